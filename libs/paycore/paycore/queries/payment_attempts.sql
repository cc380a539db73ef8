-- payment_attempts: every statement the library runs on the attempts table.
--
-- The live states, wherever they appear, are written exactly as paycore.domain.LIVE_STATE_PREDICATE
-- and the partial index one_live_attempt_per_order (tests/unit/test_queries.py pins the text).
-- A lease is four columns, set and cleared together (the schema's CHECK refuses half a lease);
-- "owned" is always: this owner, this claim's token, and a lease not yet expired at :now.
-- Every state change is conditional on the version and state read; only the writer
-- (paycore.writer) runs the ones that move an attempt. Each of those also writes the
-- transition's history (the caller's events first, then the write's, in the order given) in its
-- own statement (a "logged" CTE), so the events are written only with the write, one round trip
-- fewer per transition (docs/performance.md, issue 28).

-- name: by_id
SELECT * FROM payment_attempts WHERE attempt_id = :attempt_id

-- name: live_of_order
SELECT * FROM payment_attempts
WHERE order_id = :order_id AND state IN ('NotStarted', 'Started', 'Unknown')

-- name: order_has_live
-- Whether the order has a live attempt (paycore.orders.cancel_order: cancel outright or request).
SELECT EXISTS (SELECT 1 FROM payment_attempts WHERE order_id = :order_id AND state IN ('NotStarted', 'Started', 'Unknown'))

-- name: succeeded_of_order
-- The order's payment: its Succeeded attempt (what a capture, cancel or refund is of). At most
-- one: a Succeeded attempt makes its order paid, and a paid order takes no new attempt.
SELECT * FROM payment_attempts
WHERE order_id = :order_id AND state = 'Succeeded'
ORDER BY attempt_number DESC
LIMIT 1

-- name: latest_of_customer
SELECT * FROM payment_attempts
WHERE order_id = :order_id AND customer_id = :customer_id
ORDER BY attempt_number DESC
LIMIT 1

-- name: by_reference_or_payment_id
-- Both identities of a notification in one round trip (each side is unique in its account, so
-- at most two rows); a NULL parameter matches nothing.
SELECT * FROM payment_attempts
WHERE provider_account = :account AND (client_reference = :reference OR provider_payment_id = :payment_id)

-- name: next_attempt_number
SELECT COALESCE(MAX(attempt_number), 0) + 1 FROM payment_attempts WHERE order_id = :order_id

-- name: payment_id_owner
-- Another attempt of this account that recorded this provider payment id.
SELECT attempt_id FROM payment_attempts
WHERE provider_account = :account AND provider_payment_id = :payment_id AND attempt_id <> :attempt_id

-- name: insert_live
-- The conflict predicate is the partial index one_live_attempt_per_order's, so a writer that
-- skipped the order lock loses to the index and gets no row, its transaction still usable.
INSERT INTO payment_attempts (attempt_id, order_id, customer_id, attempt_number, provider_account,
    endpoint, api_version, client_reference, idempotency_key, request_body, amount_minor, currency,
    state, created_at, next_check_at)
VALUES (:attempt_id, :order_id, :customer_id, :attempt_number, :account, :endpoint, :api_version,
    :reference, :idempotency_key, :request_body, :amount_minor, :currency, 'NotStarted', :now,
    :next_check_at)
ON CONFLICT (order_id) WHERE state IN ('NotStarted', 'Started', 'Unknown') DO NOTHING
RETURNING *

-- name: mark_started
-- NotStarted -> Started. Stamps the key window from the provider-account row in force now: a
-- later configuration change cannot move this attempt's deadline.
WITH moved AS (
    UPDATE payment_attempts a
    SET state = 'Started',
        first_sent_at = :now,
        escalation_deadline = :now::timestamptz + pa.key_retention - pa.escalation_margin,
        next_check_at = :next_check_at,
        version = a.version + 1
    FROM provider_accounts pa
    WHERE a.attempt_id = :attempt_id AND a.version = :version AND a.state = 'NotStarted'
      AND pa.provider_account = a.provider_account
    RETURNING a.*
), logged AS (
    INSERT INTO payment_attempt_events (attempt_id, occurred_at, kind, actor, detail)
    SELECT moved.attempt_id, :now, e.kind, :actor, e.detail
    FROM moved, unnest(:kinds::text[], :details::jsonb[]) WITH ORDINALITY AS e(kind, detail, position)
    ORDER BY e.position
)
SELECT * FROM moved

-- name: apply_outcome
-- An outcome: a recorded provider payment id is kept. The lease is released only while the row
-- still carries the writer's claim (owner and token, expired or not): evidence is never refused
-- for want of a lease, and a token that still matches means nobody has claimed since.
WITH moved AS (
    UPDATE payment_attempts
    SET state = :target,
        provider_status = :provider_status,
        next_action = :next_action,
        next_action_expires_at = :next_action_expires_at,
        outcome_reason = :outcome_reason,
        provider_payment_id = COALESCE(provider_payment_id, :payment_id),
        next_check_at = :next_check_at,
        version = version + 1,
        recovery_owner = CASE WHEN recovery_owner = :owner AND lease_token = :token THEN NULL ELSE recovery_owner END,
        lease_token = CASE WHEN recovery_owner = :owner AND lease_token = :token THEN NULL ELSE lease_token END,
        lease_acquired_at = CASE WHEN recovery_owner = :owner AND lease_token = :token THEN NULL ELSE lease_acquired_at END,
        lease_expires_at = CASE WHEN recovery_owner = :owner AND lease_token = :token THEN NULL ELSE lease_expires_at END
    WHERE attempt_id = :attempt_id AND version = :version AND state = :state
    RETURNING *
), logged AS (
    INSERT INTO payment_attempt_events (attempt_id, occurred_at, kind, actor, detail)
    SELECT moved.attempt_id, :now, e.kind, :actor, e.detail
    FROM moved, unnest(:kinds::text[], :details::jsonb[]) WITH ORDINALITY AS e(kind, detail, position)
    ORDER BY e.position
)
SELECT * FROM moved

-- name: close_never_sent
-- NotStarted -> NotApplied(never-sent), by the worker that owns the lease, releasing it.
WITH moved AS (
    UPDATE payment_attempts
    SET state = 'NotApplied', outcome_reason = 'never-sent', next_check_at = :now, version = version + 1,
        recovery_owner = NULL, lease_token = NULL, lease_acquired_at = NULL, lease_expires_at = NULL
    WHERE attempt_id = :attempt_id AND version = :version AND state = 'NotStarted'
      AND recovery_owner = :owner AND lease_token = :token AND lease_expires_at > :now
    RETURNING *
), logged AS (
    INSERT INTO payment_attempt_events (attempt_id, occurred_at, kind, actor, detail)
    SELECT moved.attempt_id, :now, e.kind, :actor, e.detail
    FROM moved, unnest(:kinds::text[], :details::jsonb[]) WITH ORDINALITY AS e(kind, detail, position)
    ORDER BY e.position
)
SELECT * FROM moved

-- name: close_as_not_charged
-- Unknown -> Failed by an operator. Any lease is released: a worker that comes back finds a
-- final attempt, and its evidence, if any, takes the contradiction path.
WITH moved AS (
    UPDATE payment_attempts
    SET state = 'Failed', outcome_reason = :outcome_reason, next_check_at = :now, version = version + 1,
        next_action = NULL, next_action_expires_at = NULL,
        recovery_owner = NULL, lease_token = NULL, lease_acquired_at = NULL, lease_expires_at = NULL
    WHERE attempt_id = :attempt_id AND version = :version AND state = :state
    RETURNING *
), logged AS (
    INSERT INTO payment_attempt_events (attempt_id, occurred_at, kind, actor, detail)
    SELECT moved.attempt_id, :now, e.kind, :actor, e.detail
    FROM moved, unnest(:kinds::text[], :details::jsonb[]) WITH ORDINALITY AS e(kind, detail, position)
    ORDER BY e.position
)
SELECT * FROM moved

-- name: claim
-- This due attempt, if it is live, due, and its lease free or expired. Claiming is not a state
-- change: the version stays.
UPDATE payment_attempts
SET recovery_owner = :owner, lease_token = :token, lease_acquired_at = :now, lease_expires_at = :expires_at
WHERE attempt_id = :attempt_id
  AND state IN ('NotStarted', 'Started', 'Unknown')
  AND next_check_at <= :now AND (recovery_owner IS NULL OR lease_expires_at <= :now)
RETURNING *

-- name: claim_due
-- The claim, applied to the next due attempts in the reference's order (next_check_at,
-- created_at, attempt_id), one fresh token each: as many attempts as :tokens holds. SKIP LOCKED
-- hands concurrent claimers different attempts instead of queueing them on one row; the outer
-- predicate repeats the claim's. The CTEs are MATERIALIZED so each runs exactly once: as a
-- sub-select joined in FROM, the planner may re-run the locking scan per target row, handing
-- every attempt the same token and ignoring the LIMIT (a test saw both). One statement for
-- several attempts: each claim walks the due index past the entries of attempts resolved since
-- the last vacuum, so a sweep pays that walk once per batch (docs/performance.md).
WITH next_due AS MATERIALIZED (
        SELECT attempt_id FROM payment_attempts
        WHERE state IN ('NotStarted', 'Started', 'Unknown')
          AND next_check_at <= :now AND (recovery_owner IS NULL OR lease_expires_at <= :now)
        ORDER BY next_check_at, created_at, attempt_id
        LIMIT cardinality(:tokens::uuid[])
        FOR NO KEY UPDATE SKIP LOCKED
), due AS MATERIALIZED (
    -- Which fresh token goes with which attempt does not matter, only that each has its own.
    SELECT attempt_id, (:tokens::uuid[])[row_number() OVER ()] AS token FROM next_due
)
UPDATE payment_attempts
SET recovery_owner = :owner, lease_token = due.token, lease_acquired_at = :now, lease_expires_at = :expires_at
FROM due
WHERE payment_attempts.attempt_id = due.attempt_id
  AND state IN ('NotStarted', 'Started', 'Unknown')
  AND next_check_at <= :now AND (recovery_owner IS NULL OR lease_expires_at <= :now)
RETURNING payment_attempts.*

-- name: owns
SELECT EXISTS (
    SELECT 1 FROM payment_attempts
    WHERE attempt_id = :attempt_id
      AND recovery_owner = :owner AND lease_token = :token AND lease_expires_at > :now)

-- name: finish
-- Schedules the next check and releases the lease, only while this worker owns it.
UPDATE payment_attempts
SET next_check_at = :next_check_at,
    recovery_owner = NULL, lease_token = NULL, lease_acquired_at = NULL, lease_expires_at = NULL
WHERE attempt_id = :attempt_id
  AND recovery_owner = :owner AND lease_token = :token AND lease_expires_at > :now

-- name: lock_owned
-- FOR NO KEY UPDATE: the strongest lock a row update needs, and one that does not conflict with
-- the KEY SHARE lock an event or outbox insert takes on its attempt.
SELECT * FROM payment_attempts
WHERE attempt_id = :attempt_id
  AND recovery_owner = :owner AND lease_token = :token AND lease_expires_at > :now
FOR NO KEY UPDATE
