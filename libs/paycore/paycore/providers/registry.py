"""The one factory of providers, and which provider reads a stored notification.

Checkout and recovery build what they call here (``for_accounts(settings.accounts, clock,
...)``: the one provider of the accounts, or a :class:`ProviderRouter` over several) and
hold it as :class:`~paycore.providers.base.PaymentCalls`; the webhook intake takes one
adapter per provider (``adapters_for``). The rest of the core names no provider. A
provider's name is the first part of its provider-account ids (``cardco:acct_store:test``),
so a stored row says which provider wrote it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final, Protocol, cast

from paycore.clock import Clock
from paycore.domain import ProviderOutcome
from paycore.errors import PaycoreError
from paycore.providers.adyen import provider as adyen
from paycore.providers.base import (
    Capabilities,
    LookupResult,
    NotificationFormat,
    OperationCalls,
    PaymentCalls,
    PaymentMethod,
    Provider,
    StoredRequest,
)
from paycore.providers.cardco import provider as cardco
from paycore.providers.package import ProviderAccountConfig, ProviderPackage
from paycore.providers.stripe import provider as stripe

if TYPE_CHECKING:
    import httpx


class ProviderFactory(Protocol):
    def __call__(self, accounts: Sequence[ProviderAccountConfig], clock: Clock, *, max_call_duration_s: float,
                 transport: httpx.AsyncBaseTransport | None = None) -> Provider: ...


# Every provider paycore ships, one package each: adding a provider is adding its package and its
# line here. The first is the default (of PAYCORE_DEFAULT_PROVIDER and of an accounts-file entry
# naming none); the order is the docs' and the accounts'.
PROVIDER_PACKAGES: Final[tuple[ProviderPackage, ...]] = (cardco.PROVIDER, stripe.PROVIDER, adyen.PROVIDER)
# Every provider this process knows by name: the shipped ones, and any :func:`register` added.
_PACKAGES: Final[dict[str, ProviderPackage]] = {p.name: p for p in PROVIDER_PACKAGES}
PACKAGES: Final[Mapping[str, ProviderPackage]] = _PACKAGES
DEFAULT_PACKAGE: Final = PROVIDER_PACKAGES[0]
# Each provider's client by its name.
_PROVIDERS: Final[dict[str, ProviderFactory]] = {p.name: p.client for p in PROVIDER_PACKAGES}
PROVIDERS: Final[Mapping[str, ProviderFactory]] = _PROVIDERS


def register(package: ProviderPackage) -> ProviderPackage:
    """Make a provider package not shipped here known by its name (a test's provider fixture, a
    plug-in): its client, notification format and settlement source are then built as a shipped
    one's, and its accounts' payments endpoint resolved. It joins :data:`PACKAGES`, never
    :data:`PROVIDER_PACKAGES` (the settings, docs and ``paycore up`` list what ships).

    :raises ValueError: A provider of that name is already known (a package never replaces one).
    """
    if package.name in _PACKAGES:
        raise ValueError(f"a provider named {package.name} is already registered")
    _PACKAGES[package.name] = package
    _PROVIDERS[package.name] = package.client
    return package


class UnknownProvider(PaycoreError, ValueError):
    """A provider account names a provider paycore has no adapter for."""


def provider_name(provider_account: str) -> str:
    """``cardco`` of ``cardco:acct_store:test``."""
    return provider_account.split(":", 1)[0]


def adapters_for(accounts: Sequence[ProviderAccountConfig], clock: Clock, *, max_call_duration_s: float,
                 transport: httpx.AsyncBaseTransport | None = None) -> dict[str, Provider]:
    """One adapter per provider among ``accounts``, each serving its provider's accounts, in the
    accounts' order (budgets on ``clock``; ``transport`` replaces HTTP in tests).

    :raises UnknownProvider: An account names a provider without an adapter.
    :raises ValueError: As a provider's constructor (a bad ceiling, an account twice).
    """
    names = list(dict.fromkeys(acct.provider for acct in accounts)) or [DEFAULT_PACKAGE.name]
    unknown = sorted(set(names) - PROVIDERS.keys())
    if unknown:
        raise UnknownProvider(f"no provider adapter named {', '.join(unknown)}")
    return {name: PROVIDERS[name]([a for a in accounts if a.provider == name], clock,
                                  max_call_duration_s=max_call_duration_s, transport=transport)
            for name in names}


def for_accounts(accounts: Sequence[ProviderAccountConfig], clock: Clock, *, max_call_duration_s: float,
                 transport: httpx.AsyncBaseTransport | None = None) -> PaymentCalls:
    """What checkout and recovery call: the one provider of ``accounts``, or a router over several."""
    adapters = adapters_for(accounts, clock, max_call_duration_s=max_call_duration_s, transport=transport)
    if len(adapters) == 1:
        [only] = adapters.values()
        return only
    return ProviderRouter(adapters)


class ProviderRouter:
    """Several providers behind one :class:`~paycore.providers.base.PaymentCalls`: every call names
    its account, and the account's provider answers it. An account of no configured provider is
    the provider's own "account not configured" answer (Unknown, never another provider's call)."""

    def __init__(self, adapters: Mapping[str, Provider]) -> None:
        self.adapters: Final = dict(adapters)

    def _for(self, provider_account: str) -> Provider:
        # The first adapter answers for an account it does not serve exactly as for any
        # unconfigured account: an Unknown/unbuildable outcome, nothing sent.
        return self.adapters.get(provider_name(provider_account)) or next(iter(self.adapters.values()))

    def capabilities_of(self, provider_account: str) -> Capabilities:
        return self._for(provider_account).capabilities_of(provider_account)

    def build_request_body(self, account: ProviderAccountConfig, *, amount_minor: int, currency: str,
                           payment_method: PaymentMethod, reference: str,
                           description: str | None = None, manual_capture: bool = False) -> str:
        adapter = self.adapters.get(account.provider)
        if adapter is None:
            raise UnknownProvider(f"no provider adapter named {account.provider}")
        return adapter.build_request_body(account, amount_minor=amount_minor, currency=currency,
                                          payment_method=payment_method, reference=reference,
                                          description=description, manual_capture=manual_capture)

    def unbuildable_reason(self, stored: StoredRequest) -> str | None:
        return self._for(stored.provider_account).unbuildable_reason(stored)

    async def create_payment(self, stored: StoredRequest, *, budget_s: float | None,
                             first_send: bool) -> ProviderOutcome:
        return await self._for(stored.provider_account).create_payment(stored, budget_s=budget_s,
                                                                        first_send=first_send)

    async def get_payment(self, provider_account: str, payment_id: str, *,
                          budget_s: float | None) -> LookupResult:
        return await self._for(provider_account).get_payment(provider_account, payment_id, budget_s=budget_s)

    async def find_by_reference(self, provider_account: str, reference: str, *,
                                budget_s: float | None) -> LookupResult:
        return await self._for(provider_account).find_by_reference(provider_account, reference,
                                                                    budget_s=budget_s)

    def operations_of_account(self, provider_account: str) -> OperationCalls:
        """The captures, cancels and refunds of the account's provider (see :func:`operations_of`)."""
        return cast(OperationCalls, self._for(provider_account))

    async def aclose(self) -> None:
        for adapter in self.adapters.values():
            await adapter.aclose()


def operations_of(client: PaymentCalls, provider_account: str) -> OperationCalls:
    """The captures, cancels and refunds of ``provider_account``'s provider, from what checkout
    and recovery hold (:func:`for_accounts`: one provider, or a router over several)."""
    if isinstance(client, ProviderRouter):
        return client.operations_of_account(provider_account)
    return cast(OperationCalls, client)


def notification_format(provider_account: str) -> NotificationFormat:
    """How notifications of this account's provider read (needs no configured account).

    :raises UnknownProvider: Its provider has no adapter.
    """
    name = provider_name(provider_account)
    try:
        package = PACKAGES[name]
    except KeyError:
        raise UnknownProvider(f"no provider adapter named {name}") from None
    return package.notification_format()
