-- schema_migrations: the migration runner's record of the files it applied (paycore.db.migrate).
--
-- The runner holds a session advisory lock around these (several processes may start at once);
-- each file's version is inserted in the transaction that applies it.

-- name: create_table
-- Before the first migration there is no table to read.
CREATE TABLE IF NOT EXISTS schema_migrations (
    version     text        PRIMARY KEY,
    applied_at  timestamptz NOT NULL
)

-- name: applied
SELECT version FROM schema_migrations

-- name: insert
INSERT INTO schema_migrations (version, applied_at) VALUES (:version, :now)
