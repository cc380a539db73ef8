-- Which configured provider account an order is paid on. A store with several
-- accounts (EU orders on Adyen, US orders on Stripe) routes each order to one;
-- NULL (orders created before this migration, or by tools) means the account
-- that is the default when the order is paid. Every attempt still records its
-- own account, so a resend never follows a later change of this column.
ALTER TABLE orders ADD COLUMN provider_account text NULL;
ALTER TABLE orders ADD CONSTRAINT ck_order_provider_account
    CHECK (provider_account IS NULL OR provider_account ~ '^[a-z]+:[^:]+:(test|live)$');
