-- Issue 27: console sessions kept server-side, so that signing out, a password change or a
-- disabled account ends a session at once, and an idle one ends after its timeout
-- (paycore.operator_sessions). 0007 had none: a session was a signed token only, and a copied
-- cookie stayed valid until its expiry.
--
-- The cookie still carries a signed token (a forged one is refused before any lookup); its
-- random session id is stored here only as its SHA-256, so a copy of this table opens nothing.
CREATE TABLE operator_sessions (
    session_hash    bytea       PRIMARY KEY,
    operator        text        NOT NULL REFERENCES operators (name),
    created_at      timestamptz NOT NULL,
    -- Moved forward at most once a minute (paycore.operator_sessions.TOUCH_EVERY_S).
    last_seen_at    timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,  -- the absolute lifetime from sign-in
    ended_at        timestamptz NULL,
    end_reason      text        NULL,
    CONSTRAINT ck_session_hash CHECK (octet_length(session_hash) = 32),
    CONSTRAINT ck_session_times CHECK (last_seen_at >= created_at AND expires_at > created_at),
    CONSTRAINT ck_session_end CHECK ((ended_at IS NULL) = (end_reason IS NULL)
                                     AND (ended_at IS NULL OR ended_at >= created_at)),
    CONSTRAINT ck_session_end_reason CHECK (end_reason IN (
        'signed-out', 'idle', 'ended-by-operator', 'ended-by-admin', 'operator-disabled',
        'password-changed', 'role-changed'))
);
-- "This operator's open sessions": ending them all, listing them.
CREATE INDEX operator_sessions_open ON operator_sessions (operator) WHERE ended_at IS NULL;
-- Sign-in purges rows long past their lifetime.
CREATE INDEX operator_sessions_by_expiry ON operator_sessions (expires_at);

-- Changing a password, re-enabling an account, changing a role and ending someone's sessions
-- are operator actions (each list below is every action so far, as 0010 says).
ALTER TABLE operator_actions DROP CONSTRAINT ck_operator_action_kind;
ALTER TABLE operator_actions ADD CONSTRAINT ck_operator_action_kind CHECK (action IN (
    'escalation-acknowledge', 'escalation-resolve', 'notification-attach',
    'outbox-requeue', 'outbox-skip', 'account-apply',
    'attempt-close-not-charged', 'escalation-resolve-conflict',
    'operator-add', 'operator-disable',
    'operator-password', 'operator-enable', 'operator-role', 'operator-end-sessions'));

-- A new password and ending sessions need no reason (the record says who did it, and a
-- password change is its own reason); re-enabling an account and changing its role do.
ALTER TABLE operator_actions DROP CONSTRAINT ck_operator_action_reason;
ALTER TABLE operator_actions ADD CONSTRAINT ck_operator_action_reason CHECK (
    (reason IS NOT NULL AND btrim(reason) <> '' AND char_length(reason) <= 2000
        AND reason !~ '[[:cntrl:]]')
    OR (reason IS NULL AND action IN ('escalation-acknowledge', 'operator-add', 'operator-password',
                                      'operator-end-sessions')));
