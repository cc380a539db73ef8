-- payment_attempt_events: the append-only history of each attempt (paycore.events), the
-- provider notifications stored in it (paycore.notifications, paycore.conflicts), and what the
-- history says about a payment (paycore.dead_ends).
--
-- The database refuses UPDATE, DELETE and TRUNCATE on the table: every statement here inserts
-- or reads. Details never carry card data or secrets. A notification is the one event kind with
-- a provider account and a key; only the insert_*_notification queries write one.
--
-- Three statements read another table too, and live here because a reader looks for them with
-- the history they are about:
-- - pass_facts reads the account scope's pause (provider_rate_limit_pauses, which
--   provider_rate_limit_pauses.sql:pause writes) in the same round trip as the history;
-- - payment_evidence reads payment_escalations next to the history;
-- - open_unmatched_episode, last, reads a notification's unmatched escalation.

-- name: insert
INSERT INTO payment_attempt_events (attempt_id, occurred_at, kind, actor, detail)
VALUES (:attempt_id, :now, :kind, :actor, :detail)
RETURNING event_id

-- name: insert_many
-- Several events of one attempt in one round trip; WITH ORDINALITY and ORDER BY keep their ids
-- (the history's tie-break within one instant) in the order given.
INSERT INTO payment_attempt_events (attempt_id, occurred_at, kind, actor, detail)
SELECT :attempt_id, :now, e.kind, :actor, e.detail
FROM unnest(:kinds::text[], :details::jsonb[]) WITH ORDINALITY AS e(kind, detail, position)
ORDER BY e.position

-- name: history
SELECT event_id, attempt_id, occurred_at, kind, actor, provider_account, notification_key, detail
FROM payment_attempt_events
WHERE attempt_id = :attempt_id
ORDER BY occurred_at, event_id

-- name: of_operations
-- The timelines of captures, cancels and refunds: the events that name them, oldest first
-- (payment_attempt_events_by_operation, 0014).
SELECT event_id, operation_id, occurred_at, kind, actor, detail
FROM payment_attempt_events
WHERE operation_id = ANY(:operation_ids::uuid[])
ORDER BY occurred_at, event_id

-- name: pass_facts
-- What a recovery pass reads before it looks an attempt up: its latest send event, its lookup
-- count, and whether its account's rate-limit :scope is paused at :now. Three reads in one round
-- trip: at thousands of due attempts the round trips, not the reads, were a pass's cost; the
-- scope's pause (provider_rate_limit_pauses, written by paycore.rate_limits) rides along for
-- that reason.
SELECT
    (SELECT kind FROM payment_attempt_events
     WHERE attempt_id = :attempt_id AND kind IN ('send_intent', 'send_result', 'send_abandoned')
     ORDER BY event_id DESC
     LIMIT 1) AS latest_send,
    (SELECT count(*) FROM payment_attempt_events WHERE attempt_id = :attempt_id AND kind = 'lookup') AS lookups,
    (SELECT paused_until FROM provider_rate_limit_pauses
     WHERE scope = :scope AND paused_until > :now) AS paused_until

-- name: resend_was_rejected
-- A resend the provider refused as invalid before executing it (paycore.attempts records it in
-- its send_result): the same bytes would be refused again.
SELECT EXISTS (SELECT 1 FROM payment_attempt_events
               WHERE attempt_id = :attempt_id AND kind = 'send_result'
                 AND (detail ->> 'request_rejected')::boolean
                 AND detail ->> 'outcome' = 'unknown')

-- name: last_send_began_at
-- Every send, the first (checkout's) and each resend (recovery's), commits its send_intent
-- before it is dispatched, so the latest intent is when the attempt's last send began.
SELECT max(occurred_at) FROM payment_attempt_events
WHERE attempt_id = :attempt_id AND kind = 'send_intent'

-- name: insert_keyed_notification
-- The first write of the handler's transaction. A conflicting insert waits for the transaction
-- holding the same key: it commits -> no row (a duplicate); it rolls back -> this one proceeds.
INSERT INTO payment_attempt_events
    (attempt_id, operation_id, occurred_at, kind, actor, provider_account, notification_key, detail)
VALUES (:attempt_id, :operation_id, :now, 'notification', :actor, :account, :notification_key, :detail)
ON CONFLICT (provider_account, notification_key) DO NOTHING
RETURNING event_id

-- name: insert_unkeyed_notification
INSERT INTO payment_attempt_events
    (attempt_id, operation_id, occurred_at, kind, actor, provider_account, notification_key, detail)
VALUES (:attempt_id, :operation_id, :now, 'notification', :actor, :account, NULL, :detail)
RETURNING event_id

-- name: notification_recorded
-- Only a shortcut for redeliveries: insert_keyed_notification stays the arbiter.
SELECT EXISTS (SELECT 1 FROM payment_attempt_events WHERE provider_account = :account AND notification_key = :notification_key)

-- name: notification
-- A stored notification by its event id (an attach names it; an identity conflict's episode too).
SELECT event_id, attempt_id, provider_account, notification_key, detail
FROM payment_attempt_events
WHERE event_id = :event_id AND kind = 'notification'

-- name: notification_by_key
-- The notification a provider-id conflict's episode key names.
SELECT event_id, provider_account, notification_key, detail FROM payment_attempt_events
WHERE provider_account = :account AND notification_key = :notification_key AND kind = 'notification'

-- name: attachment
-- The transition event that attached stored notification :event_id to this attempt, if any.
SELECT 1 FROM payment_attempt_events
WHERE attempt_id = :attempt_id AND kind = 'transition' AND detail ->> 'attached_notification' = :event_id::text

-- name: payment_evidence
-- Any sign that a payment exists for this attempt, in its history or its escalations, open or
-- not: a notification matched to it, or one naming its :reference that matched no attempt or
-- two (an identity conflict stores it unmatched); a lookup that found a payment; a send answer
-- that carried a payment id, a provider status or another payment; an escalation about a
-- payment (:payment_reasons, or a reason LIKE one of :payment_reason_patterns), or an identity
-- conflict (:identity_conflict) naming it.
SELECT 'event ' || event_id || ' (' || kind || ')' AS what FROM payment_attempt_events
WHERE (attempt_id = :attempt_id AND (
        kind = 'notification'
     OR (kind = 'lookup' AND (detail ->> 'result' = 'found'
                              OR jsonb_array_length(COALESCE(detail -> 'payments', '[]'::jsonb)) > 0))
     OR (kind = 'send_result' AND (detail ->> 'provider_payment_id' IS NOT NULL
                                   OR detail ->> 'provider_status' IS NOT NULL
                                   OR detail ? 'reported_payment'))))
   OR (attempt_id IS NULL AND kind = 'notification' AND provider_account = :account
       AND detail ->> 'reference' = :reference)
UNION ALL
SELECT 'escalation ' || escalation_id || ' (' || reason || ')' FROM payment_escalations
WHERE (attempt_id = :attempt_id AND (reason = ANY (:payment_reasons::text[])
                                     OR reason LIKE ANY (:payment_reason_patterns::text[])))
   OR (reason = :identity_conflict AND (detail ->> 'reference_attempt_id' = :attempt_id::text
                                        OR detail ->> 'provider_payment_id_attempt_id' = :attempt_id::text))

-- name: open_unmatched_episode
-- On payment_escalations: the open episode of a notification's unmatched escalation key (an
-- attach resolves it). Kept with the notifications it is about; the escalations' own statements
-- are in payment_escalations.sql.
SELECT escalation_id FROM payment_escalations WHERE escalation_key = :escalation_key AND resolved_at IS NULL
