-- Issue 29: the store's back office calls paycore for refunds, captures and voids with a
-- service credential, not a customer's token (docs/decisions/0009-back-office-credentials.md;
-- paycore.service_credentials). paycore issues it and shows its secret once; this table keeps
-- only the SHA-256 of the whole secret, so a copy of it calls nothing.
--
-- A credential is never deleted and its name never reused: an operation's requested_by
-- ('backoffice:<name>') names one credential for as long as the operation is kept. Revoking is
-- final and takes effect on the next request (every request reads the row).
CREATE TABLE service_credentials (
    credential_id   uuid        PRIMARY KEY,   -- also in the secret, which says which row to check
    name            text        NOT NULL,
    -- The back office it stands for, shared by a credential and the ones that rotate it: its
    -- Idempotency-Keys are scoped to this, so a retry sent under the new credential after a
    -- rotation is the same request, never a second refund.
    client          text        NOT NULL,
    secret_hash     bytea       NOT NULL,
    scopes          text[]      NOT NULL,
    issued_at       timestamptz NOT NULL,
    issued_by       text        NOT NULL,      -- who ran `paycore credentials issue` (an OS user)
    -- Moved forward at most once a minute (paycore.service_credentials.TOUCH_EVERY_S).
    last_used_at    timestamptz NULL,
    revoked_at      timestamptz NULL,
    revoked_by      text        NULL,
    CONSTRAINT uq_service_credential_name UNIQUE (name),
    -- Letters, digits, '.', '_', '-'; never a UUID's shape (`revoke NAME|ID` takes either).
    CONSTRAINT ck_service_credential_name CHECK (
        name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'
        AND name !~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$'),
    CONSTRAINT ck_service_credential_client CHECK (client ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'),
    CONSTRAINT ck_service_credential_hash CHECK (octet_length(secret_hash) = 32),
    CONSTRAINT ck_service_credential_scopes CHECK (
        cardinality(scopes) >= 1 AND scopes <@ ARRAY['refunds', 'captures', 'voids', 'read']::text[]),
    CONSTRAINT ck_service_credential_issued_by CHECK (btrim(issued_by) <> ''),
    CONSTRAINT ck_service_credential_revoked CHECK (
        (revoked_at IS NULL) = (revoked_by IS NULL) AND (revoked_by IS NULL OR btrim(revoked_by) <> ''))
);
