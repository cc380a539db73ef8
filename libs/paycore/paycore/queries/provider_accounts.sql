-- provider_accounts: one registered configuration per provider account, without secrets
-- (paycore.accounts). The row is the one source of truth for an account's settings; the Started
-- transition stamps an attempt's escalation_deadline from it (payment_attempts.sql:mark_started).

-- name: register
-- Registered only if absent: a running fleet's settings are never overwritten by a start.
INSERT INTO provider_accounts (provider_account, provider, account, environment, base_url, api_version,
                               key_retention, escalation_margin, lookup_rate_per_s, updated_at)
VALUES (:provider_account, :provider, :account, :environment, :base_url, :api_version,
        make_interval(secs => :key_retention_s), make_interval(secs => :escalation_margin_s),
        :lookup_rate_per_s, :now)
ON CONFLICT (provider_account) DO NOTHING

-- name: settings_of
-- The compared settings (paycore.accounts.SETTINGS) of each named account, in the units a
-- configuration states them.
SELECT provider_account, base_url, api_version,
       extract(epoch FROM key_retention)::float8 AS key_retention_s,
       extract(epoch FROM escalation_margin)::float8 AS escalation_margin_s,
       lookup_rate_per_s::float8 AS lookup_rate_per_s
FROM provider_accounts
WHERE provider_account = ANY(:provider_accounts::text[])

-- name: registered
-- Every registered account, as `paycore accounts list` shows it.
SELECT provider_account, base_url, api_version, key_retention, escalation_margin, lookup_rate_per_s,
       updated_at
FROM provider_accounts
ORDER BY provider_account

-- name: names
-- The console's account filter.
SELECT provider_account FROM provider_accounts ORDER BY provider_account

-- name: update
-- An operator's `paycore accounts apply`; attempts already Started keep their stamped deadline.
UPDATE provider_accounts
SET base_url = :base_url, api_version = :api_version, key_retention = make_interval(secs => :key_retention_s),
    escalation_margin = make_interval(secs => :escalation_margin_s), lookup_rate_per_s = :lookup_rate_per_s,
    updated_at = :now
WHERE provider_account = :provider_account
