"""The provider interface: one factory, no import cycle, capabilities as the contract says."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import orjson
import pytest

import paycore.providers
from paycore.clock import FakeClock
from paycore.config import ProviderAccountConfig, Secret
from paycore.errors import PaycoreError
from paycore.providers import cardco, registry
from paycore.providers.base import InvalidNotification, ReferenceLookup
from paycore.providers.cardco.provider import KEY_RETENTION as CARDCO_KEY_RETENTION
from paycore.providers.cardco.version import API_VERSION as CARDCO_API_VERSION
from tests.support.webhooks import event, payment_object


def imported_by(*modules: str) -> set[str]:
    """The paycore modules a fresh interpreter has loaded after importing ``modules``."""
    code = (f"import sys\nfor m in {list(modules)!r}: __import__(m)\n"
            "print('\\n'.join(m for m in sys.modules if m.startswith('paycore')))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return set(out.split())


def provider_modules() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(paycore.providers.__path__, "paycore.providers.")]


def test_no_provider_module_imports_the_notification_repository() -> None:
    # registry is the factory the core calls (attach re-parses through it); every other
    # module of the package stands below paycore.notifications, never beside it.
    modules = [m for m in provider_modules() if m != "paycore.providers.registry"]
    assert "paycore.providers.cardco.events" in modules
    assert "paycore.notifications" not in imported_by(*modules)


def test_the_interface_loads_no_provider() -> None:
    loaded = imported_by("paycore.providers.base")
    assert not {m for m in loaded if m.startswith("paycore.providers.cardco")}


def account(provider: str = "cardco") -> ProviderAccountConfig:
    return ProviderAccountConfig(provider=provider, account="acct_store", environment="test",
                                 base_url="http://127.0.0.1:9", api_key=Secret("sk_test_x"),
                                 webhook_secret=None, api_version=CARDCO_API_VERSION)


async def test_the_factory_builds_cardco_for_cardco_accounts_and_refuses_a_provider_it_has_no_adapter_for(
) -> None:
    provider = registry.for_accounts([account()], FakeClock(), max_call_duration_s=30)
    assert isinstance(provider, cardco.CardcoClient) and provider.name == "cardco"
    await provider.aclose()
    with pytest.raises(registry.UnknownProvider, match="acme") as refused:
        registry.for_accounts([account("acme")], FakeClock(), max_call_duration_s=30)
    assert isinstance(refused.value, PaycoreError)  # the library's own refusal, not a bug


def test_a_stored_event_is_read_by_its_accounts_provider_without_any_configured_account() -> None:
    body = orjson.dumps(event(payment_object(payment_id="pay_1", reference="ORD-1-a1")))
    n = registry.notification_format("cardco:acct_store:test").parse_notification(body)
    assert (n.payment_id, n.reference, n.status) == ("pay_1", "ORD-1-a1", "succeeded")
    with pytest.raises(InvalidNotification):
        registry.notification_format("cardco:acct_store:test").parse_notification(b"[]")
    with pytest.raises(registry.UnknownProvider):
        registry.notification_format("acme:acct_store:test")


def test_cardcos_capabilities_are_its_contracts_and_the_configured_default_retention() -> None:
    caps = cardco.CAPABILITIES
    assert caps.lookup_by_reference is ReferenceLookup.CONSISTENT
    assert caps.server_errors_replayed  # docs/providers/cardco.md: a 500 is stored under the key
    assert caps.key_retention_s == CARDCO_KEY_RETENTION.default == 86_400


def test_cardco_answers_its_contract_for_each_account_it_is_asked_about() -> None:
    # The recovery loop reads capabilities per attempt's account (a router dispatches it).
    client = cardco.CardcoClient([], FakeClock(), max_call_duration_s=10)
    assert client.capabilities_of("cardco:acct_store:test") is cardco.CAPABILITIES
    assert client.capabilities_of("cardco:acct_store:live") is client.capabilities
