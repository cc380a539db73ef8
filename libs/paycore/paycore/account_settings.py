"""Provider accounts: which providers paycore talks to, with which credentials.

Each provider's default account is configured by its ``PAYCORE_<PROVIDER>_*``
variables (its package's settings class, listed by
:data:`paycore.providers.registry.PROVIDER_PACKAGES`); more accounts of any provider come from
``PAYCORE_ACCOUNTS_FILE``, each entry read by its ``provider``'s entry class (the shared keys of
:class:`~paycore.providers.package.AccountEntry`, and the provider's own).
``PAYCORE_DEFAULT_PROVIDER`` says which provider's account new orders use when ``POST /orders``
names none. A provider's
account exists when its marker variable is set (Cardco's base URL, Stripe's or
Adyen's API key). Secrets are named by variable in the file, never written in it.

Per provider the defaults differ where the providers' contracts do (key retention:
Cardco and Stripe 24 h, Adyen 31 days; see ``docs/providers.md``); the rules are
the same: the escalation margin stays below the retention, and a key's mode must be
the account's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

from paycore.providers.package import ACCOUNT_SEPARATOR as ACCOUNT_SEPARATOR  # re-exported
from paycore.providers.package import DAY_S as DAY_S  # re-exported
from paycore.providers.package import ESCALATION_MARGIN_CAP_S as ESCALATION_MARGIN_CAP_S  # re-exported
from paycore.providers.package import REGISTERED_SETTINGS as REGISTERED_SETTINGS  # re-exported
from paycore.providers.package import ProviderAccountConfig as ProviderAccountConfig  # re-exported
from paycore.providers.package import (
    ProviderPackage,
    check_previous,
    documented_keys,
    entry_keys,
    load_entry,
    margin_for,
    section_of,
)
from paycore.providers.registry import DEFAULT_PACKAGE, PACKAGES, PROVIDER_PACKAGES
from paycore.settings_spec import Choice, ConfigError, FileField, FilePath, Group, Setting

PROVIDERS: Final = tuple(p.name for p in PROVIDER_PACKAGES)

# --------------------------------------------------------------------------- declarations

ACCOUNTS = Group("every service: which provider new orders use, and more accounts")
DEFAULT_PROVIDER = ACCOUNTS.declare(
    "PAYCORE_DEFAULT_PROVIDER", Choice(PROVIDERS, case="lower"), DEFAULT_PACKAGE.name,
    "the provider whose account new orders use when `POST /orders` names no `provider_account`")
ACCOUNTS_FILE = ACCOUNTS.declare(
    "PAYCORE_ACCOUNTS_FILE", FilePath(), None,
    "more accounts of any provider: a JSON list of entries (below); their secrets are named by "
    "variable, never written in the file")
# Each provider's PAYCORE_<PROVIDER>_* settings, declared in its package; the docs list them here.
PROVIDER_GROUPS: Final = tuple(p.settings for p in PROVIDER_PACKAGES)

# The keys of one PAYCORE_ACCOUNTS_FILE entry: its provider (the tag that chooses the entry's class),
# then every provider's entry class's keys (paycore.providers.package.AccountEntry and its subclasses).
ACCOUNTS_FILE_FIELDS: Final = (
    FileField("provider", f"`{DEFAULT_PACKAGE.name}`",
              ", ".join(f"`{name}`" for name in PROVIDERS[:-1]) + f" or `{PROVIDERS[-1]}`"),
    *documented_keys([p.file_entry for p in PROVIDER_PACKAGES]),
)
_FIELD_NAMES: Final = frozenset(f.key for f in ACCOUNTS_FILE_FIELDS)

# The variable whose presence configures each provider's default account.
MARKERS: Final[Mapping[str, Setting[Any]]] = {p.name: p.marker for p in PROVIDER_PACKAGES}

# The settings an account registers (paycore.accounts), each as the variable that sets it for
# the provider's default account -- None where only an accounts-file entry can (its package says).
# An accounts-file entry sets each with the field of the same name.
REGISTERED_BY: Final[Mapping[str, Mapping[str, Setting[Any] | None]]] = {
    p.name: p.registered_by for p in PROVIDER_PACKAGES}


def registered_setting_variable(provider: str, setting: str) -> str | None:
    """The variable that sets ``setting`` for ``provider``'s default account, if one does."""
    declared = REGISTERED_BY[provider][setting]
    return declared.name if declared is not None else None


def _refused_for(package: ProviderPackage, e: Mapping[str, Any], where: str) -> None:
    """Refuse a key only other providers' entries take: "is for <them> accounts only", naming the
    first key of its section (``webhook_username`` for any of Adyen's basic-auth keys)."""
    own = entry_keys(package.file_entry)
    for key in (f.key for f in ACCOUNTS_FILE_FIELDS[1:]):
        if key in own or e.get(key) is None:
            continue
        having = [p for p in PROVIDER_PACKAGES if key in entry_keys(p.file_entry)]
        raise ConfigError(f"{where}.{section_of(having[0].file_entry, key)}",
                          f"is for {' and '.join(p.title for p in having)} accounts only")


# --------------------------------------------------------------------------- from the environment


def load_accounts(env: Mapping[str, str], *, require_account: bool) -> tuple[ProviderAccountConfig, ...]:
    """Every configured account, the default provider's first (it takes orders that name none).

    :param require_account: The default provider must have an account (every service that
        calls a provider); ``False`` for tools that never do (``paycore migrate``).
    """
    default = DEFAULT_PROVIDER.read(env)
    from_file = _accounts_file(env)
    needed = require_account and not any(a.provider == default for a in from_file)
    accounts = [p.from_env(env) for p in PROVIDER_PACKAGES
                if p.marker.get(env) is not None or (needed and p.name == default)]
    accounts.extend(from_file)
    ids = [a.provider_account for a in accounts]
    if len(set(ids)) != len(ids):
        raise ConfigError(ACCOUNTS_FILE.name, "configures a provider account twice")
    if accounts and not any(a.provider == default for a in accounts):
        raise ConfigError(DEFAULT_PROVIDER.name,
                          f"is {default!r} but no {default} account is configured ({MARKERS[default].name})")
    # Stable: the default provider's env account, then its file accounts, then the others as declared.
    return tuple(sorted(accounts, key=lambda a: a.provider != default))


# --------------------------------------------------------------------------- from the accounts file


def _accounts_file(env: Mapping[str, str]) -> list[ProviderAccountConfig]:
    name = ACCOUNTS_FILE.name
    path = ACCOUNTS_FILE.get(env)
    if path is None:
        return []
    try:
        entries = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ConfigError(name, f"cannot read a JSON list from {str(path)!r}: {type(exc).__name__}") from None
    if not isinstance(entries, list):
        raise ConfigError(name, "must hold a JSON list of accounts")
    return [_file_account(env, f"{name}[{i}]", e) for i, e in enumerate(entries)]


def _file_account(env: Mapping[str, str], where: str, e: Any) -> ProviderAccountConfig:
    if not isinstance(e, dict):
        raise ConfigError(where, "must be an object")
    unknown = sorted(set(e) - _FIELD_NAMES)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}",
                          "is not an accounts-file field (a secret belongs in a variable)")
    provider = e.get("provider", DEFAULT_PACKAGE.name)
    if provider not in PROVIDERS:
        raise ConfigError(f"{where}.provider", f"must be one of {', '.join(PROVIDERS)}")
    package: ProviderPackage = PACKAGES[provider]
    _refused_for(package, e, where)
    entry = load_entry(package.file_entry, e, env, where)
    environment = package.file_environment(entry.api_key_env, entry.environment, where)
    if not isinstance(environment, str) or environment not in ("test", "live"):
        raise ConfigError(f"{where}.environment", "must be 'test' or 'live'")
    package.check_file_key(entry.api_key_env, environment, f"{where}.api_key_env")
    retention = package.key_retention_s if entry.key_retention_s is None else entry.key_retention_s
    base_url = entry.base_url
    if base_url is None:
        base_url = package.default_base_url(entry, environment, where)
        if base_url is None:
            raise ConfigError(f"{where}.base_url", "is required")
    check_previous(entry.webhook_secret_env, entry.webhook_secret_previous_env,
                   f"{where}.webhook_secret_previous_env", "webhook_secret_env")
    package.check_webhook_secret(entry.webhook_secret_env, f"{where}.webhook_secret_env")
    package.check_webhook_secret(entry.webhook_secret_previous_env, f"{where}.webhook_secret_previous_env")
    own = entry.account_fields(package, environment, where)
    if package.return_url_needed is not None and entry.return_url is None:
        raise ConfigError(f"{where}.return_url", "is required" + package.return_url_needed)
    return package.account_class(
        provider=provider, account=entry.account, environment=environment, base_url=base_url,
        api_key=entry.api_key_env, webhook_secret=entry.webhook_secret_env,
        webhook_secret_previous=entry.webhook_secret_previous_env,
        api_version=entry.api_version or package.api_version, key_retention_s=retention,
        escalation_margin_s=margin_for(retention, entry.escalation_margin_s, f"{where}.escalation_margin_s"),
        lookup_rate_per_s=float(entry.lookup_rate_per_s), return_url=entry.return_url, **own,
    )
