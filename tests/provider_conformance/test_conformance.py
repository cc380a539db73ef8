"""The matrix lines every provider keeps, written once and run for each provider package.

Parametrized by ``paycore.providers.registry.PACKAGES`` (``conftest.py``): a package the
registry knows, shipped or registered, runs every line here with no edit of this file, given
its conformance adapter (``adapters/<name>.py``). What a provider cannot do is read from its
client's :class:`~paycore.providers.base.Capabilities` (a lookup by reference: at once, after a
search lag, or none) or from its adapter (a signature that carries no time), and a line that
does not apply is skipped saying why. Each provider's own wire (Cardco's headers, Stripe's API
versions, Adyen's HMAC items) stays in its own tests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from datetime import timedelta
from urllib.parse import urlsplit

import pytest

from harness.servers import free_port
from paycore.clock import FakeClock
from paycore.config import MAX_BUDGET_S
from paycore.domain import (
    AttemptState,
    OperationKind,
    OrderFacts,
    OrderStatus,
    OutcomeKind,
    OutcomeWrite,
    decide_outcome,
)
from paycore.evidence import judge
from paycore.providers.base import (
    Notification,
    NotificationUnverified,
    OperationCalls,
    OperationEnding,
    ReferenceLookup,
    StoredRequest,
)
from paycore.providers.package import ProviderPackage
from tests.provider_conformance.adapters import FAULTS
from tests.provider_conformance.support import AMOUNT, BUDGET_S, CEILING_S, Conformance, eventually

# The reason every provider's client gives an ending without a usable answer (the shared
# vocabulary: the budget ran out, the body could not be read, the server erred).
NO_ANSWER = {"drop_request": "provider.no-response.caller", "lose_response": "provider.no-response.caller",
             "delay": "provider.no-response.caller", "error_500_after": "provider.http-500",
             "malformed_body": "provider.body-unreadable", "empty_body": "provider.body-unreadable"}

# -- creating a payment ---------------------------------------------------------------------------


async def test_a_create_answered_succeeded_is_succeeded_with_the_providers_payment(
    provider: Conformance,
) -> None:
    stored = provider.stored("succeeded")
    outcome = await provider.create(stored)
    assert outcome.kind is OutcomeKind.SUCCEEDED, outcome
    [payment] = await provider.payments_of(stored.client_reference)
    assert outcome.provider_payment_id == payment["id"]
    assert payment["provider_account"] == stored.provider_account
    assert judge(stored, outcome.evidence()).accepted


async def test_a_create_answered_declined_is_failed(provider: Conformance) -> None:
    stored = provider.stored("declined")
    outcome = await provider.create(stored)
    assert (outcome.kind, outcome.reason.split(":")[0] if outcome.reason else None) == (
        OutcomeKind.FAILED, "declined"), outcome
    [payment] = await provider.payments_of(stored.client_reference)
    assert (payment["status"], outcome.provider_payment_id) == ("declined", payment["id"])


@pytest.mark.parametrize("fault", FAULTS)
async def test_each_ending_without_an_answer_is_unknown_never_a_failure(
    provider: Conformance, fault: str,
) -> None:
    """The request dropped, the answer lost, a 500 after processing, a malformed or empty body,
    an answer later than the budget: Unknown, whether or not the payment was made."""
    stored = provider.stored("succeeded")
    outcome = await provider.create_under(fault, stored)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, NO_ANSWER[fault]), outcome
    assert outcome.provider_payment_id is None
    made = await provider.payments_of(stored.client_reference)
    if fault == "drop_request":
        assert made == []  # nothing ran: still Unknown, since the caller cannot know
    else:
        assert [p["status"] for p in made] == ["succeeded"]  # it ran: Unknown is the truth, not failed


@pytest.mark.parametrize("reason", ["account-not-configured", "endpoint-changed", "invalid-header"])
async def test_a_stored_request_that_cannot_be_sent_as_stored_is_unknown_and_sends_nothing(
    provider: Conformance, reason: str,
) -> None:
    """Another account's (never a fallback to a configured one), an endpoint on another origin,
    an empty key: Unknown, and recovery is told why before it commits a resend."""
    store_only = provider.client_of(provider.store)
    unconfigured = reason == "account-not-configured"
    stored = provider.stored("succeeded", account=provider.other if unconfigured else None)
    if reason == "endpoint-changed":
        stored = dataclasses.replace(stored, endpoint="http://127.0.0.1:1" + urlsplit(stored.endpoint).path)
    if reason == "invalid-header":
        stored = dataclasses.replace(stored, idempotency_key="")
    try:
        assert store_only.unbuildable_reason(stored) == reason
        outcome = await store_only.create_payment(stored, budget_s=BUDGET_S, first_send=True)
        assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, f"request.not-buildable.{reason}")
        if unconfigured:
            lookup = await store_only.find_by_reference(provider.other.provider_account,
                                                        stored.client_reference, budget_s=BUDGET_S)
            assert (lookup.kind, lookup.reason) in (("failed", f"request.not-buildable.{reason}"),
                                                    ("unsupported", None)), lookup
    finally:
        await store_only.aclose()
    assert (await provider.server.received("POST"), await provider.server.received("GET")) == ([], [])


async def test_a_refused_connection_is_unknown(provider: Conformance) -> None:
    nowhere = dataclasses.replace(provider.store, base_url=f"http://127.0.0.1:{free_port()}")
    client = provider.client_of(nowhere)
    try:
        stored = provider.stored("succeeded", account=nowhere)
        outcome = await client.create_payment(stored, budget_s=BUDGET_S, first_send=True)
    finally:
        await client.aclose()
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, "provider.transport.ConnectError")


# -- budgets: the caller's, and the client's own ceiling ------------------------------------------


@pytest.mark.parametrize("budget_s", [0, -1])
async def test_a_spent_budget_sends_nothing(provider: Conformance, budget_s: float) -> None:
    stored = provider.stored("succeeded")
    outcome = await provider.client.create_payment(stored, budget_s=budget_s, first_send=True)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, "provider.no-response.caller")
    assert await provider.sends(stored) == []


async def test_a_nan_budget_is_a_programming_error(provider: Conformance) -> None:
    stored = provider.stored("succeeded")
    with pytest.raises(ValueError, match="NaN"):
        await provider.client.create_payment(stored, budget_s=math.nan, first_send=True)
    assert await provider.sends(stored) == []


@pytest.mark.parametrize("budget_s", [None, 60.0])
async def test_a_call_without_a_budget_or_above_the_ceiling_is_cut_off_by_the_ceiling(
    provider: Conformance, budget_s: float | None,
) -> None:
    stored = provider.stored("succeeded")
    await provider.server.fault("drop_request", operation="create")
    call = asyncio.ensure_future(provider.client.create_payment(stored, budget_s=budget_s, first_send=True))

    async def in_flight() -> bool:
        return call.done() or (provider.clock.pending_timers > 0 and bool(await provider.sends(stored)))

    await eventually(in_flight, "the create to be in flight")
    provider.clock.advance(CEILING_S - 0.1)
    await asyncio.sleep(0.01)
    assert not call.done()
    provider.clock.advance(0.2)
    outcome = await call
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, "provider.no-response.client-ceiling")


@pytest.mark.parametrize("ceiling", [0, -1, MAX_BUDGET_S + 0.001, math.nan, math.inf])
def test_a_ceiling_out_of_range_is_refused(ceiling: float, provider_package: ProviderPackage) -> None:
    with pytest.raises(ValueError, match="max_call_duration_s"):
        provider_package.client([], FakeClock(), max_call_duration_s=ceiling)


async def test_the_ceiling_at_its_bound_is_taken_and_an_account_twice_refused(provider: Conformance) -> None:
    await provider.package.client([], provider.clock, max_call_duration_s=MAX_BUDGET_S).aclose()
    moved = dataclasses.replace(provider.store, base_url="http://127.0.0.2:1")
    with pytest.raises(ValueError, match="twice"):
        provider.client_of(provider.store, moved)


async def test_a_resend_under_the_same_key_sends_the_same_bytes_and_gets_the_one_payment(
    provider: Conformance,
) -> None:
    stored = provider.stored("succeeded")
    lost = await provider.create_under("lose_response", stored)
    assert lost.kind is OutcomeKind.UNKNOWN
    resent = await provider.create(stored, first_send=False)
    assert resent.kind is OutcomeKind.SUCCEEDED, resent
    [payment] = await provider.payments_of(stored.client_reference)
    assert resent.provider_payment_id == payment["id"]
    assert await provider.sends(stored) == [stored.request_body, stored.request_body]


# -- lookups --------------------------------------------------------------------------------------


async def test_a_lookup_by_reference_finds_the_payment(provider: Conformance) -> None:
    lookup = provider.client.capabilities_of(provider.store.provider_account).lookup_by_reference
    if lookup is ReferenceLookup.UNSUPPORTED:
        pytest.skip(f"{provider.name} has no lookup by reference (capabilities: {lookup})")
    stored = provider.stored("succeeded")
    created = await provider.create(stored)
    found = await provider.client.find_by_reference(stored.provider_account, stored.client_reference,
                                                    budget_s=BUDGET_S)
    if lookup is ReferenceLookup.EVENTUALLY_CONSISTENT:
        # Inside the index's lag a miss is a miss (never a failure); after it, the payment is found.
        assert found.kind in ("found", "not_found"), found
        await provider.server.advance(provider.server.index_lag_s + 1)
        found = await provider.client.find_by_reference(stored.provider_account, stored.client_reference,
                                                        budget_s=BUDGET_S)
    assert found.kind == "found", found
    assert [p.claim().provider_payment_id for p in found.payments] == [created.provider_payment_id]
    assert judge(stored, found.payments[0].claim()).accepted


async def test_a_provider_without_a_reference_lookup_answers_unsupported_and_sends_nothing(
    provider: Conformance,
) -> None:
    lookup = provider.client.capabilities_of(provider.store.provider_account).lookup_by_reference
    if lookup is not ReferenceLookup.UNSUPPORTED:
        pytest.skip(f"{provider.name} looks payments up by reference ({lookup})")
    before = await provider.server.received("GET")
    found = await provider.client.find_by_reference(provider.store.provider_account, "ref_x",
                                                    budget_s=BUDGET_S)
    assert found.kind == "unsupported"
    assert await provider.server.received("GET") == before


# -- webhooks -------------------------------------------------------------------------------------


async def paid_and_notified(provider: Conformance, *,
                            other: bool = False) -> tuple[StoredRequest, dict[str, str], bytes]:
    stored = provider.stored("succeeded", account=provider.other if other else None)
    outcome = await provider.create(stored)
    assert outcome.kind is OutcomeKind.SUCCEEDED and outcome.provider_payment_id is not None
    headers, body = await provider.delivery_of(outcome.provider_payment_id)
    return stored, headers, body


async def test_a_delivery_signed_by_the_provider_verifies_as_its_accounts(provider: Conformance) -> None:
    stored, headers, body = await paid_and_notified(provider)
    [delivery] = provider.client.verify_deliveries(headers, body, now=await provider.server.now())
    assert delivery.account.provider_account == provider.store.provider_account
    assert isinstance(delivery.parsed, Notification), delivery.parsed
    assert delivery.parsed.reference == stored.client_reference


async def test_a_tampered_delivery_is_refused(provider: Conformance) -> None:
    _, headers, body = await paid_and_notified(provider)
    tampered = body.replace(str(AMOUNT).encode(), str(AMOUNT - 1).encode())
    assert tampered != body
    with pytest.raises(NotificationUnverified) as refused:
        provider.client.verify_deliveries(headers, tampered, now=await provider.server.now())
    assert not refused.value.malformed  # well-formed, not verified: 401, not 400


async def test_a_delivery_under_another_secret_is_refused(provider: Conformance) -> None:
    _, headers, body = await paid_and_notified(provider)
    wrong = provider.client_of(provider.adapter.wrong_secret(provider.store))
    try:
        with pytest.raises(NotificationUnverified) as refused:
            wrong.verify_deliveries(headers, body, now=await provider.server.now())
        assert not refused.value.malformed
    finally:
        await wrong.aclose()


async def test_a_stale_delivery_is_refused(provider: Conformance) -> None:
    if provider.adapter.untimed_signature is not None:
        pytest.skip(provider.adapter.untimed_signature)
    _, headers, body = await paid_and_notified(provider)
    later = await provider.server.now() + timedelta(hours=1)
    with pytest.raises(NotificationUnverified) as refused:
        provider.client.verify_deliveries(headers, body, now=later)
    assert not refused.value.malformed


async def test_a_verified_success_notification_resolves_the_unknown_attempt_succeeded(
    provider: Conformance,
) -> None:
    stored, headers, body = await paid_and_notified(provider)
    [delivery] = provider.client.verify_deliveries(headers, body, now=await provider.server.now())
    n = delivery.parsed
    assert isinstance(n, Notification), n
    attempt = provider.attempt(stored)
    verdict = judge(attempt, n.outcome.evidence())
    decision = decide_outcome(attempt, n.outcome, verdict, provider.clock.now(),
                              order=OrderFacts(OrderStatus.OPEN, cancel_requested=False),
                              recheck_after_s=60, actor="webhook")
    assert (verdict.accepted, decision.after) == (True, AttemptState.SUCCEEDED), (verdict, decision)
    assert isinstance(decision.write, OutcomeWrite) and decision.write.provider_payment_id == n.payment_id


async def test_a_notification_of_another_account_is_refused(provider: Conformance) -> None:
    """Only the store's account configured, the other account's delivery verifies as nobody's; with
    both, it is the other account's (whose attempts alone the intake looks among)."""
    _, headers, body = await paid_and_notified(provider, other=True)
    now = await provider.server.now()
    store_only = provider.client_of(provider.store)
    try:
        with pytest.raises(NotificationUnverified):
            store_only.verify_deliveries(headers, body, now=now)
    finally:
        await store_only.aclose()
    [delivery] = provider.client.verify_deliveries(headers, body, now=now)
    assert delivery.account.provider_account == provider.other.provider_account


# -- after the payment: captures, cancels and refunds ---------------------------------------------


def operations_of(provider: Conformance) -> OperationCalls:
    ops = provider.operations()
    if ops is None:
        pytest.skip(f"{provider.name}'s client makes no captures, cancels or refunds (no OperationCalls)")
    return ops


async def paid(provider: Conformance, kind: OperationKind) -> str:
    """The provider's id of a payment ``kind`` applies to: a charge to refund, a hold otherwise."""
    if kind is OperationKind.REFUND:
        created = await provider.create(provider.stored("succeeded"))
    else:
        held = await provider.hold()
        if isinstance(held, str):
            pytest.skip(f"{provider.name}'s client makes no holds ({held})")
        created = held
    assert created.kind is OutcomeKind.SUCCEEDED and created.provider_payment_id is not None, created
    return created.provider_payment_id


@pytest.mark.parametrize("kind", list(OperationKind))
async def test_an_operation_on_a_payment_it_applies_to_is_taken(provider: Conformance,
                                                                  kind: OperationKind) -> None:
    """Half a charge refunded, half a hold captured, a hold canceled: succeeded where the answer
    says so, pending where the ending comes later (Adyen's "received"); never failed or unknown."""
    ops = operations_of(provider)
    pid = await paid(provider, kind)
    amount = AMOUNT if kind is OperationKind.CANCEL else AMOUNT // 2
    stored = provider.stored_operation(ops, kind, pid, amount)
    outcome = await provider.operate(ops, kind, stored, pid)
    assert outcome.ending in (OperationEnding.SUCCEEDED, OperationEnding.PENDING), outcome
    assert (outcome.operation, outcome.provider_payment_id in (None, pid)) == (kind, True), outcome


@pytest.mark.parametrize("kind", list(OperationKind))
@pytest.mark.parametrize("fault", FAULTS)
async def test_each_operation_ending_without_an_answer_is_unknown_and_a_resend_is_taken(
    provider: Conformance, fault: str, kind: OperationKind,
) -> None:
    """A capture, cancel or refund meeting each fault is Unknown (never failed); its resend under
    the same key, the same bytes, is taken: done once, whether or not the first send ran."""
    ops = operations_of(provider)
    pid = await paid(provider, kind)
    stored = provider.stored_operation(ops, kind, pid, AMOUNT)
    await provider.server.fault(fault, operation=kind.value, delay_ms=2_000 if fault == "delay" else None)
    sent_before = len(await provider.server.received("POST"))

    async def reached() -> bool:
        return len(await provider.server.received("POST")) > sent_before

    outcome = await provider.under_fault(fault, lambda: provider.operate(ops, kind, stored, pid),
                                         reached=reached)
    assert (outcome.ending, outcome.reason) == (OperationEnding.UNKNOWN, NO_ANSWER[fault]), outcome
    if fault not in ("drop_request", "lose_response"):
        return  # a resend would meet the first still running (delay) or its stored answer (a 500)
    again = await provider.operate(ops, kind, stored, pid, first_send=False)
    assert again.ending in (OperationEnding.SUCCEEDED, OperationEnding.PENDING), again
    if fault == "drop_request":
        assert not again.replayed  # the first never ran
    assert await provider.server.received("POST", urlsplit(stored.endpoint).path) == [
        stored.request_body, stored.request_body]


def test_every_provider_package_has_a_conformance_adapter() -> None:
    from paycore.providers.registry import PACKAGES
    from tests.provider_conformance.adapters import adapter_for

    assert [dataclasses.is_dataclass(adapter_for(name)) for name in PACKAGES] == [True] * len(PACKAGES)
