-- provider_rate_limit_pauses: a provider's 429, honoured by every worker (paycore.rate_limits).
--
-- A pause names the scope the provider's limit applies to (one provider account). Recovery reads
-- a scope's pause with the attempt's other facts in one statement, so that read is
-- payment_attempt_events.sql:pass_facts, not here.

-- name: pause
-- A later pause never shortens an earlier, longer one.
INSERT INTO provider_rate_limit_pauses (scope, paused_until, reason, updated_at)
VALUES (:scope, :paused_until, :reason, :now)
ON CONFLICT (scope) DO UPDATE
SET paused_until = GREATEST(provider_rate_limit_pauses.paused_until, EXCLUDED.paused_until),
    reason = EXCLUDED.reason, updated_at = EXCLUDED.updated_at
