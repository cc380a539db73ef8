-- operator_sessions: every statement on the console's server-side sessions (paycore.operator_sessions).
--
-- A row is known by the SHA-256 of the session id the signed cookie carries, never the id itself.
-- Ending is final: every UPDATE that ends a session or marks it seen touches open rows only.

-- name: purge_expired
-- Rows long past their expiry (KEEP_DAYS), purged at a sign-in.
DELETE FROM operator_sessions WHERE expires_at < :expired_before

-- name: insert
INSERT INTO operator_sessions (session_hash, operator, created_at, last_seen_at, expires_at)
VALUES (:session_hash, :operator, :now, :now, :expires_at)

-- name: by_hash
SELECT session_hash, operator, created_at, last_seen_at, expires_at, ended_at, end_reason
FROM operator_sessions WHERE session_hash = :session_hash

-- name: touch
-- Only forward, only while open, and only when the last mark is :every_s old (a minute at most),
-- so reading a page is not a write each time.
UPDATE operator_sessions SET last_seen_at = :now
WHERE session_hash = :session_hash AND ended_at IS NULL
  AND last_seen_at <= :now::timestamptz - make_interval(secs => :every_s)

-- name: end_one
UPDATE operator_sessions SET ended_at = :now, end_reason = :reason
WHERE session_hash = :session_hash AND ended_at IS NULL

-- name: end_of_operator
-- Every open session of the operator but :keep (a session hash, or NULL for none kept).
UPDATE operator_sessions SET ended_at = :now, end_reason = :reason
WHERE operator = :operator AND ended_at IS NULL AND session_hash IS DISTINCT FROM :keep

-- name: open_of_operator
-- Usable now: not ended, not expired, seen within the idle timeout; most recent first.
SELECT session_hash, operator, created_at, last_seen_at, expires_at, ended_at, end_reason
FROM operator_sessions
WHERE operator = :operator AND ended_at IS NULL AND expires_at > :now
  AND last_seen_at > :now::timestamptz - make_interval(secs => :idle_s)
ORDER BY last_seen_at DESC, created_at DESC
