"""Stripe's refunds, captures and cancels through the real SDK against localstripe, an independent fake.

localstripe (1.15.10, ``tests/support/localstripe_stack.py``) is someone else's reading of
Stripe's API: our stored form bodies, sent by the SDK, must be taken by it and its answers
read by us. It refunds by ``payment_intent`` (with ``metadata``), lists refunds by intent,
holds with ``capture_method=manual``, captures and cancels, and posts a signed
``payment_intent.succeeded`` when a hold is captured.

What it does not do, and so is not checked here (the sandbox's Stripe dialect is:
``tests/unit/test_stripe_operations_client.py``): idempotency keys (every POST executes, so
no resend is sent here), pending or failing refunds, a refund's ``reason`` (``400 Unexpected
reason``), ``amount_received`` (absent: a capture's amount is then not claimed), and a
capture's ``metadata``, which our launcher teaches it (``tests/support/localstripe_server.py``).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from harness.servers import serve_asgi
from paycore.clock import SystemClock
from paycore.config import ProviderAccountConfig, Secret
from paycore.domain import OperationKind, OutcomeKind
from paycore.providers.base import OperationEnding, OperationOutcome, StoredRequest
from paycore.providers.stripe import (
    DEFAULT_API_VERSION,
    StripeProvider,
    build_request_body,
    parse_operation_notification,
)
from tests.support.localstripe_stack import (
    API_KEY,
    PROVIDER_ACCOUNT,
    WEBHOOK_SECRET,
    payment_method,
    register_webhook,
    running_localstripe,
)

CAPTURE, CANCEL, REFUND = OperationKind.CAPTURE, OperationKind.CANCEL, OperationKind.REFUND


@pytest.fixture(scope="module")
def localstripe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_localstripe(tmp_path_factory.mktemp("localstripe")) as base_url:
        yield base_url


def account(base_url: str) -> ProviderAccountConfig:
    return ProviderAccountConfig(provider="stripe", account="acct_store", environment="test",
                                 base_url=base_url, api_key=Secret(API_KEY),
                                 webhook_secret=Secret(WEBHOOK_SECRET), api_version=DEFAULT_API_VERSION)


@pytest.fixture
async def provider(localstripe: str) -> AsyncIterator[StripeProvider]:
    p = StripeProvider([account(localstripe)], SystemClock(), max_call_duration_s=30)
    try:
        yield p
    finally:
        await p.aclose()


def reference() -> str:
    return f"ORD-{uuid.uuid4().hex[:10]}"


async def charged(localstripe: str, provider: StripeProvider) -> str:
    """A card payment made by our own create, as checkout makes it."""
    ref = reference()
    body = build_request_body(amount_minor=4999, currency="EUR",
                              payment_method=await payment_method(localstripe, "visa"), reference=ref)
    outcome = await provider.create_payment(StoredRequest(
        uuid.uuid4(), PROVIDER_ACCOUNT, localstripe + "/v1/payment_intents", DEFAULT_API_VERSION,
        str(uuid.uuid4()), body, ref, 4999, "EUR"), budget_s=15, first_send=True)
    assert outcome.kind is OutcomeKind.SUCCEEDED and outcome.provider_payment_id is not None, outcome
    return outcome.provider_payment_id


async def held(localstripe: str) -> str:
    """An intent authorised for manual capture (our create never asks for one: made here)."""
    async with httpx.AsyncClient(trust_env=False) as http:
        r = await http.post(localstripe + "/v1/payment_intents", auth=(API_KEY, ""), data={
            "amount": "4999", "currency": "eur", "payment_method": await payment_method(localstripe, "visa"),
            "confirm": "true", "capture_method": "manual", "payment_method_types[]": "card",
            "metadata[paycore_reference]": reference()})
    r.raise_for_status()
    assert r.json()["status"] == "requires_capture"
    intent_id: str = r.json()["id"]
    return intent_id


async def send(provider: StripeProvider, localstripe: str, kind: OperationKind, intent_id: str,
               amount: int) -> tuple[StoredRequest, OperationOutcome]:
    ref = reference()
    body = provider.build_operation_body(kind, provider_payment_id=intent_id, amount_minor=amount,
                                         reference=ref)
    request = StoredRequest(
        uuid.uuid4(), PROVIDER_ACCOUNT, provider.operation_endpoint(account(localstripe), kind, intent_id),
        DEFAULT_API_VERSION, str(uuid.uuid4()), body, ref, amount, "EUR")
    outcome = await provider.send_operation(request, kind, provider_payment_id=intent_id, budget_s=15,
                                            first_send=True)
    return request, outcome


async def test_refunds_are_made_found_by_reference_and_by_id(localstripe: str,
                                                             provider: StripeProvider) -> None:
    pid = await charged(localstripe, provider)
    first, made = await send(provider, localstripe, REFUND, pid, 1000)
    second, other = await send(provider, localstripe, REFUND, pid, 1500)
    for request, outcome, amount in ((first, made, 1000), (second, other, 1500)):
        seen = (outcome.ending, outcome.provider_status, outcome.provider_payment_id, outcome.amount_minor)
        assert seen == (OperationEnding.SUCCEEDED, "succeeded", pid, amount), outcome
        found = await provider.find_operation_by_reference(
            PROVIDER_ACCOUNT, REFUND, request.client_reference, budget_s=15, provider_payment_id=pid)
        assert [o.provider_operation_id for o in found.found] == [outcome.provider_operation_id]
    assert made.provider_operation_id is not None
    by_id = await provider.get_refund(PROVIDER_ACCOUNT, made.provider_operation_id, budget_s=15)
    assert by_id.kind == "found" and by_id.found[0].amount_minor == 1000
    missing = await provider.find_operation_by_reference(PROVIDER_ACCOUNT, REFUND, "ORD-never", budget_s=15,
                                                         provider_payment_id=pid)
    assert missing.kind == "not_found"


async def test_a_hold_is_voided_and_the_lookup_sees_it(localstripe: str, provider: StripeProvider) -> None:
    pid = await held(localstripe)
    request, outcome = await send(provider, localstripe, CANCEL, pid, 4999)
    assert (outcome.ending, outcome.provider_status, outcome.provider_payment_id) == (
        OperationEnding.SUCCEEDED, "canceled", pid), outcome
    found = await provider.find_operation_by_reference(PROVIDER_ACCOUNT, CANCEL, request.client_reference,
                                                       budget_s=15, provider_payment_id=pid)
    assert [(o.operation, o.ending) for o in found.found] == [(CANCEL, OperationEnding.SUCCEEDED)]


async def test_a_hold_is_captured_and_localstripes_own_webhook_tells_of_the_capture(
        localstripe: str, provider: StripeProvider) -> None:
    deliveries: list[tuple[dict[str, str], bytes]] = []
    arrived = asyncio.Event()

    async def receive(request: Request) -> Response:
        deliveries.append((dict(request.headers), await request.body()))
        arrived.set()
        return Response(status_code=200)

    app = Starlette(routes=[Route("/webhooks/stripe", receive, methods=["POST"])])
    async with serve_asgi(app) as receiver_url:
        await register_webhook(localstripe, f"ops-{uuid.uuid4().hex[:8]}", receiver_url + "/webhooks/stripe")
        pid = await held(localstripe)
        request, outcome = await send(provider, localstripe, CAPTURE, pid, 3000)
        assert (outcome.ending, outcome.provider_status, outcome.provider_payment_id) == (
            OperationEnding.SUCCEEDED, "succeeded", pid), outcome
        assert outcome.provider_operation_id is not None and outcome.provider_operation_id.startswith("ch_")
        found = await provider.find_operation_by_reference(
            PROVIDER_ACCOUNT, CAPTURE, request.client_reference, budget_s=15, provider_payment_id=pid)
        assert [o.provider_operation_id for o in found.found] == [outcome.provider_operation_id]

        # localstripe posts about a second later; wait with a deadline, not a sleep.
        def about_the_capture() -> list[tuple[dict[str, str], bytes]]:
            return [d for d in deliveries if request.client_reference.encode() in d[1]]

        async with asyncio.timeout(20):
            while not about_the_capture():
                arrived.clear()
                await arrived.wait()
    [(headers, body)] = about_the_capture()
    delivery = provider.verify_notification(headers, body, now=datetime.now(UTC))
    assert delivery.account.provider_account == PROVIDER_ACCOUNT
    n = parse_operation_notification(body)
    assert n is not None and n.outcome.claim is not None
    assert (n.event_type, n.outcome.operation, n.outcome.ending, n.outcome.provider_payment_id,
            n.outcome.claim.reference) == (
        "payment_intent.succeeded", CAPTURE, OperationEnding.SUCCEEDED, pid, request.client_reference)
