"""Unknown attempts (and Started ones that stalled): look them up, then resolve, resend or escalate.

By the recorded payment id, and by reference when that misses or does not match; what is found
goes through the one writer of outcomes. Nothing found: a same-key resend inside the key window
when every resend condition holds, else a person is asked (``deadline``, ``resend-rejected``,
``resend-not-safe:<condition>``). A failed lookup is not "not found"; a 429 pauses the account's
lookups only; a miss by an eventually consistent search proves nothing until the search lag has
passed.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import datetime, timedelta

from paycore import events, evidence, rate_limits
from paycore.attempts import Attempt
from paycore.domain import Lookups, Pass, PassDecision, PassKind, Step
from paycore.events import EventKind
from paycore.leases import Lease
from paycore.orders import find_order
from paycore.providers.base import LookupResult, ReferenceLookup, StoredRequest
from paycore_recovery.rescuers import resend
from paycore_recovery.rescuers.base import PassState, Rescuer, distinct_payment_ids

log = logging.getLogger("paycore.recovery")


class UnknownRescuer(Rescuer):
    kind = PassKind.UNKNOWN

    async def gather(self, step: Step, attempt: Attempt, state: PassState) -> None:
        w = self.w
        if step is Step.READ_HISTORY:
            # Send history, backoff step and the scope's pause, read in one round trip.
            history = await events.pass_facts(w.pool, attempt.attempt_id, attempt.provider_account,
                                              w.clock.now())
            if history.latest_send is EventKind.SEND_INTENT:
                # An intent with neither result nor abandonment: an ambiguous send boundary. The
                # lookup reconciles it; no new intent unless every resend condition holds again.
                w.metrics.ambiguous_boundaries.inc()
                log.info("attempt %s has a send intent without a result: reconciling", attempt.attempt_id)
            state.facts = dataclasses.replace(state.facts, lookups_so_far=history.lookups_so_far,
                                              paused_until=history.paused_until)
        elif step is Step.LOOK_UP:
            made = await self.look_up(attempt)
            # When a miss by reference proves nothing yet (a search index still catching up), the
            # time from which it will.
            until = await self.search_lag_ends(attempt, made, w.clock.now())
            state.looked.extend(self.lookup_event(result, how, until) for result, how in made)
            deciding = made[-1][0]
            if deciding.kind == "found":
                state.found = deciding
            state.facts = dataclasses.replace(state.facts, lookups=Lookups(
                deciding.kind, distinct_payment_ids(deciding), deciding.retry_after_s, until))
        elif step is Step.CHECK_RESEND:
            rejected = await events.resend_was_rejected(w.pool, attempt.attempt_id)
            failing = None if rejected else await self.failing_resend_condition(attempt, w.clock.now())
            state.facts = dataclasses.replace(
                state.facts, resend_was_rejected=rejected, failing_resend_condition=failing,
                resend_conditions_checked=True)
        else:
            await super().gather(step, attempt, state)

    async def act(self, d: PassDecision, attempt: Attempt, lease: Lease, state: PassState) -> Pass | None:
        w = self.w
        if d.step is Step.PAUSE:
            now = w.clock.now()
            scope = attempt.provider_account
            await rate_limits.pause(w.pool, scope, now + timedelta(seconds=d.delay_s), "429", now)
            w.metrics.pauses.labels(scope).inc()
            return await super().act(dataclasses.replace(d, step=Step.FINISH), attempt, lease, state)
        if d.step is Step.RESEND:
            return await resend.resend(w, attempt, lease, d.delay_s)
        return await super().act(d, attempt, lease, state)

    # -- what it gathers -----------------------------------------------------------------------

    async def look_up(self, attempt: Attempt) -> list[tuple[LookupResult, str]]:
        """By provider payment id if recorded; if that misses or does not match, by reference too.

        Returns every lookup made, in order; the last one decides. A record found by the
        recorded id that is not this attempt's (another reference, amount or account) is never
        resolved from, and never hidden by a reference miss: it comes back as the deciding
        result, so the writer escalates a conflict.
        """
        w = self.w
        budget = w.settings.budgets.call_s
        made: list[tuple[LookupResult, str]] = []
        foreign: LookupResult | None = None
        if attempt.provider_payment_id is not None:
            await self.paced(attempt)
            by_id = await w.client.get_payment(attempt.provider_account, attempt.provider_payment_id,
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
        await self.paced(attempt)
        by_reference = await w.client.find_by_reference(attempt.provider_account, attempt.client_reference,
                                                         budget_s=budget)
        made.append((by_reference, "reference"))
        if foreign is not None and by_reference.kind in ("not_found", "unsupported"):
            made.append((foreign, "id"))  # decide on the record the recorded id points at
        return made

    async def search_lag_ends(self, attempt: Attempt, lookups: list[tuple[LookupResult, str]],
                              now: datetime) -> datetime | None:
        """When a miss by reference among ``lookups`` will prove something, if it does not yet.

        Only an eventually consistent lookup by reference (a search index) misses a payment that
        exists; it catches up within the search lag of the payment's creation. The latest a send
        of this attempt can have created a payment is when that send ended: its intent (every
        send, the first included, commits one before dispatch) plus the call budget. An intent
        whose send was abandoned counts too: waiting longer is safe.
        """
        if not any(how == "reference" and result.kind == "not_found" for result, how in lookups):
            return None
        capabilities = self.w.client.capabilities_of(attempt.provider_account)
        if capabilities.lookup_by_reference is not ReferenceLookup.EVENTUALLY_CONSISTENT:
            return None
        began = await events.last_send_began_at(self.w.pool, attempt.attempt_id)
        sent_at = began or attempt.first_sent_at or attempt.created_at
        lag_s = self.w.settings.budgets.call_s + self.w.recovery.search_lag_s
        conclusive_from = sent_at + timedelta(seconds=lag_s)
        return conclusive_from if now < conclusive_from else None

    async def failing_resend_condition(self, attempt: Attempt, now: datetime) -> str | None:
        """The article's resend conditions, each its own escalation when it fails."""
        w = self.w
        order = await find_order(w.pool, attempt.order_id)
        if order is None or order.not_payable_reason is not None:
            return "order-not-payable"
        if (now - attempt.created_at).total_seconds() > w.recovery.payment_token_ttl_s:
            return "token-expired"
        account = w.settings.account(attempt.provider_account)
        if account is None:
            return "account-not-configured"
        if attempt.endpoint != account.payments_endpoint:
            return "endpoint-changed"
        unbuildable = w.client.unbuildable_reason(StoredRequest.from_attempt(attempt))
        if unbuildable is not None:
            return f"request-not-buildable:{unbuildable}"
        return None
