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
-- the provider-account row in force now, as for attempts (a later configuration change cannot
-- move this operation's deadline), capped by the provider's window for operations' keys
-- (:key_retention_cap_s; Adyen keeps a modification's key for less than a payment's; NULL: no
-- cap, since LEAST ignores NULLs).
WITH moved AS (
    UPDATE payment_operations o
    SET state = 'Started',
        first_sent_at = :now,
        escalation_deadline = :now::timestamptz
            + LEAST(pa.key_retention, make_interval(secs => :key_retention_cap_s)) - pa.escalation_margin,
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
       COALESCE(SUM(o.amount_minor) FILTER (WHERE o.kind = 'capture' AND o.state = 'Succeeded'), 0)::bigint
           AS captured_later,
       COALESCE(SUM(o.amount_minor) FILTER (WHERE o.kind = 'refund' AND o.state = 'Succeeded'), 0)::bigint
           AS refunded
FROM payment_attempts a
LEFT JOIN payment_operations o ON o.attempt_id = a.attempt_id
WHERE a.attempt_id = :attempt_id
GROUP BY a.attempt_id

-- name: claim_due
-- The next due live operation whose lease is free or expired, claimed with :token, in the
-- order of the due index (next_check_at, created_at, operation_id). SKIP LOCKED hands
-- concurrent workers different operations; MATERIALIZED runs the locking scan once. Claiming
-- is not a state change: the version stays.
WITH next_due AS MATERIALIZED (
    SELECT operation_id FROM payment_operations
    WHERE state IN ('NotStarted', 'Started', 'Unknown')
      AND next_check_at <= :now AND (recovery_owner IS NULL OR lease_expires_at <= :now)
    ORDER BY next_check_at, created_at, operation_id
    LIMIT 1
    FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE payment_operations o
SET recovery_owner = :owner, lease_token = :token, lease_acquired_at = :now, lease_expires_at = :expires_at
FROM next_due
WHERE o.operation_id = next_due.operation_id
  AND o.state IN ('NotStarted', 'Started', 'Unknown')
  AND o.next_check_at <= :now AND (o.recovery_owner IS NULL OR o.lease_expires_at <= :now)
RETURNING o.*

-- name: finish
-- Schedules the next look and releases the lease, only while this worker owns it.
UPDATE payment_operations
SET next_check_at = :next_check_at,
    recovery_owner = NULL, lease_token = NULL, lease_acquired_at = NULL, lease_expires_at = NULL
WHERE operation_id = :operation_id
  AND recovery_owner = :owner AND lease_token = :token AND lease_expires_at > :now

-- name: close_never_sent
-- NotStarted -> NotApplied(never-sent) by the worker that owns the lease, releasing it, with its
-- transition event: its sender died before the send intent, so nothing was sent, and the
-- amount it held is free again.
WITH moved AS (
    UPDATE payment_operations
    SET state = 'NotApplied', outcome_reason = 'never-sent', next_check_at = :now, version = version + 1,
        recovery_owner = NULL, lease_token = NULL, lease_acquired_at = NULL, lease_expires_at = NULL
    WHERE operation_id = :operation_id AND version = :version AND state = 'NotStarted'
      AND recovery_owner = :owner AND lease_token = :token AND lease_expires_at > :now
    RETURNING *
), logged AS (
    INSERT INTO payment_attempt_events (attempt_id, operation_id, occurred_at, kind, actor, detail)
    SELECT moved.attempt_id, moved.operation_id, :now, 'transition', :actor, :detail
    FROM moved
)
SELECT * FROM moved

-- name: by_provider_operation
-- The operation a notification names by the provider's id of the refund or capture.
SELECT * FROM payment_operations
WHERE provider_account = :account AND provider_operation_id = :provider_operation_id

-- name: by_reference
-- The operation a notification or a lookup names by the operation's own reference.
SELECT * FROM payment_operations
WHERE provider_account = :account AND client_reference = :reference

-- name: refunds_of_ours
-- What the payment's own refunds add up to, live, Succeeded or Returned since (a provider's report
-- may be older than the return): a provider report of a refund up to this amount is paycore's
-- own, not one made elsewhere.
SELECT COALESCE(SUM(amount_minor), 0)::bigint FROM payment_operations
WHERE attempt_id = :attempt_id AND kind = 'refund'
  AND state NOT IN ('Failed', 'NotApplied')  -- live, Succeeded, or Returned

-- name: charged_after_cancel
-- Payments charged after their order was cancelled (their succeeded-after-cancel episode is
-- open) that paycore has not refunded yet: recovery's automatic refund (decision 0008). A refund
-- of paycore's that was never sent does not count (its sender died before the send intent).
SELECT e.attempt_id
FROM payment_escalations e
WHERE e.reason = 'succeeded-after-cancel' AND e.resolved_at IS NULL AND e.attempt_id IS NOT NULL
  AND NOT EXISTS (
      SELECT 1 FROM payment_operations o
      WHERE o.attempt_id = e.attempt_id AND o.requested_by = 'paycore'
        AND o.outcome_reason IS DISTINCT FROM 'never-sent')
ORDER BY e.raised_at, e.escalation_id
LIMIT :batch

-- name: cancel_of_payment
-- The newest cancel of the payment a notification names by the payment's provider id only (a
-- provider whose cancel answer and event carry neither a reference nor an id of their own:
-- Stripe's). At most one holds the payment (one_capture_or_cancel_per_payment).
SELECT o.* FROM payment_operations o
JOIN payment_attempts a ON a.attempt_id = o.attempt_id
WHERE a.provider_account = :account AND a.provider_payment_id = :provider_payment_id AND o.kind = 'cancel'
ORDER BY o.created_at DESC, o.operation_id
LIMIT 1
