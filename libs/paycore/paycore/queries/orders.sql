-- orders: every statement the library runs on the orders table.
--
-- The order row is the serialization point for its attempts: every transaction that touches an
-- order and its attempts locks the order row first (lock_order or lock_order_of_attempt), then
-- the attempt row.

-- name: insert
INSERT INTO orders (order_id, customer_id, amount_minor, currency, created_at, provider_account, capture)
VALUES (:order_id, :customer_id, :amount_minor, :currency, :now, :provider_account, :capture)
RETURNING *

-- name: by_id
SELECT * FROM orders WHERE order_id = :order_id

-- name: account_of
-- What the order's payment request is made of besides its amount: the account (NULL: the
-- default one) and whether it is held for a later capture.
SELECT provider_account, capture FROM orders WHERE order_id = :order_id

-- name: lock_order
SELECT * FROM orders WHERE order_id = :order_id FOR UPDATE

-- name: lock_order_of_attempt
-- The order an attempt belongs to, locked in one round trip (an attempt never changes order;
-- the sub-select's row is read, not locked).
SELECT * FROM orders
WHERE order_id = (SELECT order_id FROM payment_attempts WHERE attempt_id = :attempt_id)
FOR UPDATE

-- name: cancel_outright
-- No live attempt: the order is Cancelled at once.
UPDATE orders SET status = 'Cancelled', cancel_requested_at = :now, version = version + 1
WHERE order_id = :order_id AND status = 'Open'
RETURNING *

-- name: request_cancel
-- A live attempt: the cancellation is an intent; no new send intent can commit after it.
UPDATE orders SET cancel_requested_at = :now, version = version + 1
WHERE order_id = :order_id AND status = 'Open' AND cancel_requested_at IS NULL
RETURNING *

-- name: mark_paid
-- Recording Succeeded and marking the order Paid (Authorized for a hold) happen in one
-- transaction, under the order lock.
UPDATE orders SET status = :status, version = version + 1
WHERE order_id = :order_id AND status = 'Open'

-- name: set_status
-- What a capture, cancel or refund made of the order (paycore.domain.order_status_after_operation),
-- under the order lock, in the operation's outcome transaction. Unchanged is not written.
UPDATE orders SET status = :status, version = version + 1
WHERE order_id = :order_id AND status <> :status

-- name: held_payments
-- Held payments: their order Authorized (orders_authorized keeps this to the few held now), with
-- when they were authorized (the send boundary: a hold never starts before it) and whether a
-- capture or a cancel of them is still in flight.
SELECT a.attempt_id, a.order_id, a.provider_account, a.provider_payment_id, a.amount_minor, a.currency,
       a.first_sent_at,
       EXISTS (SELECT 1 FROM payment_operations p
               WHERE p.attempt_id = a.attempt_id AND p.kind IN ('capture', 'cancel')
                 AND p.state IN ('NotStarted', 'Started', 'Unknown')) AS capture_or_cancel_live
FROM orders o
JOIN payment_attempts a ON a.order_id = o.order_id AND a.state = 'Succeeded'
WHERE o.status = 'Authorized'
ORDER BY a.first_sent_at, a.attempt_id
LIMIT :batch

-- name: void_lapsed
-- A hold lapsed uncaptured: the order, still Authorized under its lock, is Voided.
UPDATE orders SET status = 'Voided', version = version + 1
WHERE order_id = :order_id AND status = 'Authorized'
RETURNING order_id
