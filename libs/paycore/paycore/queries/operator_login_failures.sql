-- operator_login_failures: the failed sign-ins that throttle the console (paycore.operators).
--
-- The table holds only failures inside the window (older ones are deleted at each failure), and
-- at most max_client_failures of them per client; a sign-in runs these under its client's
-- advisory lock.

-- name: of_name_and_client
SELECT failed_at FROM operator_login_failures
WHERE name = :name AND client = :client AND failed_at > :window_start
ORDER BY failed_at

-- name: of_client
-- Served by operator_login_failures_by_age.
SELECT failed_at FROM operator_login_failures
WHERE client = :client AND failed_at > :window_start
ORDER BY failed_at

-- name: insert
INSERT INTO operator_login_failures (name, client, failed_at) VALUES (:name, :client, :now)

-- name: forget_old
DELETE FROM operator_login_failures WHERE failed_at <= :window_start

-- name: clear
DELETE FROM operator_login_failures WHERE name = :name AND client = :client
