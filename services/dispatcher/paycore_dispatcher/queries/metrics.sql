-- The dispatcher's gauges, read from the database at each refresh (paycore_dispatcher.metrics).

-- name: backlog
-- Undispatched outbox rows by kind: pending, dead-lettered, and the oldest pending one.
SELECT kind,
       count(*) FILTER (WHERE dead_lettered_at IS NULL) AS pending,
       count(*) FILTER (WHERE dead_lettered_at IS NOT NULL) AS dead,
       min(created_at) FILTER (WHERE dead_lettered_at IS NULL) AS oldest
FROM outbox_messages
WHERE dispatched_at IS NULL
GROUP BY kind
