-- payment_escalations: every statement the library runs on the escalations table.
--
-- An episode is open while resolved_at IS NULL; the partial unique index on escalation_key
-- for open rows keeps one open episode per key. Every change of an episode is conditional on
-- it still being open, so a resolved episode is never reopened, reminded or acknowledged.
-- The callers are paycore.escalations (raising, reminders, operator actions) and
-- paycore.dead_ends (the dead ends an operator's close resolves).

-- name: raise_episode
-- Opens an episode for :escalation_key unless one is open (no row then: the caller queues no
-- alert), in the transaction of its cause.
INSERT INTO payment_escalations (escalation_key, attempt_id, reason, detail, raised_at, next_reminder_at)
VALUES (:escalation_key, :attempt_id, :reason, :detail, :now, :next_reminder_at)
ON CONFLICT (escalation_key) WHERE resolved_at IS NULL DO NOTHING
RETURNING escalation_id,
    -- the account the alert is about, so pages group by (account, reason) (paycore run incidents):
    -- the attempt's, else the one a notification's detail names
    COALESCE((SELECT a.provider_account FROM payment_attempts a WHERE a.attempt_id = :attempt_id),
             :detail::jsonb ->> 'provider_account') AS provider_account

-- name: resolve_for_attempt
-- Every open episode of an attempt whose payment is settled; no reminder follows.
UPDATE payment_escalations
SET resolved_at = :now, next_reminder_at = NULL
WHERE attempt_id = :attempt_id AND resolved_at IS NULL
RETURNING escalation_id

-- name: due_reminders
-- Open episodes whose next reminder is due, the longest overdue first.
SELECT e.escalation_id, e.escalation_key, e.attempt_id, e.reason, e.next_reminder_at, e.acknowledged_at,
       -- the account the alert is about (pages group by account and reason)
       COALESCE((SELECT a.provider_account FROM payment_attempts a WHERE a.attempt_id = e.attempt_id),
                e.detail ->> 'provider_account') AS provider_account
FROM payment_escalations e
WHERE e.resolved_at IS NULL AND e.next_reminder_at <= :now
ORDER BY e.next_reminder_at
LIMIT :limit

-- name: claim_reminder
-- Only the UPDATE that still sees the next_reminder_at it read (:due_at) changes the row: two
-- instances racing one episode send one reminder.
UPDATE payment_escalations
SET reminder_count = reminder_count + 1, next_reminder_at = :next_reminder_at
WHERE escalation_id = :escalation_id AND resolved_at IS NULL AND next_reminder_at = :due_at
RETURNING reminder_count

-- name: lock_schedule
-- The episode row, locked for an operator's transaction; its schedule is the action's "before".
SELECT escalation_id, attempt_id, acknowledged_at, resolved_at, next_reminder_at
FROM payment_escalations WHERE escalation_id = :escalation_id
FOR NO KEY UPDATE

-- name: lock_episode
-- The whole episode row, locked for an operator's transaction (after the order and attempt).
SELECT * FROM payment_escalations WHERE escalation_id = :escalation_id FOR NO KEY UPDATE

-- name: acknowledge
-- A person has seen it: the reminder schedule starts again from :next_reminder_at.
UPDATE payment_escalations SET acknowledged_at = :now, next_reminder_at = :next_reminder_at
WHERE escalation_id = :escalation_id AND resolved_at IS NULL
RETURNING acknowledged_at, resolved_at, next_reminder_at

-- name: resolve
-- One open episode closed; its schedule after.
UPDATE payment_escalations SET resolved_at = :now, next_reminder_at = NULL
WHERE escalation_id = :escalation_id AND resolved_at IS NULL
RETURNING acknowledged_at, resolved_at, next_reminder_at

-- name: resolve_by_key
-- The open episode of a key whose condition a reconciliation ended.
UPDATE payment_escalations SET resolved_at = :now, next_reminder_at = NULL
WHERE escalation_key = :escalation_key AND resolved_at IS NULL
RETURNING escalation_id

-- name: lock_open_dead_ends
-- The open episodes that make this attempt a dead end (:reasons alone, or qualified: the
-- :qualified LIKE patterns); locked, since an operator's close resolves them.
SELECT escalation_id, reason FROM payment_escalations
WHERE attempt_id = :attempt_id AND resolved_at IS NULL
  AND (reason = ANY (:reasons::text[]) OR reason LIKE ANY (:qualified::text[]))
ORDER BY escalation_id
FOR NO KEY UPDATE
