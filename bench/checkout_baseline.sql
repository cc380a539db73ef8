-- pgbench script: the SQL statements one checkout issues, in its three transactions
-- (create attempt, mark started, record Succeeded), against pre-seeded orders. Each transition
-- writes its history events in its own statement, as paycore/queries/payment_attempts.sql does.
-- Run with -M simple: variables are substituted as text, so ids travel quoted.
SELECT n, quote_literal('bench-' || n) AS order_id FROM nextval('bench_order_seq') AS n \gset

BEGIN;
SELECT * FROM orders WHERE order_id = :order_id FOR UPDATE;
SELECT * FROM payment_attempts WHERE order_id = :order_id AND state IN ('NotStarted', 'Started', 'Unknown');
SELECT COALESCE(MAX(attempt_number), 0) + 1 FROM payment_attempts WHERE order_id = :order_id;
INSERT INTO payment_attempts (attempt_id, order_id, customer_id, attempt_number, provider_account,
    endpoint, api_version, client_reference, idempotency_key, request_body, amount_minor, currency,
    state, created_at, next_check_at)
VALUES (gen_random_uuid(), :order_id, 'cus_bench', 1, 'cardco:acct_store:test',
    'http://127.0.0.1:1/v1/payments', '2026-11-01', :order_id || '-a1', gen_random_uuid()::text,
    '{"amount":4999,"currency":"EUR","payment_method":"tok_visa","reference":"x"}', 4999, 'EUR',
    'NotStarted', now(), now() + interval '60 seconds')
ON CONFLICT (order_id) WHERE state IN ('NotStarted', 'Started', 'Unknown') DO NOTHING
RETURNING quote_literal(attempt_id) AS attempt_id \gset
INSERT INTO payment_attempt_events (attempt_id, occurred_at, kind, actor, detail)
VALUES (:attempt_id::uuid, now(), 'transition', 'endpoint', '{"from": null, "to": "NotStarted"}');
COMMIT;

BEGIN;
SELECT * FROM orders
WHERE order_id = (SELECT order_id FROM payment_attempts WHERE attempt_id = :attempt_id::uuid) FOR UPDATE;
WITH moved AS (
    UPDATE payment_attempts a
    SET state = 'Started', first_sent_at = now(),
        escalation_deadline = now() + pa.key_retention - pa.escalation_margin,
        next_check_at = now() + interval '50 seconds', version = a.version + 1
    FROM provider_accounts pa
    WHERE a.attempt_id = :attempt_id::uuid AND a.version = 0 AND a.state = 'NotStarted'
      AND pa.provider_account = a.provider_account
    RETURNING a.*
), logged AS (
    INSERT INTO payment_attempt_events (attempt_id, occurred_at, kind, actor, detail)
    SELECT moved.attempt_id, now(), e.kind, 'endpoint', e.detail
    FROM moved, unnest(ARRAY['send_intent', 'transition']::text[],
                       ARRAY['{"first_send": true}', '{"from": "NotStarted", "to": "Started"}']::jsonb[])
         WITH ORDINALITY AS e(kind, detail, position)
    ORDER BY e.position
)
SELECT * FROM moved;
COMMIT;

BEGIN;
SELECT * FROM orders
WHERE order_id = (SELECT order_id FROM payment_attempts WHERE attempt_id = :attempt_id::uuid) FOR UPDATE;
SELECT * FROM payment_attempts WHERE attempt_id = :attempt_id::uuid;
SELECT attempt_id FROM payment_attempts
WHERE provider_account = 'cardco:acct_store:test' AND provider_payment_id = 'pay_' || :n AND attempt_id <> :attempt_id::uuid;
WITH moved AS (
    UPDATE payment_attempts SET state = 'Succeeded', provider_status = 'succeeded',
        provider_payment_id = COALESCE(provider_payment_id, 'pay_' || :n), next_check_at = now(),
        version = version + 1
    WHERE attempt_id = :attempt_id::uuid AND version = 1 AND state = 'Started'
    RETURNING *
), logged AS (
    INSERT INTO payment_attempt_events (attempt_id, occurred_at, kind, actor, detail)
    SELECT moved.attempt_id, now(), e.kind, 'endpoint', e.detail
    FROM moved, unnest(ARRAY['send_result', 'transition']::text[],
                       ARRAY['{"outcome": "succeeded"}', '{"from": "Started", "to": "Succeeded"}']::jsonb[])
         WITH ORDINALITY AS e(kind, detail, position)
    ORDER BY e.position
)
SELECT * FROM moved;
UPDATE payment_escalations SET resolved_at = now(), next_reminder_at = NULL
WHERE attempt_id = :attempt_id::uuid AND resolved_at IS NULL;
UPDATE orders SET status = 'Paid', version = version + 1 WHERE order_id = :order_id AND status = 'Open';
INSERT INTO outbox_messages (dedup_key, attempt_id, ordering_key, kind, payload, created_at, next_attempt_at)
SELECT m.dedup_key, :attempt_id::uuid, 'attempt:' || :attempt_id, m.kind, m.payload, now(), now()
FROM unnest(ARRAY['attempt:' || :attempt_id || E'\x3aorder-confirmation',
                  'attempt:' || :attempt_id || E'\x3afulfillment-request']::text[],
            ARRAY['order-confirmation', 'fulfillment-request']::text[], ARRAY['{}', '{}']::jsonb[])
     WITH ORDINALITY AS m(dedup_key, kind, payload, position)
ORDER BY m.position
ON CONFLICT (dedup_key) DO NOTHING;
COMMIT;
