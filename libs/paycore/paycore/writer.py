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
from paycore.domain import Attempt, Decision, Escalation, OutcomeWrite, StartWrite, Write, decide_escalation
from paycore.errors import PaycoreError
from paycore.events import EventKind
from paycore.leases import Lease
from paycore.orders import lock_order_of_attempt, mark_paid

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
            self.conn, key=key, reason=e.reason, qualifier=e.qualifier, attempt_id=self.attempt_id,
            now=self.now, detail=dict(e.detail), reminder_interval=self.reminder_interval)


@dataclass(frozen=True)
class Executed:
    """What :func:`execute` wrote: the attempt's new row (``None``: no write), the episodes it
    resolved, and whether a lease was released with the next look scheduled (escalate and finish)."""

    attempt: Attempt | None
    resolved: tuple[int, ...] = ()
    finished: bool = False


async def execute(conn: asyncpg.Connection, attempt: Attempt, decision: Decision, *, now: datetime,
                  actor: str, history: History, lease: Lease | None = None,
                  escalator: Escalator | None = None) -> Executed:
    """Carry out ``decision`` for ``attempt`` as read under its order's lock, in the caller's
    transaction: the conditional write with its history events (``history``, the caller's so far,
    and the write's own, by ``actor``, in the write's statement; ``history`` is emptied when they
    are written, and what it keeps the caller appends), the attempt's escalations resolved when
    it became final and the decision's opened, the order marked Paid and the effects queued, and,
    for a writer holding ``lease``, the next look scheduled and the lease released. Raises
    :class:`LostRace` when the write's condition (version, state, and for recovery's close the
    lease) matched no row."""
    if decision.refused is not None:
        raise ValueError(f"a refused decision is not executed: {decision.refused}")
    updated: Attempt | None = None
    resolved: list[int] = []
    if decision.write is not None:
        updated = await _write(conn, attempt, decision, decision.write, now=now, actor=actor, lease=lease,
                               history=history)
        if decision.resolves_escalations:
            resolved = await escalations.resolve_for_attempt(conn, attempt.attempt_id, now)
    if decision.effects:
        assert updated is not None  # effects follow a Succeeded write only
        await queue_success_effects(conn, updated, decision, now)
    if decision.escalations:
        if escalator is None:
            raise ValueError("a decision that escalates needs an Escalator")
        await open_all(escalator, decision.escalations)
    finished = False
    if decision.finish_after_s is not None and lease is not None:
        # Escalate and finish: the next look and the lease's release commit with the episode.
        finished = await leases.finish(conn, attempt.attempt_id, lease, now, decision.finish_after_s)
    return Executed(updated, tuple(resolved), finished)


async def _write(conn: asyncpg.Connection, attempt: Attempt, decision: Decision, write: Write, *,
                 now: datetime, actor: str, lease: Lease | None, history: History) -> Attempt:
    """The one conditional UPDATE of ``write``, with ``history`` and the write's own events in
    the same statement (``history`` is then emptied: written); :class:`LostRace` on a miss."""
    moved: dict[str, Any] = {"from": attempt.state.value, "to": decision.after.value}
    events: History
    if isinstance(write, OutcomeWrite):
        query = ATTEMPTS.apply_outcome
        params: dict[str, Any] = dict(
            state=attempt.state.value, target=write.target.value, provider_status=write.provider_status,
            next_action=write.next_action, next_action_expires_at=write.next_action_expires_at,
            outcome_reason=write.outcome_reason, payment_id=write.provider_payment_id,
            next_check_at=write.next_check_at, owner=lease.owner if lease else None,
            token=lease.token if lease else None)
        events = [(EventKind.TRANSITION, {**moved, "reason": write.outcome_reason,
                                          "provider_status": write.provider_status})]
    elif isinstance(write, StartWrite):
        query, params = ATTEMPTS.mark_started, dict(next_check_at=write.next_check_at)
        events = [(EventKind.SEND_INTENT, {"endpoint": attempt.endpoint, "api_version": attempt.api_version,
                                           "provider_account": attempt.provider_account, "first_send": True}),
                  (EventKind.TRANSITION, moved)]
    else:
        if not write.under_lease:  # a person's close
            query = ATTEMPTS.close_as_not_charged
            params = dict(state=attempt.state.value, outcome_reason=write.outcome_reason)
        elif lease is None:
            raise ValueError("recovery's close is made under its lease")
        else:
            query, params = ATTEMPTS.close_never_sent, dict(owner=lease.owner, token=lease.token)
        events = [(EventKind.TRANSITION, {**moved, "reason": write.outcome_reason, **decision.detail})]
    logged = [*history, *events]
    row = await query.fetchrow(conn, attempt_id=attempt.attempt_id, version=attempt.version, now=now,
                               actor=actor, kinds=[kind.value for kind, _ in logged],
                               details=[detail for _, detail in logged], **params)
    if row is None:
        raise LostRace
    history.clear()
    return Attempt.from_record(row)


async def open_all(escalator: Escalator, raised: Sequence[Escalation]) -> None:
    for e in raised:
        await escalator.open(e)


async def queue_success_effects(conn: asyncpg.Connection, attempt: Attempt, decision: Decision,
                                now: datetime) -> None:
    """The order marked Paid (when the decision says so) and the effects queued, in their order:
    the relay sends an attempt's effects in the order queued, the confirmation first."""
    if decision.order_paid:
        await mark_paid(conn, attempt.order_id, held=decision.order_held)
    payload = {
        "order_id": attempt.order_id,
        "amount_minor": attempt.amount_minor,
        "currency": attempt.currency,
        "provider_account": attempt.provider_account,
        "provider_payment_id": attempt.provider_payment_id,
    }
    await outbox.enqueue_effects(conn, attempt_id=attempt.attempt_id, payload=payload, now=now,
                                 effects=list(decision.effects))


async def escalate_and_finish(pool: asyncpg.Pool, attempt_id: UUID, lease: Lease, escalation: Escalation, *,
                              recheck_after_s: float, now: datetime, reminder_interval: timedelta,
                              actor: str = "recovery") -> bool:
    """Recovery asks a person (:func:`paycore.domain.decide_escalation`): in one transaction, while
    this worker owns the attempt and it is still Started or Unknown, open the episode
    ``attempt:<id>:<reason>`` (its alert only if new), schedule the next look and release the
    lease. ``False`` when it was resolved meanwhile (nobody is alerted about a settled payment)
    or is not this worker's any more. The attempt's state and version are not touched, so a
    concurrent outcome write never retries because of an escalation."""
    async with pool.acquire() as conn, conn.transaction():
        await lock_order_of_attempt(conn, attempt_id)
        current = await leases.lock_owned(conn, attempt_id, lease, now)
        if current is None:
            return False
        decision = decide_escalation(current, escalation, recheck_after_s=recheck_after_s)
        if decision.refused is not None:
            return False
        escalator = Escalator(conn, attempt_id, now, None, reminder_interval)
        return (await execute(conn, current, decision, now=now, actor=actor, history=[], lease=lease,
                              escalator=escalator)).finished
