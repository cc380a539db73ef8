-- consumer_inbox: the dedup keys a downstream consumer group has handled (paycore.consumer).
-- The inbox row and the handler's side effect commit in one transaction, so a redelivered
-- record finds its key and is not handled again.

-- name: insert
-- No row: the key is already there, the effect was done. A concurrent duplicate waits on the
-- first one's uncommitted row.
INSERT INTO consumer_inbox (consumer_group, dedup_key, topic, kafka_partition, kafka_offset, processed_at)
VALUES (:consumer_group, :dedup_key, :topic, :kafka_partition, :kafka_offset, :now)
ON CONFLICT (consumer_group, dedup_key) DO NOTHING
RETURNING dedup_key

-- name: purge
-- One batch of rows processed before :processed_before. Rows locked by a consumer's transaction
-- in flight are left for the next run (SKIP LOCKED). paycore.db.delete_in_batches binds the
-- batch size last: :batch_size stays this query's last parameter.
WITH doomed AS (
    SELECT consumer_group, dedup_key FROM consumer_inbox
    WHERE processed_at < :processed_before
    ORDER BY processed_at
    LIMIT :batch_size
    FOR UPDATE SKIP LOCKED
)
DELETE FROM consumer_inbox i USING doomed d
WHERE i.consumer_group = d.consumer_group AND i.dedup_key = d.dedup_key
