-- settlement_batches: one row per batch of a provider account (paycore.settlements).
--
-- A batch is written with all its lines, its exceptions and its effect in one transaction, so
-- a row here always has the lines its counts say. A closed batch is never read again.

-- name: find
-- The batch as recorded, if it is: a closed one is not read again; an open one is read whole
-- again, and skipped when its lines are byte for byte what was recorded.
SELECT batch_id, provider_status, state, content_sha256
FROM settlement_batches
WHERE provider_account = :provider_account AND provider_batch_id = :provider_batch_id

-- name: record
-- The batch, new or read again; its counts are final once record_counts has run.
INSERT INTO settlement_batches (provider_account, provider_batch_id, source, batch_date, provider_status,
    currency, reported_gross_minor, reported_fees_minor, reported_net_minor, reported_lines, state,
    line_count, gross_minor, fees_minor, net_minor, matched_count, exception_count, bad_line_count,
    content_sha256, first_reconciled_at, reconciled_at)
VALUES (:provider_account, :provider_batch_id, :source, :batch_date, :provider_status, :currency,
    :reported_gross_minor, :reported_fees_minor, :reported_net_minor, :reported_lines, :state,
    :line_count, :gross_minor, :fees_minor, :net_minor, 0, 0, :bad_line_count, :content_sha256, :now, :now)
ON CONFLICT ON CONSTRAINT one_settlement_batch_per_provider_id DO UPDATE
SET source = EXCLUDED.source, batch_date = EXCLUDED.batch_date, provider_status = EXCLUDED.provider_status,
    currency = EXCLUDED.currency, reported_gross_minor = EXCLUDED.reported_gross_minor,
    reported_fees_minor = EXCLUDED.reported_fees_minor, reported_net_minor = EXCLUDED.reported_net_minor,
    reported_lines = EXCLUDED.reported_lines, state = EXCLUDED.state, line_count = EXCLUDED.line_count,
    gross_minor = EXCLUDED.gross_minor, fees_minor = EXCLUDED.fees_minor, net_minor = EXCLUDED.net_minor,
    bad_line_count = EXCLUDED.bad_line_count, content_sha256 = EXCLUDED.content_sha256,
    reconciled_at = EXCLUDED.reconciled_at
-- a closed batch is never rewritten, whoever raced to read it
WHERE settlement_batches.provider_status = 'open'
RETURNING batch_id

-- name: record_counts
-- What the batch's lines matched, and every exception it has ever had (found again or not).
UPDATE settlement_batches b
SET matched_count = :matched_count,
    exception_count = (SELECT count(*) FROM settlement_exceptions e WHERE e.batch_id = b.batch_id)
WHERE b.batch_id = :batch_id
RETURNING *

-- name: coverage
-- The days the account's reconciled closed batches span: payments in between that no line
-- names are missing from the provider's books.
SELECT min(batch_date) AS first_date, max(batch_date) AS last_date
FROM settlement_batches
WHERE provider_account = :provider_account AND provider_status = 'closed' AND state = 'reconciled'

-- name: last_provider_batch_id
-- The account's most recent batch by the provider's numbering (Adyen numbers its batches and
-- publishes no list of them: reading resumes after this one).
SELECT provider_batch_id
FROM settlement_batches
WHERE provider_account = :provider_account AND source = 'api'
ORDER BY length(provider_batch_id) DESC, provider_batch_id DESC
LIMIT 1
