-- The recovery worker's gauges, read from the database at each refresh (paycore_recovery.metrics):
-- every instance reports the same values.

-- name: open_by_state
-- Live attempts by state, and the oldest of each.
SELECT state, count(*) AS n, min(created_at) AS oldest
FROM payment_attempts
WHERE state IN ('NotStarted', 'Started', 'Unknown')
GROUP BY state

-- name: open_escalations
-- Open episodes by reason (its prefix before ':', a bounded set) and whether a person acknowledged them.
SELECT split_part(reason, ':', 1) AS reason, acknowledged_at IS NOT NULL AS acknowledged, count(*) AS n
FROM payment_escalations
WHERE resolved_at IS NULL
GROUP BY 1, 2

-- name: oldest_unacknowledged
SELECT min(raised_at) FROM payment_escalations WHERE resolved_at IS NULL AND acknowledged_at IS NULL

-- name: past_escalation_deadline
-- Unknown attempts whose escalation deadline has passed while no episode is open for them:
-- recovery should have escalated them and has not -- it is behind.
SELECT count(*)
FROM payment_attempts a
WHERE a.state = 'Unknown' AND a.escalation_deadline <= :now
  AND NOT EXISTS (SELECT 1 FROM payment_escalations e
                  WHERE e.attempt_id = a.attempt_id AND e.resolved_at IS NULL)

-- name: paused_scopes
-- Provider scopes a 429 paused (paycore.rate_limits) that are still paused at :now.
SELECT count(*) FROM provider_rate_limit_pauses WHERE paused_until > :now

-- name: settlement_exceptions_open
-- Settlement exceptions whose escalation episode is still open, by account and kind (both
-- bounded: the accounts configured, the kinds ck_settlement_exception_kind allows).
SELECT x.provider_account, x.kind, count(*) AS n
FROM settlement_exceptions x
JOIN payment_escalations e ON e.escalation_id = x.escalation_id
WHERE e.resolved_at IS NULL
GROUP BY 1, 2

-- name: settlement_newest_batches
-- Per account, the day after its newest batch's date (when that day's batch could at the
-- earliest be complete), and its batches that do not add up to what the provider reported.
SELECT provider_account, max(batch_date) + 1 AS covered_until,
       count(*) FILTER (WHERE state = 'unbalanced') AS unbalanced
FROM settlement_batches
GROUP BY provider_account
