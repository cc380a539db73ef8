-- Issue 30: settlement reconciliation (docs/settlement.md). What each provider says it paid,
-- batch by batch and line by line, matched against the payments and refunds recorded here;
-- what does not match is an exception, and each exception is one escalation.

-- One row per batch of a provider account, written with all its lines in one transaction (a
-- batch is never half-recorded). A batch read again while the provider still calls it open is
-- read whole again (its lines replaced); once it is closed, reading it again records nothing.
CREATE TABLE settlement_batches (
    batch_id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider_account      text        NOT NULL REFERENCES provider_accounts (provider_account),
    provider_batch_id     text        NOT NULL,
    source                text        NOT NULL,
    batch_date            date        NOT NULL,
    provider_status       text        NOT NULL,
    currency              text        NOT NULL,
    -- What the provider says the lines add up to (NULL where its report states no total).
    reported_gross_minor  bigint      NULL,
    reported_fees_minor   bigint      NULL,
    reported_net_minor    bigint      NULL,
    reported_lines        int         NULL,
    -- What the lines do add up to, and how they matched.
    state                 text        NOT NULL,
    line_count            int         NOT NULL,
    gross_minor           bigint      NOT NULL,
    fees_minor            bigint      NOT NULL,
    net_minor             bigint      NOT NULL,
    matched_count         int         NOT NULL,
    exception_count       int         NOT NULL,
    bad_line_count        int         NOT NULL,
    content_sha256        text        NOT NULL,  -- of the lines as read: the same batch twice is a no-op
    first_reconciled_at   timestamptz NOT NULL,
    reconciled_at         timestamptz NOT NULL,
    CONSTRAINT ck_settlement_batch_source CHECK (source IN ('api', 'file')),
    CONSTRAINT ck_settlement_batch_status CHECK (provider_status IN ('open', 'closed')),
    -- reconciled: its lines are recorded and matched; unbalanced: they do not add up to the
    -- reported totals, so none is recorded (the batch is one exception).
    CONSTRAINT ck_settlement_batch_state CHECK (state IN ('reconciled', 'unbalanced')),
    CONSTRAINT ck_settlement_batch_currency CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT ck_settlement_batch_counts CHECK (
        line_count >= 0 AND matched_count >= 0 AND exception_count >= 0 AND bad_line_count >= 0),
    CONSTRAINT ck_settlement_batch_times CHECK (reconciled_at >= first_reconciled_at),
    CONSTRAINT one_settlement_batch_per_provider_id UNIQUE (provider_account, provider_batch_id)
);

CREATE INDEX settlement_batches_by_date ON settlement_batches (provider_account, batch_date);

-- Every line of a recorded batch, with what it matched. No foreign keys to the attempts and
-- operations: a batch of a million lines is written with COPY and matched in one INSERT ...
-- SELECT, and the match columns are written only by that statement, from those tables.
CREATE TABLE settlement_lines (
    batch_id              bigint      NOT NULL REFERENCES settlement_batches (batch_id),
    line_no               int         NOT NULL,
    kind                  text        NOT NULL,
    record_type           text        NOT NULL,
    provider_line_id      text        NULL,
    provider_payment_id   text        NULL,
    provider_operation_id text        NULL,
    reference             text        NULL,
    occurred_at           timestamptz NULL,
    gross_currency        text        NOT NULL,
    gross_minor           bigint      NOT NULL,
    net_currency          text        NOT NULL,
    fee_minor             bigint      NOT NULL,
    net_minor             bigint      NOT NULL,
    exchange_rate         numeric     NULL,
    attempt_id            uuid        NULL,  -- the payment it matched
    operation_id          uuid        NULL,  -- the refund or capture it matched
    outcome               text        NOT NULL,
    exception_kind        text        NULL,  -- an exception's kind (settlement_exceptions.kind)
    CONSTRAINT settlement_lines_pkey PRIMARY KEY (batch_id, line_no),
    CONSTRAINT ck_settlement_line_kind CHECK (kind IN (
        'charge', 'refund', 'refund_reversal', 'chargeback', 'chargeback_reversal',
        'charge_reversal', 'capture_reversal', 'fee', 'adjustment', 'payout')),
    -- matched: to ours, amount and currency equal; booked: not about one payment (fees,
    -- adjustments, payouts); exception: see settlement_exceptions.
    CONSTRAINT ck_settlement_line_outcome CHECK (outcome IN ('matched', 'booked', 'exception')),
    CONSTRAINT ck_settlement_line_net CHECK (net_minor = gross_minor - fee_minor
                                             OR gross_currency <> net_currency)
);

-- "Was this payment / refund settled?": the missing-from-settlement check and a payment's page.
CREATE INDEX settlement_lines_by_attempt ON settlement_lines (attempt_id) WHERE attempt_id IS NOT NULL;
CREATE INDEX settlement_lines_by_operation ON settlement_lines (operation_id) WHERE operation_id IS NOT NULL;

-- One row per exception ever found, keyed so that finding it again (the same line read again,
-- a payment still missing on the next day's run) records nothing and raises nothing.
CREATE TABLE settlement_exceptions (
    exception_id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    exception_key         text        NOT NULL,
    provider_account      text        NOT NULL REFERENCES provider_accounts (provider_account),
    kind                  text        NOT NULL,
    batch_id              bigint      NULL REFERENCES settlement_batches (batch_id),
    line_no               int         NULL,
    attempt_id            uuid        NULL REFERENCES payment_attempts (attempt_id),
    operation_id          uuid        NULL REFERENCES payment_operations (operation_id),
    detail                jsonb       NOT NULL,
    escalation_id         bigint      NULL REFERENCES payment_escalations (escalation_id),
    found_at              timestamptz NOT NULL,
    CONSTRAINT one_settlement_exception_per_key UNIQUE (exception_key),
    CONSTRAINT ck_settlement_exception_kind CHECK (kind IN (
        'unknown-payment', 'unknown-refund', 'not-succeeded-here', 'amount-mismatch',
        'currency-mismatch', 'duplicate-line', 'refund-reversed', 'chargeback', 'charge-reversed',
        'missing-payment', 'missing-refund', 'unbalanced-batch', 'malformed-line')),
    CONSTRAINT ck_settlement_exception_detail CHECK (jsonb_typeof(detail) = 'object')
);

CREATE INDEX settlement_exceptions_by_batch ON settlement_exceptions (batch_id) WHERE batch_id IS NOT NULL;
CREATE INDEX settlement_exceptions_by_account ON settlement_exceptions (provider_account, found_at);

-- The missing-from-settlement check: the account's Succeeded payments in a window of time.
CREATE INDEX payment_attempts_succeeded_by_account ON payment_attempts (provider_account, first_sent_at)
    WHERE state = 'Succeeded';
CREATE INDEX payment_operations_succeeded_by_account ON payment_operations (provider_account, first_sent_at)
    WHERE state = 'Succeeded';

-- The daily reconciliation (recovery's settlement task): one run per account and day, claimed by
-- one instance of however many run; a run whose instance died is taken over after its lease.
CREATE TABLE settlement_runs (
    run_date              date        NOT NULL,
    provider_account      text        NOT NULL REFERENCES provider_accounts (provider_account),
    owner                 text        NOT NULL,
    started_at            timestamptz NOT NULL,
    lease_expires_at      timestamptz NOT NULL,
    finished_at           timestamptz NULL,
    result                jsonb       NULL,
    CONSTRAINT settlement_runs_pkey PRIMARY KEY (run_date, provider_account),
    CONSTRAINT ck_settlement_run_finished CHECK ((finished_at IS NULL) = (result IS NULL))
);
