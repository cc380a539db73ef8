"""paycore.domain's transition decisions, pure: what an outcome (decide_outcome), a start, a close
and an escalation do, branch by branch, without a database.

The writer executes these decisions and the attach preview shows them (the same function:
tests/operators/test_attach_preview.py attaches for real and compares); these are the branches a
notification rarely reaches (Unknown answers, rejected resends, refusals).
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from uuid import uuid4

from paycore.domain import (
    ACCEPTED,
    CLOSED_NOT_CHARGED,
    HOLD_RELEASED_STATUS,
    HOLD_STATUS,
    Attempt,
    AttemptState,
    CloseWrite,
    Decision,
    Escalation,
    EscalationReason,
    HoldStep,
    OperationKind,
    OperationState,
    OrderFacts,
    OrderStatus,
    ProviderOutcome,
    StartWrite,
    Verdict,
    decide_close_never_sent,
    decide_close_not_charged,
    decide_escalation,
    decide_hold,
    decide_outcome,
    decide_start,
    hold_ended,
    order_status_after_operation,
)

S = AttemptState
UNKNOWN = ProviderOutcome.unknown("provider.no-response.caller")
SUCCEEDED = ProviderOutcome.succeeded("pay_1", 4999, "EUR")
FAILED = ProviderOutcome.failed("card_declined")


NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
ATTEMPT = Attempt(
    attempt_id=uuid4(), order_id="ord_1", customer_id="cus_1", attempt_number=1,
    provider_account="cardco:acct_store:test", endpoint="https://api.cardco.example/v1/payments",
    api_version="2026-11-01", client_reference="ord_1-a1", idempotency_key="k", request_body="{}",
    amount_minor=4999, currency="EUR", state=AttemptState.STARTED, provider_status=None, next_action=None,
    next_action_expires_at=None, outcome_reason=None, created_at=NOW, first_sent_at=NOW,
    escalation_deadline=NOW + timedelta(hours=22), provider_payment_id=None, recovery_owner=None,
    lease_token=None, lease_acquired_at=None, lease_expires_at=None, next_check_at=NOW, version=1)


def foresee(state: AttemptState, outcome: ProviderOutcome, verdict: Verdict = ACCEPTED, *,
            provider_status: str | None = None, order: OrderStatus = OrderStatus.OPEN,
            cancel_requested: bool = False) -> Decision:
    attempt = dataclasses.replace(ATTEMPT, state=state, provider_status=provider_status)
    return decide_outcome(attempt, outcome, verdict, NOW, order=OrderFacts(order, cancel_requested),
                          recheck_after_s=60, actor="test")


def reasons(d: Decision) -> tuple[str, ...]:
    return tuple(e.text for e in d.escalations)


def test_a_success_pays_the_order_and_queues_its_effects() -> None:
    f = foresee(S.UNKNOWN, SUCCEEDED)
    assert (f.after, f.written, f.order_paid, f.effects, reasons(f)) == (
        S.SUCCEEDED, True, True, ("order-confirmation", "fulfillment-request"), ())
    assert f.resolves_escalations


def test_a_success_after_a_cancellation_is_not_fulfilled_and_a_person_is_told() -> None:
    f = foresee(S.STARTED, SUCCEEDED, cancel_requested=True)
    assert (f.after, f.order_paid, f.effects, reasons(f)) == (
        S.SUCCEEDED, True, ("order-confirmation",), ("succeeded-after-cancel",))


def test_a_final_state_never_changes_and_a_contradicting_final_outcome_is_escalated() -> None:
    assert reasons(foresee(S.SUCCEEDED, FAILED)) == ("contradiction",)
    assert reasons(foresee(S.SUCCEEDED, SUCCEEDED)) == ()
    for state in (S.SUCCEEDED, S.FAILED, S.NOT_APPLIED):
        f = foresee(state, SUCCEEDED)
        assert (f.after, f.written, f.order_paid, f.resolves_escalations) == (state, False, False, False)


def test_unknown_never_overwrites_unknown_nor_an_observed_status() -> None:
    assert not foresee(S.UNKNOWN, UNKNOWN).written
    assert not foresee(S.STARTED, UNKNOWN, provider_status="processing").written
    f = foresee(S.STARTED, UNKNOWN)  # a send with no answer: Started -> Unknown
    assert (f.after, f.written, f.resolves_escalations) == (S.UNKNOWN, True, False)


def test_a_rejected_resend_is_escalated_and_stays_unknown() -> None:
    rejected = ProviderOutcome.unknown("provider.rejected", request_rejected=True)
    f = foresee(S.UNKNOWN, rejected)
    assert (f.after, f.written, reasons(f)) == (S.UNKNOWN, False, ("resend-rejected",))


def test_evidence_about_another_payment_resolves_nothing_but_an_unknown_answer_still_counts() -> None:
    other = Verdict(EscalationReason.MISMATCH, "amount")
    f = foresee(S.UNKNOWN, SUCCEEDED, other)
    assert (f.after, f.written, reasons(f)) == (S.UNKNOWN, False, ("mismatch",))
    f = foresee(S.STARTED, UNKNOWN, other)  # the answer said nothing about this payment: Unknown
    assert (f.after, f.written, reasons(f)) == (S.UNKNOWN, True, ("mismatch",))


def test_what_the_transition_table_refuses_is_a_refusal() -> None:
    never_sent = foresee(S.NOT_STARTED, SUCCEEDED)
    assert never_sent.refused == f"attempt {ATTEMPT.attempt_id} is NotStarted; no outcome can be recorded"
    not_applied = ProviderOutcome.not_applied("invalid_request")
    assert foresee(S.UNKNOWN, not_applied).refused == "transition Unknown -> NotApplied is not allowed"
    assert foresee(S.STARTED, not_applied).after is S.NOT_APPLIED


def test_a_current_customer_action_is_looked_at_again_when_it_expires_if_that_comes_first() -> None:
    soon, later = NOW + timedelta(seconds=20), NOW + timedelta(hours=1)
    ordinary = NOW + timedelta(seconds=60)
    # An action expiring now, or already expired, keeps the ordinary delay: a zero one would spin.
    for expires, due in ((soon, soon), (later, ordinary), (NOW, ordinary),
                         (NOW - timedelta(seconds=1), ordinary)):
        f = foresee(S.STARTED, ProviderOutcome.requires_action("pay_1", {"type": "redirect"}, expires))
        assert f.write is not None and f.write.next_check_at == due, expires
        assert f.write.next_action == {"type": "redirect"} and f.write.next_action_expires_at == expires


def test_only_an_open_order_is_marked_paid() -> None:
    assert foresee(S.UNKNOWN, SUCCEEDED, order=OrderStatus.OPEN).order_paid
    paid = foresee(S.UNKNOWN, SUCCEEDED, order=OrderStatus.PAID)
    assert (paid.after, paid.order_paid, paid.effects) == (S.SUCCEEDED, False, ("order-confirmation",))


def test_a_leased_writer_that_escalates_schedules_its_next_look_and_one_without_does_not() -> None:
    other = Verdict(EscalationReason.PROVIDER_ID_CONFLICT, "provider_payment_id")
    attempt = dataclasses.replace(ATTEMPT, state=S.UNKNOWN)
    leased = decide_outcome(attempt, SUCCEEDED, other, NOW, order=OrderFacts(OrderStatus.OPEN, False),
                            recheck_after_s=60, actor="recovery", escalated_recheck_after_s=3600)
    assert (leased.written, leased.finish_after_s) == (False, 3600)
    assert reasons(leased) == ("provider-id-conflict",)
    accepted = decide_outcome(attempt, SUCCEEDED, ACCEPTED, NOW, order=OrderFacts(OrderStatus.OPEN, False),
                              recheck_after_s=60, actor="recovery", escalated_recheck_after_s=3600)
    assert accepted.finish_after_s is None and accepted.written


def test_the_preview_and_the_writer_decide_with_the_same_function() -> None:
    """No second copy of the rules to drift: the operator's preview and the one writer of outcomes
    both call decide_outcome, and only the writer executes what it decided."""
    import inspect

    from paycore import attempts, domain, notifications

    assert attempts.decide_outcome is domain.decide_outcome is notifications.decide_outcome
    for caller in (attempts._apply_once, notifications.preview_attach):
        assert "decide_outcome(" in inspect.getsource(caller), caller.__name__
    assert "execute(" in inspect.getsource(attempts._apply_once)
    assert "execute(" not in inspect.getsource(notifications.preview_attach)
    assert not hasattr(domain, "foresee_outcome")


# -- the other transitions: start, close never sent, close not charged, escalate and finish --------

def test_only_a_not_started_attempt_of_a_payable_order_is_started() -> None:
    never_sent = dataclasses.replace(ATTEMPT, state=S.NOT_STARTED)
    d = decide_start(never_sent, order_payable=True, next_check_at=NOW)
    assert (d.before, d.after, d.write, d.refused) == (S.NOT_STARTED, S.STARTED, StartWrite(NOW), None)
    assert decide_start(never_sent, order_payable=False, next_check_at=NOW).refused == "order-not-payable"
    for state in (S.STARTED, S.UNKNOWN, S.SUCCEEDED):
        d = decide_start(dataclasses.replace(ATTEMPT, state=state), order_payable=True, next_check_at=NOW)
        assert (d.refused, d.write) == ("conflict", None), state


def test_only_a_not_started_attempt_is_closed_as_never_sent() -> None:
    d = decide_close_never_sent(dataclasses.replace(ATTEMPT, state=S.NOT_STARTED))
    assert (d.after, d.write, d.resolves_escalations) == (
        S.NOT_APPLIED, CloseWrite(S.NOT_APPLIED, "never-sent", under_lease=True), True)
    for state in (S.STARTED, S.UNKNOWN, S.FAILED):
        assert decide_close_never_sent(dataclasses.replace(ATTEMPT, state=state)).refused is not None, state


def test_a_person_closes_as_not_charged_only_a_dead_end_with_no_evidence_of_a_payment() -> None:
    unknown = dataclasses.replace(ATTEMPT, state=S.UNKNOWN)
    who = {"operator": "ana"}
    d = decide_close_not_charged(unknown, dead_ends=[7], evidence=[], detail=who)
    assert (d.after, d.write, d.detail) == (
        S.FAILED, CloseWrite(S.FAILED, CLOSED_NOT_CHARGED, under_lease=False),
        {"operator": "ana", "dead_end_escalations": [7]})
    assert "only an Unknown" in (decide_close_not_charged(
        dataclasses.replace(ATTEMPT, state=S.STARTED), dead_ends=[7], evidence=[], detail=who).refused or "")
    assert "no open dead-end" in (decide_close_not_charged(
        unknown, dead_ends=[], evidence=[], detail=who).refused or "")
    assert "evidence of a payment: provider status x" in (decide_close_not_charged(
        unknown, dead_ends=[7], evidence=["provider status x"], detail=who).refused or "")


def test_recovery_escalates_only_a_live_attempt_and_schedules_its_next_look() -> None:
    e = Escalation(EscalationReason.DEADLINE)
    d = decide_escalation(dataclasses.replace(ATTEMPT, state=S.UNKNOWN), e, recheck_after_s=3600)
    assert (d.written, d.escalations, d.finish_after_s) == (False, (e,), 3600)
    for state in (S.SUCCEEDED, S.FAILED, S.NOT_APPLIED, S.NOT_STARTED):
        d = decide_escalation(dataclasses.replace(ATTEMPT, state=state), e, recheck_after_s=3600)
        assert (d.refused is not None, d.escalations) == (True, ()), state


def test_an_outcome_is_a_replay_only_when_the_provider_said_so() -> None:
    """``replayed`` goes into the send's history: an answer built without the provider's
    replay header (no answer at all, a parsed first answer) is not a replay."""
    made = (ProviderOutcome.unknown("provider.no-response"), ProviderOutcome.failed("card_declined"),
            ProviderOutcome.not_applied("rejected:invalid_request"),
            ProviderOutcome.succeeded("pay_1", 4999, "EUR"))
    assert [o.replayed for o in made] == [False] * 4
    assert ProviderOutcome.unknown("provider.http-500", replayed=True).replayed


# -- holds (issue 29): a payment authorized for manual capture ----------------------------------

HELD = ProviderOutcome.succeeded("pay_1", 4999, "EUR", provider_status=HOLD_STATUS)
RELEASED = ProviderOutcome.failed("canceled", provider_payment_id="pay_1",
                                  provider_status=HOLD_RELEASED_STATUS)


def test_a_hold_authorizes_the_order_instead_of_paying_it() -> None:
    f = foresee(S.STARTED, HELD)
    assert (f.after, f.order_paid, f.order_held, f.effects) == (
        S.SUCCEEDED, True, True, ("order-confirmation", "fulfillment-request"))
    assert not foresee(S.STARTED, SUCCEEDED).order_held


def test_an_order_that_asked_for_a_hold_is_held_whatever_the_provider_calls_its_success() -> None:
    authorised = ProviderOutcome.succeeded("pay_1", 4999, "EUR", provider_status="Authorised")  # Adyen
    f = decide_outcome(ATTEMPT, authorised, ACCEPTED, NOW, order=OrderFacts(OrderStatus.OPEN, False, True),
                       recheck_after_s=60, actor="test")
    assert f.order_held and f.write is not None and f.write.provider_status == HOLD_STATUS
    charged = decide_outcome(ATTEMPT, authorised, ACCEPTED, NOW, order=OrderFacts(OrderStatus.OPEN, False),
                             recheck_after_s=60, actor="test")
    assert not charged.order_held
    assert charged.write is not None and charged.write.provider_status == "Authorised"


def test_the_end_of_a_hold_contradicts_nothing_but_the_end_of_a_charge_does() -> None:
    held = dataclasses.replace(ATTEMPT, state=S.SUCCEEDED, provider_status=HOLD_STATUS,
                               provider_payment_id="pay_1")
    charged = dataclasses.replace(held, provider_status="succeeded")
    assert hold_ended(held, SUCCEEDED) and hold_ended(held, RELEASED)  # captured; voided or lapsed
    assert not hold_ended(charged, RELEASED)  # a charged payment reported canceled: contradiction
    assert not hold_ended(held, FAILED)  # a hold reported declined is no end of a hold
    assert not hold_ended(held, dataclasses.replace(RELEASED, provider_payment_id="pay_2"))  # another's
    for attempt, raised in ((held, ()), (charged, ("contradiction",))):
        f = decide_outcome(attempt, RELEASED, ACCEPTED, NOW, order=OrderFacts(OrderStatus.PAID, False),
                           recheck_after_s=60, actor="test")
        assert (f.after, f.written, reasons(f)) == (S.SUCCEEDED, False, raised)


def test_a_hold_is_warned_about_then_lapses_unless_a_capture_or_void_is_in_flight() -> None:
    week, day = 7 * 86_400, 86_400

    def step(after_s: float, live: bool = False) -> HoldStep:
        return decide_hold(held_since=NOW, now=NOW + timedelta(seconds=after_s), lapse_s=week,
                           warn_before_s=day, capture_or_cancel_live=live)

    assert [step(s) for s in (0, week - day - 1, week - day, week - 1, week)] == [
        HoldStep.WAIT, HoldStep.WAIT, HoldStep.WARN, HoldStep.WARN, HoldStep.LAPSED]
    assert step(week + 1, live=True) is HoldStep.WAIT


# -- what an order says after its operations (issue 29) ------------------------------------------


def test_an_orders_status_follows_its_refunds_and_its_hold() -> None:
    def after(current: OrderStatus, kind: OperationKind, target: OperationState, refunded: int,
              captured: int = 5000) -> OrderStatus:
        return order_status_after_operation(current, kind, target, captured_minor=captured,
                                            refunded_minor=refunded)

    R, C, V = OperationKind.REFUND, OperationKind.CAPTURE, OperationKind.CANCEL
    ok, back = OperationState.SUCCEEDED, OperationState.RETURNED
    assert after(OrderStatus.PAID, R, ok, 2000) is OrderStatus.PARTIALLY_REFUNDED
    assert after(OrderStatus.PAID, R, ok, 1) is OrderStatus.PARTIALLY_REFUNDED  # one minor unit back
    assert after(OrderStatus.PARTIALLY_REFUNDED, R, ok, 5000) is OrderStatus.REFUNDED
    assert after(OrderStatus.REFUNDED, R, back, 0) is OrderStatus.PAID  # the refund came back
    assert after(OrderStatus.AUTHORIZED, C, ok, 0, 3000) is OrderStatus.PAID
    assert after(OrderStatus.AUTHORIZED, V, ok, 0) is OrderStatus.VOIDED
    assert after(OrderStatus.CANCELLED, R, ok, 5000) is OrderStatus.CANCELLED
    # A capture whose answer was lost, refunded in part before its success was learnt: the
    # refund leaves the order Authorized; the capture's success then says what both did.
    assert after(OrderStatus.AUTHORIZED, R, ok, 1500, 3000) is OrderStatus.AUTHORIZED
    assert after(OrderStatus.AUTHORIZED, C, ok, 1500, 3000) is OrderStatus.PARTIALLY_REFUNDED
    assert after(OrderStatus.AUTHORIZED, C, ok, 3000, 3000) is OrderStatus.REFUNDED
    # Only a success moves a hold: a failed capture or cancel leaves the order Authorized (the
    # money is still held), and a capture's or cancel's success moves no order that is no hold.
    failed = OperationState.FAILED
    assert after(OrderStatus.AUTHORIZED, C, failed, 0) is OrderStatus.AUTHORIZED
    assert after(OrderStatus.AUTHORIZED, V, failed, 0) is OrderStatus.AUTHORIZED
    assert after(OrderStatus.PAID, C, ok, 0) is OrderStatus.PAID
    assert after(OrderStatus.PAID, V, ok, 0) is OrderStatus.PAID
