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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, TypeVar

from paycore.domain import provider_account_id
from paycore.settings_spec import (
    ConfigError,
    FileField,
    Group,
    Invalid,
    Kind,
    Number,
    Secret,
    Setting,
    Text,
    Url,
    env_value,
    setting_of,
)

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
    :param api_version: The provider's API version the account's requests are made under
        (an account read from the settings has its provider's unless one is configured).
    :param return_url: Where a customer comes back after a redirect or 3-D Secure
        (Stripe ``return_url``, Adyen ``returnUrl``).

    A provider whose accounts have settings of their own subclasses it
    (:attr:`ProviderPackage.account_class`); its package's modules read them there.
    """

    provider: str
    account: str
    environment: str
    base_url: str
    api_key: Secret
    webhook_secret: Secret | None
    api_version: str
    key_retention_s: int = DAY_S
    escalation_margin_s: int = ESCALATION_MARGIN_CAP_S
    lookup_rate_per_s: float = 20.0
    return_url: str | None = None
    webhook_secret_previous: Secret | None = None

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


def env_margin(env: Mapping[str, str], setting: Setting[float | None], retention: int) -> int:
    """:func:`margin_for` of a default account: ``setting`` as configured, below ``retention``."""
    return margin_for(retention, setting.get(env), setting.name)


def settings_margin(settings: Any) -> int:
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


# --------------------------------------------------------------------------- an accounts-file entry

T_co = TypeVar("T_co", covariant=True)
_MISSING: Final = object()  # a key the entry does not have (null is a value: some keys refuse it)
_ENTRY_KEY = "paycore.providers.package.entry_key"


class EntryValue(Protocol[T_co]):
    """How one key of an accounts-file entry is read: ``value`` as the JSON has it (or absent), ``where``
    the key as an error names it (``PAYCORE_ACCOUNTS_FILE[0].base_url``)."""

    def read(self, value: object, env: Mapping[str, str], where: str) -> T_co: ...


@dataclass(frozen=True)
class FileText(Generic[T_co]):
    """A non-empty string, through ``kind`` (a URL, an account label) when given; absent or null: None."""

    kind: Kind[T_co] | None = None
    required: bool = False

    def read(self, value: object, env: Mapping[str, str], where: str) -> Any:
        if value is _MISSING or value is None:
            if self.required:
                raise ConfigError(where, "is required")
            return None
        if not isinstance(value, str) or not value:
            raise ConfigError(where, "must be a non-empty string")
        try:
            return value if self.kind is None else self.kind.parse(value)
        except Invalid as exc:
            raise ConfigError(where, str(exc)) from None


@dataclass(frozen=True)
class FileSecret:
    """The name of a variable holding a secret (never the secret itself): the secret it holds."""

    required: bool = False

    def read(self, value: object, env: Mapping[str, str], where: str) -> Secret | None:
        name: str | None = FileText[str](required=self.required).read(value, env, where)
        if name is None:
            return None
        held = env_value(env, name)
        if held is None:
            raise ConfigError(where, f"names {name}, which is not set")
        return Secret(held)


@dataclass(frozen=True)
class FileValue:
    """Any JSON value, checked by ``check`` (a message when it refuses one); absent: ``absent``."""

    check: Callable[[object], str | None]
    absent: object = None

    def read(self, value: object, env: Mapping[str, str], where: str) -> Any:
        if value is _MISSING:
            return self.absent
        if (why := self.check(value)) is not None:
            raise ConfigError(where, why)
        return value


@dataclass(frozen=True)
class _EntryKey:
    value: EntryValue[Any]
    default: str  # as the docs show it
    about: str
    listed_after: str | None  # starts a section of a provider's own keys, listed after this key


def entry_key(value: EntryValue[Any], default: str, about: str, *, listed_after: str | None = None) -> Any:
    """A field of an accounts-file entry class: its key is the field's name, ``value`` reads it,
    ``default`` and ``about`` document it. A provider's own keys (an :class:`AccountEntry` subclass's)
    are listed in the docs after the shared key ``listed_after`` names, and an entry of another
    provider is refused naming the first key of that section."""
    key = _EntryKey(value, default, about, listed_after)
    return dataclasses.field(default=None, metadata={_ENTRY_KEY: key})


def _as_written(value: object) -> str | None:
    del value  # checked with its key by the package (Stripe's mode is its key's)
    return None


def _no_int(value: object) -> str | None:
    return "must be a positive integer" if type(value) is not int or value <= 0 else None


def _no_margin(value: object) -> str | None:
    bad = value is not None and type(value) is not int
    return "must be an integer below key_retention_s" if bad else None


def _no_rate(value: object) -> str | None:
    bad = not isinstance(value, int | float) or isinstance(value, bool) or value <= 0
    return "must be positive" if bad else None


@dataclass(frozen=True, kw_only=True)
class AccountEntry:
    """One ``PAYCORE_ACCOUNTS_FILE`` entry: the keys every provider's entry has, each declared once as
    its field (its docs row and how it is read). A package whose entries take more keys subclasses it
    (:attr:`ProviderPackage.file_entry`); its ``provider`` key, the union's tag, chooses the class.
    A ``*_env`` field holds the secret its variable holds."""

    account: str = entry_key(FileText(Text(forbidden=ACCOUNT_SEPARATOR), required=True), "required",
                             "Cardco's account, Adyen's merchant account, a label for Stripe")
    environment: object = entry_key(FileValue(_as_written), "required (Stripe: from the key)",
                                    "`test` or `live`")
    api_key_env: Secret = entry_key(FileSecret(required=True), "required", "the variable holding its API key")
    webhook_secret_env: Secret | None = entry_key(
        FileSecret(), "—",
        "the variable holding its webhook secret (Cardco, Stripe: `whsec_…`; Adyen: the HMAC key)")
    webhook_secret_previous_env: Secret | None = entry_key(
        FileSecret(), "—", "during a rotation, the variable holding the webhook secret being replaced")
    base_url: str | None = entry_key(FileText(Url()), "Cardco: required; Stripe, Adyen: as their variables",
                                     "the API (absolute http(s) URL)")
    live_url_prefix: str | None = entry_key(FileText(), "—", "Adyen live: the endpoint prefix")
    return_url: str | None = entry_key(FileText(Url()), "—",
                                       "Stripe, Adyen: where a redirected customer returns")
    api_version: str | None = entry_key(FileText(), "the provider's", "as `PAYCORE_<PROVIDER>_API_VERSION`")
    key_retention_s: int | None = entry_key(FileValue(_no_int), "Cardco, Stripe 86400; Adyen 2678400",
                                            "positive integer")
    escalation_margin_s: int | None = entry_key(FileValue(_no_margin), "min(7200, retention // 4)",
                                                "integer below `key_retention_s`")
    lookup_rate_per_s: float = entry_key(FileValue(_no_rate, 20.0), "20", "positive number")

    def account_fields(self, package: ProviderPackage, environment: str, where: str) -> dict[str, Any]:
        """The fields of the provider's own keys (its :attr:`ProviderPackage.account_class`'s), after
        their rules."""
        del package, environment, where
        return {}


E = TypeVar("E", bound=AccountEntry)


def entry_keys(cls: type[AccountEntry]) -> dict[str, _EntryKey]:
    """An entry class's keys, in its fields' order."""
    return {f.name: f.metadata[_ENTRY_KEY] for f in dataclasses.fields(cls) if _ENTRY_KEY in f.metadata}


def load_entry(cls: type[E], entry: Mapping[str, Any], env: Mapping[str, str], where: str) -> E:
    """``cls`` with each key read from ``entry`` (a bad one is a :class:`ConfigError` naming
    ``<where>.<key>``)."""
    return cls(**{name: key.value.read(entry.get(name, _MISSING), env, f"{where}.{name}")
                  for name, key in entry_keys(cls).items()})


def documented_keys(classes: Sequence[type[AccountEntry]]) -> list[FileField]:
    """The keys of every entry class, as the docs list them: the shared ones in their order, each
    provider's own section after the key it is listed after (or at the end)."""
    rows = list(entry_keys(AccountEntry).items())
    for cls in classes:
        at = len(rows)
        for name, key in entry_keys(cls).items():
            if any(name == listed for listed, _ in rows):
                continue
            if key.listed_after is not None:
                at = next(i for i, (listed, _) in enumerate(rows) if listed == key.listed_after) + 1
            rows.insert(at, (name, key))
            at += 1
    return [FileField(name, key.default, key.about) for name, key in rows]


def section_of(cls: type[AccountEntry], name: str) -> str:
    """The key that starts the section of ``cls``'s own keys ``name`` is in (what an entry of another
    provider holding ``name`` is refused naming)."""
    start = name
    for listed, key in entry_keys(cls).items():
        if key.listed_after is not None:
            start = listed
        if listed == name:
            return start
    raise KeyError(name)


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
    # Completes "<where>: is required" when an account lacks a return URL it cannot start without.
    return_url_needed: str | None = None
    # Its accounts-file entries: the shared keys, or a subclass with its own keys too.
    file_entry: type[AccountEntry] = AccountEntry
    # Its accounts: the shared fields, or a subclass with its own too (its entry's account_fields).
    account_class: type[ProviderAccountConfig] = ProviderAccountConfig

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

    def default_base_url(self, entry: AccountEntry, environment: str, where: str) -> str | None:
        """The API's base URL of an accounts-file entry (at ``where``) that names none; None: an entry
        must name one."""
        del entry, environment, where
        return None

    def check_webhook_secret(self, secret: Secret | None, where: str) -> None:
        """Refuse a webhook secret of the wrong form."""
        del secret, where

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
