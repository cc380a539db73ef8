-- pgbench script: the SQL statements the webhook intake issues for one delivery of a signed
-- payment.succeeded event about a seeded Started attempt, in the same order as the intake run
-- (every event delivered twice, shuffled in blocks of 100 events: 50 % duplicates).
--
-- Each statement below is one the intake runs, in the order it runs them; the "-- from:" line
-- names the query (paycore/queries/<table>.sql:<name>) or code constant it comes from, and tests/webhooks/test_bench_baseline.py checks both
-- (the text against the constant, the sequence against the statements a real handler sends to
-- PostgreSQL). Parameters ($n in the code) are pgbench expressions here.
-- Run with -M prepared (the intake's driver, asyncpg, prepares each statement once per connection).
-- from: bench (which delivery this client sends next, in the intake run's order; not the intake's)
SELECT n, extract(epoch FROM now())::bigint + seq AS ts FROM bench_delivery_order
WHERE seq = (SELECT nextval('bench_delivery_seq')) \gset

-- from: payment_attempt_events.sql:notification_recorded
SELECT EXISTS (SELECT 1 FROM payment_attempt_events WHERE provider_account = :account AND notification_key = 'evt_bench_' || :n::text) \gset
\if :exists
-- A redelivery of a committed notification: answered "duplicate" from that one read.
\else
BEGIN;
-- from: webhook_deliveries_seen.sql:insert_seen
INSERT INTO webhook_deliveries_seen (provider_account, webhook_id_sha256, webhook_timestamp, seen_at)
VALUES (:account, encode(sha256(('evt_bench_' || :n::text)::bytea), 'hex'), :ts, now())
ON CONFLICT ON CONSTRAINT pk_webhook_deliveries_seen DO NOTHING
RETURNING 1;
-- from: payment_attempts.sql:by_reference_or_payment_id
SELECT * FROM payment_attempts
WHERE provider_account = :account AND (client_reference = 'wh-' || :n::text || '-a1' OR provider_payment_id = 'pay_bench_' || :n::text) \gset
-- from: orders.sql:lock_order
SELECT * FROM orders WHERE order_id = 'wh-' || :n::text FOR UPDATE;
-- from: payment_attempt_events.sql:insert_keyed_notification
INSERT INTO payment_attempt_events
    (attempt_id, operation_id, occurred_at, kind, actor, provider_account, notification_key, detail)
VALUES (:attempt_id, NULL, now(), 'notification', 'notification-handler', :account, 'evt_bench_' || :n::text, ('{"key_basis": "event-id", "canonical": {"type": "payment.succeeded", "amount": 4999, "status": "succeeded", "account": "acct_store", "currency": "EUR", "livemode": false, "reference": "wh-' || :n::text || '-a1", "payment_id": "pay_bench_' || :n::text || '"}, "event_id": "evt_bench_' || :n::text || '", "type": "payment.succeeded", "sequence": 2, "provider_payment_id": "pay_bench_' || :n::text || '", "reference": "wh-' || :n::text || '-a1", "status": "succeeded", "amount_minor": 4999, "currency": "EUR", "payload_account": "acct_store", "payload_livemode": false, "object_account": "acct_store", "object_livemode": false, "event": {"id": "evt_bench_' || :n::text || '", "data": {"object": {"id": "pay_bench_' || :n::text || '", "amount": 4999, "object": "payment", "status": "succeeded", "account": "acct_store", "created": 1795900000, "currency": "EUR", "livemode": false, "reference": "wh-' || :n::text || '-a1", "next_action": null, "decline_code": null, "amount_refunded": 0}}, "type": "payment.succeeded", "account": "acct_store", "created": 1795900000, "livemode": false, "sequence": 2}}')::jsonb)
ON CONFLICT (provider_account, notification_key) DO NOTHING
RETURNING event_id;
-- apply_outcome's try runs in a savepoint.
SAVEPOINT apply_outcome;
-- from: orders.sql:lock_order_of_attempt
SELECT * FROM orders
WHERE order_id = (SELECT order_id FROM payment_attempts WHERE attempt_id = :attempt_id)
FOR UPDATE;
-- from: payment_attempts.sql:by_id
SELECT * FROM payment_attempts WHERE attempt_id = :attempt_id;
-- from: payment_attempts.sql:payment_id_owner
SELECT attempt_id FROM payment_attempts
WHERE provider_account = :account AND provider_payment_id = 'pay_bench_' || :n::text AND attempt_id <> :attempt_id;
-- from: payment_attempts.sql:apply_outcome
WITH moved AS (
    UPDATE payment_attempts
    SET state = 'Succeeded',
        provider_status = 'succeeded',
        next_action = NULL,
        next_action_expires_at = NULL,
        outcome_reason = NULL,
        provider_payment_id = COALESCE(provider_payment_id, 'pay_bench_' || :n::text),
        next_check_at = now() + interval '60 seconds',
        version = version + 1,
        recovery_owner = CASE WHEN recovery_owner = NULL AND lease_token = NULL THEN NULL ELSE recovery_owner END,
        lease_token = CASE WHEN recovery_owner = NULL AND lease_token = NULL THEN NULL ELSE lease_token END,
        lease_acquired_at = CASE WHEN recovery_owner = NULL AND lease_token = NULL THEN NULL ELSE lease_acquired_at END,
        lease_expires_at = CASE WHEN recovery_owner = NULL AND lease_token = NULL THEN NULL ELSE lease_expires_at END
    WHERE attempt_id = :attempt_id AND version = 1 AND state = 'Started'
    RETURNING *
), logged AS (
    INSERT INTO payment_attempt_events (attempt_id, occurred_at, kind, actor, detail)
    SELECT moved.attempt_id, now(), e.kind, 'notification-handler', e.detail
    FROM moved, unnest(ARRAY['transition']::text[], ARRAY['{"from": "Started", "to": "Succeeded", "reason": null, "provider_status": "succeeded"}']::jsonb[]) WITH ORDINALITY AS e(kind, detail, position)
    ORDER BY e.position
)
SELECT * FROM moved;
-- from: payment_escalations.sql:resolve_for_attempt
UPDATE payment_escalations
SET resolved_at = now(), next_reminder_at = NULL
WHERE attempt_id = :attempt_id AND resolved_at IS NULL
RETURNING escalation_id;
-- from: orders.sql:mark_paid
UPDATE orders SET status = 'Paid', version = version + 1
WHERE order_id = 'wh-' || :n::text AND status = 'Open';
-- from: outbox_messages.sql:enqueue_effects
INSERT INTO outbox_messages (dedup_key, attempt_id, ordering_key, kind, payload, created_at, next_attempt_at,
                             traceparent)
SELECT m.dedup_key, :attempt_id, 'attempt:' || :attempt_id::text, m.kind, m.payload, now(), now(), NULL
FROM unnest(ARRAY['attempt:' || :attempt_id::text || E'\x3aorder-confirmation', 'attempt:' || :attempt_id::text || E'\x3afulfillment-request']::text[], ARRAY['order-confirmation', 'fulfillment-request']::text[], ARRAY['{"attempt_id": "x", "order_id": "wh", "amount_minor": 4999, "currency": "EUR", "provider_account": "cardco\u003aacct_store\u003atest", "provider_payment_id": "pay_bench"}', '{"attempt_id": "x", "order_id": "wh", "amount_minor": 4999, "currency": "EUR", "provider_account": "cardco\u003aacct_store\u003atest", "provider_payment_id": "pay_bench"}']::jsonb[]) WITH ORDINALITY AS m(dedup_key, kind, payload, position)
ORDER BY m.position
ON CONFLICT (dedup_key) DO NOTHING;
RELEASE SAVEPOINT apply_outcome;
COMMIT;
\endif
