"""paycore.domain.decide_operation_outcome as a table: what one ending does to a capture, a cancel
or a refund, rule by rule, and per kind where the kinds differ (a refund can come back)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from paycore.domain import (
    EscalationReason,
    OperationDecision,
    OperationKind,
    OperationState,
    OperationWrite,
    decide_operation_outcome,
)
from paycore.providers.base import OperationEnding, OperationOutcome

K, S, E = OperationKind, OperationState, OperationEnding
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
NEXT = NOW + timedelta(seconds=60)
CONTRADICTION, RETURNED = EscalationReason.CONTRADICTION, EscalationReason.REFUND_RETURNED


def ending(kind: OperationKind, end: OperationEnding) -> OperationOutcome:
    return OperationOutcome(kind, end, reason=f"r-{end.value}", provider_status=f"s-{end.value}",
                            provider_operation_id="re_1")


def decide(kind: OperationKind, state: OperationState, end: OperationEnding,
           provider_status: str | None = None) -> OperationDecision:
    return decide_operation_outcome(kind, state, 7, ending(kind, end), now=NOW, recheck_after_s=60,
                                    provider_status=provider_status)


def written(target: OperationState, end: OperationEnding) -> OperationWrite:
    return OperationWrite(target=target, version=7, provider_status=f"s-{end.value}",
                          outcome_reason=f"r-{end.value}", provider_operation_id="re_1", next_check_at=NEXT)


ALL = tuple(K)
NOT_REFUND = (K.CAPTURE, K.CANCEL)

# (kinds, state read, ending, provider status seen) -> (to_state, wrote it, refused, escalation)
FINAL: list[tuple[tuple[OperationKind, ...], OperationState, OperationEnding,
                  tuple[OperationState, bool, bool, EscalationReason | None]]] = [
    # A final state never changes; what contradicts it is escalated.
    (NOT_REFUND, S.SUCCEEDED, E.FAILED, (S.SUCCEEDED, False, False, CONTRADICTION)),
    (ALL, S.SUCCEEDED, E.SUCCEEDED, (S.SUCCEEDED, False, False, None)),
    (ALL, S.SUCCEEDED, E.PENDING, (S.SUCCEEDED, False, False, None)),
    (ALL, S.SUCCEEDED, E.UNKNOWN, (S.SUCCEEDED, False, False, None)),
    (ALL, S.FAILED, E.SUCCEEDED, (S.FAILED, False, False, CONTRADICTION)),
    (ALL, S.FAILED, E.FAILED, (S.FAILED, False, False, None)),
    (ALL, S.FAILED, E.PENDING, (S.FAILED, False, False, None)),
    (ALL, S.NOT_APPLIED, E.SUCCEEDED, (S.NOT_APPLIED, False, False, CONTRADICTION)),
    (ALL, S.NOT_APPLIED, E.REJECTED, (S.NOT_APPLIED, False, False, None)),
    # A succeeded refund reported failed was sent back: Returned, and a person is told.
    ((K.REFUND,), S.SUCCEEDED, E.FAILED, (S.RETURNED, True, False, RETURNED)),
    ((K.REFUND,), S.RETURNED, E.FAILED, (S.RETURNED, False, False, None)),
    # A late report of its success (events are unordered): it did succeed before it came back.
    ((K.REFUND,), S.RETURNED, E.SUCCEEDED, (S.RETURNED, False, False, None)),
    ((K.REFUND,), S.RETURNED, E.UNKNOWN, (S.RETURNED, False, False, None)),
]

LIVE: list[tuple[tuple[OperationKind, ...], OperationState, OperationEnding, str | None,
                 tuple[OperationState, bool, bool]]] = [
    # NotStarted takes no outcome.
    (ALL, S.NOT_STARTED, E.SUCCEEDED, None, (S.NOT_STARTED, False, True)),
    (ALL, S.NOT_STARTED, E.UNKNOWN, None, (S.NOT_STARTED, False, True)),
    (ALL, S.NOT_STARTED, E.PENDING, None, (S.NOT_STARTED, False, True)),  # the table would start it
    (ALL, S.NOT_STARTED, E.REJECTED, None, (S.NOT_STARTED, False, True)),  # the table would close it
    # pending keeps it Started, its status recorded (and an Unknown one Started again).
    (ALL, S.STARTED, E.PENDING, None, (S.STARTED, True, False)),
    (ALL, S.UNKNOWN, E.PENDING, None, (S.STARTED, True, False)),
    # unknown never overwrites Unknown nor a seen status; else Started -> Unknown.
    (ALL, S.UNKNOWN, E.UNKNOWN, None, (S.UNKNOWN, False, False)),
    (ALL, S.STARTED, E.UNKNOWN, "pending", (S.STARTED, False, False)),
    (ALL, S.STARTED, E.UNKNOWN, None, (S.UNKNOWN, True, False)),
    # rejected-before-execution is NotApplied only from Started; the table refuses the rest.
    (ALL, S.STARTED, E.REJECTED, None, (S.NOT_APPLIED, True, False)),
    (ALL, S.UNKNOWN, E.REJECTED, None, (S.UNKNOWN, False, True)),
    # succeeded and failed end it.
    (ALL, S.STARTED, E.SUCCEEDED, "pending", (S.SUCCEEDED, True, False)),
    (ALL, S.UNKNOWN, E.SUCCEEDED, None, (S.SUCCEEDED, True, False)),
    (ALL, S.STARTED, E.FAILED, None, (S.FAILED, True, False)),
    (ALL, S.UNKNOWN, E.FAILED, None, (S.FAILED, True, False)),
]


@pytest.mark.parametrize(("kind", "state", "end", "expected"),
                         [(k, s, e, x) for kinds, s, e, x in FINAL for k in kinds])
def test_a_final_state_never_changes_except_a_refund_returned(
        kind: OperationKind, state: OperationState, end: OperationEnding,
        expected: tuple[OperationState, bool, bool, EscalationReason | None]) -> None:
    d = decide(kind, state, end)
    assert (d.from_state, (d.to_state, d.written, d.refused is not None, d.escalation)) == (state, expected)
    if d.written:
        assert d.write == written(S.RETURNED, end)


@pytest.mark.parametrize(("kind", "state", "end", "seen", "expected"),
                         [(k, s, e, seen, x) for kinds, s, e, seen, x in LIVE for k in kinds])
def test_a_live_operation(kind: OperationKind, state: OperationState, end: OperationEnding, seen: str | None,
                          expected: tuple[OperationState, bool, bool]) -> None:
    d = decide(kind, state, end, seen)
    outcome = (d.to_state, d.written, d.refused is not None)
    assert (d.from_state, outcome, d.escalation) == (state, expected, None)
    if d.written:
        assert d.write == written(expected[0], end)


def test_a_refusal_says_why() -> None:
    never_sent = decide(K.REFUND, S.NOT_STARTED, E.SUCCEEDED)
    assert never_sent.refused == "refund is NotStarted; no outcome can be recorded"
    by_table = decide(K.CAPTURE, S.UNKNOWN, E.REJECTED)
    assert by_table.refused == "transition Unknown -> NotApplied is not allowed"


def test_every_ending_has_a_target() -> None:
    for end in E:
        decide(K.CAPTURE, S.STARTED, end)  # raises KeyError for an ending without one
