-- pgbench script: the raw notification insert the intake performs first, with half of
-- the keys repeating (the same 50 % duplicate mix the intake benchmark sends).
\set k random(1, :keys)
INSERT INTO payment_attempt_events
    (attempt_id, occurred_at, kind, actor, provider_account, notification_key, detail)
VALUES (NULL, now(), 'notification', 'notification-handler', 'cardco:acct_store:test',
        'evt_bench_' || :k, '{"type": "payment.succeeded"}')
ON CONFLICT (provider_account, notification_key) DO NOTHING;
