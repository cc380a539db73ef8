-- Issue 5: the consumer helper's inbox, outbox retention and operator actions,
-- alert deliveries, and the demo consumers' effect tables.

-- Consumer inbox (paycore.consumer): one row per (consumer group, dedup_key),
-- written in the same transaction as the consumer's side effect, so a redelivered
-- message -- after a crash between that commit and the offset commit, a
-- rebalance, or an outbox replay -- finds its key and does nothing.
CREATE TABLE consumer_inbox (
    consumer_group  text        NOT NULL,
    dedup_key       text        NOT NULL,
    topic           text        NOT NULL,
    kafka_partition int         NOT NULL,
    kafka_offset    bigint      NOT NULL,
    processed_at    timestamptz NOT NULL,
    CONSTRAINT pk_consumer_inbox PRIMARY KEY (consumer_group, dedup_key)
);

CREATE INDEX consumer_inbox_processed_at ON consumer_inbox (processed_at);

-- Outbox retention (paycore.outbox_admin.purge_dispatched): dispatched rows past
-- the replay horizon are deleted, their dedup keys kept here, and the trigger
-- below makes an insert of an archived key a silent no-op -- exactly what
-- ON CONFLICT (dedup_key) DO NOTHING does for a key still in outbox_messages.
CREATE TABLE outbox_dedup_keys (
    dedup_key      text        PRIMARY KEY,
    message_id     bigint      NOT NULL,
    dispatched_at  timestamptz NOT NULL,
    archived_at    timestamptz NOT NULL
);

CREATE FUNCTION outbox_skip_archived_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Wait for a retention transaction that is deleting this key's row (it holds
    -- the row lock), so the check below sees the key it archives. FOR KEY SHARE
    -- does not conflict with the relay's FOR NO KEY UPDATE claims.
    PERFORM 1 FROM outbox_messages WHERE dedup_key = NEW.dedup_key FOR KEY SHARE;
    IF EXISTS (SELECT 1 FROM outbox_dedup_keys WHERE dedup_key = NEW.dedup_key) THEN
        RETURN NULL;  -- already delivered once, within the dedup horizon
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER outbox_messages_skip_archived_key
    BEFORE INSERT ON outbox_messages
    FOR EACH ROW EXECUTE FUNCTION outbox_skip_archived_key();

-- Operator decisions on dead-lettered rows (paycore outbox requeue|skip).
CREATE TABLE outbox_operator_actions (
    action_id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id       bigint      NOT NULL,
    action           text        NOT NULL,
    operator         text        NOT NULL,
    reason           text        NOT NULL,
    acted_at         timestamptz NOT NULL,
    previous_error   text        NULL,
    previous_attempts int        NOT NULL,
    CONSTRAINT ck_outbox_operator_action CHECK (action IN ('requeue', 'skip')),
    CONSTRAINT ck_outbox_operator_named CHECK (char_length(operator) > 0)
);

CREATE INDEX outbox_operator_actions_message ON outbox_operator_actions (message_id);

-- Alert delivery (the dispatcher service's alert consumer): one row per alert delivered to the
-- configured HTTP endpoint, written with the inbox row.
CREATE TABLE alert_deliveries (
    dedup_key        text        PRIMARY KEY,
    escalation_id    bigint      NULL,
    endpoint_format  text        NOT NULL,
    response_status  int         NOT NULL,
    outcome          text        NOT NULL,
    delivered_at     timestamptz NOT NULL,
    CONSTRAINT ck_alert_delivery_outcome CHECK (outcome IN ('delivered', 'rejected'))
);

-- Demo consumers (paycore run consumer fulfillment|email): stand-ins for
-- downstream systems, used by tests and the chaos run to count effects. No
-- unique key on purpose: a duplicate effect must be countable, not prevented here.
CREATE TABLE demo_fulfillments (
    fulfillment_id  bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dedup_key       text        NOT NULL,
    kind            text        NOT NULL,
    attempt_id      text        NULL,
    message_id      bigint      NULL,
    received_at     timestamptz NOT NULL
);

CREATE INDEX demo_fulfillments_dedup_key ON demo_fulfillments (dedup_key);

CREATE TABLE demo_emails (
    email_id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dedup_key       text        NOT NULL,
    kind            text        NOT NULL,
    attempt_id      text        NULL,
    template        text        NOT NULL,
    sent_at         timestamptz NOT NULL
);

CREATE INDEX demo_emails_dedup_key ON demo_emails (dedup_key);
