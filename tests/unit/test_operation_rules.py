"""The pure rules of what follows a payment (issue 29): each kind's transition table, and never
more back than was taken -- a table of cases, no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from paycore.domain import (
    ALLOWED_TRANSITIONS,
    HOLDING_OPERATION_STATES,
    OPERATION_TRANSITIONS,
    Headroom,
    HeldAmount,
    OperationKind,
    OperationRefusal,
    OperationState,
    OperationStep,
    can_transition_operation,
    decide_operation_step,
    headroom,
    refuse_operation,
)

CAPTURE, CANCEL, REFUND = OperationKind.CAPTURE, OperationKind.CANCEL, OperationKind.REFUND
S = OperationState


def test_every_kind_has_the_payments_table_and_only_a_refund_comes_back() -> None:
    for kind, table in OPERATION_TRANSITIONS.items():
        assert set(table) == set(OperationState), kind
        for state, targets in ALLOWED_TRANSITIONS.items():
            extra = {S.RETURNED} if (kind is REFUND and state.value == "Succeeded") else set()
            allowed = {t.value for t in table[S(state.value)]}
            assert allowed == {t.value for t in targets} | extra, (kind, state)
        assert table[S.RETURNED] == frozenset()


@pytest.mark.parametrize("kind", list(OperationKind))
def test_a_final_operation_has_no_way_out_except_a_refund_returned(kind: OperationKind) -> None:
    assert not can_transition_operation(kind, S.FAILED, S.SUCCEEDED)
    assert not can_transition_operation(kind, S.NOT_APPLIED, S.STARTED)
    assert not can_transition_operation(kind, S.UNKNOWN, S.NOT_APPLIED)  # a later rejection proves nothing
    assert can_transition_operation(kind, S.SUCCEEDED, S.RETURNED) is (kind is REFUND)
    assert not can_transition_operation(kind, S.RETURNED, S.SUCCEEDED)


def ops(*rows: tuple[OperationKind, OperationState, int]) -> list[HeldAmount]:
    return [HeldAmount(kind, state, amount) for kind, state, amount in rows]


# (what happened, the headroom): a 10.00 payment, captured up front unless a hold
HEADROOM_CASES = {
    "captured, nothing refunded": (10_00, 10_00, [], Headroom(10_00, 0, 10_00)),
    "a succeeded partial refund": (10_00, 10_00, ops((REFUND, S.SUCCEEDED, 6_00)), Headroom(10_00, 0, 4_00)),
    "an Unknown refund holds its amount": (10_00, 10_00, ops((REFUND, S.UNKNOWN, 6_00)),
                                           Headroom(10_00, 0, 4_00)),
    "a recorded, unsent refund holds too": (10_00, 10_00, ops((REFUND, S.NOT_STARTED, 3_00)),
                                            Headroom(10_00, 0, 7_00)),
    "failed, unapplied and returned refunds free it": (10_00, 10_00, ops(
        (REFUND, S.FAILED, 6_00), (REFUND, S.NOT_APPLIED, 6_00), (REFUND, S.RETURNED, 6_00)),
        Headroom(10_00, 0, 10_00)),
    "a hold": (10_00, 0, [], Headroom(0, 10_00, 0)),
    "a hold with a capture in flight": (10_00, 0, ops((CAPTURE, S.UNKNOWN, 7_00)),
                                        Headroom(7_00, 0, 7_00)),
    "a partial capture, then a refund": (10_00, 0, ops((CAPTURE, S.SUCCEEDED, 7_00),
                                                        (REFUND, S.STARTED, 2_00)),
                                         Headroom(7_00, 0, 5_00)),
    "a failed capture leaves the hold": (10_00, 0, ops((CAPTURE, S.FAILED, 7_00)), Headroom(0, 10_00, 0)),
    # A refund recorded against a capture in flight that then failed: more refunds hold than
    # was captured, and the refundable amount is none, never below it.
    "a refund of a capture that failed": (10_00, 0, ops((CAPTURE, S.FAILED, 7_00), (REFUND, S.UNKNOWN, 2_00)),
                                          Headroom(0, 10_00, 0)),
    "a cancel holds the payment": (10_00, 0, ops((CANCEL, S.STARTED, 10_00)), Headroom(0, 0, 0)),
    "a payment that did not succeed": (0, 0, [], Headroom(0, 0, 0)),
}


@pytest.mark.parametrize(("authorized", "upfront", "operations", "expected"), HEADROOM_CASES.values(),
                         ids=HEADROOM_CASES.keys())
def test_headroom(authorized: int, upfront: int, operations: list[HeldAmount], expected: Headroom) -> None:
    room = headroom(authorized_minor=authorized, captured_upfront_minor=upfront, operations=operations)
    assert room == expected


def test_the_holding_states_are_the_live_ones_and_succeeded() -> None:
    assert {s.value for s in HOLDING_OPERATION_STATES} == {"NotStarted", "Started", "Unknown", "Succeeded"}


CAPTURED = Headroom(captured_minor=10_00, capturable_minor=0, refundable_minor=4_00)
HOLD = Headroom(captured_minor=0, capturable_minor=10_00, refundable_minor=0)
DONE = Headroom(captured_minor=0, capturable_minor=0, refundable_minor=0)

REFUSAL_CASES = {
    "refund within the headroom": (REFUND, 4_00, CAPTURED, None),
    "refund one minor unit over": (REFUND, 4_01, CAPTURED, OperationRefusal.EXCEEDS_REFUNDABLE),
    "refund of nothing": (REFUND, 0, CAPTURED, OperationRefusal.AMOUNT_NOT_POSITIVE),
    "refund of a hold": (REFUND, 1_00, HOLD, OperationRefusal.NOT_CAPTURED),
    "refund of a payment that did not succeed": (REFUND, 1_00, DONE, OperationRefusal.NOT_CAPTURED),
    "capture of all the hold": (CAPTURE, 10_00, HOLD, None),
    "capture of part of the hold": (CAPTURE, 1, HOLD, None),
    "capture over the hold": (CAPTURE, 10_01, HOLD, OperationRefusal.EXCEEDS_CAPTURABLE),
    "capture of a captured payment": (CAPTURE, 1_00, CAPTURED, OperationRefusal.NOT_CAPTURABLE),
    "cancel of the hold": (CANCEL, 10_00, HOLD, None),
    "cancel of part of the hold": (CANCEL, 9_99, HOLD, OperationRefusal.NOT_CANCELABLE),
    "cancel of a hold of one minor unit": (CANCEL, 1, Headroom(captured_minor=0, capturable_minor=1,
                                                              refundable_minor=0), None),
    "cancel of a captured payment": (CANCEL, 10_00, CAPTURED, OperationRefusal.NOT_CANCELABLE),
    "a second cancel or a cancel after a capture": (CANCEL, 10_00, DONE, OperationRefusal.NOT_CANCELABLE),
}


@pytest.mark.parametrize(("kind", "amount", "room", "expected"), REFUSAL_CASES.values(),
                         ids=REFUSAL_CASES.keys())
def test_refuse_operation(kind: OperationKind, amount: int, room: Headroom,
                          expected: OperationRefusal | None) -> None:
    assert refuse_operation(kind, amount, room) == expected


def test_two_partial_refunds_decided_in_turn_cannot_both_pass() -> None:
    """Under the payment's lock the second decision sees the first, recorded, refund."""
    first = ops((REFUND, S.NOT_STARTED, 6_00))
    room = headroom(authorized_minor=10_00, captured_upfront_minor=10_00, operations=first)
    assert refuse_operation(REFUND, 6_00, room) is OperationRefusal.EXCEEDS_REFUNDABLE
    assert refuse_operation(REFUND, 4_00, room) is None


# --- recovery's step for a due live operation ---------------------------------------------------

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
BEFORE, AT, AFTER = NOW + timedelta(seconds=1), NOW, NOW - timedelta(seconds=1)  # the deadline's places
Step = OperationStep

# (case, state, provider status, deadline, lookup, found, found pending, step)
STEP_CASES: list[tuple[str, OperationState, str | None, datetime | None, str, int, bool, OperationStep]] = [
    ("never sent", S.NOT_STARTED, None, AFTER, "not_found", 0, False, Step.CLOSE_NEVER_SENT),
    ("one found", S.UNKNOWN, None, BEFORE, "found", 1, False, Step.APPLY_FOUND),
    ("two found for one reference", S.UNKNOWN, None, BEFORE, "found", 2, False, Step.ESCALATE_MULTIPLE),
    ("found pending, acknowledged, past the deadline", S.UNKNOWN, "pending", AFTER, "found", 1, True,
     Step.ESCALATE_DEADLINE),
    ("found pending, acknowledged, before the deadline", S.UNKNOWN, "pending", BEFORE, "found", 1, True,
     Step.APPLY_FOUND),
    ("not found, before the deadline", S.UNKNOWN, None, BEFORE, "not_found", 0, False, Step.RESEND),
    # At the deadline itself a resend could already be a new operation: the key's window is
    # counted to it, so it is past, as for a payment (Attempt.past_deadline).
    ("not found, at the deadline", S.UNKNOWN, None, AT, "not_found", 0, False, Step.ESCALATE_DEADLINE),
    ("not found, after the deadline", S.UNKNOWN, None, AFTER, "not_found", 0, False, Step.ESCALATE_DEADLINE),
    ("no deadline counts as past", S.UNKNOWN, None, None, "unsupported", 0, False, Step.ESCALATE_DEADLINE),
    ("acknowledged, nothing learnt", S.UNKNOWN, "pending", BEFORE, "not_found", 0, False, Step.WAIT),
    ("the lookup failed", S.UNKNOWN, None, BEFORE, "unavailable", 0, False, Step.WAIT),
    ("no lookup: resend under the same key", S.UNKNOWN, None, BEFORE, "unsupported", 0, False, Step.RESEND),
]


@pytest.mark.parametrize(("state", "provider_status", "deadline", "lookup", "found", "pending", "step"),
                         [case[1:] for case in STEP_CASES], ids=[case[0] for case in STEP_CASES])
def test_decide_operation_step(state: OperationState, provider_status: str | None, deadline: datetime | None,
                               lookup: str, found: int, pending: bool, step: OperationStep) -> None:
    assert decide_operation_step(state, provider_status=provider_status, escalation_deadline=deadline,
                                 lookup=lookup, found=found, found_pending=pending, now=NOW) is step
