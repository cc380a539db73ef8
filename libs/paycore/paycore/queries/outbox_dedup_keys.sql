-- outbox_dedup_keys: the dedup keys of purged outbox rows, kept so a late replay of their cause
-- is still recognised (the migration's trigger makes an insert of an archived key a no-op).
-- Keys are archived by outbox_messages.sql's purge_dispatched, in the statement that deletes
-- their rows; this file holds what is run on the archive alone.

-- name: expire
-- Archived keys of rows dispatched before :cutoff (paycore.outbox_admin's key_horizon).
DELETE FROM outbox_dedup_keys WHERE dispatched_at < :cutoff
