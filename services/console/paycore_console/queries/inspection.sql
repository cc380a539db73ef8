-- inspection: every read of the console's pages, its JSON API and the CLI's `list|show` commands
-- (paycore_console.inspection; the two lookups of paycore_console.pages at the end). Nothing writes.
--
-- One file, not one per table: most statements join or look across tables (an escalation with its
-- attempt's account, an attempt with its order, notifications and outbox rows), so a reader finds
-- a page's SQL fastest in the order of inspection.py's sections: overview, escalations, one
-- attempt, attempts listed, unmatched notifications, dead letters; then the pages' two lookups.
--
-- A listing's sort key is its keyset cursor and has an index of its own (migrations 0008 and
-- 0013); a NULL parameter switches its filter off. The live states are written exactly as
-- paycore.domain.LIVE_STATE_PREDICATE.

-- name: live_attempts_by_age
-- The live states only (one_live_attempt_per_order keeps them few); age since creation.
SELECT state,
       CASE WHEN :now - created_at < interval '1 minute' THEN 0
            WHEN :now - created_at < interval '1 hour' THEN 1
            WHEN :now - created_at < interval '24 hours' THEN 2
            ELSE 3 END AS bucket,
       count(*) AS n
FROM payment_attempts
WHERE state IN ('NotStarted', 'Started', 'Unknown')
GROUP BY 1, 2

-- name: oldest_unknown
SELECT attempt_id, created_at FROM payment_attempts
WHERE state = 'Unknown'
ORDER BY created_at, attempt_id
LIMIT 1

-- name: open_escalations_by_reason_and_account
-- An episode about an attempt counts under the attempt's account; one about a notification
-- under the account its detail names (the webhook handler records it). The account is looked
-- up per open episode (few) by primary key: a join let the planner hash every attempt.
SELECT e.reason,
       COALESCE((SELECT a.provider_account FROM payment_attempts a WHERE a.attempt_id = e.attempt_id),
                e.detail ->> 'provider_account') AS provider_account,
       count(*) FILTER (WHERE e.acknowledged_at IS NULL) AS unacknowledged,
       count(*) FILTER (WHERE e.acknowledged_at IS NOT NULL) AS acknowledged
FROM payment_escalations e
WHERE e.resolved_at IS NULL
GROUP BY 1, 2

-- name: outbox_backlog
-- Undispatched rows: pending (the relay still tries them) or dead-lettered (waiting for an
-- operator; never dispatched too, ck_outbox_single_terminal_state). Spelled as the two partial
-- indexes' predicates (outbox_messages_pending, outbox_messages_dead_letters) so neither reads
-- the dispatched rows that retention has not purged yet.
SELECT kind,
       count(*) FILTER (WHERE dead_lettered_at IS NULL) AS pending,
       count(*) FILTER (WHERE dead_lettered_at IS NOT NULL) AS dead_lettered,
       min(created_at) FILTER (WHERE dead_lettered_at IS NULL) AS oldest_pending_at
FROM outbox_messages
WHERE (dispatched_at IS NULL AND dead_lettered_at IS NULL) OR dead_lettered_at IS NOT NULL
GROUP BY kind
ORDER BY kind

-- name: paused_scopes
SELECT scope, paused_until, reason FROM provider_rate_limit_pauses
WHERE paused_until > :now
ORDER BY scope

-- name: entered_unknown_per_hour
-- Hour index from :first_hour (the first charted hour); served by
-- payment_attempt_events_entered_unknown (0008).
SELECT floor(extract(epoch FROM occurred_at - :first_hour) / 3600)::int AS hour, count(*) AS n
FROM payment_attempt_events
WHERE kind = 'transition' AND detail ->> 'to' = 'Unknown'
  AND detail ->> 'from' IS DISTINCT FROM 'Unknown'
  AND occurred_at >= :first_hour AND occurred_at <= :now
GROUP BY 1

-- name: escalations_raised_per_hour
SELECT floor(extract(epoch FROM raised_at - :first_hour) / 3600)::int AS hour, count(*) AS n
FROM payment_escalations
WHERE raised_at >= :first_hour AND raised_at <= :now
GROUP BY 1

-- name: escalations_page
-- Open episodes first, then oldest raised first; the sort key is also the cursor
-- (payment_escalations_listing, 0008). An episode's account is its attempt's, or (about a
-- notification) the one its detail names.
SELECT e.escalation_id, e.escalation_key, e.reason, e.attempt_id,
       COALESCE(a.provider_account, e.detail ->> 'provider_account') AS provider_account,
       e.raised_at, e.acknowledged_at, e.resolved_at, e.reminder_count, e.next_reminder_at
FROM payment_escalations e
LEFT JOIN payment_attempts a ON a.attempt_id = e.attempt_id
WHERE (:reason::text IS NULL OR e.reason = :reason)
  AND (:account::text IS NULL OR COALESCE(a.provider_account, e.detail ->> 'provider_account') = :account)
  AND (:acknowledged::boolean IS NULL OR (e.acknowledged_at IS NOT NULL) = :acknowledged)
  AND (NOT :open_only::boolean OR e.resolved_at IS NULL)
  AND (:after_resolved::boolean IS NULL
       OR ((e.resolved_at IS NOT NULL), e.raised_at, e.escalation_id)
          > (:after_resolved, :after_raised_at, :after_escalation_id))
ORDER BY (e.resolved_at IS NOT NULL), e.raised_at, e.escalation_id
LIMIT :limit

-- name: escalation
SELECT e.escalation_id, e.escalation_key, e.reason, e.attempt_id,
       COALESCE(a.provider_account, e.detail ->> 'provider_account') AS provider_account,
       e.raised_at, e.acknowledged_at, e.resolved_at, e.reminder_count, e.next_reminder_at, e.detail
FROM payment_escalations e
LEFT JOIN payment_attempts a ON a.attempt_id = e.attempt_id
WHERE e.escalation_id = :escalation_id

-- name: attempt
-- The request body is read for its field names only (inspection.request_field_names).
SELECT attempt_id, order_id, attempt_number, provider_account, amount_minor, currency, idempotency_key,
       client_reference, state, provider_status, provider_payment_id, outcome_reason, version, created_at,
       first_sent_at, escalation_deadline, recovery_owner, lease_expires_at, next_check_at, request_body
FROM payment_attempts WHERE attempt_id = :attempt_id

-- name: order
SELECT order_id, status, amount_minor, currency, provider_account, created_at, cancel_requested_at
FROM orders WHERE order_id = :order_id

-- name: notifications
-- Notifications matched on arrival carry the attempt's id; one attached later by an operator
-- keeps its NULL (history is append-only) and is named by the attachment's transition event.
SELECT event_id, occurred_at, provider_account, notification_key, detail
FROM payment_attempt_events
WHERE kind = 'notification' AND event_id = ANY(:event_ids::bigint[])
ORDER BY event_id

-- name: outbox_of_attempt
SELECT message_id, dedup_key, kind, created_at, delivery_attempts, next_attempt_at, last_error,
       dispatched_at, dead_lettered_at
FROM outbox_messages WHERE attempt_id = :attempt_id
ORDER BY message_id

-- name: escalations_of_attempt
SELECT e.escalation_id, e.escalation_key, e.reason, e.attempt_id,
       COALESCE(a.provider_account, e.detail ->> 'provider_account') AS provider_account,
       e.raised_at, e.acknowledged_at, e.resolved_at, e.reminder_count, e.next_reminder_at
FROM payment_escalations e
LEFT JOIN payment_attempts a ON a.attempt_id = e.attempt_id
WHERE e.attempt_id = :attempt_id
ORDER BY e.raised_at, e.escalation_id

-- name: operation_events
-- The timelines of a payment's captures, cancels and refunds: the events that name them,
-- oldest first (payment_attempt_events_by_operation, 0014).
SELECT event_id, operation_id, occurred_at, kind, actor, detail
FROM payment_attempt_events
WHERE operation_id = ANY(:operation_ids::uuid[])
ORDER BY occurred_at, event_id

-- name: attempts_page
-- Newest first; the sort key is the cursor (payment_attempts_newest, 0013). The search is
-- exact: an order id, a client reference, a provider payment id or an attempt id.
SELECT attempt_id, order_id, attempt_number, provider_account, amount_minor, currency, state,
       provider_payment_id, created_at, next_check_at
FROM payment_attempts
WHERE (:state::text IS NULL OR state = :state)
  AND (:account::text IS NULL OR provider_account = :account)
  AND (:created_before::timestamptz IS NULL OR created_at <= :created_before)
  AND (:search::text IS NULL OR order_id = :search OR client_reference = :search
       OR provider_payment_id = :search OR attempt_id::text = lower(:search))
  AND (:after_created_at::timestamptz IS NULL
       OR (created_at, attempt_id) < (:after_created_at, :after_attempt_id::uuid))
ORDER BY created_at DESC, attempt_id DESC
LIMIT :limit

-- name: unmatched_notifications_page
-- Stored with no attempt and not attached since (the attachment's transition event names it:
-- payment_attempt_events_attachments, 0008); oldest first by event id
-- (payment_attempt_events_unmatched, 0008).
SELECT n.event_id, n.occurred_at, n.provider_account, n.notification_key, n.detail
FROM payment_attempt_events n
WHERE n.kind = 'notification' AND n.attempt_id IS NULL
  AND (:after_event_id::bigint IS NULL OR n.event_id > :after_event_id)
  AND NOT EXISTS (SELECT 1 FROM payment_attempt_events t
                  WHERE t.kind = 'transition' AND t.detail ? 'attached_notification'
                    AND t.detail ->> 'attached_notification' = n.event_id::text)
ORDER BY n.event_id
LIMIT :limit

-- name: open_notification_episodes
-- An unmatched episode is per subject (escalations.unmatched_key), an unparseable one names
-- its stored event; only open episodes (one_open_escalation_per_key).
SELECT escalation_id, escalation_key, detail ->> 'notification_event_id' AS event_id
FROM payment_escalations
WHERE resolved_at IS NULL
  AND (escalation_key = ANY(:keys::text[])
       OR (reason = 'unparseable-notification' AND detail ->> 'notification_event_id' = ANY(:event_ids::text[])))

-- name: dead_letters_page
-- Oldest first by message id (outbox_messages_dead_letters, 0008).
SELECT message_id, dedup_key, kind, created_at, delivery_attempts, next_attempt_at, last_error,
       dispatched_at, dead_lettered_at, attempt_id
FROM outbox_messages
WHERE dead_lettered_at IS NOT NULL
  AND (:kind::text IS NULL OR kind = :kind)
  AND (:after_message_id::bigint IS NULL OR message_id > :after_message_id)
ORDER BY message_id
LIMIT :limit

-- name: open_episodes_by_key
SELECT escalation_key, escalation_id FROM payment_escalations
WHERE resolved_at IS NULL AND escalation_key = ANY(:keys::text[])

-- name: stored_notification
-- The attach page's notification, and whether it was matched on arrival (its attempt_id).
SELECT event_id, occurred_at, provider_account, notification_key, detail, attempt_id
FROM payment_attempt_events WHERE kind = 'notification' AND event_id = :event_id
