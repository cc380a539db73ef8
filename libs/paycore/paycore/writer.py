"""The one writer: it executes what :mod:`paycore.domain` decided, and decides nothing.

Every change of an attempt's state is made here, in the lock order (the order row, then the
attempt row, then escalation, event and outbox rows): the conditional UPDATE on the version
and state read (a miss is :class:`LostRace`, for the caller to read again and decide again),
the history events, the escalations opened and resolved, the order marked Paid and the
effects queued. The callers -- checkout, the webhook handler, recovery, the dead ends, the
conflicts and the console -- read, ask the domain, and hand its decision here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg

from paycore import escalations, leases, outbox
from paycore.attempt_row import ATTEMPTS
from paycore.domain import Attempt, Decision, Escalation
from paycore.errors import PaycoreError
from paycore.events import EventKind
from paycore.leases import Lease
from paycore.orders import mark_paid

History = list[tuple[EventKind, dict[str, Any]]]


class LostRace(PaycoreError):
    """The conditional write matched no row: another writer moved the attempt first."""


@dataclass(frozen=True)
class Escalator:
    """Opens an attempt's episodes inside the writer's transaction, each keyed
    ``attempt:<id>:<reason>``, plus the evidence's key when one caused it (so two distinct
    notifications alert separately and a redelivery alerts once)."""

    conn: asyncpg.Connection
    attempt_id: UUID
    now: datetime
    evidence_key: str | None
    reminder_interval: timedelta

    async def open(self, e: Escalation) -> int | None:
        """Open ``e``'s episode (its alert only if new); the new episode's id, or None."""
        key = escalations.attempt_key(self.attempt_id, e.text, self.evidence_key if e.per_evidence else None)
        return await escalations.raise_escalation(
            self.conn, key=key, reason=e.text, attempt_id=self.attempt_id, now=self.now,
            detail=dict(e.detail), reminder_interval=self.reminder_interval)


async def execute_outcome(conn: asyncpg.Connection, attempt: Attempt, decision: Decision, *, now: datetime,
                          lease: Lease | None, escalator: Escalator, history: History) -> Attempt | None:
    """Carry out an outcome's :class:`~paycore.domain.Decision` for ``attempt`` as read under its
    order's lock: the attempt written (``None`` when the decision writes nothing). Its events go to
    ``history``, appended by the caller after this returns. Raises :class:`LostRace`."""
    updated: Attempt | None = None
    write = decision.write
    if write is not None:
        row = await ATTEMPTS.apply_outcome.fetchrow(
            conn, attempt_id=attempt.attempt_id, version=attempt.version, state=attempt.state.value,
            target=write.target.value, provider_status=write.provider_status, next_action=write.next_action,
            next_action_expires_at=write.next_action_expires_at, outcome_reason=write.outcome_reason,
            payment_id=write.provider_payment_id, next_check_at=write.next_check_at,
            owner=lease.owner if lease else None, token=lease.token if lease else None)
        if row is None:
            raise LostRace
        updated = Attempt.from_record(row)
        history.append((EventKind.TRANSITION, {"from": attempt.state.value, "to": write.target.value,
                                               "reason": write.outcome_reason,
                                               "provider_status": write.provider_status}))
        if decision.resolves_escalations:
            await escalations.resolve_for_attempt(conn, attempt.attempt_id, now)
    if decision.effects:
        assert updated is not None  # effects follow a Succeeded write only
        await queue_success_effects(conn, updated, decision, now)
    await open_all(escalator, decision.escalations)
    if decision.finish_after_s is not None and lease is not None:
        # Escalate and finish: the next look and the lease's release commit with the episode.
        await leases.finish(conn, attempt.attempt_id, lease, now, decision.finish_after_s)
    return updated


async def open_all(escalator: Escalator, raised: Sequence[Escalation]) -> None:
    for e in raised:
        await escalator.open(e)


async def queue_success_effects(conn: asyncpg.Connection, attempt: Attempt, decision: Decision,
                                now: datetime) -> None:
    """The order marked Paid (when the decision says so) and the effects queued, in their order:
    the relay sends an attempt's effects in the order queued, the confirmation first."""
    if decision.order_paid:
        await mark_paid(conn, attempt.order_id)
    payload = {
        "order_id": attempt.order_id,
        "amount_minor": attempt.amount_minor,
        "currency": attempt.currency,
        "provider_account": attempt.provider_account,
        "provider_payment_id": attempt.provider_payment_id,
    }
    await outbox.enqueue_effects(conn, attempt_id=attempt.attempt_id, payload=payload, now=now,
                                 effects=list(decision.effects))
