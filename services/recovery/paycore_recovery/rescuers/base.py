"""What every rescuer shares: the decide-gather-act loop over one claimed attempt, and the acts
that end a pass the same way whatever the kind (finish, escalate, apply what was found).

A rescuer asks :func:`paycore.domain.decide_pass` what to do, gathers the fact it asks for
(the kind's own :meth:`Rescuer.gather`), asks again, and acts on the answer; the writes are
the library's (:mod:`paycore.attempts`, :mod:`paycore.leases`), so a rescuer decides nothing
itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar, Protocol

import asyncpg

from paycore import evidence, leases, writer
from paycore.attempts import Attempt, record_outcome
from paycore.clock import Clock
from paycore.config import Settings
from paycore.domain import (
    FINAL_STATES,
    Escalation,
    OutcomeKind,
    Pass,
    PassDecision,
    PassFacts,
    PassKind,
    Step,
    Timing,
    decide_pass,
)
from paycore.events import EventKind, append_events
from paycore.leases import Lease
from paycore.providers.base import LookupResult, PaymentCalls
from paycore_recovery.metrics import RecoveryMetrics
from paycore_recovery.pacing import Pacer
from paycore_recovery.settings import RecoverySettings

Checkpoint = Callable[[Attempt], Awaitable[None]]
LookupEvent = tuple[EventKind, dict[str, object]]  # one lookup, as its history event

GATHER_STEPS = frozenset({Step.READ_HISTORY, Step.LOOK_UP, Step.LOOK_UP_ACTION, Step.CHECK_RESEND})


class Worker(Protocol):
    """What a rescuer uses of its recovery worker."""

    pool: asyncpg.Pool
    client: PaymentCalls
    clock: Clock
    settings: Settings
    recovery: RecoverySettings
    metrics: RecoveryMetrics
    actor: str
    pacers: dict[str, Pacer]
    before_final_check: Checkpoint
    after_final_check: Checkpoint


def timing_of(settings: Settings, recovery: RecoverySettings) -> Timing:
    """Recovery's numbers for :func:`paycore.domain.decide_pass`."""
    b = settings.budgets
    return Timing(abandonment_s=settings.abandonment_threshold_s,
                  settle_s=b.call_s + b.record_s + settings.processing_allowance_s,
                  action_poll_s=recovery.action_poll_s, slow_cadence_s=recovery.slow_cadence_s,
                  backoff_s=recovery.backoff_s)


@dataclass
class PassState:
    """One pass's facts, what its lookups answered, and their history events."""

    facts: PassFacts
    found: LookupResult | None = None  # the lookup whose payment an APPLY writes
    looked: list[LookupEvent] = field(default_factory=list)


class Rescuer:
    """The loop and the shared acts; a subclass per :class:`~paycore.domain.PassKind` gathers its
    facts and does its own acts."""

    kind: ClassVar[PassKind]

    def __init__(self, worker: Worker) -> None:
        self.w = worker
        self.timing = timing_of(worker.settings, worker.recovery)

    async def rescue(self, attempt: Attempt, lease: Lease) -> Pass:
        state = PassState(PassFacts(account_configured=self.w.settings.account(attempt.provider_account)
                                    is not None))
        while True:
            decision = decide_pass(attempt, state.facts, self.w.clock.now(), self.timing)
            if decision.step in GATHER_STEPS:
                await self.gather(decision.step, attempt, state)
                continue
            if decision.step is not Step.APPLY and state.looked:
                await self.record_lookups(attempt, state.looked)  # what an APPLY does not carry
                state.looked = []
            ended = await self.act(decision, attempt, lease, state)
            if ended is not None:
                return ended
            # The act learnt something (a race lost): decide again on it.

    async def gather(self, step: Step, attempt: Attempt, state: PassState) -> None:
        raise NotImplementedError(f"{type(self).__name__} gathers no {step}")

    async def act(self, d: PassDecision, attempt: Attempt, lease: Lease, state: PassState) -> Pass | None:
        """Do what ``d`` says; ``None`` when the pass goes on (the kind's act added a fact)."""
        if d.step is Step.FINISH:
            await leases.finish(self.w.pool, attempt.attempt_id, lease, self.w.clock.now(), d.delay_s)
            return ended(d)
        if d.step is Step.ESCALATE:
            assert d.escalation is not None
            await escalate(self.w, attempt, lease, d.escalation, d.delay_s)
            return ended(d)
        if d.step is Step.APPLY:
            assert state.found is not None
            return await self.apply(attempt, lease, state.found, d.delay_s, state.looked)
        if d.step is Step.DONE:
            return ended(d)
        raise NotImplementedError(f"{type(self).__name__} does no {d.step}")

    # -- the shared acts ---------------------------------------------------------------------

    async def apply(self, attempt: Attempt, lease: Lease, found: LookupResult, backoff: float,
                    looked: list[LookupEvent]) -> Pass:
        """Apply what a lookup found through the one writer of outcomes, with the pass's lookup
        events in its transaction (ahead of its own). A payment that is not this attempt's
        resolves nothing and is escalated, the next look on the slow cadence (scheduled with
        the lease's release); valid evidence is applied under the state rules alone, even if
        this worker's lease has lapsed; only a lease it still owns is released."""
        outcome = found.payments[0].to_outcome()
        recheck = self.w.recovery.action_poll_s if outcome.kind is OutcomeKind.REQUIRES_ACTION else backoff
        w = self.w
        recorded = await record_outcome(
            w.pool, attempt.attempt_id, outcome, now=w.clock.now(), actor=w.actor, recheck_after_s=recheck,
            from_send=False, lease=lease, escalated_recheck_after_s=w.recovery.slow_cadence_s,
            reminder_interval=w.settings.reminder_interval, evidence_events=looked)
        if not recorded.verdict.accepted:
            assert recorded.verdict.reason is not None
            w.metrics.escalations.labels(recorded.verdict.reason.value).inc()
            return Pass.ESCALATED
        if not recorded.written:
            # It wrote nothing (an already-final winner): still release what is ours. A write
            # scheduled the next check and released an owned lease itself.
            await leases.finish(w.pool, attempt.attempt_id, lease, w.clock.now(), recheck)
        state = recorded.attempt.state
        if state in FINAL_STATES:
            w.metrics.resolved.labels(state.value).inc()
            return Pass.RESOLVED
        return Pass.OBSERVED

    # -- lookups, shared by the kinds that look -------------------------------------------------

    async def paced(self, attempt: Attempt) -> None:
        pacer = self.w.pacers.get(attempt.provider_account)
        if pacer:
            await pacer.wait()

    def lookup_event(self, lookup: LookupResult, how: str,
                     inconclusive_until: datetime | None) -> LookupEvent:
        """The history event that records one lookup, counted as made."""
        self.w.metrics.lookups.labels(lookup.kind).inc()
        # Every payment as the provider answered it, matching or not: the evidence an operator
        # needs when this attempt is escalated.
        detail: dict[str, object] = {"by": how, "result": lookup.kind, "reason": lookup.reason,
                                     "payments": [p.evidence() for p in lookup.payments]}
        if how == "reference" and lookup.kind == "not_found":
            # Whether the miss proved anything, so an operator sees why recovery waited.
            detail["conclusive"] = inconclusive_until is None
            if inconclusive_until is not None:
                detail["reason"] = "search-lag"
                detail["conclusive_from"] = inconclusive_until.isoformat()
        return EventKind.LOOKUP, detail

    async def record_lookups(self, attempt: Attempt, looked: list[LookupEvent]) -> None:
        """Append a pass's lookup events on their own, when no outcome write carries them."""
        async with self.w.pool.acquire() as conn:
            await append_events(conn, attempt_id=attempt.attempt_id, actor=self.w.actor,
                                now=self.w.clock.now(), events=looked)


async def escalate(w: Worker, attempt: Attempt, lease: Lease, e: Escalation, delay_s: float) -> None:
    """Open the episode, schedule the next look and release the lease: one transaction."""
    raised = await writer.escalate_and_finish(
        w.pool, attempt.attempt_id, lease, e, recheck_after_s=delay_s, now=w.clock.now(),
        reminder_interval=w.settings.reminder_interval, actor=w.actor)
    if raised:
        w.metrics.escalations.labels(e.reason.value).inc()


def ended(d: PassDecision) -> Pass:
    """How a pass that acted on ``d`` ended (every act's decision names it)."""
    assert d.result is not None, f"{d.step} without a result"
    return d.result


def distinct_payment_ids(lookup: LookupResult) -> tuple[str, ...]:
    return tuple(evidence.distinct_payments(p.claim() for p in lookup.payments))
