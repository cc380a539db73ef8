-- Issue 13: who operators are and how they prove it (paycore.operators, paycore.console_auth).
--
-- No sessions table: a console session is a token signed with PAYCORE_CONSOLE_SECRET that
-- carries the operator's name, role and expiry, and every verification reads the operator's
-- row here anyway (a disabled operator's sessions stop at once). That row is the one place
-- a session can be revoked, so a table of sessions would only add a write per sign-in and a
-- purge job.

-- A local operator account. Rows are never deleted (the record of operator actions refers
-- to them); an operator who leaves is disabled.
CREATE TABLE operators (
    -- The same handle rules as operator_actions.operator (paycore.operator_actions.validate_operator).
    -- 'oidc:' is reserved for operators signed in by an identity provider's token.
    name            text        PRIMARY KEY,
    role            text        NOT NULL,
    -- argon2id, in the PHC string format argon2-cffi writes (parameters included).
    password_hash   text        NOT NULL,
    created_at      timestamptz NOT NULL,
    disabled_at     timestamptz NULL,
    CONSTRAINT ck_operator_name CHECK (
        char_length(name) BETWEEN 1 AND 64 AND name = btrim(name) AND name !~ '[[:cntrl:]]'
        AND name NOT LIKE 'oidc:%'),
    CONSTRAINT ck_operator_role CHECK (role IN ('viewer', 'operator')),
    CONSTRAINT ck_operator_password_hash CHECK (password_hash LIKE '$argon2id$%'),
    CONSTRAINT ck_operator_disabled_after_created CHECK (disabled_at IS NULL OR disabled_at >= created_at)
);

-- Failed sign-ins, one row each, keyed by the name tried (known or not: an unknown name is
-- throttled exactly like a known one, so the answer does not tell them apart) and the client
-- address. A sign-in counts the rows of its key inside the window; rows older than the
-- window are deleted as failures come in.
CREATE TABLE operator_login_failures (
    failure_id      bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name            text        NOT NULL,
    client          text        NOT NULL,
    failed_at       timestamptz NOT NULL,
    CONSTRAINT ck_login_failure_key CHECK (
        char_length(name) BETWEEN 1 AND 64 AND char_length(client) BETWEEN 1 AND 128)
);
CREATE INDEX operator_login_failures_by_key ON operator_login_failures (name, client, failed_at);
CREATE INDEX operator_login_failures_by_age ON operator_login_failures (failed_at);

-- Adding and disabling an operator are operator actions: their target is the account.
ALTER TABLE operator_actions ADD COLUMN target_operator text NULL REFERENCES operators (name);

ALTER TABLE operator_actions DROP CONSTRAINT ck_operator_action_kind;
ALTER TABLE operator_actions ADD CONSTRAINT ck_operator_action_kind CHECK (action IN (
    'escalation-acknowledge', 'escalation-resolve', 'notification-attach',
    'outbox-requeue', 'outbox-skip', 'account-apply',
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
    AND (action NOT LIKE 'operator-%' OR target_operator IS NOT NULL));

CREATE INDEX operator_actions_by_target_operator ON operator_actions (target_operator, occurred_at)
    WHERE target_operator IS NOT NULL;
