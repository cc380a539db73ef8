"""The same refund flows for every provider with after-payment calls, against the sandbox's dialects.

Each test runs once per provider (``tests/support/providers.py``: the sandbox, checkout and the
intake as real HTTP servers, real PostgreSQL, the fake clock). What differs is said where it
does: Cardco's refund answers with its ending at once; Adyen's answer is ``received``, never
success, and only its ``REFUND`` notification ends it; Adyen's ``REFUND`` item is a payment's
notification too, and one about a refund of paycore's is read as the refund's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import asyncpg
import pytest

from paycore.domain import OperationKind, OperationState, OperationStep
from paycore.operations import Operation, get_operation
from tests.support.providers import ProviderStack, running_provider_stack
from tests.support.stack import eventually

from .support import effects_of, order_status, sender

# The providers whose clients send refunds, captures and cancels (issue 29).
OPERATION_PROVIDERS = ("cardco", "stripe", "adyen")
# How a refund's only send ends, as each provider answers it.
# escalation_deadline − first_sent_at of an operation: the provider's window for an operation's key
# (Adyen keeps a modification's for 7 days, less than a payment's 31) minus the account's margin.
OPERATION_KEY_WINDOW_S = {"cardco": 86_400 - 7_200, "stripe": 86_400 - 7_200, "adyen": 7 * 86_400 - 7_200}
FIRST_ENDING = {"cardco": OperationState.SUCCEEDED, "stripe": OperationState.SUCCEEDED,
                "adyen": OperationState.STARTED}


@pytest.fixture(params=OPERATION_PROVIDERS)
async def flows(request: pytest.FixtureRequest, pool: asyncpg.Pool,
                db_dsn: str) -> AsyncIterator[ProviderStack]:
    async for s in running_provider_stack(request.param, pool, db_dsn):
        yield s


async def paid(flows: ProviderStack) -> tuple[str, UUID]:
    r = await flows.pay()
    assert r.status_code == 200 and r.json()["state"] == "Succeeded", r.text
    return r.json()["order_id"], UUID(r.json()["attempt_id"])


async def test_a_partial_refund_ends_succeeded_by_the_providers_evidence(flows: ProviderStack) -> None:
    await flows.subscribe()
    order_id, attempt_id = await paid(flows)
    async with sender(flows) as s:
        op = await s.request(attempt_id, OperationKind.REFUND, 1000, requested_by="test")
    # Adyen's first ending ("received") is not final: its REFUND notification may be applied
    # before the sender's answer returns (seen once in CI on a loaded machine), and then the
    # operation is already Succeeded. Never anything else.
    assert isinstance(op, Operation), op
    assert op.state in {FIRST_ENDING[flows.wire.name], OperationState.SUCCEEDED}, op
    assert op.first_sent_at is not None and op.escalation_deadline is not None
    window = (op.escalation_deadline - op.first_sent_at).total_seconds()
    assert window == OPERATION_KEY_WINDOW_S[flows.wire.name]  # resent only inside it

    async def succeeded() -> Operation | None:
        current = await get_operation(flows.pool, op.operation_id)
        return current if current.state is OperationState.SUCCEEDED else None

    async def delivered() -> bool:
        return bool((await flows.sandbox.http.get("/_sandbox/webhooks/pending")).json()["pending"] == 0)

    await eventually(succeeded, what="the refund to succeed", within_s=15)
    await eventually(delivered, what="every webhook to be delivered")
    assert await order_status(flows.pool, order_id) == "PartiallyRefunded"
    effects = await effects_of(flows.pool, attempt_id)
    # Announced once, as paycore's own: never as a refund made elsewhere (refund-request).
    assert [e for e in effects if e.startswith("refund-")] == ["refund-succeeded"]
    assert await flows.pool.fetchval("SELECT count(*) FROM payment_escalations") == 0


async def test_a_held_payment_is_captured_in_part_then_refunded(flows: ProviderStack) -> None:
    await flows.subscribe()
    order_id = await flows.shop.create_order(amount_minor=5000, capture="manual")
    r = await flows.shop.pay_with(order_id, flows.wire.method("visa"))
    # A hold, whatever the provider calls it (Adyen answers "Authorised" for a hold too: the
    # order, which asked for manual capture, says it is one).
    assert r.status_code == 200 and r.json()["provider_status"] == "requires_capture", r.text
    attempt_id = UUID(r.json()["attempt_id"])
    assert await order_status(flows.pool, order_id) == "Authorized"
    async with sender(flows) as s:
        captured = await s.request(attempt_id, OperationKind.CAPTURE, 3000, requested_by="test")
        assert isinstance(captured, Operation)
        await ended(flows, captured)  # Adyen: received, then its CAPTURE notification
        refunded = await s.request(attempt_id, OperationKind.REFUND, 3000, requested_by="test")
        assert isinstance(refunded, Operation)
        await ended(flows, refunded)
    assert await order_status(flows.pool, order_id) == "Refunded"

    async def delivered() -> bool:
        return bool((await flows.sandbox.http.get("/_sandbox/webhooks/pending")).json()["pending"] == 0)

    await eventually(delivered, what="every webhook to be delivered")
    # The provider's news of the capture and the refund, as payment events too, contradict nothing.
    assert await flows.pool.fetchval("SELECT count(*) FROM payment_escalations") == 0
    effects = await effects_of(flows.pool, attempt_id)
    assert effects == ["order-confirmation", "fulfillment-request", "captured", "refund-succeeded"]


async def ended(flows: ProviderStack, op: Operation) -> Operation:
    """The operation once it Succeeded (at once, or by its notification)."""
    async def succeeded() -> Operation | None:
        current = await get_operation(flows.pool, op.operation_id)
        return current if current.state is OperationState.SUCCEEDED else None

    return await eventually(succeeded, what=f"the {op.kind.value} to succeed", within_s=15)


# How recovery resolves a refund whose answer was lost, per provider: Cardco's lookup by the
# refund's reference finds it; Stripe's list of the intent's refunds, matched on the metadata
# paycore set, finds it; Adyen has no lookup, so the same-key resend gets the key's answer,
# "received": acknowledged (Started, never Succeeded) until its REFUND notification.
LOST_RESPONSE_RECOVERY = {
    "cardco": (OperationStep.APPLY_FOUND, OperationState.SUCCEEDED),
    "stripe": (OperationStep.APPLY_FOUND, OperationState.SUCCEEDED),
    "adyen": (OperationStep.RESEND, OperationState.STARTED),
}


async def test_a_refund_whose_answer_was_lost_is_resolved_by_recovery_once(flows: ProviderStack) -> None:
    _, attempt_id = await paid(flows)
    await flows.sandbox.fault("lose_response", times=1,
                              match={"dialect": flows.wire.name, "operation": "refund"})
    async with sender(flows) as s:
        sending = asyncio.create_task(s.request(attempt_id, OperationKind.REFUND, 1000, requested_by="test"))

        async def posted() -> bool:
            return any(r["method"] == "POST" and "refund" in r["path"]
                       for r in await flows.sandbox.requests())

        await eventually(posted, what="the refund's POST")
        flows.clock.advance(flows.settings.budgets.call_s)  # no answer within the call budget
        lost = await sending
    assert isinstance(lost, Operation) and lost.state is OperationState.UNKNOWN, lost
    await flows.advance(flows.settings.recheck_after_s + 1)
    step, state = LOST_RESPONSE_RECOVERY[flows.wire.name]
    assert await flows.worker().operations.run_pass() == [step]
    assert (await get_operation(flows.pool, lost.operation_id)).state is state
    made = (await flows.sandbox.http.get("/_sandbox/refunds")).json()["data"]
    assert len(made) == 1  # one refund at the provider, whatever was resent


# A refund whose request reaches the provider only after paycore's call gave up: the sandbox's
# late_arrival holds the request without an answer, and it lands when the test releases it
# (POST /_sandbox/late-arrivals/release), before recovery looks or after its resend; the delay
# is only a bound no run reaches, so no step races a timer.
LATE_MS = 600_000
# What recovery does, per provider, when the late original ran before it looked: Cardco's and
# Stripe's lookups find the refund; Adyen has none, so the same-key resend is answered from the
# key's stored result ("received"). When it runs after the resend, nothing was there to find:
# the resend makes the refund, and the provider answers the late original from the key.
LATE_RECOVERY = {
    ("cardco", "before-recovery"): OperationStep.APPLY_FOUND,
    ("stripe", "before-recovery"): OperationStep.APPLY_FOUND,
    ("adyen", "before-recovery"): OperationStep.RESEND,
    ("cardco", "after-the-resend"): OperationStep.RESEND,
    ("stripe", "after-the-resend"): OperationStep.RESEND,
    ("adyen", "after-the-resend"): OperationStep.RESEND,
}


async def refund_requests(flows: ProviderStack) -> list[dict[str, Any]]:
    """The refund POSTs that reached the provider (at arrival, a late one too), oldest first."""
    return [q for q in await flows.sandbox.requests()
            if q["method"] == "POST" and q["path"].endswith("/refunds")]


async def provider_refunds(flows: ProviderStack) -> list[dict[str, Any]]:
    r = await flows.sandbox.http.get("/_sandbox/refunds")
    r.raise_for_status()
    return list(r.json()["data"])


@pytest.mark.parametrize("arrives", ["before-recovery", "after-the-resend"])
async def test_a_refund_request_arriving_late_is_one_refund_resolved_by_recovery(
    flows: ProviderStack, arrives: str,
) -> None:
    """The refund's only send gets no answer (Unknown); its request reaches the provider late,
    before recovery looks or after recovery's same-key resend. Recovery resolves it by evidence
    only: the provider holds one refund, the operation ends Succeeded once, one refund-succeeded
    is queued, and the provider's webhooks, delivered afterwards, change nothing."""
    order_id, attempt_id = await paid(flows)
    await flows.sandbox.fault("late_arrival", times=1, delay_ms=LATE_MS,
                              match={"dialect": flows.wire.name, "operation": "refund"})
    async with sender(flows) as s:
        sending = asyncio.create_task(s.request(attempt_id, OperationKind.REFUND, 1000, requested_by="test"))

        async def in_flight() -> bool:
            return bool(await refund_requests(flows)) and flows.clock.pending_timers > 0

        await eventually(in_flight, what="the refund's POST to be held")
        flows.clock.advance(flows.settings.budgets.call_s)  # no answer within the call budget
        late = await sending
    assert isinstance(late, Operation) and late.state is OperationState.UNKNOWN, late
    assert await provider_refunds(flows) == []  # paycore gave up before the request arrived

    async def original_ran() -> bool:
        return (await refund_requests(flows))[0]["status"] is not None

    async def the_original_lands() -> None:
        (await flows.sandbox.http.post("/_sandbox/late-arrivals/release")).raise_for_status()
        await eventually(original_ran, what="the late original to run at the provider")

    if arrives == "before-recovery":
        await the_original_lands()
    await flows.advance(flows.settings.recheck_after_s + 1)
    assert await flows.worker().operations.run_pass() == [LATE_RECOVERY[flows.wire.name, arrives]]
    if arrives == "after-the-resend":
        assert (await refund_requests(flows))[0]["status"] is None  # still held: the resend was first
        await the_original_lands()

    async def both_answered() -> bool:
        return all(q["status"] is not None for q in await refund_requests(flows))

    await eventually(both_answered, what="every refund POST to be answered")
    posts = await refund_requests(flows)
    assert all(q["body"] == late.request_body for q in posts)
    # Which request made the refund, and which the provider answered from the key's stored result.
    if arrives == "after-the-resend":
        replayed = [True, False]  # the resend made it; the late original was answered from the key
    elif flows.wire.lookups:
        replayed = [False]  # the late original made it; the lookup found it, nothing was resent
    else:
        replayed = [False, True]  # Adyen: the late original made it; the resend was answered from the key
    assert [q["replayed"] for q in posts] == replayed

    # The provider's webhooks arrive after recovery: Adyen's REFUND ends its acknowledged refund;
    # for the others they tell what recovery already recorded.
    await flows.subscribe()
    events = (await flows.sandbox.http.get("/_sandbox/events")).json()["data"]
    for event in events:
        await flows.sandbox.redeliver(event["id"])
    done = await ended(flows, late)
    await eventually(flows.deliveries_settled, what="every webhook to be delivered")

    [made] = await provider_refunds(flows)  # one refund at the provider
    assert (made["reference"], made["amount"], made["status"]) == (late.client_reference, 1000, "succeeded")
    assert done.state is OperationState.SUCCEEDED
    succeeded = await flows.pool.fetchval(
        "SELECT count(*) FROM payment_attempt_events WHERE operation_id = $1 AND kind = 'transition' "
        "AND detail->>'to' = 'Succeeded'", late.operation_id)
    assert succeeded == 1
    effects = await effects_of(flows.pool, attempt_id)
    assert [e for e in effects if e.startswith("refund-")] == ["refund-succeeded"]
    assert await order_status(flows.pool, order_id) == "PartiallyRefunded"
    assert await flows.open_escalations() == []
