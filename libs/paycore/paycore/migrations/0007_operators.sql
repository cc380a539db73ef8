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

-- The actions' names, reasons and target rule follow in 0010_operator_account_actions.sql:
-- after 0009, which redefines the same constraints.

CREATE INDEX operator_actions_by_target_operator ON operator_actions (target_operator, occurred_at)
    WHERE target_operator IS NOT NULL;
