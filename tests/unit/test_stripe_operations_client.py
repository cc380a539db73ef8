"""Stripe's captures, cancels and refunds, through the real SDK against the real sandbox over HTTP.

Every ending of each call as the sandbox's Stripe dialect plays it (amounts ending 91/92/93,
faults matched by the operation's reference), resends under the same key with the same bytes,
the lookups (the payment intent's id given), and the webhook parser for every event it reads,
in both shapes of ``charge.refunded``. Answers the sandbox never gives (another intent's, a 402,
a 401) come from a scripted server. Nothing Stripe does raises: each ending is an
:class:`OperationOutcome`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from harness.servers import free_port, serve_asgi
from paycore.clock import SystemClock
from paycore.config import ProviderAccountConfig, Secret
from paycore.domain import OperationKind
from paycore.errors import InvalidPaymentMethod
from paycore.providers.base import OperationEnding, OperationLookup, OperationOutcome, StoredRequest
from paycore.providers.stripe import (
    DEFAULT_API_VERSION,
    StripeProvider,
    build_operation_body,
    parse_event,
    parse_operation_notification,
)
from paycore.providers.stripe.events import InvalidEvent
from paycore_sandbox.app import create_app
from paycore_sandbox.settings import SandboxSettings
from tests.sandbox.support import (
    STORE_TEST_KEY,
    add_faults,
    advance,
    captured,
    eventually,
    new_key,
    new_reference,
)
from tests.support.scripted_cardco import Received, Reply

CAPTURE, CANCEL, REFUND = OperationKind.CAPTURE, OperationKind.CANCEL, OperationKind.REFUND
ACCOUNT = "stripe:acct_store:test"
HEADERS = {"Authorization": f"Bearer {STORE_TEST_KEY}", "Stripe-Version": DEFAULT_API_VERSION}


@pytest.fixture
async def control() -> AsyncIterator[httpx.AsyncClient]:
    # A short async delay, so the pending movements that settle by themselves do so quickly.
    app = create_app(SandboxSettings(async_delay_s=0.05))
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as c:
        yield c


def account(base_url: str) -> ProviderAccountConfig:
    return ProviderAccountConfig(provider="stripe", account="acct_store", environment="test",
                                 base_url=base_url, api_key=Secret(STORE_TEST_KEY), webhook_secret=None,
                                 api_version=DEFAULT_API_VERSION)


@pytest.fixture
async def provider(control: httpx.AsyncClient) -> AsyncIterator[StripeProvider]:
    p = StripeProvider([account(str(control.base_url))], SystemClock(), max_call_duration_s=30)
    try:
        yield p
    finally:
        await p.aclose()


def stored(provider: StripeProvider, base_url: str, kind: OperationKind, intent_id: str, amount: int,
           **overrides: Any) -> StoredRequest:
    reference = overrides.pop("reference", None) or new_reference()
    reason = overrides.pop("reason", None)
    body = provider.build_operation_body(kind, provider_payment_id=intent_id, amount_minor=amount,
                                         reference=reference, reason=reason)
    values: dict[str, Any] = {
        "attempt_id": uuid.uuid4(), "provider_account": ACCOUNT,
        "endpoint": provider.operation_endpoint(account(base_url), kind, intent_id),
        "api_version": DEFAULT_API_VERSION, "idempotency_key": new_key(), "request_body": body,
        "client_reference": reference, "amount_minor": amount, "currency": "EUR",
    }
    values.update(overrides)
    return StoredRequest(**values)


async def send(provider: StripeProvider, request: StoredRequest, kind: OperationKind, intent_id: str, *,
               first_send: bool = True, budget_s: float = 10) -> OperationOutcome:
    return await provider.send_operation(request, kind, provider_payment_id=intent_id, budget_s=budget_s,
                                         first_send=first_send)


async def find(provider: StripeProvider, kind: OperationKind, reference: str,
               intent_id: str | None) -> OperationLookup:
    return await provider.find_operation_by_reference(ACCOUNT, kind, reference, budget_s=5,
                                                       provider_payment_id=intent_id)


async def intent(control: httpx.AsyncClient, *, hold: bool = False) -> str:
    """A PaymentIntent of 49.99 EUR: charged, or (``hold``) authorised for manual capture."""
    form = {"amount": "4999", "currency": "eur", "payment_method": "pm_card_visa", "confirm": "true",
            "metadata[paycore_reference]": new_reference(), "payment_method_types[]": "card"}
    if hold:
        form["capture_method"] = "manual"
    response = await control.post("/v1/payment_intents", data=form, headers=HEADERS)
    assert response.status_code == 200, response.text
    assert response.json()["status"] == ("requires_capture" if hold else "succeeded")
    intent_id: str = response.json()["id"]
    return intent_id


async def operation(provider: StripeProvider, control: httpx.AsyncClient, kind: OperationKind, amount: int,
                    **faults: Any) -> tuple[StoredRequest, str, OperationOutcome]:
    """An intent fit for ``kind``, the operation stored, ``faults`` added for it, and its first send."""
    budget_s = faults.pop("budget_s", 10)
    pid = await intent(control, hold=kind is not REFUND)
    request = stored(provider, str(control.base_url), kind, pid, amount)
    if faults:
        # A cancel carries no reference on Stripe's wire: its faults match the operation.
        match = {"operation": kind.value, "dialect": "stripe"} if kind is CANCEL else {
            "reference": request.client_reference, "operation": kind.value}
        await add_faults(control, {**faults, "match": match})
    return request, pid, await send(provider, request, kind, pid, budget_s=budget_s)


def amount_for(kind: OperationKind) -> int:
    return 4999 if kind is CANCEL else 3000


async def operation_posts(control: httpx.AsyncClient) -> list[dict[str, Any]]:
    return [r for r in await captured(control)
            if r["method"] == "POST" and r["path"] != "/v1/payment_intents"]


# ---------------------------------------------------------------------------
# Bodies


def test_bodies_are_the_sdks_form_encoding() -> None:
    assert build_operation_body(REFUND, provider_payment_id="pi_1", amount_minor=1500, reference="r1",
                                reason="requested_by_customer") == (
        "payment_intent=pi_1&amount=1500&metadata[paycore_reference]=r1&reason=requested_by_customer")
    # A reason Stripe does not take goes into the refund's metadata.
    assert build_operation_body(REFUND, provider_payment_id="pi_1", amount_minor=1500, reference="r1",
                                reason="order canceled: café") == (
        "payment_intent=pi_1&amount=1500&metadata[paycore_reference]=r1"
        "&metadata[paycore_reason]=order+canceled%3A+caf%C3%A9")
    assert build_operation_body(CAPTURE, provider_payment_id="pi_1", amount_minor=3000, reference="c1") == (
        "amount_to_capture=3000&metadata[paycore_capture_reference]=c1")
    # Stripe's cancel takes no metadata: the reference is recorded, never sent.
    assert build_operation_body(CANCEL, provider_payment_id="pi_1", amount_minor=4999, reference="v1") == ""


@pytest.mark.parametrize("overrides", [
    {"amount_minor": 0}, {"amount_minor": True}, {"amount_minor": 100_000_000}, {"reference": ""},
    {"reference": "x" * 65}, {"reference": "it's"}, {"provider_payment_id": "pay_1"},
    {"provider_payment_id": "pi_1/../x"}, {"reason": "x" * 501}, {"reason": "4242 4242 4242 4242"},
    {"kind": CAPTURE, "reason": "why"}, {"kind": CANCEL, "reason": "why"},
])
def test_bodies_refuse_what_stripe_would(overrides: dict[str, Any]) -> None:
    values: dict[str, Any] = {"kind": REFUND, "provider_payment_id": "pi_1", "amount_minor": 100,
                              "reference": "r1", **overrides}
    kind = values.pop("kind")
    with pytest.raises(InvalidPaymentMethod):
        build_operation_body(kind, **values)


def test_an_endpoint_is_never_built_on_an_id_that_is_not_an_intents() -> None:
    provider = StripeProvider([], SystemClock(), max_call_duration_s=5)
    acct = account("https://api.stripe.com/")
    assert provider.operation_endpoint(acct, CAPTURE, "pi_1") == "https://api.stripe.com/v1/payment_intents/pi_1/capture"
    assert provider.operation_endpoint(acct, REFUND, "pi_1") == "https://api.stripe.com/v1/refunds"
    with pytest.raises(InvalidPaymentMethod):
        provider.operation_endpoint(acct, CANCEL, "pi_1/../../v1/refunds")


# ---------------------------------------------------------------------------
# Endings of each call


@pytest.mark.parametrize(("kind", "amount", "ending", "status"), [
    (REFUND, 1000, OperationEnding.SUCCEEDED, "succeeded"),
    (REFUND, 1091, OperationEnding.PENDING, "pending"),
    (CAPTURE, 3000, OperationEnding.SUCCEEDED, "succeeded"),
    (CAPTURE, 3091, OperationEnding.PENDING, "processing"),
    (CANCEL, 4999, OperationEnding.SUCCEEDED, "canceled"),
])
async def test_each_call_succeeds_or_is_pending(provider: StripeProvider, control: httpx.AsyncClient,
                                                kind: OperationKind, amount: int, ending: OperationEnding,
                                                status: str) -> None:
    request, pid, outcome = await operation(provider, control, kind, amount)
    assert (outcome.operation, outcome.ending, outcome.provider_status) == (kind, ending, status)
    assert (outcome.provider_payment_id, outcome.http_status, outcome.replayed) == (pid, 200, False)
    assert outcome.reason is None and not outcome.request_rejected
    if kind is REFUND:
        assert outcome.provider_operation_id is not None and outcome.provider_operation_id.startswith("re_")
        assert (outcome.amount_minor, outcome.currency) == (amount, "EUR")
        assert outcome.claim is not None and outcome.claim.reference == request.client_reference
    elif kind is CAPTURE:
        # No capture object at Stripe: the operation's id is the charge the capture took.
        assert outcome.provider_operation_id is not None and outcome.provider_operation_id.startswith("ch_")
        assert outcome.claim is not None and outcome.claim.reference == request.client_reference
        assert outcome.amount_minor == (amount if ending is OperationEnding.SUCCEEDED else None)
    else:
        assert outcome.provider_operation_id is None
        assert outcome.detail == {"cancellation_reason": None}


@pytest.mark.parametrize("kind", [REFUND, CAPTURE])
async def test_a_92_amount_is_pending_then_failed_by_lookup(provider: StripeProvider,
                                                            control: httpx.AsyncClient,
                                                            kind: OperationKind) -> None:
    request, pid, outcome = await operation(provider, control, kind, 1092)
    assert outcome.ending is OperationEnding.PENDING

    async def settled() -> OperationOutcome | None:
        found = await find(provider, kind, request.client_reference, pid)
        assert found.kind == "found"
        [seen] = found.found
        return seen if seen.ending is not OperationEnding.PENDING else None

    seen = await eventually(settled, what="the movement to settle")
    assert seen.ending is OperationEnding.FAILED
    assert (seen.provider_operation_id, seen.provider_payment_id) == (outcome.provider_operation_id, pid)
    if kind is REFUND:
        assert (seen.provider_status, seen.reason) == ("failed", "failed:declined")
        assert outcome.provider_operation_id is not None
        by_id = await provider.get_refund(ACCOUNT, outcome.provider_operation_id, budget_s=5)
        assert by_id.kind == "found" and by_id.found[0].ending is OperationEnding.FAILED
    else:  # the capture took nothing: the hold is back
        assert (seen.provider_status, seen.reason) == ("requires_capture", "capture-failed:requires_capture")


async def test_a_93_refund_stays_pending_until_settled(provider: StripeProvider,
                                                      control: httpx.AsyncClient) -> None:
    request, pid, outcome = await operation(provider, control, REFUND, 1093)
    assert outcome.ending is OperationEnding.PENDING
    response = await control.post(f"/_sandbox/refunds/{outcome.provider_operation_id}/settle",
                                  json={"result": "canceled"})
    assert response.status_code == 200, response.text
    found = await find(provider, REFUND, request.client_reference, pid)
    assert [(o.ending, o.reason) for o in found.found] == [(OperationEnding.FAILED, "canceled")]


async def _exceeds_refundable(provider: StripeProvider, base_url: str,
                              control: httpx.AsyncClient) -> tuple[StoredRequest, str]:
    pid = await intent(control)
    return stored(provider, base_url, REFUND, pid, 5000), pid


async def _already_refunded(provider: StripeProvider, base_url: str,
                            control: httpx.AsyncClient) -> tuple[StoredRequest, str]:
    pid = await intent(control)
    whole = stored(provider, base_url, REFUND, pid, 4999)
    assert (await send(provider, whole, REFUND, pid)).ending is OperationEnding.SUCCEEDED
    return stored(provider, base_url, REFUND, pid, 100), pid


async def _a_hold_refunded(provider: StripeProvider, base_url: str,
                           control: httpx.AsyncClient) -> tuple[StoredRequest, str]:
    pid = await intent(control, hold=True)
    return stored(provider, base_url, REFUND, pid, 100), pid


async def _too_large(provider: StripeProvider, base_url: str,
                     control: httpx.AsyncClient) -> tuple[StoredRequest, str]:
    pid = await intent(control, hold=True)
    return stored(provider, base_url, CAPTURE, pid, 5000), pid


async def _not_capturable(provider: StripeProvider, base_url: str,
                          control: httpx.AsyncClient) -> tuple[StoredRequest, str]:
    pid = await intent(control)  # charged at once: no hold
    return stored(provider, base_url, CAPTURE, pid, 100), pid


async def _not_cancelable(provider: StripeProvider, base_url: str,
                          control: httpx.AsyncClient) -> tuple[StoredRequest, str]:
    pid = await intent(control)
    return stored(provider, base_url, CANCEL, pid, 4999), pid


@pytest.mark.parametrize(("kind", "setup", "code"), [
    (REFUND, _exceeds_refundable, "amount_too_large:amount"),
    (REFUND, _already_refunded, "charge_already_refunded"),
    (REFUND, _a_hold_refunded, "payment_intent_unexpected_state"),
    (CAPTURE, _too_large, "amount_too_large:amount_to_capture"),
    (CAPTURE, _not_capturable, "payment_intent_unexpected_state"),
    (CANCEL, _not_cancelable, "payment_intent_unexpected_state"),
])
async def test_a_400_is_rejected_on_the_first_send_only(provider: StripeProvider, control: httpx.AsyncClient,
                                                         kind: OperationKind, setup: Any, code: str) -> None:
    request, pid = await setup(provider, str(control.base_url), control)
    first = await send(provider, request, kind, pid)
    assert (first.ending, first.reason, first.http_status, first.replayed) == (
        OperationEnding.REJECTED, f"rejected:{code}", 400, False)
    assert first.request_rejected
    # Stripe stored the refusal under the key (execution had begun): a resend is answered it
    # again, which proves nothing about an earlier send that may have executed.
    resent = await send(provider, request, kind, pid, first_send=False)
    assert (resent.ending, resent.reason, resent.replayed) == (
        OperationEnding.UNKNOWN, f"provider.rejected-this-send.{code.split(':')[0]}", True)
    assert resent.request_rejected


@pytest.mark.parametrize("kind", [REFUND, CAPTURE, CANCEL])
async def test_a_resend_goes_under_the_same_key_with_the_same_bytes(
        provider: StripeProvider, control: httpx.AsyncClient, kind: OperationKind) -> None:
    request, pid, first = await operation(provider, control, kind, amount_for(kind))
    again = await send(provider, request, kind, pid, first_send=False)
    assert (again.ending, again.replayed) == (first.ending, True)
    assert again.provider_operation_id == first.provider_operation_id
    posts = await operation_posts(control)
    assert len(posts) == 2
    assert posts[0]["body"] == posts[1]["body"] == request.request_body
    assert {r["headers"]["idempotency-key"] for r in posts} == {request.idempotency_key}
    assert {r["headers"]["stripe-version"] for r in posts} == {request.api_version}
    assert {r["path"] for r in posts} == {request.endpoint.removeprefix(str(control.base_url))}


@pytest.mark.parametrize("kind", [REFUND, CAPTURE, CANCEL])
async def test_a_lost_response_is_unknown_and_a_resend_learns_the_ending(
        provider: StripeProvider, control: httpx.AsyncClient, kind: OperationKind) -> None:
    request, pid, lost = await operation(provider, control, kind, amount_for(kind), fault="lose_response",
                                         times=1, budget_s=0.5)
    assert (lost.ending, lost.reason) == (OperationEnding.UNKNOWN, "provider.no-response.caller")
    again = await send(provider, request, kind, pid, first_send=False)
    assert (again.ending, again.replayed) == (OperationEnding.SUCCEEDED, True)


@pytest.mark.parametrize(("fault", "reason", "status"), [
    ("error_500_after", "provider.http-500", 500),
    ("not_processed_503", "provider.http-503", 503),
])
async def test_server_errors_are_unknown(provider: StripeProvider, control: httpx.AsyncClient, fault: str,
                                         reason: str, status: int) -> None:
    request, pid, outcome = await operation(provider, control, REFUND, 1000, fault=fault, times=1)
    assert (outcome.ending, outcome.reason, outcome.http_status) == (OperationEnding.UNKNOWN, reason, status)
    again = await send(provider, request, REFUND, pid, first_send=False)
    if status == 500:  # stored under the key and replayed: a resend learns nothing more
        assert (again.ending, again.reason, again.replayed) == (OperationEnding.UNKNOWN, reason, True)
    else:  # not processed, not stored
        assert again.ending is OperationEnding.SUCCEEDED
    assert len(await operation_posts(control)) == 2  # one send per call: the SDK retried nothing


async def test_rate_limited_is_unknown_on_every_send_with_when_to_ask_again(
        provider: StripeProvider, control: httpx.AsyncClient) -> None:
    request, pid, outcome = await operation(provider, control, CAPTURE, 3000, fault="rate_limit", times=2)
    assert (outcome.ending, outcome.reason, outcome.http_status) == (
        OperationEnding.UNKNOWN, "provider.rate-limited", 429)
    assert outcome.detail == {"retry_after_s": 1.0} and not outcome.request_rejected
    resent = await send(provider, request, CAPTURE, pid, first_send=False)
    assert (resent.ending, resent.reason) == (OperationEnding.UNKNOWN, "provider.rate-limited")
    assert (await send(provider, request, CAPTURE, pid, first_send=False)).ending is OperationEnding.SUCCEEDED


async def test_in_progress_is_unknown(provider: StripeProvider, control: httpx.AsyncClient) -> None:
    pid = await intent(control)
    request = stored(provider, str(control.base_url), REFUND, pid, 1000)
    await add_faults(control, {"fault": "delay", "match": {"reference": request.client_reference,
                                                           "operation": "refund"},
                               "times": 1, "delay_ms": 1500})
    first = asyncio.create_task(send(provider, request, REFUND, pid))

    async def executed() -> list[Any]:
        listed = await control.get("/v1/refunds", params={"payment_intent": pid}, headers=HEADERS)
        data: list[Any] = listed.json()["data"]
        return data

    await eventually(executed, what="the refund to execute")
    second = await send(provider, request, REFUND, pid, first_send=False)
    assert (second.ending, second.reason, second.http_status) == (
        OperationEnding.UNKNOWN, "provider.in-progress", 409)
    assert (await first).ending is OperationEnding.SUCCEEDED


async def test_a_key_reused_with_another_body_is_unknown(provider: StripeProvider,
                                                         control: httpx.AsyncClient) -> None:
    request, pid, _ = await operation(provider, control, REFUND, 1000)
    other = stored(provider, str(control.base_url), REFUND, pid, 1001,
                   idempotency_key=request.idempotency_key)
    outcome = await send(provider, other, REFUND, pid, first_send=False)
    assert (outcome.ending, outcome.reason, outcome.http_status) == (
        OperationEnding.UNKNOWN, "provider.idempotency-error", 400)


# A refund's: the shared conformance suite (tests/provider_conformance).
@pytest.mark.parametrize("kind", [CANCEL])
@pytest.mark.parametrize("fault", ["malformed_body", "empty_body"])
async def test_an_unreadable_body_is_unknown(provider: StripeProvider, control: httpx.AsyncClient,
                                             kind: OperationKind, fault: str) -> None:
    _, _, outcome = await operation(provider, control, kind, amount_for(kind), fault=fault, times=1)
    assert (outcome.ending, outcome.reason) == (OperationEnding.UNKNOWN, "provider.body-unreadable")


@pytest.mark.parametrize(("kind", "override", "attribute"), [
    (REFUND, {"client_reference": "ORD-not-sent"}, "reference"),
    (REFUND, {"amount_minor": 999}, "amount"),
    (REFUND, {"currency": "USD"}, "currency"),
    (CAPTURE, {"client_reference": "ORD-not-sent"}, "reference"),
    (CAPTURE, {"amount_minor": 2999}, "amount"),
])
async def test_an_answer_naming_another_operation_is_not_evidence(
        provider: StripeProvider, control: httpx.AsyncClient, kind: OperationKind, override: dict[str, Any],
        attribute: str) -> None:
    pid = await intent(control, hold=kind is CAPTURE)
    request = stored(provider, str(control.base_url), kind, pid, 3000, **override)
    outcome = await send(provider, request, kind, pid)
    assert (outcome.ending, outcome.reason) == (OperationEnding.UNKNOWN,
                                                f"provider.response-mismatch.{attribute}")
    assert outcome.provider_operation_id is None and outcome.provider_status is None
    assert outcome.detail["reported"]["status"] == "succeeded"


async def test_a_request_naming_another_intent_is_not_sent(provider: StripeProvider,
                                                           control: httpx.AsyncClient) -> None:
    pid, other = await intent(control, hold=True), await intent(control, hold=True)
    for kind in (REFUND, CAPTURE, CANCEL):
        outcome = await send(provider, stored(provider, str(control.base_url), kind, pid, 100), kind, other)
        assert outcome.ending is OperationEnding.UNKNOWN
        assert outcome.reason in ("request.not-buildable.endpoint-changed",
                                  "request.not-buildable.invalid-body")
    request = stored(provider, str(control.base_url), REFUND, pid, 100)
    for body in ("amount=100", request.request_body + "&expand[]=charge", "payment_intent=pi_x%zz"):
        outcome = await send(provider, dataclasses.replace(request, request_body=body), REFUND, pid)
        assert outcome.reason == "request.not-buildable.invalid-body"
    assert await operation_posts(control) == []


# ---------------------------------------------------------------------------
# Answers the sandbox never gives: a scripted server


@contextlib.asynccontextmanager
async def scripted(*replies: Reply) -> AsyncIterator[tuple[StripeProvider, list[Received], str]]:
    """A server answering every request with the next of ``replies``, the provider on it, its URL."""
    queue, received = deque(replies), []

    async def handle(request: Request) -> Response:
        received.append(Received(request.method, request.url.path, request.scope["query_string"],
                                 dict(request.headers), await request.body()))
        reply = queue.popleft()
        return Response(reply.content(), status_code=reply.status, headers=reply.headers,
                        media_type="application/json")

    app = Starlette(routes=[Route("/{rest:path}", handle, methods=["GET", "POST"])])
    async with serve_asgi(app) as url:
        provider = StripeProvider([account(url)], SystemClock(), max_call_duration_s=10)
        try:
            yield provider, received, url
        finally:
            await provider.aclose()


PID = "pi_3Pq9c2Lk"


def held(status: str, **overrides: Any) -> dict[str, Any]:
    obj = {"id": PID, "object": "payment_intent", "amount": 4999, "currency": "eur", "livemode": False,
           "status": status, "capture_method": "manual", "amount_received": 0, "latest_charge": "ch_1",
           "cancellation_reason": None, "metadata": {"paycore_reference": "ORD-5521"}}
    return {**obj, **overrides}


def refund_object(status: str = "succeeded", **overrides: Any) -> dict[str, Any]:
    obj = {"id": "re_1", "object": "refund", "amount": 1000, "currency": "eur", "payment_intent": PID,
           "status": status, "metadata": {"paycore_reference": "ORD-5521-r1"}, "created": 1795900000,
           "failure_reason": None, "reason": None, "charge": "ch_1"}
    return {**obj, **overrides}


def stripe_error(type_: str, code: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"error": {"type": type_, "code": code, "message": "scripted", **fields}}


def scripted_request(provider: StripeProvider, base_url: str, kind: OperationKind, amount: int = 1000,
                     reference: str = "ORD-5521-r1") -> StoredRequest:
    return stored(provider, base_url, kind, PID, amount, reference=reference)


@pytest.mark.parametrize(("kind", "reply", "reason"), [
    (REFUND, Reply(200, refund_object(payment_intent="pi_other")), "provider.response-mismatch.payment"),
    (CAPTURE, Reply(200, held("succeeded", id="pi_other")), "provider.response-mismatch.payment"),
    (CANCEL, Reply(200, held("canceled", id="pi_other")), "provider.response-mismatch.payment"),
    (CANCEL, Reply(200, held("canceled", livemode=True)), "provider.response-mismatch.environment"),
    (CAPTURE, Reply(200, held("succeeded", amount_received=1000)), "provider.response-mismatch.reference"),
    (CAPTURE, Reply(200, held("requires_capture", metadata={"paycore_capture_reference": "ORD-5521-r1"})),
     "provider.capture-answered-requires_capture"),
    (CANCEL, Reply(200, held("requires_capture")), "provider.cancel-answered-requires_capture"),
    (REFUND, Reply(200, {"id": "re_1", "object": "refund"}), "provider.body-unrecognized"),
    (REFUND, Reply(400, stripe_error("card_error", "x")), "provider.body-unrecognized"),
    (REFUND, Reply(400, stripe_error("invalid_request_error", "resource_missing",
                                     payment_intent={"id": "pi_other"})),
     "provider.response-mismatch.payment"),
    (REFUND, Reply(404, stripe_error("invalid_request_error", "resource_missing")),
     "provider.unexpected-status-404"),
    (CAPTURE, Reply(409, stripe_error("idempotency_error", "idempotency_key_in_use")),
     "provider.in-progress"),
])
async def test_answers_that_prove_nothing_are_unknown(kind: OperationKind, reply: Reply, reason: str) -> None:
    async with scripted(reply) as (provider, received, base_url):
        outcome = await send(provider, scripted_request(provider, base_url, kind), kind, PID)
    assert (outcome.ending, outcome.reason) == (OperationEnding.UNKNOWN, reason)
    assert len(received) == 1


async def test_a_402_is_failed_and_an_auth_refusal_rejected_on_the_first_send_only() -> None:
    declined = Reply(402, stripe_error("card_error", "card_declined", decline_code="expired_card"))
    unauthorized = Reply(401, stripe_error("invalid_request_error", "api_key_invalid"))
    async with scripted(declined, unauthorized, unauthorized) as (provider, _, base_url):
        request = scripted_request(provider, base_url, CAPTURE)
        failed = await send(provider, request, CAPTURE, PID)
        assert (failed.ending, failed.reason, failed.provider_payment_id) == (
            OperationEnding.FAILED, "declined:expired_card", PID)
        first = await send(provider, request, CAPTURE, PID)
        assert (first.ending, first.reason) == (OperationEnding.REJECTED, "rejected:auth")
        resent = await send(provider, request, CAPTURE, PID, first_send=False)
        assert (resent.ending, resent.reason) == (OperationEnding.UNKNOWN, "provider.rejected.auth")


async def test_a_refund_that_requires_action_is_pending_and_a_canceled_one_failed() -> None:
    canceled_ = refund_object("canceled", failure_reason="merchant_request")
    async with scripted(Reply(200, refund_object("requires_action")), Reply(200, canceled_)) as (p, _, url):
        request = scripted_request(p, url, REFUND)
        assert (await send(p, request, REFUND, PID)).ending is OperationEnding.PENDING
        canceled = await send(p, request, REFUND, PID, first_send=False)
        assert (canceled.ending, canceled.reason) == (OperationEnding.FAILED, "canceled:merchant_request")


# ---------------------------------------------------------------------------
# Nothing raises


async def test_no_answer_at_all_is_unknown(control: httpx.AsyncClient) -> None:
    pid = await intent(control)
    base_url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    nowhere = StripeProvider([account(base_url)], SystemClock(), max_call_duration_s=5)
    try:
        request = stored(nowhere, base_url, REFUND, pid, 100)
        refused = await send(nowhere, request, REFUND, pid)
        assert refused.ending is OperationEnding.UNKNOWN and refused.reason is not None
        assert refused.reason.startswith("provider.transport.")
        spent = await send(nowhere, request, REFUND, pid, budget_s=0)
        assert (spent.ending, spent.reason) == (OperationEnding.UNKNOWN, "provider.no-response.caller")
        unconfigured = await send(nowhere, dataclasses.replace(request, provider_account="stripe:x:test"),
                                  REFUND, pid)
        assert unconfigured.reason == "request.not-buildable.account-not-configured"
        empty_key = await send(nowhere, dataclasses.replace(request, idempotency_key=""), REFUND, pid)
        assert empty_key.reason == "request.not-buildable.invalid-header"
        lookup = await find(nowhere, REFUND, "r", pid)
        assert lookup.kind == "unavailable" and lookup.reason is not None
        assert lookup.reason.startswith("provider.transport.")
    finally:
        await nowhere.aclose()


# ---------------------------------------------------------------------------
# Lookups


@pytest.mark.parametrize("kind", [REFUND, CAPTURE, CANCEL])
async def test_find_by_reference_found_and_not_found(provider: StripeProvider, control: httpx.AsyncClient,
                                                     kind: OperationKind) -> None:
    request, pid, made = await operation(provider, control, kind, amount_for(kind))
    found = await find(provider, kind, request.client_reference, pid)
    assert found.kind == "found"
    [seen] = found.found
    assert (seen.operation, seen.ending, seen.provider_operation_id, seen.provider_payment_id,
            seen.http_status) == (kind, OperationEnding.SUCCEEDED, made.provider_operation_id, pid, None)
    other = await intent(control, hold=kind is not REFUND)
    assert (await find(provider, kind, request.client_reference, other)).kind == "not_found"
    if kind is not CANCEL:  # a cancel carries no reference: its lookup reads the intent's state only
        assert (await find(provider, kind, "ORD-never-sent", pid)).kind == "not_found"


async def test_several_refunds_of_one_intent_are_told_apart_by_reference(
        provider: StripeProvider, control: httpx.AsyncClient) -> None:
    pid = await intent(control)
    requests = [stored(provider, str(control.base_url), REFUND, pid, amount) for amount in (1000, 1200, 1000)]
    made = [await send(provider, r, REFUND, pid) for r in requests]
    for request, outcome in zip(requests, made, strict=True):
        found = await find(provider, REFUND, request.client_reference, pid)
        assert [o.provider_operation_id for o in found.found] == [outcome.provider_operation_id]


async def test_a_lapsed_hold_is_no_cancel(provider: StripeProvider, control: httpx.AsyncClient) -> None:
    pid = await intent(control, hold=True)
    await advance(control, 7 * 86400 + 1)  # the hold lapses: Stripe cancels it ("automatic")
    found = await find(provider, CANCEL, "ORD-void", pid)
    assert found.kind == "not_found"
    assert (await find(provider, CAPTURE, "ORD-capture", pid)).kind == "not_found"


async def test_lookups_without_what_they_need_send_nothing(provider: StripeProvider,
                                                           control: httpx.AsyncClient) -> None:
    for kind in (REFUND, CAPTURE, CANCEL):
        without = await provider.find_operation_by_reference(ACCOUNT, kind, "ORD-1", budget_s=5)
        assert (without.kind, without.reason) == ("unavailable", "lookup.needs-provider-payment-id")
    assert (await find(provider, REFUND, "ORD-1", "pi_x/../x")).reason == \
        "request.not-buildable.invalid-payment-id"
    assert (await find(provider, REFUND, "", "pi_1")).reason == "request.not-buildable.invalid-reference"
    assert (await provider.get_refund(ACCOUNT, "re_1/../x", budget_s=5)).reason == \
        "request.not-buildable.invalid-refund-id"
    assert await captured(control) == []
    assert (await provider.get_refund(ACCOUNT, "re_nope", budget_s=5)).kind == "not_found"
    missing = await find(provider, CAPTURE, "ORD-1", "pi_nope")
    assert (missing.kind, missing.reason) == ("unavailable", "provider.unexpected-status-404")


async def test_a_rate_limited_lookup_is_unavailable_with_when_to_ask_again(
        provider: StripeProvider, control: httpx.AsyncClient) -> None:
    request, pid, _ = await operation(provider, control, REFUND, 1000)
    await add_faults(control, {"fault": "rate_limit", "match": {"operation": "lookup", "dialect": "stripe"},
                               "times": 1})
    result = await find(provider, REFUND, request.client_reference, pid)
    assert (result.kind, result.reason, result.retry_after_s) == ("unavailable", "provider.rate-limited", 1.0)
    assert (await find(provider, REFUND, request.client_reference, pid)).kind == "found"


async def test_a_refund_list_that_says_there_is_more_proves_no_miss() -> None:
    another = refund_object(metadata={"paycore_reference": "other"})
    page = {"object": "list", "has_more": True, "data": [another]}
    async with scripted(Reply(200, page), Reply(200, {**page, "has_more": False})) as (provider, received, _):
        truncated = await find(provider, REFUND, "ORD-5521-r1", PID)
        assert (truncated.kind, truncated.reason) == ("unavailable", "provider.list-truncated")
        assert (await find(provider, REFUND, "ORD-5521-r1", PID)).kind == "not_found"
    assert received[0].path == "/v1/refunds"
    assert received[0].query == b"payment_intent=pi_3Pq9c2Lk&limit=100"


# ---------------------------------------------------------------------------
# Webhooks: parse_operation_notification


def event(type_: str, obj: dict[str, Any], **kw: Any) -> bytes:
    return orjson.dumps({"id": "evt_1QxA", "object": "event", "type": type_, "created": 1795900000,
                         "livemode": False, "api_version": DEFAULT_API_VERSION, "data": {"object": obj},
                         **kw})


async def sandbox_events(control: httpx.AsyncClient, intent_id: str) -> list[dict[str, Any]]:
    response = await control.get("/_sandbox/events", params={"payment": intent_id})
    data: list[dict[str, Any]] = response.json()["data"]
    return data


@pytest.mark.parametrize(("type_", "status", "ending"), [
    ("refund.created", "pending", OperationEnding.PENDING),
    ("refund.updated", "succeeded", OperationEnding.SUCCEEDED),
    ("refund.updated", "requires_action", OperationEnding.PENDING),
    ("refund.failed", "failed", OperationEnding.FAILED),
    ("charge.refund.updated", "canceled", OperationEnding.FAILED),
])
def test_a_refund_event_is_the_refunds_ending(type_: str, status: str, ending: OperationEnding) -> None:
    failure = "expired_or_canceled_card" if status == "failed" else None
    n = parse_operation_notification(event(type_, refund_object(status, failure_reason=failure)))
    assert n is not None
    assert (n.event_id, n.event_type, n.payload_livemode, n.payload_account) == (
        "evt_1QxA", type_, False, None)
    o = n.outcome
    assert (o.operation, o.ending, o.provider_status, o.provider_operation_id, o.provider_payment_id) == (
        REFUND, ending, status, "re_1", PID)
    assert o.claim is not None and (o.claim.reference, o.claim.amount_minor, o.claim.livemodes) == (
        "ORD-5521-r1", 1000, (False,))
    if status == "failed":
        assert o.reason == "failed:expired_or_canceled_card"


def charge(**overrides: Any) -> dict[str, Any]:
    obj = {"id": "ch_1", "object": "charge", "amount": 4999, "currency": "eur", "livemode": False,
           "payment_intent": PID, "status": "succeeded", "amount_refunded": 2200,
           "metadata": {"paycore_reference": "ORD-5521"}}
    return {**obj, **overrides}


def test_charge_refunded_of_the_old_shape_tells_its_latest_refund_and_the_new_shape_none() -> None:
    older = refund_object(id="re_old", created=1795900000, metadata={"paycore_reference": "ORD-r-old"})
    newer = refund_object(id="re_new", amount=1200, created=1795900100,
                          metadata={"paycore_reference": "ORD-r-new"})
    old_shape = charge(refunds={"object": "list", "data": [newer, older], "has_more": False})
    n = parse_operation_notification(event("charge.refunded", old_shape))
    assert n is not None and n.outcome.claim is not None
    assert (n.outcome.provider_operation_id, n.outcome.claim.reference, n.outcome.amount_minor) == (
        "re_new", "ORD-r-new", 1200)
    # The same second: the first listed is the newest.
    same_time = charge(refunds={"object": "list",
                                "data": [refund_object(id="re_b"), refund_object(id="re_a")]})
    n = parse_operation_notification(event("charge.refunded", same_time))
    assert n is not None and n.outcome.provider_operation_id == "re_b"
    # The old shape under the name charge.refund.updated reads the same.
    n = parse_operation_notification(event("charge.refund.updated", old_shape))
    assert n is not None and n.outcome.provider_operation_id == "re_new"
    # API versions from 2022-11-15 leave the refunds out: the refund comes in refund.* events.
    assert parse_operation_notification(event("charge.refunded", charge())) is None
    assert parse_operation_notification(event("charge.refunded", charge(refunds={"data": []}))) is None
    # The payment's reading of the same event is unchanged: a refunded payment.
    payment = parse_event(event("charge.refunded", old_shape))
    assert (payment.is_refund, payment.payment_id, payment.amount_refunded) == (True, PID, 2200)


def test_intent_events_tell_of_a_cancel_or_a_capture_only_when_they_are_one() -> None:
    voided = parse_operation_notification(event("payment_intent.canceled", held("canceled")))
    assert voided is not None
    assert (voided.outcome.operation, voided.outcome.ending, voided.outcome.provider_payment_id) == (
        CANCEL, OperationEnding.SUCCEEDED, PID)
    assert voided.outcome.claim is not None and voided.outcome.claim.reference is None
    # A hold that lapsed (Stripe's own cancel), or an intent that never held, is no cancel.
    assert parse_operation_notification(event("payment_intent.canceled",
                                              held("canceled", cancellation_reason="automatic"))) is None
    assert parse_operation_notification(event("payment_intent.canceled",
                                              held("canceled", capture_method="automatic",
                                                   cancellation_reason="abandoned"))) is None
    captured_ = held("succeeded", amount_received=3000,
                     metadata={"paycore_reference": "ORD-5521", "paycore_capture_reference": "ORD-cap"})
    n = parse_operation_notification(event("payment_intent.succeeded", captured_))
    assert n is not None and n.outcome.claim is not None
    assert (n.outcome.operation, n.outcome.ending, n.outcome.provider_operation_id, n.outcome.amount_minor,
            n.outcome.claim.reference) == (CAPTURE, OperationEnding.SUCCEEDED, "ch_1", 3000, "ORD-cap")
    # A payment that succeeded by itself is the payment's event only.
    assert parse_operation_notification(event("payment_intent.succeeded",
                                              held("succeeded", capture_method="automatic"))) is None
    # A hold placed is the payment's authorization, no operation's ending.
    assert parse_operation_notification(event("payment_intent.amount_capturable_updated",
                                              held("requires_capture"))) is None
    assert parse_operation_notification(event("customer.created", {"id": "cus_1"})) is None


def test_the_envelope_mode_joins_the_objects_and_connect_accounts_are_kept() -> None:
    n = parse_operation_notification(event("refund.updated", refund_object(livemode=False), livemode=True,
                                           account="acct_connected"))
    assert n is not None and n.outcome.claim is not None
    assert (n.outcome.claim.livemodes, n.payload_account) == ((False, True), "acct_connected")


@pytest.mark.parametrize(("body", "reason"), [
    (b"not json", "not-json"),
    (b"[]", "not-an-object"),
    (event("refund.updated", {"id": "re_1", "object": "refund"}), "invalid-object"),
    (event("refund.updated", refund_object(status="paused")), "invalid-object"),
    (event("charge.refunded", charge(refunds={"data": [{"id": "x"}]})), "invalid-object"),
    (event("charge.refunded", charge(refunds={"data": "x"})), "invalid-object"),
    (event("payment_intent.canceled", {"id": "pi_1"}), "invalid-object"),
    (event("refund.updated", refund_object(), id="nope"), "invalid-id"),
])
def test_an_operation_event_that_does_not_parse_is_invalid(body: bytes, reason: str) -> None:
    with pytest.raises(InvalidEvent, match=reason):
        parse_operation_notification(body)


async def test_the_sandboxs_own_events_parse_as_the_operations(provider: StripeProvider,
                                                              control: httpx.AsyncClient) -> None:
    """The new shape end to end: what the dialect emits for a refund, a capture and a cancel."""
    refund, pid, made = await operation(provider, control, REFUND, 1091)

    async def settled() -> list[dict[str, Any]] | None:
        seen = await sandbox_events(control, pid)
        return seen if any(e["type"] == "charge.refunded" for e in seen) else None

    seen = await eventually(settled, what="the refund to settle")
    parsed = {e["type"]: parse_operation_notification(orjson.dumps(e)) for e in seen}
    assert [e["type"] for e in seen] == ["payment_intent.succeeded", "refund.created", "refund.updated",
                                         "charge.refunded"]
    assert parsed["payment_intent.succeeded"] is None and parsed["charge.refunded"] is None
    for type_, ending in (("refund.created", OperationEnding.PENDING),
                          ("refund.updated", OperationEnding.SUCCEEDED)):
        n = parsed[type_]
        assert n is not None and n.outcome.claim is not None
        assert (n.outcome.ending, n.outcome.provider_operation_id, n.outcome.claim.reference) == (
            ending, made.provider_operation_id, refund.client_reference)
    with pytest.raises(InvalidEvent, match="unknown-type"):  # the payment's reading keeps it raw
        parse_event(orjson.dumps(seen[1]))

    capture, hold, _ = await operation(provider, control, CAPTURE, 3000)
    held_events = await sandbox_events(control, hold)
    assert [e["type"] for e in held_events] == [
        "payment_intent.amount_capturable_updated", "capture.succeeded", "payment_intent.succeeded"]
    n = parse_operation_notification(orjson.dumps(held_events[-1]))
    assert n is not None and n.outcome.claim is not None
    assert (n.outcome.operation, n.outcome.ending, n.outcome.claim.reference) == (
        CAPTURE, OperationEnding.SUCCEEDED, capture.client_reference)

    _, voided, _ = await operation(provider, control, CANCEL, 4999)
    [*_, canceled] = await sandbox_events(control, voided)
    n = parse_operation_notification(orjson.dumps(canceled))
    assert n is not None and (n.event_type, n.outcome.operation, n.outcome.ending) == (
        "payment_intent.canceled", CANCEL, OperationEnding.SUCCEEDED)
