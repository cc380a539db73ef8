-- operator_actions: the append-only record of operator actions (paycore.operator_actions).
--
-- The database refuses UPDATE, DELETE and TRUNCATE on the table: an action is inserted, in the
-- transaction that performs it, and read.

-- name: insert
INSERT INTO operator_actions (occurred_at, operator, action, reason, attempt_id, escalation_id, message_id,
                              event_id, provider_account, target_operator, state_before, state_after,
                              detail)
VALUES (:now, :operator, :action, :reason, :attempt_id, :escalation_id, :message_id, :event_id,
        :provider_account, :target_operator, :state_before, :state_after, :detail)
RETURNING *

-- name: matching
-- Each filter is optional; a NULL parameter switches it off. The partial indexes serve the
-- attempt and escalation filters, the operator index the operator one.
SELECT * FROM operator_actions
WHERE (:attempt_id::uuid IS NULL OR attempt_id = :attempt_id)
  AND (:escalation_id::bigint IS NULL OR escalation_id = :escalation_id)
  AND (:operator::text IS NULL OR operator = :operator)
ORDER BY occurred_at DESC, action_id DESC
LIMIT :limit
