"""The recovery sweep: claim due attempts in the reference's order, hand each to its rescuer;
then the due captures, cancels and refunds (:mod:`paycore_recovery.rescuers.operations`) and
the holds nobody captured (:mod:`paycore_recovery.rescuers.holds`).

For every due attempt, in ``(next_check_at, created_at, attempt_id)`` order: claim it, then
the rescuer of its kind (:mod:`paycore_recovery.rescuers`, deciding with
:func:`paycore.domain.decide_pass`) does exactly one of: resolve it from evidence, schedule it
and release the lease (``finish``), escalate and schedule it in one transaction
(``escalate_and_finish``), or one of two deliberate exceptions -- a send intent whose commit is
unknown, and a lost lease -- where the lease simply expires or already belongs to someone else.
Recovery never creates an attempt and never sends anything but the attempt's stored request
under its own key.

The claims stay one statement for every kind (lanes batched by :class:`_Claims`): the reference
orders all due work together, and one walk of the due index per batch is what keeps a sweep
cheap at scale (docs/performance.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
from uuid import UUID

import asyncpg

from paycore import leases
from paycore.attempts import Attempt
from paycore.clock import Clock
from paycore.config import Settings
from paycore.domain import Pass, kind_of
from paycore.errors import MAY_HAVE_COMMITTED
from paycore.leases import Lease
from paycore.liveness import SLACK_S, Liveness, beat
from paycore.logs import bind_log_context
from paycore.providers.base import PaymentCalls
from paycore_recovery.metrics import RecoveryMetrics
from paycore_recovery.pacing import Pacer
from paycore_recovery.rescuers import rescuers_for
from paycore_recovery.rescuers.base import Checkpoint, timing_of
from paycore_recovery.rescuers.holds import HoldWatch
from paycore_recovery.rescuers.operations import OperationRescuer
from paycore_recovery.settings import RecoverySettings

__all__ = ["Pass", "RecoveryWorker", "default_owner", "liveness_bound_s"]

log = logging.getLogger("paycore.recovery")


async def _no_pause(attempt: Attempt) -> None:
    return None


def liveness_bound_s(recovery: RecoverySettings) -> float:
    """The longest a healthy recovery loop goes between beats.

    It beats before every sweep and before every claim, so the longest gap is one
    attempt's pass -- shorter than the lease, which start-up validation keeps
    above a worst-case pass -- or the wait of ``interval_s`` between sweeps, plus
    the claim, reminder and metrics statements, which ``SLACK_S`` covers. A sweep
    that fails on the database still ends and beats.
    """
    return recovery.interval_s + recovery.lease_s + SLACK_S


def default_owner() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class _Claims:
    """Hands a sweep's lanes their attempts, claiming for every lane waiting at once.

    A lane that needs work claims for itself and for every lane that is waiting
    with it, in one statement; lanes arriving while that claim runs take what it
    brought back. Only waiting lanes are claimed for, so no claimed attempt sits
    unworked while its lease runs: each pass starts at its claim, as with a claim
    per lane. When claims are cheap, lanes rarely wait together and each claims one;
    when they are slow, lanes pile up behind one and the next claim takes them all.
    """

    def __init__(self, worker: RecoveryWorker, budget: int) -> None:
        self._worker = worker
        self._budget = budget  # attempts this sweep may still claim (``batch``)
        self._waiting = 0
        self._claimed: list[tuple[Attempt, Lease]] = []  # in the reference's order
        self._lock = asyncio.Lock()
        self._claims_made = 0
        self._last_short = 0  # the number of the last claim that found fewer than it asked for

    async def next(self) -> tuple[Attempt, Lease] | None:
        """This lane's next claimed attempt; ``None`` when nothing is due or the batch is spent."""
        self._waiting += 1
        waiting_since = self._claims_made
        try:
            async with self._lock:
                if self._claimed:
                    return self._claimed.pop(0)
                if self._last_short > waiting_since:
                    # A claim made for this lane found nothing left for it: the lane ends its
                    # sweep, as one whose own claim found nothing does. Lanes still working
                    # claim again when they are done.
                    return None
                if self._budget > 0:
                    await self._claim(min(self._waiting, self._budget))
                return self._claimed.pop(0) if self._claimed else None
        finally:
            self._waiting -= 1

    async def _claim(self, n: int) -> None:
        worker = self._worker
        self._budget -= n
        self._claims_made += 1
        fresh = [leases.new_lease(worker.owner) for _ in range(n)]
        self._claimed = await leases.claim_due(worker.pool, fresh, worker.clock.now(),
                                               worker.recovery.lease_s)
        if len(self._claimed) < n:
            self._last_short = self._claims_made


class RecoveryWorker:
    def __init__(self, *, pool: asyncpg.Pool, client: PaymentCalls, clock: Clock, settings: Settings,
                 recovery: RecoverySettings, metrics: RecoveryMetrics, owner: str | None = None,
                 liveness: Liveness | None = None) -> None:
        self.pool = pool
        self.client = client
        self.clock = clock
        self.settings = settings
        self.recovery = recovery
        self.metrics = metrics
        self.owner = owner or default_owner()
        self.actor = f"recovery-{self.owner}"
        self.liveness = liveness  # beaten each sweep and before each claim
        self.pacers = {a.provider_account: Pacer(a.lookup_rate_per_s) for a in settings.accounts}
        # Seams where a test can hold a worker still, to show what local checks can and cannot do.
        self.before_final_check: Checkpoint = _no_pause
        self.after_final_check: Checkpoint = _no_pause
        self._timing = timing_of(settings, recovery)
        self.rescuers = rescuers_for(self)
        # What follows a payment has its own rows and leases, and its own task (issue 29).
        self.operations = OperationRescuer(pool=pool, client=client, clock=clock, settings=settings,
                                           recovery=recovery, owner=self.owner)
        self.holds = HoldWatch(pool=pool, client=client, clock=clock, settings=settings, recovery=recovery)

    # -- the sweep -------------------------------------------------------------------------

    async def run_pass(self) -> list[Pass]:
        """One sweep over due attempts (and due reminders); returns how each pass ended.

        ``concurrency`` lanes each take the next due attempt in the reference's
        order and work it, until nothing is due or ``batch`` attempts were claimed.
        """
        from paycore_recovery.reminders import send_due_reminders

        results: list[Pass] = []
        claims = _Claims(self, self.recovery.batch)

        async def lane() -> None:
            while True:
                beat(self.liveness)
                try:
                    claimed = await claims.next()
                except MAY_HAVE_COMMITTED:
                    # Unknown whether the claim committed: its leases simply expire.
                    log.exception("claiming the next due attempts failed; ending this lane's sweep")
                    self.metrics.failures.inc()
                    return
                if claimed is None:
                    return
                attempt, lease = claimed
                results.append(await self._recover_guarded(attempt, lease))

        await asyncio.gather(*(lane() for _ in range(self.recovery.concurrency)))
        beat(self.liveness)
        try:
            await self.operations.refund_charged_after_cancel()
            await self.operations.run_pass()
            await self.holds.run_pass()
        except MAY_HAVE_COMMITTED:
            log.exception("claiming due operations failed; ending this sweep's operations")
            self.metrics.failures.inc()
        await send_due_reminders(self.pool, self.clock, self.settings)
        return results

    async def run_forever(self, stop: asyncio.Event) -> None:
        log.info("recovery worker %s started", self.owner)
        while not stop.is_set():
            beat(self.liveness)
            try:
                await self.run_pass()
                await self.metrics.refresh(self.pool, self.clock.now())
            except MAY_HAVE_COMMITTED:
                log.exception("recovery sweep failed; retrying after the interval")
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.recovery.interval_s)
            except TimeoutError:
                pass
        log.info("recovery worker %s stopped", self.owner)

    # -- one attempt -----------------------------------------------------------------------

    async def recover(self, attempt_id: UUID) -> Pass:
        """Claim this attempt, if it is due and free, and work it once."""
        lease = leases.new_lease(self.owner)
        attempt = await leases.claim(self.pool, attempt_id, lease, self.clock.now(), self.recovery.lease_s)
        if attempt is None:
            return Pass.NOT_CLAIMED
        with bind_log_context(order_id=attempt.order_id, attempt_id=attempt.attempt_id):
            return await self.rescue(attempt, lease)

    async def _recover_guarded(self, attempt: Attempt, lease: Lease) -> Pass:
        with bind_log_context(order_id=attempt.order_id, attempt_id=attempt.attempt_id):
            try:
                return await self.rescue(attempt, lease)
            except Exception:
                # One attempt's failure must not stop the sweep for the others. It is
                # surfaced (log with traceback, metric), never turned into an outcome;
                # the lease expires and a later pass retries from durable state.
                log.exception("recovery pass over attempt %s failed", attempt.attempt_id)
                self.metrics.failures.inc()
                return Pass.FAILED

    async def rescue(self, attempt: Attempt, lease: Lease) -> Pass:
        """Work one claimed attempt: the rescuer of its kind decides and acts."""
        self.metrics.claims.inc()
        kind = kind_of(attempt, self.clock.now(), self._timing.settle_s)
        return await self.rescuers[kind].rescue(attempt, lease)
