-- Verified webhook deliveries, kept only while their signature is inside the
-- verifier's tolerance: a byte-identical replay (same webhook-id and timestamp,
-- same verifying secret) is answered as a duplicate and never applied again.
-- A provider's genuine redelivery carries a new timestamp and is handled as usual.
CREATE TABLE webhook_deliveries_seen (
    provider_account    text        NOT NULL,
    webhook_id_sha256   text        NOT NULL,   -- the header is sender-chosen text: store its hash
    webhook_timestamp   bigint      NOT NULL,   -- seconds, as signed
    seen_at             timestamptz NOT NULL,
    CONSTRAINT pk_webhook_deliveries_seen PRIMARY KEY (provider_account, webhook_id_sha256, webhook_timestamp),
    CONSTRAINT ck_webhook_id_sha256 CHECK (webhook_id_sha256 ~ '^[0-9a-f]{64}$')
);

CREATE INDEX webhook_deliveries_seen_expiry ON webhook_deliveries_seen (webhook_timestamp);
