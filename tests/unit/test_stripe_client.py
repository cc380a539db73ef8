"""The Stripe adapter, through the real SDK, against a real HTTP server that plays Stripe from a script.

Each test scripts Stripe's exact status, body and headers, and asserts on the exact
requests the server received. Budgets run on :class:`FakeClock`; synchronisation is by
deadline-bounded polling, never by fixed sleeps. Every Unknown path is a named test.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import parse_qs

import pytest

from harness.servers import free_port
from paycore.clock import FakeClock
from paycore.config import ProviderAccountConfig, Secret
from paycore.domain import OutcomeKind, ProviderOutcome
from paycore.errors import InvalidPaymentMethod
from paycore.payment_methods import contains_card_number as looks_like_card_number
from paycore.providers.base import LookupResult, NotificationFormat, Provider, ReferenceLookup, StoredRequest
from paycore.providers.http import NotBuildable
from paycore.providers.registry import ProviderFactory
from paycore.providers.stripe import (
    CAPABILITIES,
    DEFAULT_API_VERSION,
    STRIPE_EVENTS,
    PaymentIntent,
    StripeProvider,
    build_request_body,
)
from tests.support.scripted_stripe import (
    INTENT_ID,
    REFERENCE,
    ScriptedStripe,
    error,
    intent,
    running_scripted_stripe,
)

API_KEY = "sk_test_51PaycoreScriptedKey"
OTHER_KEY = "sk_test_51PaycoreOtherKey"
PAYMENT_METHOD = "pm_card_visa"
IDEMPOTENCY_KEY = "8e03978e-6f0a-4b7e-9c1d-2f3a4b5c6d7e"
# Not the account's version: a send must carry the attempt's own.
STORED_VERSION = "2025-03-31.basil"


def account(
    base_url: str,
    *,
    name: str = "acct_store",
    key: str = API_KEY,
    environment: str = "test",
    return_url: str | None = None,
) -> ProviderAccountConfig:
    return ProviderAccountConfig(
        provider="stripe",
        account=name,
        environment=environment,
        base_url=base_url,
        api_key=Secret(key),
        webhook_secret=None,
        api_version=DEFAULT_API_VERSION,
        return_url=return_url,
    )


def stored_request(base_url: str, **overrides: Any) -> StoredRequest:
    values: dict[str, Any] = {
        "attempt_id": uuid.uuid4(),
        "provider_account": "stripe:acct_store:test",
        "endpoint": base_url + "/v1/payment_intents",
        "api_version": STORED_VERSION,
        "idempotency_key": IDEMPOTENCY_KEY,
        "request_body": build_request_body(
            amount_minor=4999,
            currency="EUR",
            payment_method=PAYMENT_METHOD,
            reference=REFERENCE,
            description="order ORD-5521 – café",
        ),
        "client_reference": REFERENCE,
        "amount_minor": 4999,
        "currency": "EUR",
    }
    values.update(overrides)
    return StoredRequest(**values)


async def eventually(predicate: Callable[[], bool], *, within_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.002)


@pytest.fixture
async def stripe_api() -> AsyncIterator[ScriptedStripe]:
    async with running_scripted_stripe() as server:
        yield server


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def provider(stripe_api: ScriptedStripe, clock: FakeClock) -> AsyncIterator[StripeProvider]:
    p = StripeProvider(
        [account(stripe_api.base_url), account(stripe_api.base_url, name="acct_other", key=OTHER_KEY)],
        clock,
        max_call_duration_s=30,
    )
    try:
        yield p
    finally:
        await p.aclose()


async def create(
    provider: StripeProvider,
    server: ScriptedStripe,
    *,
    first_send: bool = True,
    budget_s: float | None = 15,
    **overrides: Any,
) -> ProviderOutcome:
    return await provider.create_payment(
        stored_request(server.base_url, **overrides), budget_s=budget_s, first_send=first_send
    )


# ---------------------------------------------------------------------------
# Construction and the stored body


async def test_it_is_a_provider_with_the_factorys_signature() -> None:
    # mypy checks these assignments: the class fits registry.ProviderFactory and Provider.
    factory: ProviderFactory = StripeProvider
    provider: Provider = factory([], FakeClock(), max_call_duration_s=30)
    events: NotificationFormat = STRIPE_EVENTS
    assert (provider.name, events.name) == ("stripe", "stripe")
    await provider.aclose()


def test_capabilities_say_search_lags_and_500s_are_replayed(provider: StripeProvider) -> None:
    assert provider.capabilities == CAPABILITIES
    assert CAPABILITIES.lookup_by_reference is ReferenceLookup.EVENTUALLY_CONSISTENT
    assert (CAPABILITIES.key_retention_s, CAPABILITIES.server_errors_replayed) == (86_400.0, True)


def test_build_request_body_is_the_sdk_form_encoding() -> None:
    body = build_request_body(
        amount_minor=4999,
        currency="EUR",
        payment_method="pm_card_visa",
        reference="ORD-1",
        description="café [x] a+b",
    )
    assert body == (
        "amount=4999&currency=eur&payment_method=pm_card_visa&confirm=true"
        "&metadata[paycore_reference]=ORD-1&description=caf%C3%A9+[x]+a%2Bb"
        "&payment_method_types[]=card"
    )


def test_build_request_body_sends_the_return_url_instead_of_card_only() -> None:
    body = build_request_body(
        amount_minor=1,
        currency="EUR",
        payment_method="pm_x",
        reference="r",
        return_url="https://shop.example/return",
    )
    assert body.endswith("&return_url=https%3A%2F%2Fshop.example%2Freturn")
    assert "payment_method_types" not in body


@pytest.mark.parametrize(
    "overrides",
    [
        {"amount_minor": 0},
        {"amount_minor": True},
        {"amount_minor": 100_000_000},
        {"currency": "eur"},
        {"payment_method": "tok_visa"},
        {"payment_method": {"type": "card"}},
        {"payment_method": ""},
        {"payment_method": "4242424242424242"},
        {"payment_method": "pm_4242424242424242"},
        {"description": "card 4242 4242 4242 4242"},
        {"reference": "4000-0025-0000-3155"},
        {"reference": "it's"},
        {"reference": "a\\b"},
        {"reference": "x" * 65},
        {"reference": ""},
    ],
)
def test_build_request_body_rejects_what_stripe_would_and_card_numbers(overrides: dict[str, Any]) -> None:
    values: dict[str, Any] = {
        "amount_minor": 1,
        "currency": "EUR",
        "payment_method": "pm_card_visa",
        "reference": "r",
    }
    values.update(overrides)
    with pytest.raises(InvalidPaymentMethod):  # the library's error, still a ValueError for callers
        build_request_body(**values)


async def test_provider_body_takes_the_named_accounts_return_url(stripe_api: ScriptedStripe) -> None:
    p = StripeProvider(
        [
            account(stripe_api.base_url, return_url="https://shop.example/back"),
            account(stripe_api.base_url, name="acct_other", key=OTHER_KEY),
        ],
        FakeClock(),
        max_call_duration_s=30,
    )
    kw: dict[str, Any] = {"amount_minor": 5, "currency": "EUR", "payment_method": "pm_x", "reference": "r"}
    store = account(stripe_api.base_url, return_url="https://shop.example/back")
    other = account(stripe_api.base_url, name="acct_other", key=OTHER_KEY)
    assert "return_url=https" in p.build_request_body(store, **kw)
    assert p.build_request_body(other, **kw).endswith("payment_method_types[]=card")
    with pytest.raises(NotBuildable, match="account-not-configured"):
        p.build_request_body(account(stripe_api.base_url, name="acct_nope"), **kw)
    await p.aclose()


# ---------------------------------------------------------------------------
# What goes on the wire


async def test_every_send_carries_the_stored_bytes_key_and_version(
    provider: StripeProvider, stripe_api: ScriptedStripe
) -> None:
    # Characters the form encoding treats specially, so the SDK's own encoding is proven equal.
    body = build_request_body(
        amount_minor=4999,
        currency="EUR",
        payment_method=PAYMENT_METHOD,
        reference=REFERENCE,
        description="Ünïcode café [x] a+b=c&d %5B 100% ~*'()!/?#",
    )
    stored = stored_request(stripe_api.base_url, request_body=body)
    assert provider.unbuildable_reason(stored) is None
    for _ in range(3):
        stripe_api.reply(200, intent())
    for first in (True, False, False):
        outcome = await provider.create_payment(stored, budget_s=15, first_send=first)
        assert outcome.kind is OutcomeKind.SUCCEEDED

    assert len(stripe_api.received) == 3
    for req in stripe_api.received:
        assert (req.method, req.path) == ("POST", "/v1/payment_intents")
        assert req.body == body.encode("utf-8")
        assert req.headers["idempotency-key"] == IDEMPOTENCY_KEY
        assert req.headers["stripe-version"] == STORED_VERSION
        assert req.headers["authorization"] == f"Bearer {API_KEY}"
        assert req.headers["content-type"] == "application/x-www-form-urlencoded"
        assert "stripe-account" not in req.headers
    assert parse_qs(stripe_api.received[0].body.decode())["metadata[paycore_reference]"] == [REFERENCE]


async def test_the_stored_accounts_key_is_applied(
    provider: StripeProvider, stripe_api: ScriptedStripe
) -> None:
    stripe_api.reply(200, intent())
    await create(provider, stripe_api, provider_account="stripe:acct_other:test")
    assert stripe_api.received[0].headers["authorization"] == f"Bearer {OTHER_KEY}"


async def test_a_500_is_answered_once_the_sdk_does_not_retry(
    provider: StripeProvider, stripe_api: ScriptedStripe
) -> None:
    # The SDK would retry a 500 (and this header asks it to) with max_network_retries > 0.
    stripe_api.reply(500, error("api_error"), headers={"Stripe-Should-Retry": "true"})
    stripe_api.reply(200, intent())  # what a retry would get
    outcome = await create(provider, stripe_api)
    assert (outcome.kind, outcome.reason, outcome.http_status) == (
        OutcomeKind.UNKNOWN,
        "provider.http-500",
        500,
    )
    assert len(stripe_api.received) == 1


async def test_a_409_is_answered_once_the_sdk_does_not_retry(
    provider: StripeProvider, stripe_api: ScriptedStripe
) -> None:
    stripe_api.reply(409, error("idempotency_error", "idempotency_key_in_use"))
    stripe_api.reply(200, intent())
    outcome = await create(provider, stripe_api)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, "provider.in-progress")
    assert len(stripe_api.received) == 1


async def test_a_connection_reset_mid_body_is_unknown_and_not_retried(
    provider: StripeProvider, stripe_api: ScriptedStripe
) -> None:
    stripe_api.reply(200, intent(), fail_mid_stream=True)
    stripe_api.reply(200, intent())
    outcome = await create(provider, stripe_api)
    assert outcome.kind is OutcomeKind.UNKNOWN
    assert outcome.reason is not None and outcome.reason.startswith("provider.transport.")
    assert outcome.provider_payment_id is None
    assert len(stripe_api.received) == 1


# ---------------------------------------------------------------------------
# Budgets


# ---------------------------------------------------------------------------
# A stored request that cannot be sent as stored: Unknown, nothing sent


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"request_body": "amount=4999&currency=eur&api_key=sk_live_x"}, "invalid-body"),
        ({"request_body": "amount=4999&amount=5000"}, "invalid-body"),
        ({"request_body": "amount=4999&description=a%20b"}, "invalid-body"),  # not the SDK's encoding of it
        ({"request_body": "amount=4999&description=%FF"}, "invalid-body"),
        ({"idempotency_key": "k" * 256}, "invalid-header"),
        ({"idempotency_key": "two words"}, "invalid-header"),
        ({"api_version": "2026-10-28 endive"}, "invalid-header"),
    ],
)
async def test_a_stored_request_that_cannot_be_sent_as_stored_is_unknown(
    provider: StripeProvider, stripe_api: ScriptedStripe, overrides: dict[str, Any], reason: str
) -> None:
    stored = stored_request(stripe_api.base_url, **overrides)
    assert provider.unbuildable_reason(stored) == reason
    outcome = await provider.create_payment(stored, budget_s=15, first_send=True)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, f"request.not-buildable.{reason}")
    assert stripe_api.received == []


@pytest.mark.parametrize(
    ("key", "environment", "reason"),
    [
        ("sk_live_51Real", "test", "key-environment-mismatch"),
        ("sk_test_51Test", "live", "key-environment-mismatch"),
        ("pk_test_51Publishable", "test", "invalid-api-key"),
    ],
)
async def test_a_key_whose_mode_is_not_the_accounts_sends_nothing(
    stripe_api: ScriptedStripe, key: str, environment: str, reason: str
) -> None:
    p = StripeProvider(
        [account(stripe_api.base_url, key=key, environment=environment)], FakeClock(), max_call_duration_s=30
    )
    stored = stored_request(stripe_api.base_url, provider_account=f"stripe:acct_store:{environment}")
    outcome = await p.create_payment(stored, budget_s=15, first_send=True)
    await p.aclose()
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, f"request.not-buildable.{reason}")
    assert stripe_api.received == []


async def test_an_account_base_url_that_is_not_http_sends_nothing_create_or_lookup(
    stripe_api: ScriptedStripe,
) -> None:
    """The SDK joins the account's base URL and the path: one that is not http(s) is not where
    this account's payments live. Every call on it is refused before sending."""
    base_url = "ftp://127.0.0.1:21"
    p = StripeProvider([account(base_url)], FakeClock(), max_call_duration_s=30)
    stored = stored_request(base_url)
    assert p.unbuildable_reason(stored) == "endpoint-changed"
    outcome = await p.create_payment(stored, budget_s=15, first_send=True)
    by_id = await p.get_payment("stripe:acct_store:test", INTENT_ID, budget_s=5)
    by_reference = await p.find_by_reference("stripe:acct_store:test", REFERENCE, budget_s=5)
    await p.aclose()
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, "request.not-buildable.endpoint-changed")
    assert (by_id.kind, by_id.reason) == ("failed", "request.not-buildable.endpoint-changed")
    assert (by_reference.kind, by_reference.reason) == ("failed", "request.not-buildable.endpoint-changed")
    assert stripe_api.received == []


async def test_an_empty_stored_key_is_refused_where_the_sdk_would_invent_one(
    provider: StripeProvider, stripe_api: ScriptedStripe
) -> None:
    """The SDK sends a POST without an ``idempotency_key`` (an empty one included) under a random
    key of its own: a send no later send could repeat. An empty stored key sends nothing."""
    stored = stored_request(stripe_api.base_url, idempotency_key="")
    assert provider.unbuildable_reason(stored) == "invalid-header"
    stripe_api.reply(200, intent())
    outcome = await provider.create_payment(stored, budget_s=15, first_send=True)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, "request.not-buildable.invalid-header")
    assert stripe_api.received == []


# ---------------------------------------------------------------------------
# 200: the PaymentIntent's status


async def test_a_succeeded_intent_is_succeeded_with_its_evidence(
    provider: StripeProvider, stripe_api: ScriptedStripe
) -> None:
    stripe_api.reply(200, intent(), headers={"Request-Id": "req_1"})
    outcome = await create(provider, stripe_api)
    assert outcome.kind is OutcomeKind.SUCCEEDED
    assert (outcome.provider_payment_id, outcome.amount_minor, outcome.currency) == (INTENT_ID, 4999, "EUR")
    assert (outcome.http_status, outcome.replayed) == (200, False)
    claim = outcome.evidence()
    assert (claim.reference, claim.accounts, claim.livemodes) == (REFERENCE, (), (False,))


@pytest.mark.parametrize(
    ("obj", "kind", "reason"),
    [
        (intent("processing"), OutcomeKind.PROCESSING, None),
        (intent("requires_capture"), OutcomeKind.SUCCEEDED, None),  # a hold: nothing charged yet
        (intent("requires_confirmation"), OutcomeKind.PROCESSING, None),
        (intent("requires_payment_method"), OutcomeKind.PROCESSING, None),
        (
            intent(
                "requires_payment_method",
                last_payment_error={
                    "type": "card_error",
                    "code": "card_declined",
                    "decline_code": "insufficient_funds",
                },
            ),
            OutcomeKind.FAILED,
            "declined:insufficient_funds",
        ),
        (
            intent(
                "requires_payment_method",
                last_payment_error={
                    "type": "invalid_request_error",
                    "code": "payment_intent_authentication_failure",
                },
            ),
            OutcomeKind.FAILED,
            "declined:payment_intent_authentication_failure",
        ),
        (intent("canceled"), OutcomeKind.FAILED, "canceled"),
    ],
)
async def test_each_intent_status_has_its_outcome(
    provider: StripeProvider,
    stripe_api: ScriptedStripe,
    obj: dict[str, Any],
    kind: OutcomeKind,
    reason: str | None,
) -> None:
    stripe_api.reply(200, obj)
    outcome = await create(provider, stripe_api)
    assert (outcome.kind, outcome.reason, outcome.provider_payment_id) == (kind, reason, INTENT_ID)
    assert outcome.provider_status == obj["status"]


async def test_requires_action_carries_the_next_action(
    provider: StripeProvider, stripe_api: ScriptedStripe
) -> None:
    action = {"type": "redirect_to_url", "redirect_to_url": {"url": "https://hooks.stripe.com/3ds"}}
    stripe_api.reply(200, intent("requires_action", next_action=action))
    outcome = await create(provider, stripe_api)
    assert (outcome.kind, outcome.next_action) == (OutcomeKind.REQUIRES_ACTION, action)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"metadata": {"paycore_reference": "ORD-OTHER"}}, "reference"),
        ({"amount": 5000}, "amount"),
        ({"currency": "usd"}, "currency"),
        ({"livemode": True}, "environment"),
    ],
)
async def test_an_answer_about_another_payment_is_not_this_attempts_evidence(
    provider: StripeProvider, stripe_api: ScriptedStripe, overrides: dict[str, Any], field: str
) -> None:
    stripe_api.reply(200, intent(id="pi_someone_else", **overrides))
    outcome = await create(provider, stripe_api)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, f"provider.response-mismatch.{field}")
    assert (outcome.provider_payment_id, outcome.provider_status) == (None, None)
    assert outcome.evidence().provider_payment_id == "pi_someone_else"  # kept for the escalation


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "provider.body-unreadable"),
        (b"{not json", "provider.body-unreadable"),
        (b"\xff\xfe", "provider.body-unreadable"),
        (b"[]", "provider.body-unrecognized"),
        (b'{"id": "pi_1", "object": "payment_intent"}', "provider.body-unrecognized"),
        (
            b'{"id": "pi_1", "object": "payment_intent", "amount": 4999, "currency": "eur", '
            b'"status": "done"}',
            "provider.body-unrecognized",
        ),
    ],
)
async def test_an_unreadable_or_unrecognised_200_is_unknown(
    provider: StripeProvider, stripe_api: ScriptedStripe, content: bytes, reason: str
) -> None:
    stripe_api.reply(200, content)
    outcome = await create(provider, stripe_api)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, reason)


# ---------------------------------------------------------------------------
# Errors


async def test_a_402_card_error_is_failed_with_its_intent_as_evidence(
    provider: StripeProvider, stripe_api: ScriptedStripe
) -> None:
    pi = intent(
        "requires_payment_method",
        last_payment_error={"code": "card_declined", "decline_code": "generic_decline"},
    )
    stripe_api.reply(
        402, error("card_error", "card_declined", decline_code="generic_decline", payment_intent=pi)
    )
    outcome = await create(provider, stripe_api)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.FAILED, "declined:generic_decline")
    assert (outcome.provider_payment_id, outcome.http_status) == (INTENT_ID, 402)


async def test_a_402_naming_another_payment_is_unknown(
    provider: StripeProvider, stripe_api: ScriptedStripe
) -> None:
    pi = intent(
        "requires_payment_method",
        id="pi_other",
        metadata={"paycore_reference": "ORD-OTHER"},
        last_payment_error={"code": "card_declined"},
    )
    stripe_api.reply(402, error("card_error", "card_declined", payment_intent=pi))
    outcome = await create(provider, stripe_api)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, "provider.response-mismatch.reference")
    assert outcome.provider_payment_id is None


async def test_a_402_whose_intent_says_succeeded_is_not_understood(
    provider: StripeProvider, stripe_api: ScriptedStripe
) -> None:
    stripe_api.reply(402, error("card_error", "card_declined", payment_intent=intent("succeeded")))
    outcome = await create(provider, stripe_api)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, "provider.body-unrecognized")


async def test_a_402_without_an_intent_is_a_decline(
    provider: StripeProvider, stripe_api: ScriptedStripe
) -> None:
    stripe_api.reply(402, error("card_error", "card_declined", decline_code="stolen_card"))
    outcome = await create(provider, stripe_api)
    assert (outcome.kind, outcome.reason, outcome.provider_payment_id) == (
        OutcomeKind.FAILED,
        "declined:stolen_card",
        None,
    )


@pytest.mark.parametrize(
    ("status", "content", "reason"),
    [
        (402, b"<html>", "provider.body-unreadable"),
        (402, b'{"message": "no error object"}', "provider.body-unrecognized"),
        (400, b"", "provider.body-unreadable"),
        (400, b'{"error": "invalid_grant"}', "provider.body-unrecognized"),
        (400, b'{"error": {"type": "card_error", "code": "x"}}', "provider.body-unrecognized"),
    ],
)
async def test_an_unreadable_error_body_is_unknown(
    provider: StripeProvider, stripe_api: ScriptedStripe, status: int, content: bytes, reason: str
) -> None:
    stripe_api.reply(status, content)
    outcome = await create(provider, stripe_api)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, reason)


async def test_a_400_on_the_first_send_is_not_applied(
    provider: StripeProvider, stripe_api: ScriptedStripe
) -> None:
    stripe_api.reply(400, error("invalid_request_error", "parameter_invalid_integer", param="amount"))
    outcome = await create(provider, stripe_api)
    assert (outcome.kind, outcome.reason) == (
        OutcomeKind.NOT_APPLIED,
        "rejected:parameter_invalid_integer:amount",
    )
    assert outcome.request_rejected


async def test_a_400_on_a_resend_is_unknown(provider: StripeProvider, stripe_api: ScriptedStripe) -> None:
    stripe_api.reply(400, error("invalid_request_error", "parameter_missing", param="amount"))
    outcome = await create(provider, stripe_api, first_send=False)
    assert (outcome.kind, outcome.reason) == (
        OutcomeKind.UNKNOWN,
        "provider.rejected-this-send.parameter_missing",
    )
    assert outcome.request_rejected


async def test_a_replayed_400_is_unknown_even_on_the_first_send(
    provider: StripeProvider, stripe_api: ScriptedStripe
) -> None:
    stripe_api.reply(
        400, error("invalid_request_error", "parameter_missing"), headers={"Idempotent-Replayed": "true"}
    )
    outcome = await create(provider, stripe_api)
    assert (outcome.kind, outcome.replayed) == (OutcomeKind.UNKNOWN, True)


async def test_a_400_naming_an_intent_is_that_intents_outcome_never_not_applied(
    provider: StripeProvider, stripe_api: ScriptedStripe
) -> None:
    pi = intent(
        "requires_payment_method", last_payment_error={"code": "payment_intent_authentication_failure"}
    )
    stripe_api.reply(
        400, error("invalid_request_error", "payment_intent_authentication_failure", payment_intent=pi)
    )
    outcome = await create(provider, stripe_api)
    assert (outcome.kind, outcome.provider_payment_id) == (OutcomeKind.FAILED, INTENT_ID)


@pytest.mark.parametrize("first_send", [True, False])
async def test_an_idempotency_error_is_unknown(
    provider: StripeProvider, stripe_api: ScriptedStripe, first_send: bool, caplog: pytest.LogCaptureFixture
) -> None:
    stripe_api.reply(400, error("idempotency_error", "idempotency_key_in_use"))
    with caplog.at_level(logging.ERROR, logger="paycore.providers.stripe"):
        outcome = await create(provider, stripe_api, first_send=first_send)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, "provider.idempotency-error")
    assert any("idempotency key reused" in r.getMessage() for r in caplog.records)


async def test_409_idempotency_key_in_use_is_unknown(
    provider: StripeProvider, stripe_api: ScriptedStripe
) -> None:
    stripe_api.reply(409, error("idempotency_error", "idempotency_key_in_use"))
    outcome = await create(provider, stripe_api, first_send=True)
    assert (outcome.kind, outcome.reason, outcome.http_status) == (
        OutcomeKind.UNKNOWN,
        "provider.in-progress",
        409,
    )


@pytest.mark.parametrize("status", [401, 403])
async def test_an_auth_rejection_is_not_applied_only_on_the_first_send(
    provider: StripeProvider, stripe_api: ScriptedStripe, status: int
) -> None:
    stripe_api.reply(status, error("invalid_request_error"))
    stripe_api.reply(status, error("invalid_request_error"))
    first = await create(provider, stripe_api, first_send=True)
    resend = await create(provider, stripe_api, first_send=False)
    assert (first.kind, first.reason) == (OutcomeKind.NOT_APPLIED, "rejected:auth")
    assert (resend.kind, resend.reason) == (OutcomeKind.UNKNOWN, "provider.rejected.auth")


async def test_429_is_not_applied_only_on_the_first_send(
    provider: StripeProvider, stripe_api: ScriptedStripe
) -> None:
    stripe_api.reply(429, error("invalid_request_error", "rate_limit"), headers={"Retry-After": "2"})
    stripe_api.reply(429, error("invalid_request_error", "rate_limit"))
    first = await create(provider, stripe_api, first_send=True)
    resend = await create(provider, stripe_api, first_send=False)
    assert (first.kind, first.reason, first.detail) == (
        OutcomeKind.NOT_APPLIED,
        "rejected:rate_limited",
        {"retry_after_s": 2.0},
    )
    assert (resend.kind, resend.reason) == (OutcomeKind.UNKNOWN, "provider.rate-limited")


@pytest.mark.parametrize("status", [500, 502, 503, 504])
async def test_a_5xx_is_unknown(provider: StripeProvider, stripe_api: ScriptedStripe, status: int) -> None:
    stripe_api.reply(status, error("api_error"))
    outcome = await create(provider, stripe_api)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, f"provider.http-{status}")


async def test_a_replayed_500_on_a_resend_is_unknown(
    provider: StripeProvider, stripe_api: ScriptedStripe
) -> None:
    stripe_api.reply(500, error("api_error"))
    stripe_api.reply(500, error("api_error"), headers={"Idempotent-Replayed": "true"})
    await create(provider, stripe_api, first_send=True)
    outcome = await create(provider, stripe_api, first_send=False)
    assert (outcome.kind, outcome.reason, outcome.replayed) == (
        OutcomeKind.UNKNOWN,
        "provider.http-500",
        True,
    )


@pytest.mark.parametrize("status", [201, 302, 404, 418])
async def test_an_unexpected_status_is_unknown(
    provider: StripeProvider, stripe_api: ScriptedStripe, status: int
) -> None:
    stripe_api.reply(status, intent(), headers={"Location": "http://elsewhere/"} if status == 302 else {})
    outcome = await create(provider, stripe_api)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, f"provider.unexpected-status-{status}")
    assert len(stripe_api.received) == 1  # a redirect is not followed


# ---------------------------------------------------------------------------
# Lookups


async def test_get_payment_finds_the_intent_under_the_accounts_version(
    provider: StripeProvider, stripe_api: ScriptedStripe
) -> None:
    stripe_api.reply(200, intent("processing"))
    result = await provider.get_payment("stripe:acct_store:test", INTENT_ID, budget_s=5)
    assert result.kind == "found"
    assert isinstance(result.payment, PaymentIntent) and result.payment.status == "processing"
    [req] = stripe_api.received
    assert (req.method, req.path, req.body) == ("GET", f"/v1/payment_intents/{INTENT_ID}", b"")
    assert req.headers["stripe-version"] == DEFAULT_API_VERSION
    assert "idempotency-key" not in req.headers


@pytest.mark.parametrize(
    ("status", "content", "kind", "reason"),
    [
        (404, error("invalid_request_error", "resource_missing"), "not_found", None),
        (500, error("api_error"), "failed", "provider.http-500"),
        (401, error("invalid_request_error"), "failed", "provider.rejected.auth"),
        (200, b"nope", "failed", "provider.body-unreadable"),
        (200, {"id": "pi_1"}, "failed", "provider.body-unrecognized"),
        (418, b"", "failed", "provider.unexpected-status-418"),
    ],
)
async def test_get_payment_answers(
    provider: StripeProvider,
    stripe_api: ScriptedStripe,
    status: int,
    content: Any,
    kind: str,
    reason: str | None,
) -> None:
    stripe_api.reply(status, content)
    result = await provider.get_payment("stripe:acct_store:test", INTENT_ID, budget_s=5)
    assert (result.kind, result.reason) == (kind, reason)


async def test_a_rate_limited_lookup_says_when(provider: StripeProvider, stripe_api: ScriptedStripe) -> None:
    stripe_api.reply(429, error("invalid_request_error", "rate_limit"), headers={"Retry-After": "3"})
    stripe_api.reply(429, error("invalid_request_error", "rate_limit"))
    first = await provider.get_payment("stripe:acct_store:test", INTENT_ID, budget_s=5)
    second = await provider.get_payment("stripe:acct_store:test", INTENT_ID, budget_s=5)
    assert (first.kind, first.retry_after_s) == ("rate_limited", 3.0)
    assert (second.kind, second.retry_after_s) == ("rate_limited", 1.0)


LOOKUPS = ("get_payment", "find_by_reference")


async def look_up(p: StripeProvider, lookup: str, budget_s: float = 5) -> LookupResult:
    if lookup == "get_payment":
        return await p.get_payment("stripe:acct_store:test", INTENT_ID, budget_s=budget_s)
    return await p.find_by_reference("stripe:acct_store:test", REFERENCE, budget_s=budget_s)


@pytest.mark.parametrize("lookup", LOOKUPS)
async def test_a_lookup_with_its_budget_spent_sends_nothing_and_fails(
    stripe_api: ScriptedStripe, clock: FakeClock, lookup: str
) -> None:
    p = StripeProvider([account(stripe_api.base_url)], clock, max_call_duration_s=30)
    results = [await look_up(p, lookup, budget_s=0), await look_up(p, lookup, budget_s=-1)]
    await p.aclose()
    assert {(r.kind, r.reason) for r in results} == {("failed", "provider.no-response.caller")}
    assert stripe_api.received == []


@pytest.mark.parametrize("lookup", LOOKUPS)
async def test_a_lookup_without_an_answer_in_its_budget_fails_never_not_found(
    provider: StripeProvider, stripe_api: ScriptedStripe, clock: FakeClock, lookup: str
) -> None:
    release = stripe_api.hang()
    task = asyncio.create_task(look_up(provider, lookup))
    await eventually(lambda: len(stripe_api.received) == 1)
    clock.advance(5.001)
    result = await task
    release.set()
    assert (result.kind, result.reason) == ("failed", "provider.no-response.caller")


@pytest.mark.parametrize("lookup", LOOKUPS)
async def test_a_lookup_whose_connection_breaks_fails_never_not_found(
    provider: StripeProvider, stripe_api: ScriptedStripe, lookup: str
) -> None:
    answer = {"object": "search_result", "data": []} if lookup == "find_by_reference" else intent()
    stripe_api.reply(200, answer, fail_mid_stream=True)
    result = await look_up(provider, lookup)
    assert result.kind == "failed"
    assert result.reason is not None and result.reason.startswith("provider.transport."), result.reason
    assert len(stripe_api.received) == 1  # not retried


@pytest.mark.parametrize("lookup", LOOKUPS)
async def test_a_lookup_on_a_refused_connection_fails(clock: FakeClock, lookup: str) -> None:
    base_url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    p = StripeProvider([account(base_url)], clock, max_call_duration_s=30)
    result = await look_up(p, lookup)
    await p.aclose()
    assert (result.kind, result.reason) == ("failed", "provider.transport.ConnectError")


@pytest.mark.parametrize("lookup", LOOKUPS)
async def test_a_lookup_under_a_version_that_is_no_header_value_sends_nothing(
    stripe_api: ScriptedStripe, lookup: str
) -> None:
    acct = dataclasses.replace(account(stripe_api.base_url), api_version="2026-10-28 endive")
    p = StripeProvider([acct], FakeClock(), max_call_duration_s=30)
    result = await look_up(p, lookup)
    await p.aclose()
    assert (result.kind, result.reason) == ("failed", "request.not-buildable.invalid-header")
    assert stripe_api.received == []


@pytest.mark.parametrize("payment_id", ["", "ch_1", "pi_1/../../v1/charges", "pi_1 2"])
async def test_a_malformed_payment_id_sends_nothing(
    provider: StripeProvider, stripe_api: ScriptedStripe, payment_id: str
) -> None:
    result = await provider.get_payment("stripe:acct_store:test", payment_id, budget_s=5)
    assert (result.kind, result.reason) == ("failed", "request.not-buildable.invalid-payment-id")
    assert stripe_api.received == []


async def test_find_by_reference_searches_the_metadata_oldest_first(
    provider: StripeProvider, stripe_api: ScriptedStripe
) -> None:
    newer, older = (
        intent(id="pi_newer", created=1795900100),
        intent("canceled", id="pi_older", created=1795900000),
    )
    stripe_api.reply(200, {"object": "search_result", "data": [newer, older], "has_more": False})
    result = await provider.find_by_reference("stripe:acct_store:test", REFERENCE, budget_s=5)
    assert result.kind == "found"
    assert [p.claim().provider_payment_id for p in result.payments] == ["pi_older", "pi_newer"]
    [req] = stripe_api.received
    assert req.path == "/v1/payment_intents/search"
    assert parse_qs(req.query.decode()) == {
        "query": [f"metadata['paycore_reference']:'{REFERENCE}'"],
        "limit": ["100"],
    }


async def test_find_by_reference_with_no_result_is_not_found(
    provider: StripeProvider, stripe_api: ScriptedStripe
) -> None:
    stripe_api.reply(200, {"object": "search_result", "data": [], "has_more": False})
    result = await provider.find_by_reference("stripe:acct_store:test", REFERENCE, budget_s=5)
    assert result.kind == "not_found"


async def test_find_by_reference_with_an_unrecognised_item_fails(
    provider: StripeProvider, stripe_api: ScriptedStripe
) -> None:
    stripe_api.reply(200, {"object": "search_result", "data": [intent(), {"id": "pi_x"}]})
    result = await provider.find_by_reference("stripe:acct_store:test", REFERENCE, budget_s=5)
    assert (result.kind, result.reason) == ("failed", "provider.body-unrecognized")


@pytest.mark.parametrize("answer", [
    {"object": "search_result", "data": {"id": INTENT_ID}},
    {"object": "search_result"},
    [intent()],
    intent(),  # an intent where a search result belongs
], ids=["data-not-a-list", "no-data", "a-bare-list", "an-intent"])
async def test_a_search_answer_that_is_not_a_list_of_intents_fails(
    provider: StripeProvider, stripe_api: ScriptedStripe, answer: Any
) -> None:
    stripe_api.reply(200, answer)
    result = await provider.find_by_reference("stripe:acct_store:test", REFERENCE, budget_s=5)
    assert (result.kind, result.reason) == ("failed", "provider.body-unrecognized")


@pytest.mark.parametrize("reference", ["", "it's", "a\\b", "a\nb"])
async def test_a_reference_that_would_break_the_query_sends_nothing(
    provider: StripeProvider, stripe_api: ScriptedStripe, reference: str
) -> None:
    result = await provider.find_by_reference("stripe:acct_store:test", reference, budget_s=5)
    assert (result.kind, result.reason) == ("failed", "request.not-buildable.invalid-reference")
    assert stripe_api.received == []


# ---------------------------------------------------------------------------
# Logs


async def test_no_secret_body_or_payment_method_reaches_a_log(
    provider: StripeProvider, stripe_api: ScriptedStripe, caplog: pytest.LogCaptureFixture
) -> None:
    stored = stored_request(stripe_api.base_url)
    stripe_api.reply(200, intent(client_secret="pi_secret_abc"))
    stripe_api.reply(402, error("card_error", "card_declined"))
    stripe_api.reply(500, error("api_error"))
    with caplog.at_level(logging.DEBUG):
        for _ in range(3):
            await provider.create_payment(stored, budget_s=15, first_send=True)
        await provider.get_payment("stripe:acct_store:test", INTENT_ID, budget_s=5)
    everything = caplog.text + "\n".join(r.getMessage() for r in caplog.records)
    assert "stripe create attempt_id=" in everything  # our lines are there
    for secret in (API_KEY, "Bearer", PAYMENT_METHOD, stored.request_body, "pi_secret_abc", "café"):
        assert secret not in everything
    assert not [r for r in caplog.records if r.name.startswith("stripe") and r.levelno <= logging.DEBUG]


@pytest.mark.parametrize(
    ("text", "card_like"),
    [
        ("4242424242424242", True),
        ("4242 4242 4242 4242", True),
        ("4242-4242-4242-4242", True),
        ("paid with 4242 4242 4242 4242 1234 today", True),  # the number is its first four groups
        ("378282246310005", True),  # 15-digit Amex test number
        ("4242424242424243", False),  # not Luhn-valid
        ("12345678901234567890123", False),  # 23 digits: not windowed into a 16-digit "card"
        ("ORD-5521-a1", False),
        ("order 2026-12-01 #42", False),
    ],
)
def test_what_looks_like_a_card_number(text: str, card_like: bool) -> None:
    assert looks_like_card_number(text) is card_like
