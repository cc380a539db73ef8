-- Recovery: shared rate-limit pauses, so every recovery instance honours a provider's
-- 429 for the scope it names (here: one provider account), and only that scope.
CREATE TABLE provider_rate_limit_pauses (
    scope         text        PRIMARY KEY,   -- e.g. 'cardco:acct_store:test'
    paused_until  timestamptz NOT NULL,
    reason        text        NOT NULL,
    updated_at    timestamptz NOT NULL
);
