"""paycore.domain.foresee_outcome, pure: apply_outcome's decisions, branch by branch.

The attach preview's end-to-end comparison with real writes is tests/operators/test_attach_preview.py;
these are the branches a notification rarely reaches (Unknown answers, rejected resends, refusals).
"""

from __future__ import annotations

from paycore.domain import AttemptState, Foreseen, OrderStatus, ProviderOutcome, foresee_outcome
from paycore.evidence import ACCEPTED, Reason, Verdict

S = AttemptState
UNKNOWN = ProviderOutcome.unknown("provider.no-response.caller")
SUCCEEDED = ProviderOutcome.succeeded("pay_1", 4999, "EUR")
FAILED = ProviderOutcome.failed("card_declined")


def foresee(state: AttemptState, outcome: ProviderOutcome, verdict: Verdict = ACCEPTED, *,
            provider_status: str | None = None, order: OrderStatus = OrderStatus.OPEN,
            cancel_requested: bool = False) -> Foreseen:
    return foresee_outcome(state, provider_status, outcome, verdict, order_status=order,
                           cancel_requested=cancel_requested)


def test_a_success_pays_the_order_and_queues_its_effects() -> None:
    f = foresee(S.UNKNOWN, SUCCEEDED)
    assert (f.after, f.written, f.order_paid, f.effects, f.escalations) == (
        S.SUCCEEDED, True, True, ("order-confirmation", "fulfillment-request"), ())
    assert f.resolves_escalations


def test_a_success_after_a_cancellation_is_not_fulfilled_and_a_person_is_told() -> None:
    f = foresee(S.STARTED, SUCCEEDED, cancel_requested=True)
    assert (f.after, f.order_paid, f.effects, f.escalations) == (
        S.SUCCEEDED, True, ("order-confirmation",), ("succeeded-after-cancel",))


def test_a_final_state_never_changes_and_a_contradicting_final_outcome_is_escalated() -> None:
    assert foresee(S.SUCCEEDED, FAILED).escalations == ("contradiction",)
    assert foresee(S.SUCCEEDED, SUCCEEDED).escalations == ()
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
    assert (f.after, f.written, f.escalations) == (S.UNKNOWN, False, ("resend-rejected",))


def test_evidence_about_another_payment_resolves_nothing_but_an_unknown_answer_still_counts() -> None:
    other = Verdict(Reason.MISMATCH, "amount")
    f = foresee(S.UNKNOWN, SUCCEEDED, other)
    assert (f.after, f.written, f.escalations) == (S.UNKNOWN, False, ("mismatch",))
    f = foresee(S.STARTED, UNKNOWN, other)  # the answer said nothing about this payment: Unknown
    assert (f.after, f.written, f.escalations) == (S.UNKNOWN, True, ("mismatch",))


def test_what_the_transition_table_refuses_is_a_refusal() -> None:
    never_sent = foresee(S.NOT_STARTED, SUCCEEDED)
    assert never_sent.refused == "the attempt is NotStarted; no outcome can be recorded"
    not_applied = ProviderOutcome.not_applied("invalid_request")
    assert foresee(S.UNKNOWN, not_applied).refused == "transition Unknown -> NotApplied is not allowed"
    assert foresee(S.STARTED, not_applied).after is S.NOT_APPLIED
