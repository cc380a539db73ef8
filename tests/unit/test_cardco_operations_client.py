"""The Cardco client's captures, cancels and refunds against the real sandbox over HTTP.

Every ending of each call, as the sandbox plays it (amounts ending 91/92/93, faults matched by
the operation's reference), resends under the same key with the same bytes, and the lookups.
Nothing the provider does raises: each ending is an :class:`OperationOutcome`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from harness.servers import free_port, serve_asgi
from paycore.clock import SystemClock
from paycore.config import ProviderAccountConfig, Secret
from paycore.domain import OperationKind
from paycore.errors import InvalidPaymentMethod
from paycore.providers.base import OperationEnding, OperationOutcome, StoredRequest
from paycore.providers.cardco import CardcoClient
from paycore.providers.cardco.operations import OPERATION_REJECTION_CODES, build_operation_body
from paycore.providers.cardco.provider import API_VERSION as CARDCO_API_VERSION
from paycore_sandbox.app import create_app
from paycore_sandbox.settings import SandboxSettings
from tests.sandbox.support import (
    STORE_TEST_KEY,
    add_faults,
    captured,
    eventually,
    get_json,
    new_key,
    new_reference,
    paid,
)
from tests.support.scripted_cardco import payment_object, running_scripted_cardco

CAPTURE, CANCEL, REFUND = OperationKind.CAPTURE, OperationKind.CANCEL, OperationKind.REFUND
ACCOUNT = "cardco:acct_store:test"


@pytest.fixture
async def control() -> AsyncIterator[httpx.AsyncClient]:
    # A short async delay, so the pending movements that settle by themselves do so quickly.
    app = create_app(SandboxSettings(async_delay_s=0.05))
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as c:
        yield c


def account(base_url: str) -> ProviderAccountConfig:
    return ProviderAccountConfig(provider="cardco", account="acct_store", environment="test",
                                 base_url=base_url, api_key=Secret(STORE_TEST_KEY), webhook_secret=None,
                                 api_version=CARDCO_API_VERSION)


@pytest.fixture
async def client(control: httpx.AsyncClient) -> AsyncIterator[CardcoClient]:
    c = CardcoClient([account(str(control.base_url))], SystemClock(), max_call_duration_s=30)
    try:
        yield c
    finally:
        await c.aclose()


def stored(client: CardcoClient, control: httpx.AsyncClient, kind: OperationKind, payment_id: str,
           amount: int, **overrides: Any) -> StoredRequest:
    reference = overrides.pop("reference", None) or new_reference()
    values: dict[str, Any] = {
        "attempt_id": uuid.uuid4(), "provider_account": ACCOUNT,
        "endpoint": client.operation_endpoint(account(str(control.base_url)), kind, payment_id),
        "api_version": CARDCO_API_VERSION, "idempotency_key": new_key(),
        "request_body": client.build_operation_body(kind, provider_payment_id=payment_id, amount_minor=amount,
                                                    reference=reference),
        "client_reference": reference, "amount_minor": amount, "currency": "EUR",
    }
    values.update(overrides)
    return StoredRequest(**values)


async def send(client: CardcoClient, request: StoredRequest, kind: OperationKind, payment_id: str, *,
               first_send: bool = True, budget_s: float = 10) -> OperationOutcome:
    return await client.send_operation(request, kind, provider_payment_id=payment_id, budget_s=budget_s,
                                       first_send=first_send)


async def payment(control: httpx.AsyncClient, *, hold: bool = False) -> str:
    made = await paid(control, capture="manual" if hold else None)
    payment_id: str = made["id"]
    return payment_id


async def operation(client: CardcoClient, control: httpx.AsyncClient, kind: OperationKind, amount: int,
                    **faults: Any) -> tuple[StoredRequest, str, OperationOutcome]:
    """A payment fit for ``kind``, the operation stored, ``faults`` added for it, and its first send."""
    budget_s = faults.pop("budget_s", 10)
    pid = await payment(control, hold=kind is not REFUND)
    request = stored(client, control, kind, pid, amount)
    if faults:
        await add_faults(control, {**faults, "match": {"reference": request.client_reference,
                                                       "operation": kind.value}})
    return request, pid, await send(client, request, kind, pid, budget_s=budget_s)


# ---------------------------------------------------------------------------
# Bodies


def test_bodies_are_canonical_json() -> None:
    assert build_operation_body(REFUND, provider_payment_id="pay_1", amount_minor=1500, reference="r1",
                                reason="requested_by_customer") == (
        '{"amount":1500,"payment":"pay_1","reason":"requested_by_customer","reference":"r1"}')
    assert build_operation_body(CAPTURE, provider_payment_id="pay_1", amount_minor=3000,
                                reference="c1") == '{"amount":3000,"reference":"c1"}'
    assert build_operation_body(CANCEL, provider_payment_id="pay_1", amount_minor=4999,
                                reference="v1") == '{"reference":"v1"}'


@pytest.mark.parametrize("overrides", [
    {"amount_minor": 0}, {"amount_minor": True}, {"reference": ""}, {"reference": "x" * 65},
    {"provider_payment_id": ""}, {"reason": "x" * 201}, {"kind": CAPTURE, "reason": "why"},
])
def test_bodies_refuse_what_the_contract_would(overrides: dict[str, Any]) -> None:
    values: dict[str, Any] = {"kind": REFUND, "provider_payment_id": "pay_1", "amount_minor": 100,
                              "reference": "r1", **overrides}
    kind = values.pop("kind")
    with pytest.raises(InvalidPaymentMethod):
        build_operation_body(kind, **values)


# ---------------------------------------------------------------------------
# Endings of each call


@pytest.mark.parametrize(("kind", "amount", "ending", "status"), [
    (REFUND, 1000, OperationEnding.SUCCEEDED, "succeeded"),
    (REFUND, 1091, OperationEnding.PENDING, "pending"),
    (CAPTURE, 3000, OperationEnding.SUCCEEDED, "succeeded"),
    (CAPTURE, 3091, OperationEnding.PENDING, "pending"),
    (CANCEL, 4999, OperationEnding.SUCCEEDED, "canceled"),
])
async def test_each_call_succeeds_or_is_pending(client: CardcoClient, control: httpx.AsyncClient,
                                                kind: OperationKind, amount: int, ending: OperationEnding,
                                                status: str) -> None:
    request, pid, outcome = await operation(client, control, kind, amount)
    assert (outcome.operation, outcome.ending, outcome.provider_status) == (kind, ending, status)
    assert (outcome.provider_payment_id, outcome.http_status, outcome.replayed) == (
        pid, 200 if kind is CANCEL else 201, False)
    assert outcome.reason is None and not outcome.request_rejected
    if kind is not CANCEL:
        assert outcome.provider_operation_id is not None
        assert outcome.provider_operation_id.startswith("re_" if kind is REFUND else "cap_")
        assert (outcome.amount_minor, outcome.currency) == (amount, "EUR")
        assert outcome.claim is not None and outcome.claim.reference == request.client_reference


@pytest.mark.parametrize("kind", [REFUND, CAPTURE])
async def test_a_92_amount_is_pending_then_failed_by_lookup(client: CardcoClient, control: httpx.AsyncClient,
                                                            kind: OperationKind) -> None:
    request, pid, outcome = await operation(client, control, kind, 1092)
    assert outcome.ending is OperationEnding.PENDING

    async def settled() -> OperationOutcome | None:
        found = await client.find_operation_by_reference(ACCOUNT, kind, request.client_reference, budget_s=5)
        assert found.kind == "found"
        [seen] = found.found
        return seen if seen.ending is not OperationEnding.PENDING else None

    seen = await eventually(settled, what="the movement to settle")
    assert (seen.ending, seen.provider_status, seen.reason) == (
        OperationEnding.FAILED, "failed", "failed:declined")
    assert (seen.provider_operation_id, seen.provider_payment_id) == (outcome.provider_operation_id, pid)
    if kind is REFUND:
        assert outcome.provider_operation_id is not None
        by_id = await client.get_refund(ACCOUNT, outcome.provider_operation_id, budget_s=5)
        assert by_id.kind == "found" and by_id.found[0].ending is OperationEnding.FAILED


async def test_a_93_refund_stays_pending_until_settled(client: CardcoClient,
                                                      control: httpx.AsyncClient) -> None:
    request, _, outcome = await operation(client, control, REFUND, 1093)
    assert outcome.ending is OperationEnding.PENDING
    response = await control.post(f"/_sandbox/refunds/{outcome.provider_operation_id}/settle",
                                  json={"result": "canceled"})
    assert response.status_code == 200, response.text
    found = await client.find_operation_by_reference(ACCOUNT, REFUND, request.client_reference, budget_s=5)
    assert [(o.ending, o.reason) for o in found.found] == [(OperationEnding.FAILED, "canceled")]


async def _not_capturable(client: CardcoClient, control: httpx.AsyncClient) -> tuple[StoredRequest, str]:
    pid = await payment(control)  # charged at once: no hold
    return stored(client, control, CAPTURE, pid, 100), pid


async def _not_cancelable(client: CardcoClient, control: httpx.AsyncClient) -> tuple[StoredRequest, str]:
    pid = await payment(control)
    return stored(client, control, CANCEL, pid, 4999), pid


async def _exceeds_refundable(client: CardcoClient, control: httpx.AsyncClient) -> tuple[StoredRequest, str]:
    pid = await payment(control)
    return stored(client, control, REFUND, pid, 5000), pid


async def _not_refundable(client: CardcoClient, control: httpx.AsyncClient) -> tuple[StoredRequest, str]:
    pid = await payment(control, hold=True)
    return stored(client, control, REFUND, pid, 100), pid


async def _too_large(client: CardcoClient, control: httpx.AsyncClient) -> tuple[StoredRequest, str]:
    pid = await payment(control, hold=True)
    return stored(client, control, CAPTURE, pid, 5000), pid


@pytest.mark.parametrize(("kind", "setup", "code"), [
    (REFUND, _exceeds_refundable, "amount_exceeds_refundable"),
    (REFUND, _not_refundable, "payment_not_refundable"),
    (CAPTURE, _too_large, "amount_too_large"),
    (CAPTURE, _not_capturable, "payment_not_capturable"),
    (CANCEL, _not_cancelable, "payment_not_cancelable"),
])
async def test_a_documented_400_is_rejected_on_the_first_send_only(
        client: CardcoClient, control: httpx.AsyncClient, kind: OperationKind, setup: Any, code: str) -> None:
    request, pid = await setup(client, control)
    first = await send(client, request, kind, pid)
    assert (first.ending, first.reason, first.http_status) == (
        OperationEnding.REJECTED, f"rejected:{code}", 400)
    assert first.request_rejected
    # The same 400 to a resend proves nothing about an earlier send that may have executed.
    resent = await send(client, request, kind, pid, first_send=False)
    assert (resent.ending, resent.reason) == (OperationEnding.UNKNOWN, f"provider.rejected-this-send.{code}")
    assert resent.request_rejected


async def test_a_400_code_of_another_endpoint_is_not_understood(
        client: CardcoClient, control: httpx.AsyncClient) -> None:
    # payment_not_capturable is not a refund's code: a refund answered so is not understood.
    pid = await payment(control)
    request = stored(client, control, REFUND, pid, 5000)
    assert "payment_not_capturable" not in OPERATION_REJECTION_CODES[REFUND]
    outcome = await send(client, request, REFUND, pid)
    assert outcome.reason == "rejected:amount_exceeds_refundable"


@pytest.mark.parametrize("kind", [REFUND, CAPTURE, CANCEL])
async def test_a_resend_goes_under_the_same_key_with_the_same_bytes(
        client: CardcoClient, control: httpx.AsyncClient, kind: OperationKind) -> None:
    request, pid, first = await operation(client, control, kind, 3000 if kind is not CANCEL else 4999)
    again = await send(client, request, kind, pid, first_send=False)
    assert (again.ending, again.replayed) == (first.ending, True)
    assert again.provider_operation_id == first.provider_operation_id
    posts = [r for r in await captured(control) if r["method"] == "POST" and r["path"] != "/v1/payments"]
    assert len(posts) == 2
    assert posts[0]["body"] == posts[1]["body"] == request.request_body
    assert {r["headers"]["idempotency-key"] for r in posts} == {f'"{request.idempotency_key}"'}


@pytest.mark.parametrize("kind", [REFUND, CAPTURE, CANCEL])
async def test_a_lost_response_is_unknown_and_a_resend_learns_the_ending(
        client: CardcoClient, control: httpx.AsyncClient, kind: OperationKind) -> None:
    request, pid, lost = await operation(client, control, kind, 3000 if kind is not CANCEL else 4999,
                                         fault="lose_response", times=1, budget_s=0.5)
    assert (lost.ending, lost.reason) == (OperationEnding.UNKNOWN, "provider.no-response.caller")
    again = await send(client, request, kind, pid, first_send=False)
    assert (again.ending, again.replayed) == (OperationEnding.SUCCEEDED, True)


@pytest.mark.parametrize(("fault", "reason", "status"), [
    ("error_500_after", "provider.http-500", 500),
    ("not_processed_503", "provider.http-503", 503),
])
async def test_server_errors_are_unknown(client: CardcoClient, control: httpx.AsyncClient, fault: str,
                                         reason: str, status: int) -> None:
    request, pid, outcome = await operation(client, control, REFUND, 1000, fault=fault, times=1)
    assert (outcome.ending, outcome.reason, outcome.http_status) == (OperationEnding.UNKNOWN, reason, status)
    again = await send(client, request, REFUND, pid, first_send=False)
    if status == 500:  # stored under the key and replayed: a resend learns nothing more
        assert (again.ending, again.reason, again.replayed) == (OperationEnding.UNKNOWN, reason, True)
    else:  # not processed, not stored
        assert again.ending is OperationEnding.SUCCEEDED


async def test_rate_limited_is_rejected_on_the_first_send_only(client: CardcoClient,
                                                               control: httpx.AsyncClient) -> None:
    request, pid, outcome = await operation(client, control, CAPTURE, 3000, fault="rate_limit", times=2)
    assert (outcome.ending, outcome.reason, outcome.http_status) == (
        OperationEnding.REJECTED, "rejected:rate_limited", 429)
    assert not outcome.request_rejected  # the same bytes may pass later
    assert outcome.detail["retry_after_s"] == 1.0
    resent = await send(client, request, CAPTURE, pid, first_send=False)
    assert (resent.ending, resent.reason) == (OperationEnding.UNKNOWN, "provider.rate-limited")


async def test_in_progress_is_unknown(client: CardcoClient, control: httpx.AsyncClient) -> None:
    pid = await payment(control)
    request = stored(client, control, REFUND, pid, 1000)
    await add_faults(control, {"fault": "delay", "match": {"reference": request.client_reference,
                                                           "operation": "refund"},
                               "times": 1, "delay_ms": 1500})
    first = asyncio.create_task(send(client, request, REFUND, pid))

    async def executed() -> list[Any]:
        data: list[Any] = (await get_json(control, "/v1/refunds", reference=request.client_reference))["data"]
        return data

    await eventually(executed, what="the refund to execute")
    second = await send(client, request, REFUND, pid, first_send=False)
    assert (second.ending, second.reason, second.http_status) == (
        OperationEnding.UNKNOWN, "provider.in-progress", 409)
    assert (await first).ending is OperationEnding.SUCCEEDED


async def test_a_key_reused_with_another_body_is_unknown(client: CardcoClient,
                                                         control: httpx.AsyncClient) -> None:
    request, pid, _ = await operation(client, control, REFUND, 1000)
    other = stored(client, control, REFUND, pid, 1001, idempotency_key=request.idempotency_key)
    outcome = await send(client, other, REFUND, pid, first_send=False)
    assert (outcome.ending, outcome.reason, outcome.http_status) == (
        OperationEnding.UNKNOWN, "provider.key-reused", 422)


# A refund's: the shared conformance suite (tests/provider_conformance).
@pytest.mark.parametrize("kind", [CANCEL])
@pytest.mark.parametrize("fault", ["malformed_body", "empty_body"])
async def test_an_unreadable_body_is_unknown(client: CardcoClient, control: httpx.AsyncClient,
                                             kind: OperationKind, fault: str) -> None:
    amount = 1000 if kind is REFUND else 4999
    _, _, outcome = await operation(client, control, kind, amount, fault=fault, times=1)
    assert (outcome.ending, outcome.reason) == (OperationEnding.UNKNOWN, "provider.body-unreadable")


@pytest.mark.parametrize(("override", "attribute"), [
    ({"client_reference": "ORD-not-sent"}, "reference"),
    ({"amount_minor": 999}, "amount"),
    ({"currency": "USD"}, "currency"),
])
async def test_an_answer_naming_another_operation_is_not_evidence(
        client: CardcoClient, control: httpx.AsyncClient, override: dict[str, Any], attribute: str) -> None:
    pid = await payment(control)
    request = stored(client, control, REFUND, pid, 1000, **override)
    outcome = await send(client, request, REFUND, pid)
    assert (outcome.ending, outcome.reason) == (OperationEnding.UNKNOWN,
                                                f"provider.response-mismatch.{attribute}")
    assert outcome.provider_operation_id is None and outcome.provider_status is None
    assert outcome.detail["reported"]["status"] == "succeeded"


async def test_a_request_naming_another_payment_is_not_sent(client: CardcoClient,
                                                            control: httpx.AsyncClient) -> None:
    pid, other = await payment(control, hold=True), await payment(control, hold=True)
    for kind in (REFUND, CAPTURE, CANCEL):
        outcome = await send(client, stored(client, control, kind, pid, 100), kind, other)
        assert outcome.ending is OperationEnding.UNKNOWN
        assert outcome.reason in ("request.not-buildable.endpoint-changed",
                                  "request.not-buildable.invalid-body")
    assert [r for r in await captured(control) if r["path"] != "/v1/payments"] == []


# ---------------------------------------------------------------------------
# Nothing raises


async def test_no_answer_at_all_is_unknown(control: httpx.AsyncClient) -> None:
    pid = await payment(control)
    base_url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    nowhere = CardcoClient([account(base_url)], SystemClock(), max_call_duration_s=5)
    try:
        request = stored(nowhere, control, REFUND, pid, 100, endpoint=f"{base_url}/v1/refunds")
        refused = await send(nowhere, request, REFUND, pid)
        assert refused.ending is OperationEnding.UNKNOWN and refused.reason is not None
        assert refused.reason.startswith("provider.transport.")
        spent = await send(nowhere, request, REFUND, pid, budget_s=0)
        assert (spent.ending, spent.reason) == (OperationEnding.UNKNOWN, "provider.no-response.caller")
        unconfigured = await send(nowhere, dataclasses.replace(request, provider_account="cardco:x:test"),
                                  REFUND, pid)
        assert unconfigured.reason == "request.not-buildable.account-not-configured"
        lookup = await nowhere.find_operation_by_reference(ACCOUNT, REFUND, "r", budget_s=5)
        assert lookup.kind == "unavailable" and lookup.reason is not None
    finally:
        await nowhere.aclose()


# ---------------------------------------------------------------------------
# Lookups


async def test_find_by_reference_found_and_none(client: CardcoClient, control: httpx.AsyncClient) -> None:
    request, pid, made = await operation(client, control, CAPTURE, 3000)
    found = await client.find_operation_by_reference(ACCOUNT, CAPTURE, request.client_reference, budget_s=5)
    assert found.kind == "found"
    [seen] = found.found
    assert (seen.ending, seen.provider_operation_id, seen.provider_payment_id, seen.http_status) == (
        OperationEnding.SUCCEEDED, made.provider_operation_id, pid, None)
    none = await client.find_operation_by_reference(ACCOUNT, REFUND, request.client_reference, budget_s=5)
    assert none.kind == "not_found"
    missing = await client.get_refund(ACCOUNT, "re_nope", budget_s=5)
    assert missing.kind == "not_found"


async def test_a_cancel_has_no_lookup_and_nothing_is_sent(client: CardcoClient,
                                                          control: httpx.AsyncClient) -> None:
    result = await client.find_operation_by_reference(ACCOUNT, CANCEL, "ORD-void", budget_s=5)
    assert (result.kind, result.reason) == ("unavailable", "lookup.unsupported.cancel")
    assert await captured(control) == []


async def test_a_rate_limited_lookup_is_unavailable_with_when_to_ask_again(
        client: CardcoClient, control: httpx.AsyncClient) -> None:
    request, _, _ = await operation(client, control, REFUND, 1000)
    await add_faults(control, {"fault": "rate_limit", "match": {"reference": request.client_reference,
                                                                "operation": "lookup"}, "times": 1})
    result = await client.find_operation_by_reference(ACCOUNT, REFUND, request.client_reference, budget_s=5)
    assert (result.kind, result.reason, result.retry_after_s) == ("unavailable", "provider.rate-limited", 1.0)
    assert (await client.find_operation_by_reference(ACCOUNT, REFUND, request.client_reference,
                                                     budget_s=5)).kind == "found"


@pytest.mark.parametrize("status", ["requires_capture", "succeeded"])
async def test_a_cancel_answered_with_a_payment_not_canceled_is_unknown(status: str) -> None:
    """The contract's 200 is the canceled payment; a 200 showing it held or charged is not
    understood, so nothing is concluded (the sandbox never answers so: a scripted server does)."""
    async with running_scripted_cardco() as cardco:
        client = CardcoClient([account(cardco.base_url)], SystemClock(), max_call_duration_s=30)
        try:
            pid = "pay_3f9c"
            request = StoredRequest(
                attempt_id=uuid.uuid4(), provider_account=ACCOUNT,
                endpoint=client.operation_endpoint(account(cardco.base_url), CANCEL, pid),
                api_version=CARDCO_API_VERSION, idempotency_key=new_key(),
                request_body=client.build_operation_body(CANCEL, provider_payment_id=pid, amount_minor=4999,
                                                         reference="ORD-5521-void"),
                client_reference="ORD-5521-void", amount_minor=4999, currency="EUR")
            hold = {"capture_before": 1796500000, "amount_capturable": 4999}
            held = hold if status == "requires_capture" else {}
            cardco.reply(200, payment_object(status, id=pid, capture="manual", **held))
            outcome = await send(client, request, CANCEL, pid)
            assert (outcome.ending, outcome.reason) == (OperationEnding.UNKNOWN,
                                                        f"provider.cancel-answered-{status}")
            cardco.reply(200, payment_object("canceled", id=pid, capture="manual"))
            resent = await send(client, request, CANCEL, pid, first_send=False)
            assert resent.ending is OperationEnding.SUCCEEDED
        finally:
            await client.aclose()
