-- Two roles for paycore (docs/operations.md, "Before the first deploy"): paycore_owner runs the
-- migrations (PAYCORE_MIGRATION_DATABASE_URL, the Job only) and owns the tables; paycore_app is
-- what every service connects as (PAYCORE_DATABASE_URL): it reads and writes rows, creates
-- nothing. Run once, as an administrator, in the database `paycore`; replace both passwords
-- (or leave them out and use your platform's IAM authentication).
CREATE ROLE paycore_owner LOGIN PASSWORD 'REPLACE_ME_owner';
CREATE ROLE paycore_app LOGIN PASSWORD 'REPLACE_ME_app';
GRANT CONNECT ON DATABASE paycore TO paycore_owner, paycore_app;
GRANT USAGE, CREATE ON SCHEMA public TO paycore_owner;
GRANT USAGE ON SCHEMA public TO paycore_app;
-- Every table and sequence the owner's migrations create, now and in later releases.
ALTER DEFAULT PRIVILEGES FOR ROLE paycore_owner IN SCHEMA public
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO paycore_app;
ALTER DEFAULT PRIVILEGES FOR ROLE paycore_owner IN SCHEMA public
    GRANT USAGE, SELECT ON SEQUENCES TO paycore_app;
