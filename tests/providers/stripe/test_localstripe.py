"""The Stripe adapter through the real SDK against localstripe, an independent Stripe fake.

localstripe (1.15.10) runs as a real server (``tests/support/localstripe_stack.py``: on a
free port, its state in a private directory) for this module, so the SDK's whole path
runs against someone else's reading of Stripe's API: a card payment that succeeds, a
decline, a 3-D Secure ``requires_action``, and a signed webhook delivered to a real
receiver. The black-box flows (checkout, the intake, recovery) against it are
``test_localstripe_flows.py``.

What localstripe does not do, and so is not checked here (the scripted-server tests
in ``tests/unit/test_stripe_client.py`` cover it):

- idempotency keys: it ignores ``Idempotency-Key`` (no replay, no 409, no
  ``idempotency_error``) and ``Stripe-Version``;
- the search API (``/v1/payment_intents/search`` is answered 404);
- ``return_url`` on a PaymentIntent (it answers 400), so bodies here carry none (the account
  has no return URL: ``payment_method_types[]=card``); nor ``description``, which our launcher
  teaches it to take (``tests/support/localstripe_server.py``) but which these bodies leave out;
- a decline's error has ``type: invalid_request_error`` and no ``payment_intent``
  (Stripe's has ``card_error`` and the intent): the adapter's rule for a 402 without an
  intent applies.

Test card numbers are localstripe's (``resources.PaymentMethod``): 4242424242424242
succeeds, 4000000000000341 is declined when charged, 4000002500003155 requires 3-D Secure.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
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
from paycore.domain import OutcomeKind
from paycore.providers.base import Notification, NotificationUnverified, StoredRequest
from paycore.providers.stripe import DEFAULT_API_VERSION, PaymentIntent, StripeProvider, build_request_body
from paycore.providers.stripe.provider import API_VERSION as STRIPE_API_VERSION
from tests.support.localstripe_stack import (
    API_KEY,
    PROVIDER_ACCOUNT,
    WEBHOOK_SECRET,
    payment_method,
    running_localstripe,
)

ACCOUNT = PROVIDER_ACCOUNT


@pytest.fixture(scope="module")
def localstripe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """localstripe on a free port for this module, its state in a private directory."""
    with running_localstripe(tmp_path_factory.mktemp("localstripe")) as base_url:
        yield base_url


def account(base_url: str) -> ProviderAccountConfig:
    return ProviderAccountConfig(
        provider="stripe",
        account="acct_store",
        environment="test",
        base_url=base_url,
        api_key=Secret(API_KEY),
        webhook_secret=Secret(WEBHOOK_SECRET),
        api_version=DEFAULT_API_VERSION,
    )


@pytest.fixture
async def provider(localstripe: str) -> AsyncIterator[StripeProvider]:
    p = StripeProvider([account(localstripe)], SystemClock(), max_call_duration_s=30)
    try:
        yield p
    finally:
        await p.aclose()


def stored_request(base_url: str, pm: str, reference: str, amount_minor: int = 4999) -> StoredRequest:
    return StoredRequest(
        attempt_id=uuid.uuid4(),
        provider_account=ACCOUNT,
        endpoint=base_url + "/v1/payment_intents",
        api_version=DEFAULT_API_VERSION,
        idempotency_key=str(uuid.uuid4()),
        request_body=build_request_body(
            amount_minor=amount_minor, currency="EUR", payment_method=pm, reference=reference
        ),
        client_reference=reference,
        amount_minor=amount_minor,
        currency="EUR",
    )


def reference() -> str:
    return f"ORD-{uuid.uuid4().hex[:10]}"


async def test_a_card_payment_succeeds_and_is_found_by_id(localstripe: str, provider: StripeProvider) -> None:
    ref = reference()
    stored = stored_request(localstripe, await payment_method(localstripe, "4242424242424242"), ref)
    outcome = await provider.create_payment(stored, budget_s=15, first_send=True)
    assert outcome.kind is OutcomeKind.SUCCEEDED, outcome
    assert outcome.provider_payment_id is not None and outcome.provider_payment_id.startswith("pi_")
    assert (outcome.amount_minor, outcome.currency, outcome.evidence().reference) == (4999, "EUR", ref)

    found = await provider.get_payment(ACCOUNT, outcome.provider_payment_id, budget_s=15)
    assert found.kind == "found"
    assert isinstance(found.payment, PaymentIntent)
    assert (found.payment.status, found.payment.reference) == ("succeeded", ref)
    missing = await provider.get_payment(ACCOUNT, "pi_doesnotexist", budget_s=15)
    assert missing.kind == "not_found"


async def test_a_declined_card_is_failed(localstripe: str, provider: StripeProvider) -> None:
    stored = stored_request(localstripe, await payment_method(localstripe, "4000000000000341"), reference())
    outcome = await provider.create_payment(stored, budget_s=15, first_send=True)
    assert (outcome.kind, outcome.http_status) == (OutcomeKind.FAILED, 402), outcome
    assert outcome.reason == "declined:card_declined"


async def test_a_3ds_card_requires_action(localstripe: str, provider: StripeProvider) -> None:
    ref = reference()
    stored = stored_request(localstripe, await payment_method(localstripe, "4000002500003155"), ref)
    outcome = await provider.create_payment(stored, budget_s=15, first_send=True)
    assert outcome.kind is OutcomeKind.REQUIRES_ACTION, outcome
    assert outcome.next_action is not None and outcome.next_action["type"] == "use_stripe_sdk"
    assert outcome.provider_payment_id is not None
    found = await provider.get_payment(ACCOUNT, outcome.provider_payment_id, budget_s=15)
    assert found.payment is not None and found.payment.to_outcome().kind is OutcomeKind.REQUIRES_ACTION


@dataclass
class Receiver:
    """A tiny real webhook endpoint: records what it is sent, answers 200."""

    deliveries: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: Request) -> Response:
        self.deliveries.append((dict(request.headers), await request.body()))
        self.arrived.set()
        return Response(status_code=200)


async def test_a_signed_webhook_round_trip_verifies_with_our_events(
    localstripe: str, provider: StripeProvider
) -> None:
    receiver = Receiver()
    app = Starlette(routes=[Route("/webhooks/stripe", receiver.handle, methods=["POST"])])
    async with serve_asgi(app) as receiver_url:
        async with httpx.AsyncClient(trust_env=False) as http:
            registered = await http.post(
                f"{localstripe}/_config/webhooks/paycore-{uuid.uuid4().hex[:8]}",
                data={
                    "url": receiver_url + "/webhooks/stripe",
                    "secret": WEBHOOK_SECRET,
                    "events[]": "payment_intent.succeeded",
                },
            )
        registered.raise_for_status()

        ref = reference()
        stored = stored_request(localstripe, await payment_method(localstripe, "4242424242424242"), ref)
        outcome = await provider.create_payment(stored, budget_s=15, first_send=True)
        assert outcome.kind is OutcomeKind.SUCCEEDED

        # localstripe posts after about a second; wait with a deadline, not a sleep.
        def found() -> list[tuple[dict[str, str], bytes]]:
            return [d for d in receiver.deliveries if ref.encode() in d[1]]

        async with asyncio.timeout(20):
            while not found():
                receiver.arrived.clear()
                await receiver.arrived.wait()
    [(headers, body)] = found()
    assert headers["stripe-signature"].startswith("t=")

    delivery = provider.verify_notification(headers, body, now=datetime.now(UTC))
    assert delivery.account.provider_account == ACCOUNT
    assert isinstance(delivery.parsed, Notification)
    n = delivery.parsed
    assert (n.event_type, n.payment_id, n.reference) == (
        "payment_intent.succeeded",
        outcome.provider_payment_id,
        ref,
    )
    assert n.outcome.kind is OutcomeKind.SUCCEEDED
    assert delivery.key == n.event_id and n.event_id is not None and n.event_id.startswith("evt_")

    # The same bytes under another secret do not verify.
    other = StripeProvider(
        [
            ProviderAccountConfig(
                provider="stripe",
                account="acct_store",
                environment="test",
                base_url=localstripe,
                api_key=Secret(API_KEY),
                webhook_secret=Secret("whsec_someone_else"),
                api_version=STRIPE_API_VERSION,
            )
        ],
        SystemClock(),
        max_call_duration_s=30,
    )
    with pytest.raises(NotificationUnverified, match="no-matching-signature"):
        other.verify_notification(headers, body, now=datetime.now(UTC))
    await other.aclose()
