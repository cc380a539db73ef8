-- paycore schema, version 1: the reference's four tables, plus orders, provider accounts
-- and inbound idempotency records. Every timestamp comes from the application clock.

CREATE TABLE provider_accounts (
    provider_account    text        PRIMARY KEY,   -- 'cardco:acct_store:test'
    provider            text        NOT NULL,
    account             text        NOT NULL,
    environment         text        NOT NULL,
    base_url            text        NOT NULL,
    api_version         text        NOT NULL,
    key_retention       interval    NOT NULL,      -- provider's minimum key retention
    escalation_margin   interval    NOT NULL,      -- safety margin inside that window
    lookup_rate_per_s   numeric     NOT NULL,
    updated_at          timestamptz NOT NULL,
    CONSTRAINT ck_provider_account_environment CHECK (environment IN ('test', 'live')),
    CONSTRAINT ck_provider_account_id CHECK (provider_account = provider || ':' || account || ':' || environment),
    CONSTRAINT ck_provider_account_margin CHECK (escalation_margin >= interval '0' AND escalation_margin < key_retention),
    CONSTRAINT ck_provider_account_rate CHECK (lookup_rate_per_s > 0)
);

CREATE TABLE orders (
    order_id            text        PRIMARY KEY,
    customer_id         text        NOT NULL,
    amount_minor        bigint      NOT NULL,
    currency            text        NOT NULL,
    status              text        NOT NULL DEFAULT 'Open',
    cancel_requested_at timestamptz NULL,
    created_at          timestamptz NOT NULL,
    version             int         NOT NULL DEFAULT 0,
    CONSTRAINT ck_order_status CHECK (status IN ('Open', 'Paid', 'Cancelled')),
    CONSTRAINT ck_order_amount CHECK (amount_minor > 0),
    CONSTRAINT ck_order_currency CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT ck_order_version CHECK (version >= 0)
);

CREATE INDEX orders_by_customer ON orders (customer_id, created_at);

CREATE TABLE payment_attempts (
    attempt_id          uuid        PRIMARY KEY,
    order_id            text        NOT NULL REFERENCES orders (order_id),
    customer_id         text        NOT NULL,
    attempt_number      int         NOT NULL,
    provider_account    text        NOT NULL REFERENCES provider_accounts (provider_account),
    endpoint            text        NOT NULL,
    api_version         text        NOT NULL,
    client_reference    text        NOT NULL,
    idempotency_key     text        NOT NULL,
    request_body        text        NOT NULL,
    amount_minor        bigint      NOT NULL,
    currency            text        NOT NULL,
    state               text        NOT NULL,
    provider_status     text        NULL,
    next_action         jsonb       NULL,
    next_action_expires_at timestamptz NULL,
    outcome_reason      text        NULL,
    created_at          timestamptz NOT NULL,
    first_sent_at       timestamptz NULL,
    escalation_deadline timestamptz NULL,
    provider_payment_id text        NULL,
    recovery_owner      text        NULL,
    lease_token         uuid        NULL,
    lease_acquired_at   timestamptz NULL,
    lease_expires_at    timestamptz NULL,
    next_check_at       timestamptz NOT NULL,
    version             int         NOT NULL DEFAULT 0,
    CONSTRAINT ck_payment_attempt_state CHECK (state IN
        ('NotStarted', 'Started', 'Unknown', 'Succeeded', 'Failed', 'NotApplied')),
    CONSTRAINT ck_payment_attempt_number CHECK (attempt_number > 0),
    CONSTRAINT ck_payment_amount CHECK (amount_minor > 0),
    CONSTRAINT ck_payment_currency CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT ck_payment_version CHECK (version >= 0),
    -- Never sent: NotStarted, or NotApplied because recovery closed it as never-sent.
    -- Everything else crossed the send boundary. IS NOT DISTINCT FROM, not '=': a NULL
    -- reason must not turn the whole CHECK into NULL, which PostgreSQL would accept.
    CONSTRAINT ck_payment_attempt_send_boundary CHECK (
        ((state = 'NotStarted' OR (state = 'NotApplied' AND outcome_reason IS NOT DISTINCT FROM 'never-sent'))
            AND first_sent_at IS NULL AND escalation_deadline IS NULL)
        OR (state <> 'NotStarted' AND outcome_reason IS DISTINCT FROM 'never-sent'
            AND first_sent_at IS NOT NULL AND escalation_deadline IS NOT NULL)),
    CONSTRAINT ck_payment_attempt_lease CHECK (
        (recovery_owner IS NULL AND lease_token IS NULL AND lease_acquired_at IS NULL
            AND lease_expires_at IS NULL)
        OR (recovery_owner IS NOT NULL AND lease_token IS NOT NULL AND lease_acquired_at IS NOT NULL
            AND lease_expires_at IS NOT NULL)),
    CONSTRAINT ck_payment_attempt_action_expiry CHECK (next_action_expires_at IS NULL OR next_action IS NOT NULL),
    CONSTRAINT uq_payment_attempt_number UNIQUE (order_id, attempt_number),
    CONSTRAINT uq_payment_attempt_reference UNIQUE (provider_account, client_reference),
    CONSTRAINT uq_payment_attempt_idempotency_key UNIQUE (provider_account, idempotency_key)
);

-- At most one attempt per order that might still take effect. The live-attempt insert's
-- ON CONFLICT predicate must stay textually identical to this WHERE clause.
CREATE UNIQUE INDEX one_live_attempt_per_order
    ON payment_attempts (order_id)
    WHERE state IN ('NotStarted', 'Started', 'Unknown');

CREATE INDEX payment_attempts_due
    ON payment_attempts (next_check_at, created_at, attempt_id)
    WHERE state IN ('NotStarted', 'Started', 'Unknown');

CREATE UNIQUE INDEX one_attempt_per_provider_payment
    ON payment_attempts (provider_account, provider_payment_id)
    WHERE provider_payment_id IS NOT NULL;

CREATE INDEX payment_attempts_by_order ON payment_attempts (order_id, attempt_number);

-- Append-only: every send intent and result, notification, lookup and state change.
CREATE TABLE payment_attempt_events (
    event_id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    attempt_id        uuid        NULL REFERENCES payment_attempts (attempt_id),
    occurred_at       timestamptz NOT NULL,
    kind              text        NOT NULL,
    actor             text        NOT NULL,
    provider_account  text        NULL,
    notification_key  text        NULL,
    detail            jsonb       NOT NULL,
    CONSTRAINT ck_event_kind CHECK (kind IN
        ('send_intent', 'send_result', 'send_abandoned', 'notification', 'lookup', 'transition')),
    CONSTRAINT ck_notification_event_fields CHECK (
        (kind = 'notification' AND provider_account IS NOT NULL)
        OR (kind <> 'notification' AND provider_account IS NULL AND notification_key IS NULL)),
    -- Deliberately NOT "NULLS NOT DISTINCT": unkeyed notifications are each their own row.
    CONSTRAINT uq_notification UNIQUE (provider_account, notification_key)
);

CREATE INDEX payment_attempt_events_history ON payment_attempt_events (attempt_id, occurred_at);

-- History is evidence: the database refuses to change or remove it.
CREATE FUNCTION payment_attempt_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'payment_attempt_events is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

CREATE TRIGGER payment_attempt_events_no_update_delete
    BEFORE UPDATE OR DELETE ON payment_attempt_events
    FOR EACH ROW EXECUTE FUNCTION payment_attempt_events_append_only();

CREATE TRIGGER payment_attempt_events_no_truncate
    BEFORE TRUNCATE ON payment_attempt_events
    FOR EACH STATEMENT EXECUTE FUNCTION payment_attempt_events_append_only();

CREATE TABLE payment_escalations (
    escalation_id     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    escalation_key    text        NOT NULL,
    attempt_id        uuid        NULL REFERENCES payment_attempts (attempt_id),
    reason            text        NOT NULL,
    detail            jsonb       NOT NULL DEFAULT '{}'::jsonb,
    raised_at         timestamptz NOT NULL,
    acknowledged_at   timestamptz NULL,
    reminder_count    int         NOT NULL DEFAULT 0,
    resolved_at       timestamptz NULL,
    next_reminder_at  timestamptz NULL,
    CONSTRAINT ck_escalation_reminder_count CHECK (reminder_count >= 0),
    CONSTRAINT ck_escalation_resolved_reminder CHECK (resolved_at IS NULL OR next_reminder_at IS NULL),
    CONSTRAINT ck_escalation_resolved_after_raised CHECK (resolved_at IS NULL OR resolved_at >= raised_at),
    CONSTRAINT ck_escalation_acknowledged_after_raised CHECK (acknowledged_at IS NULL OR acknowledged_at >= raised_at)
);

CREATE UNIQUE INDEX one_open_escalation_per_key
    ON payment_escalations (escalation_key)
    WHERE resolved_at IS NULL;

CREATE INDEX payment_escalations_by_attempt ON payment_escalations (attempt_id);

CREATE INDEX payment_escalations_reminders_due
    ON payment_escalations (next_reminder_at)
    WHERE resolved_at IS NULL;

CREATE TABLE outbox_messages (
    message_id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dedup_key         text        NOT NULL,
    attempt_id        uuid        NULL REFERENCES payment_attempts (attempt_id),
    ordering_key      text        NULL,
    kind              text        NOT NULL,
    payload           jsonb       NOT NULL,
    created_at        timestamptz NOT NULL,
    delivery_attempts int         NOT NULL DEFAULT 0,
    next_attempt_at   timestamptz NOT NULL,
    last_error        text        NULL,
    dispatched_at     timestamptz NULL,
    dead_lettered_at  timestamptz NULL,
    CONSTRAINT uq_outbox_dedup_key UNIQUE (dedup_key),
    CONSTRAINT ck_outbox_delivery_attempts CHECK (delivery_attempts >= 0),
    CONSTRAINT ck_outbox_single_terminal_state CHECK (dispatched_at IS NULL OR dead_lettered_at IS NULL)
);

CREATE INDEX outbox_messages_pending
    ON outbox_messages (next_attempt_at, created_at)
    WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL;

CREATE INDEX outbox_messages_unfinished_by_order
    ON outbox_messages (ordering_key, message_id)
    WHERE dispatched_at IS NULL AND ordering_key IS NOT NULL;

-- Inbound Idempotency-Key records (idempotency-keys-are-not-optional): one per key,
-- endpoint and customer; the full response is stored and replayed.
CREATE TABLE idempotency_records (
    idempotency_key     text        NOT NULL,
    endpoint            text        NOT NULL,
    customer_id         text        NOT NULL,
    request_fingerprint text        NOT NULL,
    state               text        NOT NULL,
    response_status     int         NULL,
    response_headers    jsonb       NULL,
    response_body       bytea       NULL,
    created_at          timestamptz NOT NULL,
    expires_at          timestamptz NOT NULL,
    CONSTRAINT pk_idempotency_records PRIMARY KEY (idempotency_key, endpoint, customer_id),
    CONSTRAINT ck_idempotency_state CHECK (state IN ('in_progress', 'completed')),
    CONSTRAINT ck_idempotency_key_length CHECK (char_length(idempotency_key) BETWEEN 1 AND 255),
    CONSTRAINT ck_idempotency_fingerprint CHECK (request_fingerprint ~ '^[0-9a-f]{64}$'),
    CONSTRAINT ck_idempotency_completed CHECK (
        (state = 'in_progress' AND response_status IS NULL AND response_body IS NULL)
        OR (state = 'completed' AND response_status IS NOT NULL AND response_body IS NOT NULL)),
    CONSTRAINT ck_idempotency_expiry CHECK (expires_at > created_at)
);

CREATE INDEX idempotency_records_expiry ON idempotency_records (expires_at);
