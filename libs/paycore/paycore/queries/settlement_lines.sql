-- settlement_lines: every line of a recorded batch and what it matched (paycore.settlements).
--
-- A batch's lines are streamed with COPY into a temporary table (settlement_incoming, gone at
-- the end of the transaction), then matched and written in one INSERT ... SELECT: one pass
-- over a million lines, and nothing written unless the whole batch is.

-- name: create_incoming
CREATE TEMPORARY TABLE settlement_incoming (
    line_no               int         NOT NULL,
    kind                  text        NOT NULL,
    record_type           text        NOT NULL,
    provider_line_id      text        NULL,
    provider_payment_id   text        NULL,
    provider_operation_id text        NULL,
    reference             text        NULL,
    occurred_at           timestamptz NULL,
    gross_currency        text        NOT NULL,
    gross_minor           bigint      NOT NULL,
    net_currency          text        NOT NULL,
    fee_minor             bigint      NOT NULL,
    net_minor             bigint      NOT NULL,
    exchange_rate         numeric     NULL
) ON COMMIT DROP

-- name: analyze_incoming
-- The planner's row estimate for a temporary table is a guess; a million lines deserve a plan.
ANALYZE settlement_incoming

-- name: forget
-- An open batch read again: its earlier lines give way to the whole new read.
DELETE FROM settlement_lines WHERE batch_id = :batch_id

-- name: record
-- Match each incoming line and write it. A line about a payment or an operation of ours finds
-- it by the provider's id, else by the merchant reference; what it should say is compared with
-- what is recorded here (docs/settlement.md, "Matching"), and the first rule it breaks is its
-- exception. Answers how many lines matched and how many are exceptions.
WITH found AS (
    SELECT i.*,
           COALESCE(op_by_id.operation_id, op_by_ref.operation_id) AS operation_id,
           COALESCE(op_by_id.attempt_id, op_by_ref.attempt_id, pay_by_id.attempt_id, pay_by_ref.attempt_id)
               AS attempt_id
    FROM settlement_incoming i
    -- the refund or capture the line is about: only refunds' and charges' lines name one
    LEFT JOIN LATERAL (
        SELECT o.operation_id, o.attempt_id FROM payment_operations o
        WHERE i.kind IN ('charge', 'refund', 'refund_reversal')
          AND o.provider_account = :provider_account AND o.provider_operation_id = i.provider_operation_id
          AND o.kind = CASE WHEN i.kind = 'charge' THEN 'capture' ELSE 'refund' END
    ) op_by_id ON true
    LEFT JOIN LATERAL (
        SELECT o.operation_id, o.attempt_id FROM payment_operations o
        WHERE op_by_id.operation_id IS NULL AND i.kind IN ('charge', 'refund', 'refund_reversal')
          AND o.provider_account = :provider_account AND o.client_reference = i.reference
          AND o.kind = CASE WHEN i.kind = 'charge' THEN 'capture' ELSE 'refund' END
    ) op_by_ref ON true
    -- the payment
    LEFT JOIN LATERAL (
        SELECT a.attempt_id FROM payment_attempts a
        WHERE i.kind NOT IN ('fee', 'adjustment', 'payout')
          AND a.provider_account = :provider_account AND a.provider_payment_id = i.provider_payment_id
    ) pay_by_id ON true
    LEFT JOIN LATERAL (
        SELECT a.attempt_id FROM payment_attempts a
        WHERE pay_by_id.attempt_id IS NULL AND i.kind NOT IN ('fee', 'adjustment', 'payout')
          AND a.provider_account = :provider_account AND a.client_reference = i.reference
    ) pay_by_ref ON true
),
judged AS (
    SELECT f.*,
           CASE
               WHEN f.kind IN ('fee', 'adjustment', 'payout', 'chargeback_reversal', 'capture_reversal') THEN NULL
               -- money moved against the store, or came back to it: always a person's to see
               WHEN f.kind = 'refund_reversal' THEN 'refund-reversed'
               WHEN f.kind = 'chargeback' THEN 'chargeback'
               WHEN f.kind = 'charge_reversal' THEN 'charge-reversed'
               WHEN f.kind = 'charge' AND f.attempt_id IS NULL THEN 'unknown-payment'
               WHEN f.kind = 'refund' AND f.operation_id IS NULL THEN 'unknown-refund'
               -- the provider moved money this side does not record as moved
               WHEN f.kind = 'charge' AND f.operation_id IS NOT NULL AND o.state <> 'Succeeded' THEN 'not-succeeded-here'
               WHEN f.kind = 'charge' AND f.operation_id IS NULL AND a.state <> 'Succeeded' THEN 'not-succeeded-here'
               WHEN f.kind = 'refund' AND o.state NOT IN ('Succeeded', 'Returned') THEN 'not-succeeded-here'
               WHEN f.gross_currency <> COALESCE(o.currency, a.currency) THEN 'currency-mismatch'
               WHEN f.kind = 'charge' AND f.gross_minor <> COALESCE(o.amount_minor, captured.amount_minor, a.amount_minor)
                   THEN 'amount-mismatch'
               WHEN f.kind = 'refund' AND -f.gross_minor <> o.amount_minor THEN 'amount-mismatch'
               -- the same payment or refund paid out twice: earlier in this batch, or in another
               WHEN row_number() OVER (PARTITION BY f.kind, f.attempt_id, f.operation_id ORDER BY f.line_no) > 1
                   THEN 'duplicate-line'
               WHEN f.kind = 'charge' AND EXISTS (
                   SELECT 1 FROM settlement_lines l
                   WHERE l.attempt_id = f.attempt_id AND l.kind = 'charge' AND l.batch_id <> :batch_id)
                   THEN 'duplicate-line'
               WHEN f.kind = 'refund' AND EXISTS (
                   SELECT 1 FROM settlement_lines l
                   WHERE l.operation_id = f.operation_id AND l.kind = 'refund' AND l.batch_id <> :batch_id)
                   THEN 'duplicate-line'
           END AS exception_kind
    FROM found f
    LEFT JOIN payment_attempts a ON a.attempt_id = f.attempt_id
    LEFT JOIN payment_operations o ON o.operation_id = f.operation_id
    -- a hold's charge is what was captured of it (Stripe's charge line names no capture)
    LEFT JOIN LATERAL (
        SELECT c.amount_minor FROM payment_operations c
        WHERE f.kind = 'charge' AND f.operation_id IS NULL AND f.attempt_id IS NOT NULL
          AND c.attempt_id = f.attempt_id AND c.kind = 'capture' AND c.state = 'Succeeded'
    ) captured ON true
),
written AS (
    INSERT INTO settlement_lines (batch_id, line_no, kind, record_type, provider_line_id, provider_payment_id,
        provider_operation_id, reference, occurred_at, gross_currency, gross_minor, net_currency, fee_minor,
        net_minor, exchange_rate, attempt_id, operation_id, outcome, exception_kind)
    SELECT :batch_id, j.line_no, j.kind, j.record_type, j.provider_line_id, j.provider_payment_id,
           j.provider_operation_id, j.reference, j.occurred_at, j.gross_currency, j.gross_minor, j.net_currency,
           j.fee_minor, j.net_minor, j.exchange_rate, j.attempt_id, j.operation_id,
           CASE WHEN j.exception_kind IS NOT NULL THEN 'exception'
                WHEN j.kind IN ('fee', 'adjustment', 'payout', 'chargeback_reversal', 'capture_reversal') THEN 'booked'
                ELSE 'matched' END,
           j.exception_kind
    FROM judged j
    RETURNING outcome
)
SELECT count(*) FILTER (WHERE outcome = 'matched') AS matched_count,
       count(*) FILTER (WHERE outcome = 'exception') AS exception_count
FROM written
