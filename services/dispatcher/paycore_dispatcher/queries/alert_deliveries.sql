-- alert_deliveries: what the alert consumer did with each alert (paycore_dispatcher.alerts),
-- written in the transaction that holds the alert's inbox row.

-- name: record
-- A 2xx as delivered, another 4xx as rejected; a dedup_key recorded before stays as it was.
INSERT INTO alert_deliveries
    (dedup_key, escalation_id, endpoint_format, response_status, outcome, delivered_at)
VALUES (:dedup_key, :escalation_id, :endpoint_format, :response_status, :outcome, :now)
ON CONFLICT (dedup_key) DO NOTHING
