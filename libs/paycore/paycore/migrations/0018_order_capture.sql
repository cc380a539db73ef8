-- Issue 29: authorize now, capture later. An order asks for its payment to be held
-- ('manual'), for a capture (or a void) after; 'automatic' charges it when it succeeds, as
-- every order did before. The payment's request carries the choice (it is fixed with the body).
ALTER TABLE orders ADD COLUMN capture text NOT NULL DEFAULT 'automatic'
    CONSTRAINT ck_order_capture CHECK (capture IN ('automatic', 'manual'));

-- Recovery's hold task reads the held orders (few at any time, among every order ever made).
CREATE INDEX orders_authorized ON orders (order_id) WHERE status = 'Authorized';
