-- Issue 29: what captures, cancels and refunds make of an order (paycore.domain.OrderStatus):
-- Paid -> PartiallyRefunded -> Refunded by its refunds, and, for a payment authorized for manual
-- capture, Authorized -> Paid by the capture or Authorized -> Voided by the cancel.
ALTER TABLE orders DROP CONSTRAINT ck_order_status;
ALTER TABLE orders ADD CONSTRAINT ck_order_status CHECK (status IN
    ('Open', 'Paid', 'Cancelled', 'Authorized', 'PartiallyRefunded', 'Refunded', 'Voided'));
