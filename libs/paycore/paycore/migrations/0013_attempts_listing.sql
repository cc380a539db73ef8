-- Issue 27: the console lists attempts newest first, filtered by state or provider account, with
-- a keyset cursor (paycore.inspection.list_attempts). One index, on a column no write changes:
-- every index of payment_attempts is written again on each state change, so the filters ride on
-- this one (a live state also on payment_attempts_due), and the searches (order id, reference,
-- provider payment id) on the indexes those columns already have.
CREATE INDEX payment_attempts_newest ON payment_attempts (created_at DESC, attempt_id DESC);
