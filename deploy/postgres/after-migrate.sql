-- After the first `paycore migrate` (docs/operations.md): the attempt history is append-only.
-- Its triggers already refuse UPDATE, DELETE and TRUNCATE; the services' role loses the rights
-- as well, so a refusal no longer depends on the trigger staying in place. Run as paycore_owner
-- (or an administrator); once is enough, later migrations never recreate the table.
REVOKE UPDATE, DELETE, TRUNCATE ON payment_attempt_events FROM paycore_app;
