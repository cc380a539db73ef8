-- refund_approvals: refunds an operator asked for above the console's approval threshold,
-- waiting for a second operator (paycore.operator_refunds; migration 0017).
--
-- A row is inserted pending and decided once, approved or rejected, by an operator who is not its
-- requester (ck_refund_approval_second_operator; the decide_once trigger refuses any other
-- change). An approval is decided in the lock order of every writer: the payment's attempt row
-- first (operations.lock_payment, which also serialises it with every other refund of the
-- payment), then this row (lock); the decision is conditional on the row still pending.

-- name: insert
INSERT INTO refund_approvals (attempt_id, amount_minor, currency, reason, requested_by, requested_at)
VALUES (:attempt_id, :amount_minor, :currency, :reason, :requested_by, :now)
RETURNING *

-- name: by_id
SELECT * FROM refund_approvals WHERE approval_id = :approval_id

-- name: lock
-- The row an approval or a rejection decides, held until it commits: a second decision (a
-- double click, another operator) waits here and then finds it decided.
SELECT * FROM refund_approvals WHERE approval_id = :approval_id FOR UPDATE

-- name: decide
-- Pending only, and never by its requester: NULL when either no longer holds.
UPDATE refund_approvals
SET decision = :decision, decided_by = :operator, decided_at = :now, decision_reason = :reason,
    operation_id = :operation_id
WHERE approval_id = :approval_id AND decision IS NULL AND requested_by <> :operator
RETURNING *

-- name: of_attempt
-- A payment's requests, newest first (refund_approvals_by_attempt).
SELECT * FROM refund_approvals
WHERE attempt_id = :attempt_id
ORDER BY requested_at DESC, approval_id DESC

-- name: pending
-- Waiting for a second operator, oldest first (refund_approvals_pending).
SELECT * FROM refund_approvals
WHERE decision IS NULL
ORDER BY requested_at, approval_id
LIMIT :limit
