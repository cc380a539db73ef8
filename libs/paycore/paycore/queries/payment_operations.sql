-- payment_operations: the captures, cancels (voids) and refunds that follow a payment
-- (paycore.operations; docs/architecture.md, "The next operations").
--
-- An operation is decided against its payment under the payment's lock: lock_payment takes the
-- payment attempt's row, then holding_amounts reads what the payment's operations already hold,
-- and only then is a new one inserted. Two recorders of one payment therefore decide one after
-- the other, each seeing what the other committed. The unique index
-- one_capture_or_cancel_per_payment is the database's half of the rule, whatever the code does.

-- name: lock_payment
-- The payment an operation is decided against, locked until the recording commits. FOR NO KEY
-- UPDATE, not FOR UPDATE: it excludes every other recorder of this payment and every update of
-- the attempt, but not the foreign-key checks (FOR KEY SHARE) of an event or an operation
-- inserted for this attempt elsewhere, which have no reason to wait. A hold is a Succeeded
-- attempt whose provider_status is 'requires_capture'; any other Succeeded one was captured
-- whole when it succeeded.
SELECT attempt_id, state, amount_minor, currency, provider_account, provider_payment_id,
       provider_status, client_reference
FROM payment_attempts
WHERE attempt_id = :attempt_id
FOR NO KEY UPDATE

-- name: holding_amounts
-- Every operation of the payment, final or not (paycore.domain.headroom decides which hold);
-- read after lock_payment, so it sees every operation a previous recorder committed.
SELECT kind, state, amount_minor
FROM payment_operations
WHERE attempt_id = :attempt_id
ORDER BY created_at, operation_id

-- name: insert
-- A NotStarted operation with its exact request (what every send of it transmits) and its
-- history event, in one statement: the event is written only with the row. No ON CONFLICT: the
-- key is new (a uuid4) and the reference numbered under the payment's lock, so a conflict is a
-- writer that skipped the lock; on one_capture_or_cancel_per_payment the caller reads it as a
-- refusal, any other is an error.
WITH recorded AS (
    INSERT INTO payment_operations (operation_id, attempt_id, kind, requested_by, provider_account,
        endpoint, api_version, client_reference, idempotency_key, request_body, amount_minor,
        currency, state, created_at, next_check_at)
    VALUES (:operation_id, :attempt_id, :kind, :requested_by, :account, :endpoint, :api_version,
        :reference, :idempotency_key, :request_body, :amount_minor, :currency, 'NotStarted', :now,
        :next_check_at)
    RETURNING *
), logged AS (
    INSERT INTO payment_attempt_events (attempt_id, operation_id, occurred_at, kind, actor, detail)
    SELECT recorded.attempt_id, recorded.operation_id, :now, 'transition', :requested_by, :detail
    FROM recorded
)
SELECT * FROM recorded

-- name: by_id
SELECT * FROM payment_operations WHERE operation_id = :operation_id

-- name: by_attempt
-- A payment's operations, oldest first.
SELECT * FROM payment_operations
WHERE attempt_id = :attempt_id
ORDER BY created_at, operation_id

-- name: mark_started
-- NotStarted -> Started, the operation's send boundary, with its send intent in the payment's
-- history, in one statement: the event is written only with the move. Stamps the key window from
-- the provider-account row in force now, as for attempts: a later configuration change cannot
-- move this operation's deadline.
WITH moved AS (
    UPDATE payment_operations o
    SET state = 'Started',
        first_sent_at = :now,
        escalation_deadline = :now::timestamptz + pa.key_retention - pa.escalation_margin,
        next_check_at = :next_check_at,
        version = o.version + 1
    FROM provider_accounts pa
    WHERE o.operation_id = :operation_id AND o.version = :version AND o.state = 'NotStarted'
      AND pa.provider_account = o.provider_account
    RETURNING o.*
), logged AS (
    INSERT INTO payment_attempt_events (attempt_id, operation_id, occurred_at, kind, actor, detail)
    SELECT moved.attempt_id, moved.operation_id, :now, 'send_intent', :actor, :detail
    FROM moved
)
SELECT * FROM moved

-- name: apply_outcome
-- An outcome (paycore.domain.decide_operation_outcome), on the version and state read, with its
-- transition event: a recorded provider operation id is kept.
WITH moved AS (
    UPDATE payment_operations
    SET state = :target,
        provider_status = :provider_status,
        outcome_reason = :outcome_reason,
        provider_operation_id = COALESCE(provider_operation_id, :provider_operation_id),
        next_check_at = :next_check_at,
        version = version + 1
    WHERE operation_id = :operation_id AND version = :version AND state = :state
    RETURNING *
), logged AS (
    INSERT INTO payment_attempt_events (attempt_id, operation_id, occurred_at, kind, actor, detail)
    SELECT moved.attempt_id, moved.operation_id, :now, 'transition', :actor, :detail
    FROM moved
)
SELECT * FROM moved

-- name: settled_amounts
-- What a payment's final operations add up to, for its order's status: the payment's amount and
-- provider status (a hold charged nothing up front), what Succeeded captures charged later and
-- what Succeeded refunds gave back. Read under the order's lock, after the operation's write.
SELECT a.order_id, a.amount_minor AS payment_amount, a.provider_status,
       COALESCE(SUM(o.amount_minor) FILTER (WHERE o.kind = 'capture' AND o.state = 'Succeeded'), 0)
           AS captured_later,
       COALESCE(SUM(o.amount_minor) FILTER (WHERE o.kind = 'refund' AND o.state = 'Succeeded'), 0)
           AS refunded
FROM payment_attempts a
LEFT JOIN payment_operations o ON o.attempt_id = a.attempt_id
WHERE a.attempt_id = :attempt_id
GROUP BY a.attempt_id
