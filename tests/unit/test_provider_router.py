"""Several providers behind one set of calls: each call goes to its own account's provider.

Cardco and Adyen are real scripted HTTP servers; the router is what ``for_accounts`` builds
when a checkout or a recovery worker is configured with accounts of both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from paycore.clock import FakeClock
from paycore.domain import OutcomeKind
from paycore.errors import InvalidPaymentMethod
from paycore.providers.base import ReferenceLookup
from paycore.providers.cardco import CardcoClient
from paycore.providers.registry import ProviderRouter, for_accounts
from tests.support.scripted_adyen import ScriptedAdyen, payment_response, running_scripted_adyen
from tests.support.scripted_cardco import ScriptedCardco, payment_object, running_scripted_cardco
from tests.unit import test_adyen_client as adyen_t
from tests.unit import test_cardco_client as cardco_t


@pytest.fixture
async def servers() -> AsyncIterator[tuple[ScriptedCardco, ScriptedAdyen]]:
    async with running_scripted_cardco() as cardco, running_scripted_adyen() as adyen:
        yield cardco, adyen


@pytest.fixture
async def router(servers: tuple[ScriptedCardco, ScriptedAdyen]) -> AsyncIterator[ProviderRouter]:
    cardco, adyen = servers
    calls = for_accounts([cardco_t.account(cardco.base_url), adyen_t.account(adyen.base_url)], FakeClock(),
                         max_call_duration_s=30)
    assert isinstance(calls, ProviderRouter)
    yield calls
    await calls.aclose()


def test_one_provider_needs_no_router() -> None:
    calls = for_accounts([cardco_t.account("http://127.0.0.1:9")], FakeClock(), max_call_duration_s=30)
    assert isinstance(calls, CardcoClient)


async def test_each_create_goes_to_its_accounts_provider_only(
        router: ProviderRouter, servers: tuple[ScriptedCardco, ScriptedAdyen]) -> None:
    cardco, adyen = servers
    adyen.reply(200, payment_response("Authorised"))
    outcome = await router.create_payment(adyen_t.stored_request(adyen.base_url), budget_s=5, first_send=True)
    assert outcome.kind is OutcomeKind.SUCCEEDED
    assert (len(adyen.received), len(cardco.received)) == (1, 0)

    cardco.reply(201, payment_object())
    stored = cardco_t.stored_request(cardco.base_url)
    outcome = await router.create_payment(stored, budget_s=5, first_send=True)
    assert outcome.kind is OutcomeKind.SUCCEEDED
    assert (len(adyen.received), len(cardco.received)) == (1, 1)


async def test_lookups_and_capabilities_follow_the_account(
        router: ProviderRouter, servers: tuple[ScriptedCardco, ScriptedAdyen]) -> None:
    cardco, adyen = servers
    adyen_account = adyen_t.stored_request(adyen.base_url).provider_account
    assert router.capabilities_of(adyen_account).lookup_by_reference is ReferenceLookup.UNSUPPORTED
    assert router.capabilities_of("cardco:acct_store:test").lookup_by_reference is ReferenceLookup.CONSISTENT
    missed = await router.find_by_reference(adyen_account, "ORD-1-a1", budget_s=5)
    assert missed.kind == "unsupported"
    assert (adyen.received, cardco.received) == ([], [])


async def test_bodies_are_built_by_the_accounts_provider(servers: tuple[ScriptedCardco, ScriptedAdyen],
                                                         router: ProviderRouter) -> None:
    cardco, adyen = servers
    kw = {"amount_minor": 100, "currency": "EUR", "reference": "ORD-1-a1"}
    adyen_body = router.build_request_body(adyen_t.account(adyen.base_url),
                                           payment_method=adyen_t.PAYMENT_METHOD, **kw)  # type: ignore[arg-type]
    assert '"merchantAccount"' in adyen_body
    with pytest.raises(InvalidPaymentMethod):  # Cardco takes a token, never Adyen's object
        router.build_request_body(cardco_t.account(cardco.base_url), payment_method=adyen_t.PAYMENT_METHOD,
                                  **kw)  # type: ignore[arg-type]


async def test_an_account_of_no_configured_provider_sends_nothing(
        router: ProviderRouter, servers: tuple[ScriptedCardco, ScriptedAdyen]) -> None:
    cardco, adyen = servers
    stray = cardco_t.stored_request(cardco.base_url, provider_account="stripe:acct_store:test")
    outcome = await router.create_payment(stray, budget_s=5, first_send=True)
    assert outcome.kind is OutcomeKind.UNKNOWN
    assert (adyen.received, cardco.received) == ([], [])
