-- Issue 29: what follows a payment -- captures, cancels (voids) and refunds. Each is an outbound
-- call with the payment's own problem, so it carries the payment's protocol columns under the
-- same names and the same CHECKs (docs/architecture.md, "The next operations"). A table of its
-- own, not more rows in payment_attempts: an attempt is one live per order, an operation is many
-- per payment, and the payment's row is what an operation is decided against (under its lock).
CREATE TABLE payment_operations (
    operation_id          uuid        PRIMARY KEY,
    attempt_id            uuid        NOT NULL REFERENCES payment_attempts (attempt_id),
    kind                  text        NOT NULL,
    requested_by          text        NOT NULL,      -- 'backoffice:<client>', 'operator:<name>', 'paycore'
    provider_account      text        NOT NULL REFERENCES provider_accounts (provider_account),
    endpoint              text        NOT NULL,
    api_version           text        NOT NULL,
    client_reference      text        NOT NULL,
    idempotency_key       text        NOT NULL,
    request_body          text        NOT NULL,
    amount_minor          bigint      NOT NULL,
    currency              text        NOT NULL,
    state                 text        NOT NULL,
    provider_status       text        NULL,
    outcome_reason        text        NULL,
    provider_operation_id text        NULL,
    created_at            timestamptz NOT NULL,
    first_sent_at         timestamptz NULL,
    escalation_deadline   timestamptz NULL,
    recovery_owner        text        NULL,
    lease_token           uuid        NULL,
    lease_acquired_at     timestamptz NULL,
    lease_expires_at      timestamptz NULL,
    next_check_at         timestamptz NOT NULL,
    version               int         NOT NULL DEFAULT 0,
    CONSTRAINT ck_operation_kind CHECK (kind IN ('capture', 'cancel', 'refund')),
    CONSTRAINT ck_operation_state CHECK (state IN
        ('NotStarted', 'Started', 'Unknown', 'Succeeded', 'Failed', 'NotApplied', 'Returned')),
    -- Only a refund comes back: Cardco moves a succeeded refund to failed days later.
    CONSTRAINT ck_operation_returned_is_a_refund CHECK (state <> 'Returned' OR kind = 'refund'),
    CONSTRAINT ck_operation_amount CHECK (amount_minor > 0),
    CONSTRAINT ck_operation_currency CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT ck_operation_version CHECK (version >= 0),
    -- The send boundary, as for attempts (IS NOT DISTINCT FROM: a NULL reason must not make
    -- the whole CHECK NULL, which PostgreSQL would accept).
    CONSTRAINT ck_operation_send_boundary CHECK (
        ((state = 'NotStarted' OR (state = 'NotApplied' AND outcome_reason IS NOT DISTINCT FROM 'never-sent'))
            AND first_sent_at IS NULL AND escalation_deadline IS NULL)
        OR (state <> 'NotStarted' AND outcome_reason IS DISTINCT FROM 'never-sent'
            AND first_sent_at IS NOT NULL AND escalation_deadline IS NOT NULL)),
    CONSTRAINT ck_operation_lease CHECK (
        (recovery_owner IS NULL AND lease_token IS NULL AND lease_acquired_at IS NULL
            AND lease_expires_at IS NULL)
        OR (recovery_owner IS NOT NULL AND lease_token IS NOT NULL AND lease_acquired_at IS NOT NULL
            AND lease_expires_at IS NOT NULL)),
    CONSTRAINT uq_operation_reference UNIQUE (provider_account, client_reference),
    CONSTRAINT uq_operation_idempotency_key UNIQUE (provider_account, idempotency_key)
);

-- One capture or one cancel per payment, live or done: the capture/void race is decided here
-- whatever the code above it does (a failed or never-applied one leaves room for another).
CREATE UNIQUE INDEX one_capture_or_cancel_per_payment
    ON payment_operations (attempt_id)
    WHERE kind IN ('capture', 'cancel') AND state IN ('NotStarted', 'Started', 'Unknown', 'Succeeded');

CREATE INDEX payment_operations_due
    ON payment_operations (next_check_at, created_at, operation_id)
    WHERE state IN ('NotStarted', 'Started', 'Unknown');

CREATE UNIQUE INDEX one_operation_per_provider_operation
    ON payment_operations (provider_account, provider_operation_id)
    WHERE provider_operation_id IS NOT NULL;

CREATE INDEX payment_operations_by_attempt ON payment_operations (attempt_id, created_at);

-- One history per payment: an operation's events are the payment's, marked with the operation.
ALTER TABLE payment_attempt_events
    ADD COLUMN operation_id uuid NULL REFERENCES payment_operations (operation_id);

CREATE INDEX payment_attempt_events_by_operation
    ON payment_attempt_events (operation_id, occurred_at) WHERE operation_id IS NOT NULL;
