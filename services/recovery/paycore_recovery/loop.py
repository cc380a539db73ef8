"""The recovery loop, top to bottom as in the reference.

For every due attempt, in ``(next_check_at, created_at, attempt_id)`` order:
claim it, then exactly one of: resolve it from evidence, schedule it and release
the lease (``finish``), escalate and schedule it in one transaction
(``escalate_and_finish``), or one of two deliberate exceptions -- a send intent
whose commit is unknown, and a lost lease -- where the lease simply expires or
already belongs to someone else. The loop never creates an attempt and never
sends anything but the attempt's stored request under its own key.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import secrets
import socket
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from uuid import UUID

import asyncpg

from paycore import attempts, events, evidence, leases, rate_limits
from paycore.attempts import Attempt, get_attempt, record_outcome
from paycore.clock import Clock
from paycore.config import Settings
from paycore.domain import LIVE_STATES, AttemptState, EscalationReason, OutcomeKind
from paycore.errors import MAY_HAVE_COMMITTED
from paycore.events import EventKind, append_events
from paycore.leases import Lease
from paycore.liveness import SLACK_S, Liveness, beat
from paycore.logs import bind_log_context
from paycore.orders import find_order
from paycore.providers.base import LookupResult, PaymentCalls, ReferenceLookup, StoredRequest
from paycore_recovery.metrics import RecoveryMetrics
from paycore_recovery.pacing import Pacer
from paycore_recovery.settings import RecoverySettings

log = logging.getLogger("paycore.recovery")


class Pass(enum.StrEnum):
    """How one claimed pass over an attempt ended."""

    NOT_CLAIMED = "not-claimed"
    CLOSED_NEVER_SENT = "closed-never-sent"
    RESCHEDULED = "rescheduled"
    INCONCLUSIVE = "inconclusive"  # a miss by reference inside the search lag: looked at again after it
    RESOLVED = "resolved"
    OBSERVED = "observed"  # processing / customer action recorded, still live
    ESCALATED = "escalated"
    LOOKUP_FAILED = "lookup-failed"
    PAUSED = "paused"
    RESENT = "resent"
    INTENT_REFUSED = "intent-refused"
    INTENT_UNKNOWN = "intent-unknown"
    ABANDONED = "abandoned"
    FAILED = "failed"  # this pass raised; logged, counted, and the lease left to expire


Checkpoint = Callable[[Attempt], Awaitable[None]]
LookupEvent = tuple[EventKind, dict[str, object]]  # one lookup, as its history event


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
            return await self._recover_claimed(attempt, lease)

    async def _recover_guarded(self, attempt: Attempt, lease: Lease) -> Pass:
        with bind_log_context(order_id=attempt.order_id, attempt_id=attempt.attempt_id):
            try:
                return await self._recover_claimed(attempt, lease)
            except Exception:
                # One attempt's failure must not stop the sweep for the others. It is
                # surfaced (log with traceback, metric), never turned into an outcome;
                # the lease expires and a later pass retries from durable state.
                log.exception("recovery pass over attempt %s failed", attempt.attempt_id)
                self.metrics.failures.inc()
                return Pass.FAILED

    async def _recover_claimed(self, attempt: Attempt, lease: Lease) -> Pass:
        """The reference's pass over one claimed attempt, top to bottom."""
        attempt_id = attempt.attempt_id
        self.metrics.claims.inc()
        now = self.clock.now()

        if attempt.state is AttemptState.NOT_STARTED:
            return await self._not_started(attempt, lease, now)

        if attempt.state is AttemptState.STARTED and attempt.action_is_current(now):
            if attempt.next_action_expires_at is None and attempt.provider_payment_id is not None:
                return await self._action_status(attempt, lease, now)
            return await self._waiting_for_customer(attempt, lease, now)
        # An expired or superseded action proves nothing and permits no resend: reconcile below.

        if attempt.state is AttemptState.STARTED and attempt.next_action is None:
            settle_at = attempt.first_sent_at + timedelta(seconds=self._settle_s()) \
                if attempt.first_sent_at else now
            if now < settle_at:
                await leases.finish(self.pool, attempt_id, lease, now, (settle_at - now).total_seconds())
                return Pass.RESCHEDULED

        # -- the attempt is Unknown, or a stalled Started attempt --
        return await self._reconcile(attempt, lease)

    def _settle_s(self) -> float:
        b = self.settings.budgets
        return b.call_s + b.record_s + self.settings.processing_allowance_s

    async def _not_started(self, attempt: Attempt, lease: Lease, now: datetime) -> Pass:
        age = (now - attempt.created_at).total_seconds()
        threshold = self.settings.abandonment_threshold_s
        if age >= threshold:
            if await attempts.close_never_sent(self.pool, attempt, lease, now, self.actor) is not None:
                self.metrics.closed_never_sent.inc()
                return Pass.CLOSED_NEVER_SENT
            # The endpoint started it first: schedule it for its new state, once (finish
            # releases only a lease this worker still owns).
            current = await get_attempt(self.pool, attempt.attempt_id)
            if current.state in LIVE_STATES:
                started = current.state is AttemptState.STARTED
                delay = self._settle_s() if started else self.recovery.backoff(0)
                await leases.finish(self.pool, current.attempt_id, lease, now, delay)
            return Pass.RESCHEDULED
        # The endpoint is about to send it; recovery never sends a first attempt.
        await leases.finish(self.pool, attempt.attempt_id, lease, now, threshold - age)
        return Pass.RESCHEDULED

    def _action_delay(self, attempt: Attempt, now: datetime) -> float:
        if attempt.next_action_expires_at is None:
            return self.recovery.action_poll_s
        until_expiry = (attempt.next_action_expires_at - now).total_seconds()
        return min(until_expiry, self.recovery.action_poll_s)

    async def _waiting_for_customer(self, attempt: Attempt, lease: Lease, now: datetime) -> Pass:
        # Never resend: the customer's step is pending.
        delay = self._action_delay(attempt, now)
        if attempt.escalation_deadline is not None and now >= attempt.escalation_deadline:
            # The key window is closing whether or not the customer acts.
            await self._escalate(attempt, lease, "deadline", delay)
            return Pass.ESCALATED
        await leases.finish(self.pool, attempt.attempt_id, lease, now, delay)
        return Pass.RESCHEDULED

    async def _action_status(self, attempt: Attempt, lease: Lease, now: datetime) -> Pass:
        """A current action whose provider states no expiry (Stripe's ``next_action``): it never
        expires by itself, so without a look the attempt would wait for a notification or the
        deadline. Look it up by its payment id at each action poll; never resend. A provider
        that cannot be asked (Adyen: ``unsupported``) or does not answer leaves it waiting."""
        if attempt.escalation_deadline is not None and now >= attempt.escalation_deadline:
            return await self._waiting_for_customer(attempt, lease, now)
        assert attempt.provider_payment_id is not None
        pacer = self.pacers.get(attempt.provider_account)
        if pacer:
            await pacer.wait()
        by_id = await self.client.get_payment(attempt.provider_account, attempt.provider_payment_id,
                                              budget_s=self.settings.budgets.call_s)
        if by_id.kind == "unsupported":
            return await self._waiting_for_customer(attempt, lease, now)
        looked = [self._lookup_event(by_id, "id", None)]
        if by_id.kind == "found" and by_id.payment is not None:
            return await self._found(attempt, lease, by_id, self._action_delay(attempt, self.clock.now()),
                                     looked)
        await self._record_lookups(attempt, looked)
        return await self._waiting_for_customer(attempt, lease, self.clock.now())

    async def _reconcile(self, attempt: Attempt, lease: Lease) -> Pass:
        attempt_id = attempt.attempt_id
        scope = attempt.provider_account
        # Send history, backoff step and the scope's pause, read in one round trip.
        facts = await events.pass_facts(self.pool, attempt_id, scope, self.clock.now())
        # Send history first: an intent with neither result nor abandonment is an
        # ambiguous boundary. It is reconciled by the lookup below; no new intent is
        # appended unless every resend condition holds again.
        if facts.latest_send is EventKind.SEND_INTENT:
            self.metrics.ambiguous_boundaries.inc()
            log.info("attempt %s has a send intent without a result: reconciling", attempt_id)

        if self.settings.account(attempt.provider_account) is None:
            # No credentials to look it up or resend it: a person must restore the account.
            await self._escalate(attempt, lease, "resend-not-safe:account-not-configured",
                                 self.recovery.slow_cadence_s)
            return Pass.ESCALATED

        backoff = self.recovery.backoff(facts.lookups_so_far)
        now = self.clock.now()
        paused = facts.paused_until
        if paused is not None:
            await leases.finish(self.pool, attempt_id, lease, now, (paused - now).total_seconds())
            return Pass.PAUSED

        lookups = await self._look_up(attempt)
        now = self.clock.now()
        # When a miss by reference proves nothing yet (a search index still catching up), the
        # time from which it will; None when this pass's lookups hold no such miss.
        inconclusive_until = await self._search_lag_ends(attempt, lookups, now)
        looked = [self._lookup_event(result, how, inconclusive_until) for result, how in lookups]
        lookup = lookups[-1][0]
        if lookup.kind == "found":
            # Recorded by the outcome write, in its transaction (one commit fewer per resolution).
            return await self._found(attempt, lease, lookup, backoff, looked)
        await self._record_lookups(attempt, looked)

        if lookup.kind == "failed":
            # Not "not found": the attempt stays as it is. Past the deadline a person
            # must know even while the provider cannot answer; the lookups go on, on the
            # slow read-only cadence like every other pass past the deadline.
            if attempt.escalation_deadline is not None and now >= attempt.escalation_deadline:
                await self._escalate(attempt, lease, "deadline", self.recovery.slow_cadence_s)
            else:
                await leases.finish(self.pool, attempt_id, lease, now, backoff)
            return Pass.LOOKUP_FAILED
        if lookup.kind == "rate_limited":
            # Pause this rate-limit scope only (the account); other accounts go on.
            wait = lookup.retry_after_s or 1.0
            await rate_limits.pause(self.pool, scope, now + timedelta(seconds=wait), "429", now)
            self.metrics.pauses.labels(scope).inc()
            await leases.finish(self.pool, attempt_id, lease, now, wait)
            return Pass.PAUSED

        # Not found, or the provider has no lookup by reference ("unsupported": then only a
        # notification or a same-key resend inside the key window can tell): it stays Unknown.
        if attempt.escalation_deadline is None or now >= attempt.escalation_deadline:
            # Past the safe cutoff: send nothing, under any key; keep looking on the slow cadence.
            # (A miss inside the search lag changes nothing here: the deadline is time, not evidence.)
            await self._escalate(attempt, lease, "deadline", self.recovery.slow_cadence_s)
            return Pass.ESCALATED

        if inconclusive_until is not None and lookup.kind == "not_found":
            # The search lag: a payment created by the last send may not be indexed yet, so this
            # miss is no evidence that the request never arrived. Conclude nothing from it: no
            # resend (one under the key inside its window would charge nothing twice, but it
            # would be a decision on no evidence while a conclusive miss is minutes away, and
            # may meet the original still executing) and no resend-rejected / resend-not-safe
            # escalation (each presumes "not found"). Look again when the miss will be
            # conclusive, or at the deadline if that is sooner.
            assert attempt.escalation_deadline is not None
            again = min(inconclusive_until, attempt.escalation_deadline)
            await leases.finish(self.pool, attempt_id, lease, now, (again - now).total_seconds())
            return Pass.INCONCLUSIVE

        if await events.resend_was_rejected(self.pool, attempt_id):
            # An earlier resend of these bytes was refused before execution: never again.
            await self._escalate(attempt, lease, "resend-rejected", self.recovery.slow_cadence_s)
            return Pass.ESCALATED

        failing = await self._failing_resend_condition(attempt, now)
        if failing is not None:
            await self._escalate(attempt, lease, f"resend-not-safe:{failing}", self.recovery.slow_cadence_s)
            return Pass.ESCALATED

        return await self._resend(attempt, lease, backoff)

    async def _look_up(self, attempt: Attempt) -> list[tuple[LookupResult, str]]:
        """By provider payment id if recorded; if that misses or does not match, by reference too.

        Returns every lookup made, in order; the last one decides. A record found by
        the recorded id that is not this attempt's (another reference, amount or
        account) is never resolved from, and never hidden by a reference miss: it
        comes back as the deciding result, so the caller escalates a conflict.
        """
        budget = self.settings.budgets.call_s
        pacer = self.pacers.get(attempt.provider_account)
        made: list[tuple[LookupResult, str]] = []
        foreign: LookupResult | None = None
        if attempt.provider_payment_id is not None:
            if pacer:
                await pacer.wait()
            by_id = await self.client.get_payment(attempt.provider_account, attempt.provider_payment_id,
                                                  budget_s=budget)
            made.append((by_id, "id"))
            if by_id.kind in ("failed", "rate_limited"):
                return made
            if by_id.kind == "found" and by_id.payment is not None:
                if evidence.judge(attempt, by_id.payment.claim(),
                                  recorded_payment_id=attempt.provider_payment_id).accepted:
                    return made
                foreign = by_id
            # A miss (replication lag) or a record that does not match: ask by reference before concluding.
        if pacer:
            await pacer.wait()
        by_reference = await self.client.find_by_reference(attempt.provider_account, attempt.client_reference,
                                                           budget_s=budget)
        made.append((by_reference, "reference"))
        if foreign is not None and by_reference.kind in ("not_found", "unsupported"):
            made.append((foreign, "id"))  # decide on the record the recorded id points at
        return made

    async def _search_lag_ends(self, attempt: Attempt, lookups: list[tuple[LookupResult, str]],
                               now: datetime) -> datetime | None:
        """When a miss by reference among ``lookups`` will prove something, if it does not yet.

        Only an eventually consistent lookup by reference (a search index) misses a payment
        that exists; it catches up within the search lag of the payment's creation. The
        latest a send of this attempt can have created a payment is when that send ended:
        its intent (every send, the first included, commits one before dispatch) plus the
        call budget. An intent whose send was abandoned counts too: waiting longer is safe.
        """
        if not any(how == "reference" and result.kind == "not_found" for result, how in lookups):
            return None
        capabilities = self.client.capabilities_of(attempt.provider_account)
        if capabilities.lookup_by_reference is not ReferenceLookup.EVENTUALLY_CONSISTENT:
            return None
        began = await events.last_send_began_at(self.pool, attempt.attempt_id)
        sent_at = began or attempt.first_sent_at or attempt.created_at
        lag_s = self.settings.budgets.call_s + self.recovery.search_lag_s
        conclusive_from = sent_at + timedelta(seconds=lag_s)
        return conclusive_from if now < conclusive_from else None

    def _lookup_event(self, lookup: LookupResult, how: str,
                      inconclusive_until: datetime | None) -> LookupEvent:
        """The history event that records one lookup, counted as made."""
        self.metrics.lookups.labels(lookup.kind).inc()
        # Every payment as the provider answered it, matching or not: the evidence
        # an operator needs when this attempt is escalated.
        detail: dict[str, object] = {"by": how, "result": lookup.kind, "reason": lookup.reason,
                                     "payments": [p.evidence() for p in lookup.payments]}
        if how == "reference" and lookup.kind == "not_found":
            # Whether the miss proved anything, so an operator sees why recovery waited.
            detail["conclusive"] = inconclusive_until is None
            if inconclusive_until is not None:
                detail["reason"] = "search-lag"
                detail["conclusive_from"] = inconclusive_until.isoformat()
        return EventKind.LOOKUP, detail

    async def _record_lookups(self, attempt: Attempt, looked: list[LookupEvent]) -> None:
        """Append a pass's lookup events on their own, when no outcome write carries them."""
        async with self.pool.acquire() as conn:
            await append_events(conn, attempt_id=attempt.attempt_id, actor=self.actor, now=self.clock.now(),
                                events=looked)

    async def _found(self, attempt: Attempt, lease: Lease, lookup: LookupResult, backoff: float,
                     looked: list[LookupEvent]) -> Pass:
        """Apply what a lookup found. ``looked``: the pass's lookup events, appended in the outcome
        write's transaction ahead of its own (a write that raises records them with nothing:
        the pass fails, and the next one looks again)."""
        payments = lookup.payments
        distinct = evidence.distinct_payments(p.claim() for p in payments)
        if len(distinct) > 1:
            await self._record_lookups(attempt, looked)
            # Several provider payments for one attempt's reference: a person must look.
            await self._escalate(attempt, lease, EscalationReason.MULTIPLE_PAYMENTS.value,
                                 self.recovery.slow_cadence_s, {"provider_payment_ids": distinct})
            return Pass.ESCALATED
        # The one writer of outcomes judges the evidence (paycore.evidence): a payment that
        # is not this attempt's resolves nothing, is escalated, and the next look is on the
        # slow cadence, scheduled with the lease's release in the same transaction. Valid
        # evidence is applied under the state rules alone, even if this worker's lease has
        # lapsed; only a lease it still owns is released.
        outcome = payments[0].to_outcome()
        recheck = self.recovery.action_poll_s if outcome.kind is OutcomeKind.REQUIRES_ACTION else backoff
        recorded = await record_outcome(
            self.pool, attempt.attempt_id, outcome, now=self.clock.now(), actor=self.actor,
            recheck_after_s=recheck, from_send=False, lease=lease,
            escalated_recheck_after_s=self.recovery.slow_cadence_s,
            reminder_interval=self.settings.reminder_interval, evidence_events=looked)
        if not recorded.verdict.accepted:
            assert recorded.verdict.reason is not None
            self.metrics.escalations.labels(recorded.verdict.reason.value).inc()
            return Pass.ESCALATED
        if not recorded.written:
            # It wrote nothing (an already-final winner): still release what is ours. A write
            # scheduled the next check and released an owned lease itself.
            await leases.finish(self.pool, attempt.attempt_id, lease, self.clock.now(), recheck)
        state = recorded.attempt.state
        if state in (AttemptState.SUCCEEDED, AttemptState.FAILED, AttemptState.NOT_APPLIED):
            self.metrics.resolved.labels(state.value).inc()
            return Pass.RESOLVED
        return Pass.OBSERVED

    async def _failing_resend_condition(self, attempt: Attempt, now: datetime) -> str | None:
        """The article's resend conditions, each its own escalation when it fails."""
        order = await find_order(self.pool, attempt.order_id)
        if order is None or order.not_payable_reason is not None:
            return "order-not-payable"
        if (now - attempt.created_at).total_seconds() > self.recovery.payment_token_ttl_s:
            return "token-expired"
        account = self.settings.account(attempt.provider_account)
        if account is None:
            return "account-not-configured"
        if attempt.endpoint != account.payments_endpoint:
            return "endpoint-changed"
        unbuildable = self.client.unbuildable_reason(StoredRequest.from_attempt(attempt))
        if unbuildable is not None:
            return f"request-not-buildable:{unbuildable}"
        return None

    async def _resend(self, attempt: Attempt, lease: Lease, backoff: float) -> Pass:
        attempt_id = attempt.attempt_id
        try:
            committed, why = await attempts.commit_send_intent(self.pool, attempt, lease, self.clock.now(),
                                                             self.actor)
        except MAY_HAVE_COMMITTED as exc:
            # Unknown commit: send nothing and do not finish (ownership cannot be confirmed).
            # The next claimed pass finds the intent present or absent and acts on that.
            log.warning("send intent for %s unconfirmed (%s)", attempt_id, type(exc).__name__)
            return Pass.INTENT_UNKNOWN
        if committed is not attempts.IntentResult.COMMITTED:
            log.info("send intent for %s refused: %s", attempt_id, why)
            await leases.finish(self.pool, attempt_id, lease, self.clock.now(), backoff)
            return Pass.INTENT_REFUSED

        await self.before_final_check(attempt)
        # Final local check, just before dispatch.
        now = self.clock.now()
        if not await leases.owns(self.pool, attempt_id, lease, now):
            await attempts.record_send_abandoned(self.pool, attempt_id, now, self.actor, "lease-lost")
            return Pass.ABANDONED  # the new owner schedules it
        if attempt.escalation_deadline is None or now >= attempt.escalation_deadline:
            await attempts.record_send_abandoned(self.pool, attempt_id, now, self.actor, "deadline-passed")
            await self._escalate(attempt, lease, "deadline", self.recovery.slow_cadence_s)
            return Pass.ABANDONED
        await self.after_final_check(attempt)

        # The stored request, unchanged, under its own key and its own call budget.
        try:
            outcome = await self.client.create_payment(
                StoredRequest.from_attempt(attempt), budget_s=self.settings.budgets.call_s, first_send=False)
        except BaseException:
            self.metrics.resends.labels("error").inc()
            raise
        self.metrics.resends.labels("rejected" if outcome.request_rejected else outcome.kind.value).inc()
        # A resend refused before execution is escalated by the outcome write
        # (resend-rejected) and never repeated: only lookups go on, on the slow cadence.
        recheck = self.recovery.slow_cadence_s if outcome.request_rejected else backoff
        recorded = await record_outcome(self.pool, attempt_id, outcome, now=self.clock.now(),
                                        actor=self.actor, recheck_after_s=recheck, from_send=True,
                                        lease=lease, reminder_interval=self.settings.reminder_interval)
        if not recorded.written:  # as in _found: a write already scheduled and released
            await leases.finish(self.pool, attempt_id, lease, self.clock.now(), recheck)
        state = recorded.attempt.state
        if state in (AttemptState.SUCCEEDED, AttemptState.FAILED, AttemptState.NOT_APPLIED):
            self.metrics.resolved.labels(state.value).inc()
        return Pass.RESENT

    async def _escalate(self, attempt: Attempt, lease: Lease, reason: str, delay_s: float,
                        detail: dict[str, object] | None = None) -> None:
        raised = await leases.escalate_and_finish(
            self.pool, attempt.attempt_id, lease, reason=reason, delay_s=delay_s, now=self.clock.now(),
            detail=detail, reminder_interval=self.settings.reminder_interval)
        if raised:
            self.metrics.escalations.labels(reason.split(":")[0]).inc()
