"""The search lag: a miss by an eventually consistent lookup by reference proves nothing
until ``PAYCORE_RECOVERY_SEARCH_LAG_S`` after the attempt's last send ended.

The provider is the real Cardco client against the sandbox, seen through a provider that
reports its lookup by reference ``eventually-consistent`` (as Stripe's Search is); only the
capability is replaced, never the wire. The sandbox's ``search_stale`` fault makes a lookup
by reference miss a payment that exists (a search index that has not caught up), and
``lose_response`` / ``drop_request`` make an attempt Unknown the way production does.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import datetime
from typing import Any

from paycore import orders
from paycore.attempts import Attempt
from paycore.domain import AttemptState
from paycore.providers.base import Capabilities, Provider, ReferenceLookup
from paycore_recovery.loop import Pass, RecoveryWorker
from tests.support.recovery import RecoveryStack, seconds
from tests.support.stack import eventually


class WithSearchLookup:
    """``inner``, but its lookup by reference is a search index that may lag."""

    def __init__(self, inner: Provider) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @property
    def capabilities(self) -> Capabilities:
        return dataclasses.replace(self._inner.capabilities,
                                   lookup_by_reference=ReferenceLookup.EVENTUALLY_CONSISTENT)

    def capabilities_of(self, provider_account: str) -> Capabilities:
        return dataclasses.replace(self._inner.capabilities_of(provider_account),
                                   lookup_by_reference=ReferenceLookup.EVENTUALLY_CONSISTENT)


def worker_with_search(rec: RecoveryStack) -> RecoveryWorker:
    worker = rec.worker("w1")
    worker.client = WithSearchLookup(worker.client)  # type: ignore[assignment]
    return worker


async def last_send_began_at(rec: RecoveryStack, attempt: Attempt) -> datetime:
    began: datetime = await rec.pool.fetchval(
        "SELECT max(occurred_at) FROM payment_attempt_events WHERE attempt_id = $1 AND kind = 'send_intent'",
        attempt.attempt_id)
    return began


async def conclusive_from(rec: RecoveryStack, attempt: Attempt) -> datetime:
    """The last send's intent, plus the call budget it may last, plus the search lag."""
    return (await last_send_began_at(rec, attempt)
            + seconds(rec.hooks.settings.budgets.call_s + rec.recovery.search_lag_s))


async def unindexed(rec: RecoveryStack, attempt: Attempt) -> None:
    """Lookups by reference miss the attempt's payment until the faults are cleared."""
    await rec.sandbox.fault("search_stale", match={"reference": attempt.client_reference})


async def assert_inconclusive_miss_recorded(rec: RecoveryStack, attempt: Attempt, until: datetime) -> None:
    lookup = (await rec.lookup_events(attempt))[-1]
    assert (lookup["by"], lookup["result"]) == ("reference", "not_found")
    assert (lookup["conclusive"], lookup["reason"]) == (False, "search-lag")
    assert datetime.fromisoformat(lookup["conclusive_from"]) == until


async def assert_waiting_until(rec: RecoveryStack, attempt: Attempt, until: datetime) -> None:
    after = await rec.current(attempt)
    assert after.state is AttemptState.UNKNOWN
    assert after.next_check_at == until and after.recovery_owner is None  # rescheduled, lease released


# -- Inside the lag: no conclusion ------------------------------------------------------------------


async def test_a_search_miss_inside_the_lag_concludes_nothing_and_the_next_look_finds_the_payment(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("lose_response")  # charged, the answer lost
    [payment] = await rec.payments_for(attempt)
    await unindexed(rec, attempt)
    await rec.make_due(attempt)
    assert rec.clock.now() < await conclusive_from(rec, attempt)  # the default recheck is inside the lag
    worker = worker_with_search(rec)

    assert await worker.run_pass() == [Pass.INCONCLUSIVE]

    until = await conclusive_from(rec, attempt)
    await assert_waiting_until(rec, attempt, until)
    await assert_inconclusive_miss_recorded(rec, attempt, until)
    assert len(await rec.sends_for(attempt)) == 1  # nothing resent on the strength of the miss
    assert (await rec.history(attempt)).count("send_intent") == 1  # the endpoint's, before the first send
    assert await rec.open_escalations() == []

    await rec.sandbox.clear_faults()  # the index catches up
    await rec.make_due(attempt)
    assert await worker.run_pass() == [Pass.RESOLVED]
    assert await rec.state(attempt) == "Succeeded"
    assert [p["id"] for p in await rec.payments_for(attempt)] == [payment["id"]]
    assert len(await rec.sends_for(attempt)) == 1


async def test_a_search_miss_inside_the_lag_does_not_escalate_a_failing_resend_condition(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("lose_response")
    await unindexed(rec, attempt)
    await orders.cancel_order(rec.pool, attempt.order_id, attempt.customer_id, rec.clock.now())
    await rec.make_due(attempt)
    worker = worker_with_search(rec)

    # "Not found and cannot be resent" would be a conclusion from the miss: none yet.
    assert await worker.run_pass() == [Pass.INCONCLUSIVE]
    assert await rec.open_escalations() == []

    await rec.make_due(attempt)  # the lag is over and the index still misses it: the normal rule
    assert await worker.run_pass() == [Pass.ESCALATED]
    assert await rec.open_escalations() == [f"attempt:{attempt.attempt_id}:resend-not-safe:order-not-payable"]
    assert (await rec.lookup_events(attempt))[-1]["conclusive"] is True
    assert len(await rec.sends_for(attempt)) == 1 and len(await rec.payments_for(attempt)) == 1


async def test_a_deadline_inside_the_lag_is_where_the_next_look_goes_and_it_escalates_there(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("lose_response")
    await unindexed(rec, attempt)
    await rec.make_due(attempt)
    deadline = rec.clock.now() + seconds(30)  # the key window closes before the miss is conclusive
    assert deadline < await conclusive_from(rec, attempt)
    await rec.pool.execute("UPDATE payment_attempts SET escalation_deadline = $2 WHERE attempt_id = $1",
                           attempt.attempt_id, deadline)
    worker = worker_with_search(rec)

    assert await worker.run_pass() == [Pass.INCONCLUSIVE]
    await assert_waiting_until(rec, attempt, deadline)

    await rec.make_due(attempt)
    assert await worker.run_pass() == [Pass.ESCALATED]  # the deadline is time, not evidence
    assert await rec.open_escalations() == [f"attempt:{attempt.attempt_id}:deadline"]
    assert len(await rec.sends_for(attempt)) == 1 and len(await rec.payments_for(attempt)) == 1


# -- After the lag: the normal rule -----------------------------------------------------------------


async def test_a_request_that_never_arrived_is_resent_under_its_key_once_the_lag_is_over(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    await rec.make_due(attempt)
    worker = worker_with_search(rec)

    assert await worker.run_pass() == [Pass.INCONCLUSIVE]  # a real miss, but too soon to tell
    assert len(await rec.sends_for(attempt)) == 1 and await rec.payments_for(attempt) == []

    await rec.make_due(attempt)
    assert rec.clock.now() == await conclusive_from(rec, attempt)
    assert await worker.run_pass() == [Pass.RESENT]
    assert await rec.state(attempt) == "Succeeded"
    assert [(e["result"], e["conclusive"]) for e in await rec.lookup_events(attempt)] == [
        ("not_found", False), ("not_found", True)]
    payments = await rec.payments_for(attempt)
    assert len(payments) == 1 and payments[0]["idempotency_key"] == attempt.idempotency_key


async def test_a_search_that_still_misses_after_the_lag_resends_under_the_key_and_makes_no_second_payment(
    rec: RecoveryStack,
) -> None:
    # A search incident longer than the lag: the miss is taken as "not found" and the same-key
    # resend inside the key window is answered from the key, so it cannot charge twice.
    attempt = await rec.unknown_via_checkout("lose_response")
    [payment] = await rec.payments_for(attempt)
    await unindexed(rec, attempt)
    await rec.make_due(attempt)
    worker = worker_with_search(rec)
    assert await worker.run_pass() == [Pass.INCONCLUSIVE]

    await rec.make_due(attempt)
    assert await worker.run_pass() == [Pass.RESENT]
    assert await rec.state(attempt) == "Succeeded"
    assert [p["id"] for p in await rec.payments_for(attempt)] == [payment["id"]]
    sends = await rec.sends_for(attempt)
    assert len(sends) == 2 and sends[0]["body"] == sends[1]["body"] == attempt.request_body


async def test_the_lag_counts_from_the_last_send_not_the_first(rec: RecoveryStack) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    await rec.make_due(attempt)
    worker = worker_with_search(rec)
    assert await worker.run_pass() == [Pass.INCONCLUSIVE]

    # The lag after the first send is over: the resend reaches the provider, its answer is lost,
    # and the index has not caught up with the payment it made.
    await rec.make_due(attempt)
    await rec.sandbox.fault("lose_response", times=1, match={"reference": attempt.client_reference,
                                                            "operation": "create"})
    await unindexed(rec, attempt)
    resending = asyncio.create_task(worker.run_pass())

    async def resend_in_flight() -> bool:
        return len(await rec.sends_for(attempt)) == 2 and rec.clock.pending_timers > 0

    await eventually(resend_in_flight, what="the resend to be in flight")
    rec.clock.advance(rec.hooks.settings.budgets.call_s)
    assert await resending == [Pass.RESENT]
    assert await rec.state(attempt) == "Unknown" and len(await rec.payments_for(attempt)) == 1

    await rec.make_due(attempt)
    assert await worker.run_pass() == [Pass.INCONCLUSIVE]  # inside the lag after the resend
    until = await conclusive_from(rec, attempt)
    await assert_waiting_until(rec, attempt, until)
    await assert_inconclusive_miss_recorded(rec, attempt, until)
    assert len(await rec.sends_for(attempt)) == 2

    await rec.sandbox.clear_faults()
    await rec.make_due(attempt)
    assert await worker.run_pass() == [Pass.RESOLVED]
    assert await rec.state(attempt) == "Succeeded" and len(await rec.payments_for(attempt)) == 1


# -- A consistent lookup by reference: unchanged -----------------------------------------------------


async def test_a_consistent_lookup_by_reference_miss_is_not_found_at_once(rec: RecoveryStack) -> None:
    attempt = await rec.unknown_via_checkout("lose_response")
    [payment] = await rec.payments_for(attempt)
    await unindexed(rec, attempt)  # a consistent lookup cannot lag; the fault forces the miss anyway
    await rec.make_due(attempt)
    worker = rec.worker()  # Cardco as it is: capabilities_of says consistent
    assert worker.client.capabilities_of(attempt.provider_account).lookup_by_reference \
        is ReferenceLookup.CONSISTENT

    assert await worker.run_pass() == [Pass.RESENT]  # the miss is "not found": resent under the key
    [lookup] = await rec.lookup_events(attempt)
    assert (lookup["result"], lookup["conclusive"], lookup["reason"]) == ("not_found", True, None)
    assert "conclusive_from" not in lookup
    assert await rec.state(attempt) == "Succeeded"
    assert [p["id"] for p in await rec.payments_for(attempt)] == [payment["id"]]
