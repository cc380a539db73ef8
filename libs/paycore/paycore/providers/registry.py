"""The one factory of providers, and which provider reads a stored notification.

Services build their provider here (``for_accounts(settings.accounts, clock, ...)``)
and hold it as a :class:`~paycore.providers.base.Provider`; the rest of the core
names no provider. A provider's name is the first part of its provider-account ids
(``cardco:acct_store:test``), so a stored row says which provider wrote it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, Protocol

import httpx

from paycore.clock import Clock
from paycore.config import ProviderAccountConfig
from paycore.providers import cardco
from paycore.providers.base import NotificationFormat, Provider


class ProviderFactory(Protocol):
    def __call__(self, accounts: Sequence[ProviderAccountConfig], clock: Clock, *, max_call_duration_s: float,
                 transport: httpx.AsyncBaseTransport | None = None) -> Provider: ...


# Each provider by its name. The next provider adds its line to both.
PROVIDERS: Final[Mapping[str, ProviderFactory]] = {cardco.NAME: cardco.CardcoClient}
NOTIFICATION_FORMATS: Final[Mapping[str, NotificationFormat]] = {cardco.NAME: cardco.CardcoEvents()}


class UnknownProvider(ValueError):
    """A provider account names a provider paycore has no adapter for."""


def provider_name(provider_account: str) -> str:
    """``cardco`` of ``cardco:acct_store:test``."""
    return provider_account.split(":", 1)[0]


def for_accounts(accounts: Sequence[ProviderAccountConfig], clock: Clock, *, max_call_duration_s: float,
                 transport: httpx.AsyncBaseTransport | None = None) -> Provider:
    """The provider serving ``accounts`` (budgets on ``clock``; ``transport`` replaces HTTP in tests).

    Every account must be of one provider: a deployment with two needs a router that
    picks the provider by each call's account (every call names one), which comes with
    the second provider.

    :raises UnknownProvider: An account names a provider without an adapter, or two providers.
    :raises ValueError: As the provider's constructor (a bad ceiling, an account twice).
    """
    names = {acct.provider for acct in accounts} or {cardco.NAME}
    unknown = sorted(names - PROVIDERS.keys())
    if unknown:
        raise UnknownProvider(f"no provider adapter named {', '.join(unknown)}")
    if len(names) > 1:
        raise UnknownProvider(f"accounts of several providers ({', '.join(sorted(names))}) need a router")
    [name] = names
    return PROVIDERS[name](accounts, clock, max_call_duration_s=max_call_duration_s, transport=transport)


def notification_format(provider_account: str) -> NotificationFormat:
    """How notifications of this account's provider read (needs no configured account).

    :raises UnknownProvider: Its provider has no adapter.
    """
    name = provider_name(provider_account)
    try:
        return NOTIFICATION_FORMATS[name]
    except KeyError:
        raise UnknownProvider(f"no provider adapter named {name}") from None
