-- outbox_messages: every statement on the outbox, whoever runs it: queueing (paycore.outbox),
-- the relay's claims and marks (the dispatcher's relay loads this
-- file; its marks go through paycore.outbox), an operator's requeue or skip, and retention
-- (paycore.outbox_admin).
--
-- A row is pending while dispatched_at IS NULL AND dead_lettered_at IS NULL, and unfinished
-- while dispatched_at IS NULL (a dead-lettered row is unfinished: it blocks the later rows of
-- its ordering key until an operator decides). dedup_key names the effect: queueing the same
-- effect twice is a no-op (ON CONFLICT here; the retention trigger for an archived key).
-- The relay reads its claims by position: each claim's column list is relay.Row's fields, in
-- that order (the relay checks it at import).

-- name: enqueue
-- One message unless its effect is already queued; its id, or no row.
INSERT INTO outbox_messages (dedup_key, attempt_id, ordering_key, kind, payload, created_at, next_attempt_at,
                             traceparent)
VALUES (:dedup_key, :attempt_id, :ordering_key, :kind, :payload, :now, :now, :traceparent)
ON CONFLICT (dedup_key) DO NOTHING
RETURNING message_id

-- name: enqueue_effects
-- Several effects of one attempt in one round trip, their ids (the relay's order within the
-- attempt's ordering key) in the order given.
INSERT INTO outbox_messages (dedup_key, attempt_id, ordering_key, kind, payload, created_at, next_attempt_at,
                             traceparent)
SELECT m.dedup_key, :attempt_id, :ordering_key, m.kind, m.payload, :now, :now, :traceparent
FROM unnest(:dedup_keys::text[], :kinds::text[], :payloads::jsonb[]) WITH ORDINALITY AS m(dedup_key, kind, payload, position)
ORDER BY m.position
ON CONFLICT (dedup_key) DO NOTHING

-- name: claim_alerts
-- The relay's alerts: due, pending rows without an ordering key. They never wait behind
-- business rows.
SELECT message_id, dedup_key, attempt_id, ordering_key, kind, payload, delivery_attempts, traceparent
FROM outbox_messages
WHERE ordering_key IS NULL
  AND dispatched_at IS NULL AND dead_lettered_at IS NULL
  AND next_attempt_at <= :now
ORDER BY next_attempt_at, created_at
LIMIT :limit
FOR NO KEY UPDATE SKIP LOCKED

-- name: claim_heads
-- The relay's business heads: due, pending rows with no unfinished earlier row of their key.
-- The NOT EXISTS reads the snapshot and ignores row locks: a predecessor that another relay
-- has claimed (locked) is still dispatched_at IS NULL, so it blocks.
SELECT message_id, dedup_key, attempt_id, ordering_key, kind, payload, delivery_attempts, traceparent
FROM outbox_messages m
WHERE m.ordering_key IS NOT NULL
  AND m.dispatched_at IS NULL AND m.dead_lettered_at IS NULL
  AND m.next_attempt_at <= :now
  AND NOT EXISTS (
      SELECT 1 FROM outbox_messages p
      WHERE p.ordering_key = m.ordering_key
        AND p.message_id < m.message_id
        AND p.dispatched_at IS NULL)
ORDER BY m.next_attempt_at, m.created_at
LIMIT :limit
FOR NO KEY UPDATE OF m SKIP LOCKED

-- name: followers
-- The unfinished rows behind the claimed heads, in order (a plain read: a row locked by
-- someone else is still listed, so the chain can stop before it).
SELECT message_id, ordering_key, next_attempt_at <= :now AND dead_lettered_at IS NULL AS due
FROM outbox_messages
WHERE ordering_key = ANY(:ordering_keys::text[]) AND dispatched_at IS NULL
ORDER BY ordering_key, message_id

-- name: lock_followers
-- The followers the relay chose, claimed if still pending and due; a row locked by someone
-- else is skipped, and its chain stops there.
SELECT message_id, dedup_key, attempt_id, ordering_key, kind, payload, delivery_attempts, traceparent
FROM outbox_messages
WHERE message_id = ANY(:message_ids::bigint[])
  AND dispatched_at IS NULL AND dead_lettered_at IS NULL AND next_attempt_at <= :now
FOR NO KEY UPDATE SKIP LOCKED

-- name: mark_dispatched
-- The relay's marks, in its pass's transaction, each conditional on the row still being
-- pending: a row an operator skipped or requeued meanwhile is not overwritten. This one is one
-- statement for every acknowledged row of a pass (one 10,000-id update cost less per row than
-- one per wave: docs/dispatcher.md, "Benchmark").
UPDATE outbox_messages
SET dispatched_at = :now
WHERE message_id = ANY(:message_ids::bigint[]) AND dispatched_at IS NULL AND dead_lettered_at IS NULL

-- name: mark_failed
-- A send failed: count it, keep the error, try again at :retry_at.
UPDATE outbox_messages
SET delivery_attempts = delivery_attempts + 1, last_error = :error, next_attempt_at = :retry_at
WHERE message_id = :message_id AND dispatched_at IS NULL AND dead_lettered_at IS NULL
RETURNING delivery_attempts

-- name: mark_dead_lettered
-- The relay gives up on the row: it waits for an operator and keeps blocking its key's later rows.
UPDATE outbox_messages
SET delivery_attempts = delivery_attempts + 1, last_error = :error, dead_lettered_at = :now
WHERE message_id = :message_id AND dispatched_at IS NULL AND dead_lettered_at IS NULL
RETURNING delivery_attempts

-- name: lock_message
-- The row an operator acts on, locked for the action's transaction; its dispatch fields are the
-- action's "before".
SELECT message_id, attempt_id, ordering_key, dead_lettered_at, dispatched_at, delivery_attempts,
       next_attempt_at, last_error
FROM outbox_messages WHERE message_id = :message_id
FOR NO KEY UPDATE

-- name: requeue
-- A dead-lettered row back to pending, due :now, its attempts reset.
UPDATE outbox_messages
SET dead_lettered_at = NULL, delivery_attempts = 0, next_attempt_at = :now
WHERE message_id = :message_id AND dispatched_at IS NULL
RETURNING dead_lettered_at, dispatched_at, delivery_attempts, next_attempt_at, last_error

-- name: skip
-- A dead-lettered row given up: marked finished (nothing was published) so its successors
-- flow; :note says who skipped it and why.
UPDATE outbox_messages
SET dead_lettered_at = NULL, dispatched_at = :now, last_error = :note
WHERE message_id = :message_id AND dispatched_at IS NULL
RETURNING dead_lettered_at, dispatched_at, delivery_attempts, next_attempt_at, last_error

-- name: purge_dispatched
-- One retention batch: rows dispatched before :cutoff deleted, their dedup keys archived in
-- outbox_dedup_keys in the same statement. Rows locked by a relay or a writer are left for the
-- next run (SKIP LOCKED).
WITH doomed AS (
    SELECT message_id FROM outbox_messages
    WHERE dispatched_at IS NOT NULL AND dispatched_at < :cutoff
    ORDER BY message_id
    LIMIT :batch_size
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM outbox_messages m USING doomed d
    WHERE m.message_id = d.message_id
    RETURNING m.dedup_key, m.message_id, m.dispatched_at
), archived AS (
    INSERT INTO outbox_dedup_keys (dedup_key, message_id, dispatched_at, archived_at)
    SELECT dedup_key, message_id, dispatched_at, :now FROM deleted
    ON CONFLICT (dedup_key) DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM deleted) AS deleted, (SELECT count(*) FROM archived) AS archived
