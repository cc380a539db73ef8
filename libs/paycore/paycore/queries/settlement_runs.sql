-- settlement_runs: the daily reconciliation of each account, one claimed run per day
-- (paycore.settlement_runs; recovery's settlement task).

-- name: claim
-- This instance takes the account's run of :run_date unless another has it: finished, or
-- started and still within its lease. Answers the run when this instance has it.
INSERT INTO settlement_runs (run_date, provider_account, owner, started_at, lease_expires_at)
VALUES (:run_date, :provider_account, :owner, :now, :lease_expires_at)
ON CONFLICT ON CONSTRAINT settlement_runs_pkey DO UPDATE
SET owner = EXCLUDED.owner, started_at = EXCLUDED.started_at, lease_expires_at = EXCLUDED.lease_expires_at
WHERE settlement_runs.finished_at IS NULL AND settlement_runs.lease_expires_at <= :now
RETURNING run_date, provider_account

-- name: finish
-- Only the owner finishes its run (one that lost its lease to another instance writes nothing).
UPDATE settlement_runs
SET finished_at = :now, result = :result
WHERE run_date = :run_date AND provider_account = :provider_account AND owner = :owner
  AND finished_at IS NULL

-- name: last_finished
-- When each account's daily run last finished (the console and the lateness gauge).
SELECT provider_account, max(finished_at) AS finished_at
FROM settlement_runs
WHERE finished_at IS NOT NULL
GROUP BY provider_account
