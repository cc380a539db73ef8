-- idempotency_records: checkout's inbound Idempotency-Key layer (paycore_checkout.inbound_idempotency).
--
-- A record's primary key (idempotency_key, endpoint, customer_id) decides who runs; a claim is
-- identified by its created_at, so a request completes or releases its own claim, never the one
-- of a successor that took an orphan over.

-- name: delete_expired
-- This key's record, if it expired or is an orphan (in progress since before :stale_before).
DELETE FROM idempotency_records
WHERE idempotency_key = :idempotency_key AND endpoint = :endpoint AND customer_id = :customer_id
  AND (expires_at <= :now OR (state = 'in_progress' AND created_at <= :stale_before))

-- name: claim
INSERT INTO idempotency_records (idempotency_key, endpoint, customer_id, request_fingerprint, state,
                                 created_at, expires_at)
VALUES (:idempotency_key, :endpoint, :customer_id, :request_fingerprint, 'in_progress', :now, :expires_at)
ON CONFLICT (idempotency_key, endpoint, customer_id) DO NOTHING
RETURNING idempotency_key

-- name: by_key
SELECT request_fingerprint, state, response_status, response_headers, response_body
FROM idempotency_records
WHERE idempotency_key = :idempotency_key AND endpoint = :endpoint AND customer_id = :customer_id

-- name: complete
UPDATE idempotency_records
SET state = 'completed', response_status = :response_status, response_headers = :response_headers,
    response_body = :response_body
WHERE idempotency_key = :idempotency_key AND endpoint = :endpoint AND customer_id = :customer_id
  AND state = 'in_progress' AND created_at = :claimed_at

-- name: release
DELETE FROM idempotency_records
WHERE idempotency_key = :idempotency_key AND endpoint = :endpoint AND customer_id = :customer_id
  AND state = 'in_progress' AND created_at = :claimed_at

-- name: sweep_expired
-- A record past its expiry answers nobody any more (claim would delete it on the key's next
-- request); the sweep removes the rest, a batch at a time, skipping rows a request holds.
WITH expired AS (
    SELECT idempotency_key, endpoint, customer_id FROM idempotency_records
    WHERE expires_at <= :now
    ORDER BY expires_at
    LIMIT :batch_size
    FOR UPDATE SKIP LOCKED
)
DELETE FROM idempotency_records r USING expired e
WHERE r.idempotency_key = e.idempotency_key AND r.endpoint = e.endpoint AND r.customer_id = e.customer_id
