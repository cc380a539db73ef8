-- settlement_exceptions: what reconciliation found wrong, one row per exception ever found
-- (paycore.settlements). Each is keyed: finding it again -- the same line read again, a payment
-- still missing on the next run -- inserts nothing (ON CONFLICT DO NOTHING), so only a new
-- exception raises an escalation.

-- name: record_line_exceptions
-- The batch's lines that are exceptions, each with its evidence: the line and what is recorded
-- here about the payment or operation it names.
INSERT INTO settlement_exceptions (exception_key, provider_account, kind, batch_id, line_no, attempt_id,
    operation_id, detail, found_at)
SELECT 'settlement:' || :provider_account::text || ':' || :provider_batch_id::text || ':line:'
           || COALESCE(l.provider_line_id, l.line_no::text) || ':' || l.exception_kind,
       :provider_account, l.exception_kind, l.batch_id, l.line_no, l.attempt_id, l.operation_id,
       jsonb_strip_nulls(jsonb_build_object(
           'provider_account', :provider_account::text, 'provider_batch_id', :provider_batch_id::text,
           'batch_id', l.batch_id, 'line_no', l.line_no, 'line_kind', l.kind, 'record_type', l.record_type,
           'provider_line_id', l.provider_line_id, 'provider_payment_id', l.provider_payment_id,
           'provider_operation_id', l.provider_operation_id, 'reference', l.reference,
           'gross_currency', l.gross_currency, 'gross_minor', l.gross_minor, 'net_currency', l.net_currency,
           'fee_minor', l.fee_minor, 'net_minor', l.net_minor,
           'attempt_id', l.attempt_id, 'operation_id', l.operation_id,
           'ours', jsonb_strip_nulls(jsonb_build_object(
               'order_id', a.order_id, 'attempt_state', a.state, 'attempt_amount_minor', a.amount_minor,
               'attempt_currency', a.currency, 'operation_kind', o.kind, 'operation_state', o.state,
               'operation_amount_minor', o.amount_minor)))),
       :now
FROM settlement_lines l
LEFT JOIN payment_attempts a ON a.attempt_id = l.attempt_id
LEFT JOIN payment_operations o ON o.operation_id = l.operation_id
WHERE l.batch_id = :batch_id AND l.outcome = 'exception'
ORDER BY l.line_no
ON CONFLICT ON CONSTRAINT one_settlement_exception_per_key DO NOTHING
RETURNING exception_id, exception_key, kind, detail

-- name: renumber_line_exceptions
-- An open batch read again is numbered afresh (Stripe lists a day newest first, so a later
-- transaction moves every earlier one down): an exception found on an earlier read follows its
-- line, by the provider's id of the line (what its key is made of), to the number it has now.
UPDATE settlement_exceptions e
SET line_no = l.line_no, detail = jsonb_set(e.detail, '{line_no}', to_jsonb(l.line_no))
FROM settlement_lines l
WHERE e.batch_id = :batch_id AND l.batch_id = :batch_id
  AND l.provider_line_id = e.detail ->> 'provider_line_id'
  AND e.line_no IS DISTINCT FROM l.line_no

-- name: record_batch_exception
-- One exception about a batch or one of its rows: a batch whose lines do not add up, a row
-- that could not be read.
INSERT INTO settlement_exceptions (exception_key, provider_account, kind, batch_id, line_no, detail, found_at)
VALUES (:exception_key, :provider_account, :kind, :batch_id, :line_no, :detail, :now)
ON CONFLICT ON CONSTRAINT one_settlement_exception_per_key DO NOTHING
RETURNING exception_id, exception_key, kind, detail

-- name: record_missing_payments
-- The account's payments charged in the covered window that no line of any batch names: paid
-- here, not in the provider's books. A day whose batch is unbalanced is not covered. A payment captured whole when it succeeded is settled by
-- its charge; a hold by its capture (record_missing_captures).
INSERT INTO settlement_exceptions (exception_key, provider_account, kind, attempt_id, detail, found_at)
SELECT 'settlement:' || :provider_account::text || ':missing-payment:' || a.attempt_id,
       :provider_account, 'missing-payment', a.attempt_id,
       jsonb_build_object('provider_account', :provider_account::text, 'attempt_id', a.attempt_id,
           'order_id', a.order_id, 'provider_payment_id', a.provider_payment_id,
           'reference', a.client_reference, 'amount_minor', a.amount_minor, 'currency', a.currency,
           'first_sent_at', a.first_sent_at, 'covered_from', :covered_from::timestamptz,
           'covered_until', :covered_until::timestamptz),
       :now
FROM payment_attempts a
JOIN orders ord ON ord.order_id = a.order_id
WHERE a.provider_account = :provider_account AND a.state = 'Succeeded'
  AND a.first_sent_at >= :covered_from AND a.first_sent_at < :covered_until
  AND ord.capture = 'automatic'
  AND NOT EXISTS (SELECT 1 FROM settlement_lines l WHERE l.attempt_id = a.attempt_id AND l.kind = 'charge')
  -- a day whose batch is unbalanced is not covered: its lines, which may name it, were not recorded
  AND NOT EXISTS (SELECT 1 FROM settlement_batches b
                  WHERE b.provider_account = :provider_account AND b.state <> 'reconciled'
                    AND b.batch_date = (a.first_sent_at AT TIME ZONE 'UTC')::date)
ORDER BY a.first_sent_at
ON CONFLICT ON CONSTRAINT one_settlement_exception_per_key DO NOTHING
RETURNING exception_id, exception_key, kind, detail

-- name: record_missing_operations
-- The same for the account's captures (a hold's charge) and refunds: succeeded here in the
-- covered window, named by no line. A Returned refund is not missing: it was paid and came back.
INSERT INTO settlement_exceptions (exception_key, provider_account, kind, attempt_id, operation_id, detail, found_at)
SELECT 'settlement:' || :provider_account::text || ':' || k.kind || ':' || o.operation_id,
       :provider_account, k.kind, o.attempt_id, o.operation_id,
       jsonb_build_object('provider_account', :provider_account::text, 'attempt_id', o.attempt_id,
           'operation_id', o.operation_id, 'operation_kind', o.kind,
           'provider_operation_id', o.provider_operation_id, 'reference', o.client_reference,
           'amount_minor', o.amount_minor, 'currency', o.currency, 'first_sent_at', o.first_sent_at,
           'covered_from', :covered_from::timestamptz, 'covered_until', :covered_until::timestamptz),
       :now
FROM payment_operations o
CROSS JOIN LATERAL (SELECT CASE o.kind WHEN 'refund' THEN 'missing-refund' ELSE 'missing-payment' END AS kind) k
WHERE o.provider_account = :provider_account AND o.state = 'Succeeded' AND o.kind IN ('capture', 'refund')
  AND o.first_sent_at >= :covered_from AND o.first_sent_at < :covered_until
  AND NOT EXISTS (SELECT 1 FROM settlement_lines l WHERE l.operation_id = o.operation_id)
  AND NOT (o.kind = 'capture' AND EXISTS (
      SELECT 1 FROM settlement_lines l WHERE l.attempt_id = o.attempt_id AND l.kind = 'charge'))
  AND NOT EXISTS (SELECT 1 FROM settlement_batches b
                  WHERE b.provider_account = :provider_account AND b.state <> 'reconciled'
                    AND b.batch_date = (o.first_sent_at AT TIME ZONE 'UTC')::date)
ORDER BY o.first_sent_at
ON CONFLICT ON CONSTRAINT one_settlement_exception_per_key DO NOTHING
RETURNING exception_id, exception_key, kind, detail

-- name: attach_escalation
UPDATE settlement_exceptions SET escalation_id = :escalation_id WHERE exception_id = :exception_id
