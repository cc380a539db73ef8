-- Issue 13: adding and disabling an operator account (paycore.operators) are operator actions,
-- recorded with the account as target_operator (the column is 0007's). The constraints are
-- redefined here, after 0009 redefined them for the attempt-changing actions: each list below
-- is every action so far, and a later migration that adds one repeats them all.

ALTER TABLE operator_actions DROP CONSTRAINT ck_operator_action_kind;
ALTER TABLE operator_actions ADD CONSTRAINT ck_operator_action_kind CHECK (action IN (
    'escalation-acknowledge', 'escalation-resolve', 'notification-attach',
    'outbox-requeue', 'outbox-skip', 'account-apply',
    'attempt-close-not-charged', 'escalation-resolve-conflict',
    'operator-add', 'operator-disable'));

-- Adding an account needs no reason (the record says who added it, with which role);
-- disabling one does.
ALTER TABLE operator_actions DROP CONSTRAINT ck_operator_action_reason;
ALTER TABLE operator_actions ADD CONSTRAINT ck_operator_action_reason CHECK (
    (reason IS NOT NULL AND btrim(reason) <> '' AND char_length(reason) <= 2000
        AND reason !~ '[[:cntrl:]]')
    OR (reason IS NULL AND action IN ('escalation-acknowledge', 'operator-add')));

ALTER TABLE operator_actions DROP CONSTRAINT ck_operator_action_target;
ALTER TABLE operator_actions ADD CONSTRAINT ck_operator_action_target CHECK (
    num_nonnulls(attempt_id, escalation_id, message_id, event_id, provider_account, target_operator) > 0
    AND (action NOT LIKE 'escalation-%' OR escalation_id IS NOT NULL)
    AND (action <> 'account-apply' OR provider_account IS NOT NULL)
    AND (action NOT LIKE 'outbox-%' OR message_id IS NOT NULL)
    AND (action <> 'notification-attach' OR (event_id IS NOT NULL AND attempt_id IS NOT NULL))
    AND (action <> 'attempt-close-not-charged' OR attempt_id IS NOT NULL)
    AND (action NOT LIKE 'operator-%' OR target_operator IS NOT NULL));
