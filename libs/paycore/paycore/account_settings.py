"""Provider accounts: which providers paycore talks to, with which credentials.

Each provider's default account is configured by its ``PAYCORE_<PROVIDER>_*``
variables (declared in its package's ``provider.py``, listed by
:data:`paycore.providers.registry.PROVIDER_PACKAGES`); more accounts of any provider come from
``PAYCORE_ACCOUNTS_FILE``. ``PAYCORE_DEFAULT_PROVIDER`` says which
provider's account new orders use when ``POST /orders`` names none. A provider's
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
from paycore.providers.package import ProviderPackage, check_previous, margin_for
from paycore.providers.registry import DEFAULT_PACKAGE, PACKAGES, PROVIDER_PACKAGES
from paycore.settings_spec import (
    Choice,
    ConfigError,
    FileField,
    FilePath,
    Group,
    Invalid,
    Secret,
    Setting,
    Url,
    env_value,
)

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

# The keys of one PAYCORE_ACCOUNTS_FILE entry, as _file_account reads them.
ACCOUNTS_FILE_FIELDS = (
    FileField("provider", f"`{DEFAULT_PACKAGE.name}`",
              ", ".join(f"`{name}`" for name in PROVIDERS[:-1]) + f" or `{PROVIDERS[-1]}`"),
    FileField("account", "required", "Cardco's account, Adyen's merchant account, a label for Stripe"),
    FileField("environment", "required (Stripe: from the key)", "`test` or `live`"),
    FileField("api_key_env", "required", "the variable holding its API key"),
    FileField("webhook_secret_env", "—",
              "the variable holding its webhook secret (Cardco, Stripe: `whsec_…`; Adyen: the HMAC key)"),
    FileField("webhook_secret_previous_env", "—",
              "during a rotation, the variable holding the webhook secret being replaced"),
    FileField("webhook_username", "—", "Adyen: the webhook's basic-auth user"),
    FileField("webhook_password_env", "—", "Adyen: the variable holding that user's password"),
    FileField("webhook_password_previous_env", "—",
              "Adyen, during a rotation: the variable holding the password being replaced"),
    FileField("base_url", "Cardco: required; Stripe, Adyen: as their variables",
              "the API (absolute http(s) URL)"),
    FileField("live_url_prefix", "—", "Adyen live: the endpoint prefix"),
    FileField("return_url", "—", "Stripe, Adyen: where a redirected customer returns"),
    FileField("api_version", "the provider's", "as `PAYCORE_<PROVIDER>_API_VERSION`"),
    FileField("key_retention_s", "Cardco, Stripe 86400; Adyen 2678400", "positive integer"),
    FileField("escalation_margin_s", "min(7200, retention // 4)", "integer below `key_retention_s`"),
    FileField("lookup_rate_per_s", "20", "positive number"),
    FileField("report_username", "—", "Adyen: the report user that downloads settlement reports"),
    FileField("report_password_env", "—", "Adyen: the variable holding the report user's password"),
    FileField("reports_base_url", "Adyen: by `environment`", "Adyen: where reports are downloaded from"),
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


def _only_for(feature: str) -> str:
    """"is for <the providers with ``feature``> accounts only"."""
    having = [p.title for p in PROVIDER_PACKAGES if getattr(p, feature)]
    return f"is for {' and '.join(having)} accounts only"


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


def _text(e: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> str | None:
    value = e.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        why = "must be a non-empty string" if value is not None else "is required"
        raise ConfigError(f"{where}.{key}", why)
    return value


def _url(e: Mapping[str, Any], key: str, where: str) -> str | None:
    raw = _text(e, key, where)
    if raw is None:
        return None
    try:
        return Url().parse(raw)
    except Invalid as exc:
        raise ConfigError(f"{where}.{key}", str(exc)) from None


def _secret_env(env: Mapping[str, str], e: Mapping[str, Any], key: str, where: str) -> Secret | None:
    var = _text(e, key, where)
    if var is None:
        return None
    value = env_value(env, var)
    if value is None:
        raise ConfigError(f"{where}.{key}", f"names {var}, which is not set")
    return Secret(value)


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
    account = _text(e, "account", where, required=True)
    assert account is not None
    if ACCOUNT_SEPARATOR in account:
        raise ConfigError(f"{where}.account", f"must not contain {ACCOUNT_SEPARATOR!r}")
    api_key = _secret_env(env, e, "api_key_env", where)
    if api_key is None:
        raise ConfigError(f"{where}.api_key_env", "is required")
    environment = package.file_environment(api_key, e.get("environment"), where)
    if not isinstance(environment, str) or environment not in ("test", "live"):
        raise ConfigError(f"{where}.environment", "must be 'test' or 'live'")
    package.check_file_key(api_key, environment, f"{where}.api_key_env")
    retention = e.get("key_retention_s", package.key_retention_s)
    if type(retention) is not int or retention <= 0:
        raise ConfigError(f"{where}.key_retention_s", "must be a positive integer")
    margin = e.get("escalation_margin_s")
    if margin is not None and type(margin) is not int:
        raise ConfigError(f"{where}.escalation_margin_s", "must be an integer below key_retention_s")
    rate = e.get("lookup_rate_per_s", 20.0)
    if not isinstance(rate, int | float) or isinstance(rate, bool) or rate <= 0:
        raise ConfigError(f"{where}.lookup_rate_per_s", "must be positive")
    prefix = _text(e, "live_url_prefix", where)
    base_url = _url(e, "base_url", where)
    if base_url is None:
        base_url = package.default_base_url(environment, prefix, f"{where}.live_url_prefix")
        if base_url is None:
            raise ConfigError(f"{where}.base_url", "is required")
    webhook_secret = _secret_env(env, e, "webhook_secret_env", where)
    secret_previous = _secret_env(env, e, "webhook_secret_previous_env", where)
    check_previous(webhook_secret, secret_previous, f"{where}.webhook_secret_previous_env",
                   "webhook_secret_env")
    username = _text(e, "webhook_username", where)
    password = _secret_env(env, e, "webhook_password_env", where)
    password_previous = _secret_env(env, e, "webhook_password_previous_env", where)
    package.check_webhook_secret(webhook_secret, f"{where}.webhook_secret_env")
    package.check_webhook_secret(secret_previous, f"{where}.webhook_secret_previous_env")
    if package.webhook_basic_auth:
        if (username is None) != (password is None):
            raise ConfigError(f"{where}.webhook_password_env", "and webhook_username are set together")
        check_previous(password, password_previous, f"{where}.webhook_password_previous_env",
                       "webhook_password_env")
    elif username is not None or password is not None or password_previous is not None:
        raise ConfigError(f"{where}.webhook_username", _only_for("webhook_basic_auth"))
    report_username = _text(e, "report_username", where)
    report_password = _secret_env(env, e, "report_password_env", where)
    reports_base_url = _url(e, "reports_base_url", where)
    if not package.settlement_reports and (report_username or report_password or reports_base_url):
        raise ConfigError(f"{where}.report_username", _only_for("settlement_reports"))
    if (report_username is None) != (report_password is None):
        raise ConfigError(f"{where}.report_password_env", "and report_username are set together")
    if package.settlement_reports and reports_base_url is None:
        reports_base_url = package.default_reports_base_url(environment)
    return_url = _url(e, "return_url", where)
    if package.return_url_needed is not None and return_url is None:
        raise ConfigError(f"{where}.return_url", "is required" + package.return_url_needed)
    return ProviderAccountConfig(
        provider=provider, account=account, environment=environment, base_url=base_url, api_key=api_key,
        webhook_secret=webhook_secret, api_version=_text(e, "api_version", where) or package.api_version,
        key_retention_s=retention,
        escalation_margin_s=margin_for(retention, margin, f"{where}.escalation_margin_s"),
        lookup_rate_per_s=float(rate), webhook_username=username, webhook_password=password,
        live_url_prefix=prefix, return_url=return_url, webhook_secret_previous=secret_previous,
        webhook_password_previous=password_previous, report_username=report_username,
        report_password=report_password, reports_base_url=reports_base_url,
    )
