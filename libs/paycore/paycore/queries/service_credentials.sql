-- service_credentials: every statement on the back office's credentials (paycore.service_credentials).
--
-- A row is checked by the SHA-256 of the whole secret the caller presents, never the secret
-- itself; revoking is final: the UPDATEs that revoke or mark a use touch unrevoked rows only.

-- name: insert
INSERT INTO service_credentials (credential_id, name, client, secret_hash, scopes, issued_at, issued_by)
VALUES (:credential_id, :name, :client, :secret_hash, :scopes::text[], :now, :issued_by)
RETURNING *

-- name: by_id
SELECT * FROM service_credentials WHERE credential_id = :credential_id

-- name: by_name
SELECT * FROM service_credentials WHERE name = :name

-- name: every
-- Every credential, revoked ones too (they name past operations' requesters), oldest first.
SELECT * FROM service_credentials ORDER BY issued_at, name

-- name: revoke
UPDATE service_credentials SET revoked_at = :now, revoked_by = :revoked_by
WHERE credential_id = :credential_id AND revoked_at IS NULL
RETURNING *

-- name: touch
-- Only while unrevoked, and only when the last mark is :every_s old (a minute at most), so a
-- busy back office is not a write per request.
UPDATE service_credentials SET last_used_at = :now
WHERE credential_id = :credential_id AND revoked_at IS NULL
  AND (last_used_at IS NULL OR last_used_at <= :now::timestamptz - make_interval(secs => :every_s))
