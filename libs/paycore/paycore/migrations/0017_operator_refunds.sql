-- Issue 29: refunds from the operator console (paycore.operator_refunds; docs/operators.md,
-- "Refunds"). Three things:
--
-- 1. A role that may send money back: 'refunder' (above 'operator': it may do everything an
--    operator does, and request and approve refunds, captures and voids).
-- 2. A refund above PAYCORE_CONSOLE_REFUND_APPROVAL_ABOVE_MINOR waits for a second operator:
--    refund_approvals holds it, decided once, never by whoever asked for it.
-- 3. Requesting, approving and rejecting a refund are operator actions.
--
-- 0016 belongs to another change; if it redefines the operator_actions constraints too, the
-- lists below must be merged with it (each list is every action so far, as 0010 says).

ALTER TABLE operators DROP CONSTRAINT ck_operator_role;
ALTER TABLE operators ADD CONSTRAINT ck_operator_role CHECK (role IN ('viewer', 'operator', 'refunder'));

CREATE TABLE refund_approvals (
    approval_id     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The payment to refund, for how much (its own currency, minor units) and why.
    attempt_id      uuid        NOT NULL REFERENCES payment_attempts (attempt_id),
    amount_minor    bigint      NOT NULL,
    currency        text        NOT NULL,
    reason          text        NOT NULL,
    requested_by    text        NOT NULL,  -- an operator handle (operator_actions.operator's rules)
    requested_at    timestamptz NOT NULL,
    -- The decision, once: by another operator, approved (then the refund it recorded) or rejected.
    decided_by      text        NULL,
    decided_at      timestamptz NULL,
    decision        text        NULL,
    decision_reason text        NULL,
    operation_id    uuid        NULL REFERENCES payment_operations (operation_id),
    CONSTRAINT ck_refund_approval_amount CHECK (amount_minor > 0),
    CONSTRAINT ck_refund_approval_currency CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT ck_refund_approval_reason CHECK (
        btrim(reason) <> '' AND char_length(reason) <= 2000 AND reason !~ '[[:cntrl:]]'),
    CONSTRAINT ck_refund_approval_operators CHECK (
        char_length(requested_by) BETWEEN 1 AND 64 AND requested_by = btrim(requested_by)
        AND requested_by !~ '[[:cntrl:]]'
        AND (decided_by IS NULL OR (char_length(decided_by) BETWEEN 1 AND 64
                                    AND decided_by = btrim(decided_by) AND decided_by !~ '[[:cntrl:]]'))),
    -- Four eyes: whoever asked never decides (whatever the code above does).
    CONSTRAINT ck_refund_approval_second_operator CHECK (decided_by IS NULL OR decided_by <> requested_by),
    -- Pending, or decided whole: who, when and what together.
    CONSTRAINT ck_refund_approval_decided CHECK (
        (decision IS NULL AND decided_by IS NULL AND decided_at IS NULL AND decision_reason IS NULL)
        OR (decision IN ('approved', 'rejected') AND decided_by IS NOT NULL
            AND decided_at IS NOT NULL AND decided_at >= requested_at)),
    -- An approval names the refund it recorded; nothing else names one.
    CONSTRAINT ck_refund_approval_operation CHECK (
        (operation_id IS NOT NULL) = (decision IS NOT DISTINCT FROM 'approved')),
    CONSTRAINT ck_refund_approval_decision_reason CHECK (
        decision_reason IS NULL OR (btrim(decision_reason) <> '' AND char_length(decision_reason) <= 2000
                                    AND decision_reason !~ '[[:cntrl:]]'))
);

-- "Waiting for a second operator", oldest first; "this payment's requests", newest first.
CREATE INDEX refund_approvals_pending ON refund_approvals (requested_at, approval_id) WHERE decision IS NULL;
CREATE INDEX refund_approvals_by_attempt ON refund_approvals (attempt_id, requested_at);
CREATE UNIQUE INDEX refund_approvals_by_operation ON refund_approvals (operation_id)
    WHERE operation_id IS NOT NULL;

-- A request is decided once and its terms never change; no row is removed (the record of
-- operator actions names it). The one UPDATE allowed: a pending row decided.
CREATE FUNCTION refund_approvals_decide_once() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'UPDATE' THEN
        RAISE EXCEPTION 'refund_approvals rows are never removed: % refused', TG_OP
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF OLD.decision IS NOT NULL THEN
        RAISE EXCEPTION 'refund approval % was decided already (%)', OLD.approval_id, OLD.decision
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF (NEW.approval_id, NEW.attempt_id, NEW.amount_minor, NEW.currency, NEW.reason, NEW.requested_by,
        NEW.requested_at)
       IS DISTINCT FROM
       (OLD.approval_id, OLD.attempt_id, OLD.amount_minor, OLD.currency, OLD.reason, OLD.requested_by,
        OLD.requested_at) THEN
        RAISE EXCEPTION 'a refund approval''s request never changes'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER refund_approvals_decided_once
    BEFORE UPDATE OR DELETE ON refund_approvals
    FOR EACH ROW EXECUTE FUNCTION refund_approvals_decide_once();

CREATE TRIGGER refund_approvals_no_truncate
    BEFORE TRUNCATE ON refund_approvals
    FOR EACH STATEMENT EXECUTE FUNCTION refund_approvals_decide_once();

-- Requesting a refund (sent at once, or waiting for approval), approving and rejecting one are
-- operator actions on the payment's attempt; approving needs no reason of its own (the request
-- carries it), requesting and rejecting do.
ALTER TABLE operator_actions DROP CONSTRAINT ck_operator_action_kind;
ALTER TABLE operator_actions ADD CONSTRAINT ck_operator_action_kind CHECK (action IN (
    'escalation-acknowledge', 'escalation-resolve', 'notification-attach',
    'outbox-requeue', 'outbox-skip', 'account-apply',
    'attempt-close-not-charged', 'escalation-resolve-conflict',
    'operator-add', 'operator-disable',
    'operator-password', 'operator-enable', 'operator-role', 'operator-end-sessions',
    'refund-request', 'refund-approve', 'refund-reject'));

ALTER TABLE operator_actions DROP CONSTRAINT ck_operator_action_reason;
ALTER TABLE operator_actions ADD CONSTRAINT ck_operator_action_reason CHECK (
    (reason IS NOT NULL AND btrim(reason) <> '' AND char_length(reason) <= 2000
        AND reason !~ '[[:cntrl:]]')
    OR (reason IS NULL AND action IN ('escalation-acknowledge', 'operator-add', 'operator-password',
                                      'operator-end-sessions', 'refund-approve')));

ALTER TABLE operator_actions DROP CONSTRAINT ck_operator_action_target;
ALTER TABLE operator_actions ADD CONSTRAINT ck_operator_action_target CHECK (
    num_nonnulls(attempt_id, escalation_id, message_id, event_id, provider_account, target_operator) > 0
    AND (action NOT LIKE 'escalation-%' OR escalation_id IS NOT NULL)
    AND (action <> 'account-apply' OR provider_account IS NOT NULL)
    AND (action NOT LIKE 'outbox-%' OR message_id IS NOT NULL)
    AND (action <> 'notification-attach' OR (event_id IS NOT NULL AND attempt_id IS NOT NULL))
    AND (action <> 'attempt-close-not-charged' OR attempt_id IS NOT NULL)
    AND (action NOT LIKE 'operator-%' OR target_operator IS NOT NULL)
    AND (action NOT LIKE 'refund-%' OR attempt_id IS NOT NULL));
