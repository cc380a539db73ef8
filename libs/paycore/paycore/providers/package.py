"""What a provider package tells paycore about its provider, and the account every one configures.

A provider is a package, ``paycore/providers/<name>/``; its ``provider.py`` exports ``PROVIDER``,
a :class:`ProviderPackage`: its ``PAYCORE_<PROVIDER>_*`` settings (a
:class:`~paycore.settings_spec.Group`), how its default account is read from them and what an
accounts-file entry of it may say, its default base URL, payments path, API version and key
retention, how its client, notification format and settlement reader are built, how its webhook
is signed (the intake's OpenAPI) and what the local sandbox sets for it.
:data:`paycore.providers.registry.PROVIDER_PACKAGES` lists the packages; the shared code
(``paycore.account_settings``, the registry, the intake's document, ``paycore up``) asks it and
names no provider.

This module is a leaf: it imports the settings' primitives, never a provider's client, so a
provider's settings load without its SDK (a package's ``provider.py`` builds clients on demand).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from paycore.domain import provider_account_id
from paycore.providers.cardco.version import API_VERSION as _FIRST_PROVIDERS_API_VERSION
from paycore.settings_spec import ConfigError, Group, Number, Secret, Setting, setting_of

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    import httpx
    from _typeshed import DataclassInstance

    from paycore.clock import Clock
    from paycore.providers.base import NotificationFormat, Provider
    from paycore.settlement_lines import BadLine, SettlementBatch, SettlementLine, SettlementSource

DAY_S: Final = 86_400
# Separates provider, account and environment in a provider-account id (``cardco:acct_store:test``):
# an account label containing it would be read back as another account.
ACCOUNT_SEPARATOR: Final = ":"
ESCALATION_MARGIN_CAP_S: Final = 7_200

# The kinds every provider's key retention, escalation margin and lookup pace are read as.
RETENTION = Number("seconds", maximum=None)  # days, not an asyncio budget
MARGIN = Number("seconds", allow_zero=True, maximum=None)
RATE = Number("lookups per second")


@dataclass(frozen=True)
class ProviderAccountConfig:
    """One configured provider account: where it lives and how to authenticate.

    :param provider: ``cardco``, ``stripe`` or ``adyen``.
    :param account: The account label in provider-account ids: Cardco's account,
        Adyen's merchant account, a Stripe account's label (Stripe's objects do not
        name the account, so it is never compared with a payment's).
    :param webhook_secret: What verifies a notification's signature: Cardco's and
        Stripe's ``whsec_…`` signing secret, Adyen's hex HMAC key.
    :param webhook_secret_previous: During a rotation, the secret it replaces: a notification it
        verifies is this account's exactly as one the current secret verifies.
    :param api_version: Cardco's when not given (paycore's first provider; an account read from
        the settings always has its provider's).
    :param webhook_username: Adyen: the basic-auth user its notifications carry.
    :param webhook_password: Adyen: that user's password.
    :param webhook_password_previous: Adyen, during a rotation: the password it replaces.
    :param live_url_prefix: Adyen live: the company's endpoint prefix.
    :param return_url: Where a customer comes back after a redirect or 3-D Secure
        (Stripe ``return_url``, Adyen ``returnUrl``).
    :param report_username: Adyen: the report user whose basic auth downloads settlement reports
        (none: the account's settlements are read from files only).
    :param report_password: Adyen: that user's password.
    :param reports_base_url: Adyen: where reports are downloaded (the Customer Area's host).
    """

    provider: str
    account: str
    environment: str
    base_url: str
    api_key: Secret
    webhook_secret: Secret | None
    api_version: str = _FIRST_PROVIDERS_API_VERSION
    key_retention_s: int = DAY_S
    escalation_margin_s: int = ESCALATION_MARGIN_CAP_S
    lookup_rate_per_s: float = 20.0
    webhook_username: str | None = None
    webhook_password: Secret | None = None
    live_url_prefix: str | None = None
    return_url: str | None = None
    webhook_secret_previous: Secret | None = None
    webhook_password_previous: Secret | None = None
    report_username: str | None = None
    report_password: Secret | None = None
    reports_base_url: str | None = None

    @property
    def provider_account(self) -> str:
        return provider_account_id(self.provider, self.account, self.environment)

    @property
    def payments_endpoint(self) -> str:
        """Where the account's create requests go: its base URL and its provider's payments path."""
        from paycore.providers.registry import PACKAGES  # it imports this module: asked when called

        path = PACKAGES[self.provider].payments_path.format(api_version=self.api_version)
        return self.base_url.rstrip("/") + path


# --------------------------------------------------------------------------- rules every provider keeps


def margin_for(retention: int, margin: float | None, where: str) -> int:
    """The escalation margin: the configured one, else ``min(7200, retention // 4)``; below the retention."""
    chosen = min(ESCALATION_MARGIN_CAP_S, retention // 4) if margin is None else margin
    if chosen != int(chosen) or not 0 <= chosen < retention:
        raise ConfigError(where, "must be a whole number of seconds below the key retention")
    return int(chosen)


# The settings an account registers (paycore.accounts), each a field of ProviderAccountConfig, of a
# default account's settings class (where a variable sets it) and of an accounts-file entry.
REGISTERED_SETTINGS: Final = ("base_url", "api_version", "key_retention_s", "escalation_margin_s",
                              "lookup_rate_per_s")


def variable(settings: type[DataclassInstance], name: str) -> str:
    """The variable that sets field ``name`` of a default account's settings class."""
    return setting_of(settings, name).name


def required(settings: DataclassInstance, name: str, hint: str = "") -> Any:
    """Field ``name`` of loaded ``settings``; unset is a :class:`ConfigError` ``is required`` + ``hint``
    naming its variable."""
    value = getattr(settings, name)
    if value is None:
        raise ConfigError(variable(type(settings), name), f"is required{hint}")
    return value


def env_margin(settings: Any) -> int:
    """:func:`margin_for` of a default account's loaded settings class: its ``escalation_margin_s`` as
    configured, below its ``key_retention_s``."""
    return margin_for(settings.key_retention_s, settings.escalation_margin_s,
                      variable(type(settings), "escalation_margin_s"))


def registered_by(settings: type[DataclassInstance]) -> dict[str, Setting[Any] | None]:
    """:attr:`ProviderPackage.registered_by` of a default account's settings class: each registered
    setting as the field's setting, None where the class has no such field (an entry sets it)."""
    names = {f.name for f in dataclasses.fields(settings)}
    return {name: setting_of(settings, name) if name in names else None for name in REGISTERED_SETTINGS}


def check_previous(current: object | None, previous: object | None, where: str, current_name: str) -> None:
    """A previous secret is the one a rotation replaces: never without a current one."""
    if previous is not None and current is None:
        raise ConfigError(where, f"is the secret a rotation replaces: set {current_name} to the new one")


# --------------------------------------------------------------------------- the package


@dataclass(frozen=True)
class WebhookSecurity:
    """How a provider signs its notifications, as the intake's OpenAPI document says it."""

    scheme_name: str  # its key under components.securitySchemes
    scheme: dict[str, Any]  # the security scheme object
    headers: list[dict[str, Any]] = field(default_factory=list)  # the header parameters it sends besides


@dataclass(frozen=True)
class ProviderPackage(ABC):
    """Everything paycore knows about one provider (a package's ``PROVIDER``).

    The fields are facts; the methods what differs in reading its accounts (overridden where a
    provider's rules differ: the defaults are "nothing more to check") and how its parts are
    built (each package imports its client on demand, so settings load without it).
    """

    name: str  # the first part of its provider-account ids, its webhook route, PAYCORE_DEFAULT_PROVIDER
    title: str  # as messages name it
    settings: Group  # its PAYCORE_<PROVIDER>_* settings, in its docs table's order
    marker: Setting[Any]  # the variable whose presence configures its default account
    # The settings an account registers (paycore.accounts), each as the variable that sets it for
    # the default account; None where only an accounts-file entry can.
    registered_by: Mapping[str, Setting[Any] | None]
    payments_path: str  # where a create request goes below the base URL ({api_version} filled in)
    api_version: str  # what an attempt is stamped with unless configured otherwise
    key_retention_s: int  # an accounts-file entry's default
    webhook_security: WebhookSecurity
    webhook_basic_auth: bool = False  # its notifications carry basic auth (webhook_username & co.)
    settlement_reports: bool = False  # it downloads settlement reports as a report user (report_username…)
    # Completes "<where>: is required" when an account lacks a return URL it cannot start without.
    return_url_needed: str | None = None

    # ---- its accounts

    @abstractmethod
    def from_env(self, env: Mapping[str, str]) -> ProviderAccountConfig:
        """Its default account, from its ``PAYCORE_<PROVIDER>_*`` variables."""

    def file_environment(self, api_key: Secret, environment: object, where: str) -> object:
        """An accounts-file entry's mode, from its ``environment`` (as written, unchecked) and key."""
        del api_key, where
        return environment

    def check_file_key(self, api_key: Secret, environment: str, where: str) -> None:
        """Refuse an accounts-file entry's API key that is not of the entry's mode."""
        del api_key, environment, where

    def default_base_url(self, environment: str, live_url_prefix: str | None, where: str) -> str | None:
        """The API's base URL of an entry that names none; None: an entry must name one."""
        del environment, live_url_prefix, where
        return None

    def check_webhook_secret(self, secret: Secret | None, where: str) -> None:
        """Refuse a webhook secret of the wrong form."""
        del secret, where

    def default_reports_base_url(self, environment: str) -> str | None:
        """Where reports are downloaded from, unless configured (with :attr:`settlement_reports`)."""
        del environment
        return None

    # ---- its parts, built on demand

    @abstractmethod
    def client(self, accounts: Sequence[ProviderAccountConfig], clock: Clock, *, max_call_duration_s: float,
               transport: httpx.AsyncBaseTransport | None = None) -> Provider:
        """Its adapter over ``accounts`` (each of this provider): payments, operations, webhooks."""

    @abstractmethod
    def notification_format(self) -> NotificationFormat:
        """How its stored notifications read (needs no account)."""

    @abstractmethod
    def settlement_source(self, config: ProviderAccountConfig, clock: Clock,
                          transport: httpx.AsyncBaseTransport | None = None) -> SettlementSource:
        """The source of ``config``'s settlement batches from its API."""

    @abstractmethod
    async def read_report_file(self, path: Path, provider_account: str, *, batch_id: str | None = None,
                               batch_date: date | None = None
                               ) -> tuple[SettlementBatch, AsyncIterator[SettlementLine | BadLine]]:
        """A settlement report file a person downloaded, as one closed batch of ``provider_account``."""

    @abstractmethod
    def sandbox_env(self, base_url: str, account: str, environment: str, credentials: Mapping[str, str],
                    return_url: str) -> dict[str, str]:
        """Its ``PAYCORE_<PROVIDER>_*`` for a sandbox account: the sandbox at ``base_url`` speaking its
        wire, with the development ``credentials`` the sandbox's dialect gives for the account."""
