-- Issue 13: the two operator actions that change attempts. Closing a dead end as not charged
-- (paycore.dead_ends) and resolving an identity or provider-id conflict by choosing the owner
-- of the provider payment (paycore.conflicts) are recorded like every other operator action.
-- 'escalation-resolve-conflict' falls under the existing rule that an escalation-* action
-- names its escalation; closing a dead end must name its attempt.

ALTER TABLE operator_actions DROP CONSTRAINT ck_operator_action_kind;
ALTER TABLE operator_actions ADD CONSTRAINT ck_operator_action_kind CHECK (action IN (
    'escalation-acknowledge', 'escalation-resolve', 'notification-attach',
    'outbox-requeue', 'outbox-skip', 'account-apply',
    'attempt-close-not-charged', 'escalation-resolve-conflict'));

ALTER TABLE operator_actions DROP CONSTRAINT ck_operator_action_target;
ALTER TABLE operator_actions ADD CONSTRAINT ck_operator_action_target CHECK (
    num_nonnulls(attempt_id, escalation_id, message_id, event_id, provider_account) > 0
    AND (action NOT LIKE 'escalation-%' OR escalation_id IS NOT NULL)
    AND (action <> 'account-apply' OR provider_account IS NOT NULL)
    AND (action NOT LIKE 'outbox-%' OR message_id IS NOT NULL)
    AND (action <> 'notification-attach' OR (event_id IS NOT NULL AND attempt_id IS NOT NULL))
    AND (action <> 'attempt-close-not-charged' OR attempt_id IS NOT NULL));
