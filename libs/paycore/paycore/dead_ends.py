"""Closing a dead end: an operator closes an escalated Unknown attempt as not charged.

Recovery stops on its own at a dead end: the key window has passed (``deadline``),
the provider refused a resend as invalid (``resend-rejected``), or resending is not
safe (``resend-not-safe:*``). The attempt stays Unknown -- no evidence, no outcome --
and while it is live the order cannot be paid again. Only a person who has checked
at the provider can end that: :func:`close_as_not_charged`.

Why **Failed** and not NotApplied. In the reference, NotApplied is a proof: the
provider rejected the only send before executing it, or no send ever left (recovery's
never-sent close). An Unknown attempt crossed the send boundary and its outcome was
not observed; an operator's look at the provider dashboard is a judgement, not that
proof, and the transition table says so (``Unknown`` never becomes ``NotApplied``:
a later no-effect answer proves nothing about an earlier send). Failed is the final
"no payment was taken; offer another try" state (the reference's status endpoint
treats Failed and NotApplied alike for the customer), so the attempt becomes
``Failed`` with ``outcome_reason = 'operator-closed-not-charged'``.

Why its own module: this is the one operator write of an attempt's state that
carries no provider evidence, so it is kept apart from :mod:`paycore.attempts`
(whose writers apply evidence) and can be found by name. It still follows every
writer's rules: the order lock first, the transition table, and a conditional
UPDATE on the version read; evidence that arrives later meets a final state and
takes the ordinary contradiction path of :func:`paycore.attempts.apply_outcome`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from paycore.attempt_row import Attempt, get_attempt
from paycore.db import transaction_on
from paycore.domain import (
    CLOSED_NOT_CHARGED,
    DEAD_END_REASONS,
    EVIDENCE_REASONS,
    EscalationReason,
    decide_close_not_charged,
)
from paycore.errors import PaycoreError
from paycore.escalations import ESCALATIONS
from paycore.events import HISTORY, append_events
from paycore.operator_actions import (
    REASON_MAX_LENGTH,
    ActionKind,
    InvalidOperatorAction,
    OperatorAction,
    record_action,
    validate_operator,
    validate_reason,
)
from paycore.orders import lock_order
from paycore.writer import History, LostRace, execute

CLOSED_REASON = CLOSED_NOT_CHARGED

# The reasons recovery gives up with (paycore.domain.DEAD_END_REASONS), as episodes write them:
# the reason alone or qualified (``resend-not-safe:<condition>``).
DEAD_END_TEXTS = sorted(r.value for r in DEAD_END_REASONS)
DEAD_END_QUALIFIED = [f"{text}:%" for text in DEAD_END_TEXTS]


def is_dead_end(reason: str) -> bool:
    """Whether an episode's reason says recovery gave up (the attempt still Unknown)."""
    return reason.split(":", 1)[0] in DEAD_END_TEXTS


class CloseRefused(PaycoreError):
    """The attempt cannot be closed as not charged; ``str()`` says why. Nothing was changed or recorded."""


@dataclass(frozen=True)
class Closed:
    """The attempt after the close, the episodes it resolved, and the operator action that records it."""

    attempt: Attempt
    resolved_escalations: list[int]
    recorded: OperatorAction


def validate_checked(text: str) -> str:
    """What the operator checked at the provider: required, one printable line."""
    checked = (text or "").strip()
    if not checked:
        raise InvalidOperatorAction("say what was checked at the provider (--checked)")
    if len(checked) > REASON_MAX_LENGTH:
        raise InvalidOperatorAction(f"what was checked is longer than {REASON_MAX_LENGTH} characters")
    if not checked.isprintable():
        raise InvalidOperatorAction("what was checked must be one printable line (no control characters)")
    return checked


# Escalation reasons that say a payment exists: every verdict against a piece of evidence
# (mismatch, provider-id conflict, identity conflict, several payments), a final outcome
# contradicting the recorded one, a success after a cancellation.
PAYMENT_REASONS = tuple(sorted(r.value for r in (*EVIDENCE_REASONS, EscalationReason.CONTRADICTION,
                                                  EscalationReason.SUCCEEDED_AFTER_CANCEL)))


async def payment_evidence(conn: asyncpg.Connection | asyncpg.Pool, attempt: Attempt) -> list[str]:
    """What says a payment may exist for ``attempt`` (empty: nothing does); also for a page to show."""
    found = []
    if attempt.provider_payment_id is not None:
        found.append(f"provider payment id {attempt.provider_payment_id}")
    if attempt.provider_status is not None:
        found.append(f"provider status {attempt.provider_status}")
    # payment_attempt_events.sql:payment_evidence says what counts.
    rows = await HISTORY.payment_evidence.fetch(
        conn, attempt_id=attempt.attempt_id, account=attempt.provider_account,
        reference=attempt.client_reference, payment_reasons=list(PAYMENT_REASONS), payment_reason_patterns=[],
        identity_conflict=EscalationReason.IDENTITY_CONFLICT.value)
    return found + [r["what"] for r in rows]


def _fields(a: Attempt) -> dict[str, Any]:
    return {"state": a.state.value, "version": a.version, "outcome_reason": a.outcome_reason,
            "provider_payment_id": a.provider_payment_id}


async def close_as_not_charged(
    db: asyncpg.Pool | asyncpg.Connection, *, attempt_id: UUID, operator: str, reason: str,
    checked_at_provider: str, now: datetime, expected_version: int | None = None,
) -> Closed:
    """Close an escalated Unknown attempt as not charged (Failed), after a person checked.

    One transaction: Unknown -> Failed(``operator-closed-not-charged``) through the
    transition table with an UPDATE conditional on the version read (``expected_version``,
    when given, is the version the operator saw: a console page), a ``transition`` event
    with the operator, reason and what was checked, the attempt's open escalations
    resolved, and an ``attempt-close-not-charged`` operator action (state before and
    after). Failed queues no business effect (:func:`paycore.attempts.apply_outcome`
    queues effects for Succeeded only), so neither does this. Afterwards the order has no
    live attempt, and checkout creates the next one, as after any Failed attempt.

    Raises :class:`CloseRefused`, with nothing changed or recorded, when the attempt is
    not Unknown, has no open ``deadline`` / ``resend-rejected`` / ``resend-not-safe:*``
    escalation, when any evidence of a payment exists (:func:`payment_evidence`), or when
    it changed underneath; :class:`~paycore.errors.AttemptNotFound` for no such attempt;
    :class:`~paycore.operator_actions.InvalidOperatorAction` for a bad handle, reason or
    check note.
    """
    operator = validate_operator(operator)
    why = validate_reason(ActionKind.ATTEMPT_CLOSE_NOT_CHARGED, reason)
    checked = validate_checked(checked_at_provider)
    async with transaction_on(db) as conn:
        seen = await get_attempt(conn, attempt_id)  # what the decision is about
        if expected_version is not None and seen.version != expected_version:
            raise CloseRefused(f"attempt {attempt_id} changed since it was shown (version "
                               f"{expected_version}, now {seen.version}); look again")
        await lock_order(conn, seen.order_id)  # the lock order every writer keeps
        dead_ends = await ESCALATIONS.lock_open_dead_ends.fetch(
            conn, attempt_id=attempt_id, reasons=DEAD_END_TEXTS, qualified=DEAD_END_QUALIFIED)
        decision = decide_close_not_charged(
            seen, dead_ends=[r["escalation_id"] for r in dead_ends],
            evidence=await payment_evidence(conn, seen),
            detail={"operator": operator, "operator_reason": why, "checked_at_provider": checked})
        if decision.refused is not None:
            raise CloseRefused(decision.refused)
        history: History = []
        try:
            executed = await execute(conn, seen, decision, now=now, actor=f"operator-{operator}",
                                     history=history)
        except LostRace:
            raise CloseRefused(f"attempt {attempt_id} changed underneath (it was version {seen.version}); "
                               f"nothing was done; look again") from None
        closed, resolved = executed.attempt, list(executed.resolved)
        assert closed is not None
        await append_events(conn, attempt_id=attempt_id, actor=f"operator-{operator}", now=now,
                            events=history)
        recorded = await record_action(
            conn, action=ActionKind.ATTEMPT_CLOSE_NOT_CHARGED, operator=operator, reason=why, now=now,
            before=_fields(seen), after=_fields(closed), attempt_id=attempt_id,
            escalation_id=dead_ends[0]["escalation_id"],
            detail={"checked_at_provider": checked, "resolved_escalations": resolved},
        )
        return Closed(closed, resolved, recorded)
