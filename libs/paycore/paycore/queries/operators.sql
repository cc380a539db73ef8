-- operators: every statement the library runs on the local operator accounts.
--
-- An account is never deleted or renamed (operator_actions names it); a change returns the
-- account as it left it, without its password hash, or no row when there was nothing to change.

-- name: insert
INSERT INTO operators (name, role, password_hash, created_at) VALUES (:name, :role, :password_hash, :now)
ON CONFLICT (name) DO NOTHING
RETURNING name, role, created_at, disabled_at

-- name: disable
UPDATE operators SET disabled_at = :now WHERE name = :name AND disabled_at IS NULL
RETURNING name, role, created_at, disabled_at

-- name: enable
UPDATE operators SET disabled_at = NULL WHERE name = :name AND disabled_at IS NOT NULL
RETURNING name, role, created_at, disabled_at

-- name: set_password
UPDATE operators SET password_hash = :password_hash WHERE name = :name
RETURNING name, role, created_at, disabled_at

-- name: set_role
UPDATE operators SET role = :role WHERE name = :name AND role <> :role
RETURNING name, role, created_at, disabled_at

-- name: by_name
SELECT name, role, created_at, disabled_at FROM operators WHERE name = :name

-- name: all
SELECT name, role, created_at, disabled_at FROM operators ORDER BY name

-- name: for_sign_in
-- The one read that returns the password hash.
SELECT name, role, created_at, disabled_at, password_hash FROM operators WHERE name = :name

-- name: update_hash
-- A sign-in with the right password stores a hash made with the hasher's current parameters.
UPDATE operators SET password_hash = :password_hash WHERE name = :name
