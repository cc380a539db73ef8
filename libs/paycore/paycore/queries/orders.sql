-- orders: every statement the library runs on the orders table.
--
-- The order row is the serialization point for its attempts: every transaction that touches an
-- order and its attempts locks the order row first (lock_order or lock_order_of_attempt), then
-- the attempt row.

-- name: insert
INSERT INTO orders (order_id, customer_id, amount_minor, currency, created_at, provider_account)
VALUES (:order_id, :customer_id, :amount_minor, :currency, :now, :provider_account)
RETURNING *

-- name: by_id
SELECT * FROM orders WHERE order_id = :order_id

-- name: account_of
SELECT provider_account FROM orders WHERE order_id = :order_id

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
-- Recording Succeeded and marking the order Paid happen in one transaction, under the order lock.
UPDATE orders SET status = 'Paid', version = version + 1
WHERE order_id = :order_id AND status = 'Open'

-- name: set_status
-- What a capture, cancel or refund made of the order (paycore.domain.order_status_after_operation),
-- under the order lock, in the operation's outcome transaction. Unchanged is not written.
UPDATE orders SET status = :status, version = version + 1
WHERE order_id = :order_id AND status <> :status
