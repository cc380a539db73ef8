-- settlements: the console's reads of settlement reconciliation (paycore_console.settlements):
-- batches per account and day, one batch's totals, lines by kind and exceptions, the exceptions
-- in no batch, and the fees-and-exceptions chart. Nothing writes. A NULL parameter switches its
-- filter off; a listing's sort key is its keyset cursor.

-- name: batches_page
-- Newest batch date first, then account and batch; the date range is inclusive
-- (settlement_batches_by_date serves one account's range).
SELECT batch_id, provider_account, provider_batch_id, batch_date, provider_status, state, currency,
       line_count, matched_count, exception_count, bad_line_count, gross_minor, fees_minor, net_minor,
       reconciled_at
FROM settlement_batches
WHERE (:account::text IS NULL OR provider_account = :account)
  AND batch_date >= :date_from AND batch_date <= :date_to
  AND (:after_date::date IS NULL
       OR (batch_date, batch_id) < (:after_date, :after_batch_id::bigint))
ORDER BY batch_date DESC, batch_id DESC
LIMIT :limit

-- name: batch
SELECT batch_id, provider_account, provider_batch_id, source, batch_date, provider_status, state, currency,
       reported_gross_minor, reported_fees_minor, reported_net_minor, reported_lines,
       line_count, matched_count, exception_count, bad_line_count, gross_minor, fees_minor, net_minor,
       first_reconciled_at, reconciled_at
FROM settlement_batches WHERE batch_id = :batch_id

-- name: line_kinds
-- The batch's lines by kind (and currencies: a line's gross may be in the payment's currency).
-- Sums of bigint are numeric: cast back (a batch's sums fit, like its totals).
SELECT kind, gross_currency, net_currency, count(*)::int AS lines, sum(gross_minor)::bigint AS gross_minor,
       sum(fee_minor)::bigint AS fee_minor, sum(net_minor)::bigint AS net_minor
FROM settlement_lines
WHERE batch_id = :batch_id
GROUP BY kind, gross_currency, net_currency
ORDER BY kind, gross_currency, net_currency

-- name: batch_exceptions_page
-- By line number (the batch's own exception, with no line, first), then id
-- (settlement_exceptions_by_batch). An operation's payment is looked up for its link.
SELECT x.exception_id, x.provider_account, x.kind, x.batch_id, x.line_no, x.attempt_id, x.operation_id,
       o.attempt_id AS operation_attempt_id, x.detail, x.found_at, x.escalation_id,
       e.acknowledged_at, e.resolved_at
FROM settlement_exceptions x
LEFT JOIN payment_escalations e ON e.escalation_id = x.escalation_id
LEFT JOIN payment_operations o ON o.operation_id = x.operation_id
WHERE x.batch_id = :batch_id
  AND (:after_line::int IS NULL OR (COALESCE(x.line_no, 0), x.exception_id) > (:after_line, :after_id::bigint))
ORDER BY COALESCE(x.line_no, 0), x.exception_id
LIMIT :limit

-- name: unbatched_exceptions_page
-- Payments and refunds of ours no batch of the account settled: in no batch, newest found first
-- (settlement_exceptions_by_account); the date range is of the day they were found (UTC).
SELECT x.exception_id, x.provider_account, x.kind, x.batch_id, x.line_no, x.attempt_id, x.operation_id,
       o.attempt_id AS operation_attempt_id, x.detail, x.found_at, x.escalation_id,
       e.acknowledged_at, e.resolved_at
FROM settlement_exceptions x
LEFT JOIN payment_escalations e ON e.escalation_id = x.escalation_id
LEFT JOIN payment_operations o ON o.operation_id = x.operation_id
WHERE x.batch_id IS NULL AND x.kind IN ('missing-payment', 'missing-refund')
  AND (:account::text IS NULL OR x.provider_account = :account)
  AND x.found_at >= :found_from AND x.found_at < :found_until
  AND (:after_found_at::timestamptz IS NULL
       OR (x.found_at, x.exception_id) < (:after_found_at, :after_id::bigint))
ORDER BY x.found_at DESC, x.exception_id DESC
LIMIT :limit

-- name: fees_per_day
-- The chart's fees: per batch date and settlement currency.
SELECT batch_date AS day, currency, sum(fees_minor)::bigint AS fees_minor
FROM settlement_batches
WHERE (:account::text IS NULL OR provider_account = :account)
  AND batch_date >= :date_from AND batch_date <= :date_to
GROUP BY 1, 2

-- name: exceptions_per_day
-- The chart's exceptions: per day found (UTC), in a batch or not.
SELECT (found_at AT TIME ZONE 'UTC')::date AS day, count(*)::int AS n
FROM settlement_exceptions
WHERE (:account::text IS NULL OR provider_account = :account)
  AND found_at >= :found_from AND found_at < :found_until
GROUP BY 1

-- name: batch_lines_export
-- Every line of a batch with what it matched, in line order: the accounting view a finance team
-- exports (streamed with a cursor; a batch may hold a million lines).
SELECT l.line_no, l.provider_line_id, l.kind, l.record_type, l.provider_payment_id,
       l.provider_operation_id, l.reference, l.occurred_at, l.gross_currency, l.gross_minor,
       l.net_currency, l.fee_minor, l.net_minor, l.exchange_rate, l.outcome, l.exception_kind,
       a.order_id, l.attempt_id, l.operation_id
FROM settlement_lines l
LEFT JOIN payment_attempts a ON a.attempt_id = l.attempt_id
WHERE l.batch_id = :batch_id
ORDER BY l.line_no
