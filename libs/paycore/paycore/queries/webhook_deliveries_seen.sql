-- webhook_deliveries_seen: the replay window (paycore.webhook_replays). A signed delivery is
-- recorded once, as (account, sha256 of its webhook-id, its timestamp), in the intake's
-- transaction; rows older than the signature tolerance can never be replayed and are purged.

-- name: insert_seen
-- Waits on a concurrent uncommitted insert of the same delivery, like the notification insert:
-- it commits -> no row, this is a replay; it rolls back -> this one proceeds.
INSERT INTO webhook_deliveries_seen (provider_account, webhook_id_sha256, webhook_timestamp, seen_at)
VALUES (:account, :webhook_id_sha256, :webhook_timestamp, :now)
ON CONFLICT ON CONSTRAINT pk_webhook_deliveries_seen DO NOTHING
RETURNING 1

-- name: purge_expired
-- :expired_before is a Unix timestamp the verifier would refuse (older than its tolerance).
DELETE FROM webhook_deliveries_seen WHERE webhook_timestamp < :expired_before
