-- Issue 8: who did what. One append-only row per operator action (paycore.operator_actions),
-- written in the same transaction as the action it records: who (an operator handle), what,
-- on which target, when (the application clock), why, and the state before and after.

CREATE TABLE operator_actions (
    action_id       bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    occurred_at     timestamptz NOT NULL,
    operator        text        NOT NULL,
    action          text        NOT NULL,
    reason          text        NULL,
    -- Targets. Attempts and escalation episodes are never deleted: foreign keys.
    -- message_id has none on purpose: retention deletes dispatched outbox rows (a skipped
    -- row among them), and the record must outlive the row it is about. event_id has none
    -- because payment_attempt_events is append-only already (its rows cannot go), and a
    -- foreign key would make TRUNCATE of that history fail on the key before its own
    -- append-only trigger could refuse it.
    attempt_id      uuid        NULL REFERENCES payment_attempts (attempt_id),
    escalation_id   bigint      NULL REFERENCES payment_escalations (escalation_id),
    message_id      bigint      NULL,
    event_id        bigint      NULL,
    provider_account text       NULL REFERENCES provider_accounts (provider_account),
    state_before    jsonb       NOT NULL,
    state_after     jsonb       NOT NULL,
    detail          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    -- A later console action adds its name here (and to the target rule below) in a new migration.
    CONSTRAINT ck_operator_action_kind CHECK (action IN (
        'escalation-acknowledge', 'escalation-resolve', 'notification-attach',
        'outbox-requeue', 'outbox-skip', 'account-apply')),
    -- An operator handle, not a person's name: short, printable, no surrounding space.
    CONSTRAINT ck_operator_action_operator CHECK (
        char_length(operator) BETWEEN 1 AND 64 AND operator = btrim(operator)
        AND operator !~ '[[:cntrl:]]'),
    -- Every action says why, except an acknowledgement ("I have seen it").
    CONSTRAINT ck_operator_action_reason CHECK (
        (reason IS NOT NULL AND btrim(reason) <> '' AND char_length(reason) <= 2000
            AND reason !~ '[[:cntrl:]]')
        OR (reason IS NULL AND action = 'escalation-acknowledge')),
    -- At least one target, and the one each kind of action is about.
    CONSTRAINT ck_operator_action_target CHECK (
        num_nonnulls(attempt_id, escalation_id, message_id, event_id, provider_account) > 0
        AND (action NOT LIKE 'escalation-%' OR escalation_id IS NOT NULL)
        AND (action <> 'account-apply' OR provider_account IS NOT NULL)
        AND (action NOT LIKE 'outbox-%' OR message_id IS NOT NULL)
        AND (action <> 'notification-attach' OR (event_id IS NOT NULL AND attempt_id IS NOT NULL))),
    CONSTRAINT ck_operator_action_states CHECK (
        jsonb_typeof(state_before) = 'object' AND jsonb_typeof(state_after) = 'object'
        AND jsonb_typeof(detail) = 'object')
);

-- "What was done to this attempt / this episode", "what did this operator do", newest first.
CREATE INDEX operator_actions_by_attempt ON operator_actions (attempt_id, occurred_at)
    WHERE attempt_id IS NOT NULL;
CREATE INDEX operator_actions_by_escalation ON operator_actions (escalation_id, occurred_at)
    WHERE escalation_id IS NOT NULL;
CREATE INDEX operator_actions_by_operator ON operator_actions (operator, occurred_at);

-- The record is evidence, like the attempt history: the database refuses to change or remove it.
CREATE FUNCTION operator_actions_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'operator_actions is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

CREATE TRIGGER operator_actions_no_update_delete
    BEFORE UPDATE OR DELETE ON operator_actions
    FOR EACH ROW EXECUTE FUNCTION operator_actions_append_only();

CREATE TRIGGER operator_actions_no_truncate
    BEFORE TRUNCATE ON operator_actions
    FOR EACH STATEMENT EXECUTE FUNCTION operator_actions_append_only();

-- outbox_operator_actions (0002) is superseded: paycore outbox requeue|skip now write
-- operator_actions. The old table is kept, no longer written, so no earlier record is lost.
COMMENT ON TABLE outbox_operator_actions IS
    'superseded by operator_actions (0004_operator_actions); no longer written, kept for earlier rows';
