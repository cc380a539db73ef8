"""Provider accounts: which providers paycore talks to, with which credentials.

Each provider's default account is configured by its ``PAYCORE_<PROVIDER>_*``
variables (declared here, one group per provider); more accounts of any provider
come from ``PAYCORE_ACCOUNTS_FILE``. ``PAYCORE_DEFAULT_PROVIDER`` says which
provider's account new orders use when ``POST /orders`` names none. A provider's
account exists when its marker variable is set (Cardco's base URL, Stripe's or
Adyen's API key). Secrets are named by variable in the file, never written in it.

Per provider the defaults differ where the providers' contracts do (key retention:
Cardco and Stripe 24 h, Adyen 31 days; see ``docs/providers.md``); the rules are
the same: the escalation margin stays below the retention, and a key's mode must be
the account's.
"""

from __future__ import annotations

import binascii
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from paycore.domain import provider_account_id
from paycore.settings_spec import (
    Choice,
    ConfigError,
    FileField,
    FilePath,
    Group,
    Invalid,
    Number,
    Secret,
    SecretText,
    Setting,
    Text,
    Url,
    env_value,
)

CARDCO_API_VERSION: Final = "2026-11-01"
STRIPE_API_VERSION: Final = "2026-10-28.endive"  # the version stripe==16.1.0 is generated for
ADYEN_API_VERSION: Final = "v71"
PROVIDERS: Final = ("cardco", "stripe", "adyen")
DAY_S: Final = 86_400
# Separates provider, account and environment in a provider-account id (``cardco:acct_store:test``):
# an account label containing it would be read back as another account.
ACCOUNT_SEPARATOR: Final = ":"
ESCALATION_MARGIN_CAP_S: Final = 7_200

# Where each provider's create request goes, below the account's base URL.
PAYMENTS_PATHS: Final = {"cardco": "/v1/payments", "stripe": "/v1/payment_intents",
                         "adyen": "/{api_version}/payments"}

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
    api_version: str = CARDCO_API_VERSION
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
        path = PAYMENTS_PATHS[self.provider].format(api_version=self.api_version)
        return self.base_url.rstrip("/") + path


# --------------------------------------------------------------------------- declarations

ACCOUNTS = Group("every service: which provider new orders use, and more accounts")
DEFAULT_PROVIDER = ACCOUNTS.declare(
    "PAYCORE_DEFAULT_PROVIDER", Choice(PROVIDERS, case="lower"), "cardco",
    "the provider whose account new orders use when `POST /orders` names no `provider_account`")
ACCOUNTS_FILE = ACCOUNTS.declare(
    "PAYCORE_ACCOUNTS_FILE", FilePath(), None,
    "more accounts of any provider: a JSON list of entries (below); their secrets are named by "
    "variable, never written in the file")

CARDCO = Group("every service: the default Cardco account (set `PAYCORE_CARDCO_BASE_URL` to configure it)")
CARDCO_BASE_URL = CARDCO.declare(
    "PAYCORE_CARDCO_BASE_URL", Url(), None, "the Cardco API",
    shown_default="— (required when Cardco is the default provider)")
CARDCO_ACCOUNT = CARDCO.declare(
    "PAYCORE_CARDCO_ACCOUNT", Text(forbidden=ACCOUNT_SEPARATOR), None, "the account, e.g. `acct_store`",
    shown_default="— (required with the base URL)")
CARDCO_ENVIRONMENT = CARDCO.declare(
    "PAYCORE_CARDCO_ENVIRONMENT", Choice(("test", "live")), "test", "the account's mode")
CARDCO_API_KEY = CARDCO.declare(
    "PAYCORE_CARDCO_API_KEY", SecretText(), None, "its API key, `sk_test_…` or `sk_live_…` as the mode says",
    shown_default="— (required with the base URL)")
CARDCO_WEBHOOK_SECRET = CARDCO.declare(
    "PAYCORE_CARDCO_WEBHOOK_SECRET", SecretText(), None,
    "its webhook signing secret (`whsec_…`); without one the webhook intake does not start")
CARDCO_WEBHOOK_SECRET_PREVIOUS = CARDCO.declare(
    "PAYCORE_CARDCO_WEBHOOK_SECRET_PREVIOUS", SecretText(), None,
    "during a rotation, the signing secret being replaced: accepted beside the current one "
    "(docs/providers.md, Rotating credentials)")
CARDCO_API_VERSION_SETTING = CARDCO.declare(
    "PAYCORE_CARDCO_API_VERSION", Text(), CARDCO_API_VERSION,
    "the `Cardco-Version` header of every request; stamped on each attempt, so a resend keeps its own")
CARDCO_KEY_RETENTION = CARDCO.declare(
    "PAYCORE_CARDCO_KEY_RETENTION_S", RETENTION, float(DAY_S),
    "the provider's minimum idempotency-key retention")
CARDCO_ESCALATION_MARGIN = CARDCO.declare(
    "PAYCORE_CARDCO_ESCALATION_MARGIN_S", MARGIN, None,
    "safety margin, below the retention: `escalation_deadline = first_sent_at + retention − margin`",
    shown_default="min(7200, retention/4)")
CARDCO_LOOKUP_RATE = CARDCO.declare(
    "PAYCORE_CARDCO_LOOKUP_RATE_PER_S", RATE, 20.0,
    "recovery's pace of lookups on this account, across its concurrent lanes")

STRIPE = Group("every service: the default Stripe account (set `PAYCORE_STRIPE_API_KEY` to configure it)")
STRIPE_API_KEY = STRIPE.declare(
    "PAYCORE_STRIPE_API_KEY", SecretText(), None,
    "secret or restricted key; its prefix (`sk_test_`/`rk_test_` or `sk_live_`/`rk_live_`) is the mode",
    shown_default="— (required when Stripe is the default provider)")
STRIPE_WEBHOOK_SECRET = STRIPE.declare(
    "PAYCORE_STRIPE_WEBHOOK_SECRET", SecretText(), None,
    "the endpoint's signing secret (`whsec_…`) for `Stripe-Signature`; without one the intake does not start")
STRIPE_WEBHOOK_SECRET_PREVIOUS = STRIPE.declare(
    "PAYCORE_STRIPE_WEBHOOK_SECRET_PREVIOUS", SecretText(), None,
    "during a rotation, the signing secret being replaced: accepted beside the current one")
STRIPE_API_BASE = STRIPE.declare(
    "PAYCORE_STRIPE_API_BASE", Url(), "https://api.stripe.com", "the Stripe API (another only for tests)")
STRIPE_ACCOUNT = STRIPE.declare(
    "PAYCORE_STRIPE_ACCOUNT", Text(printable=True, forbidden=ACCOUNT_SEPARATOR), "default",
    "the account's label in provider-account ids (`stripe:<label>:<mode>`), e.g. its `acct_…` id")
STRIPE_API_VERSION_SETTING = STRIPE.declare(
    "PAYCORE_STRIPE_API_VERSION", Text(), STRIPE_API_VERSION,
    "the `Stripe-Version` of every request; stamped on each attempt, so a resend keeps its own")
STRIPE_RETURN_URL = STRIPE.declare(
    "PAYCORE_STRIPE_RETURN_URL", Url(), None,
    "where a customer returns after a redirect; unset, only card payments without redirects are offered")
STRIPE_KEY_RETENTION = STRIPE.declare(
    "PAYCORE_STRIPE_KEY_RETENTION_S", RETENTION, float(DAY_S),
    "Stripe's idempotency-key retention (keys are kept at least 24 h)")
STRIPE_ESCALATION_MARGIN = STRIPE.declare(
    "PAYCORE_STRIPE_ESCALATION_MARGIN_S", MARGIN, None, "as `PAYCORE_CARDCO_ESCALATION_MARGIN_S`",
    shown_default="min(7200, retention/4)")
STRIPE_LOOKUP_RATE = STRIPE.declare(
    "PAYCORE_STRIPE_LOOKUP_RATE_PER_S", RATE, 20.0,
    "recovery's pace of lookups (Stripe's Search allows fewer requests than retrieve)")

ADYEN = Group("every service: the default Adyen account (set `PAYCORE_ADYEN_API_KEY` to configure it)")
ADYEN_API_KEY = ADYEN.declare(
    "PAYCORE_ADYEN_API_KEY", SecretText(), None, "the API credential's key (`X-API-Key`)",
    shown_default="— (required when Adyen is the default provider)")
ADYEN_MERCHANT_ACCOUNT = ADYEN.declare(
    "PAYCORE_ADYEN_MERCHANT_ACCOUNT", Text(printable=True, forbidden=ACCOUNT_SEPARATOR), None,
    "the merchant account payments are made on",
    shown_default="— (required with the API key)")
ADYEN_ENVIRONMENT = ADYEN.declare(
    "PAYCORE_ADYEN_ENVIRONMENT", Choice(("test", "live")), "test", "the account's mode")
ADYEN_LIVE_URL_PREFIX = ADYEN.declare(
    "PAYCORE_ADYEN_LIVE_URL_PREFIX", Text(printable=True), None,
    "live: the company's endpoint prefix (`https://<prefix>-checkout-live.adyenpayments.com/checkout`)",
    shown_default="— (required for live)")
ADYEN_BASE_URL = ADYEN.declare(
    "PAYCORE_ADYEN_BASE_URL", Url(), None, "overrides the Checkout API base URL (tests, the sandbox)",
    shown_default="`https://checkout-test.adyen.com` (test), from the prefix (live)")
ADYEN_HMAC_KEY = ADYEN.declare(
    "PAYCORE_ADYEN_HMAC_KEY", SecretText(), None,
    "the webhook's HMAC key (hex); without it the intake does not start")
ADYEN_HMAC_KEY_PREVIOUS = ADYEN.declare(
    "PAYCORE_ADYEN_HMAC_KEY_PREVIOUS", SecretText(), None,
    "during a rotation, the HMAC key being replaced: accepted beside the current one")
ADYEN_WEBHOOK_USERNAME = ADYEN.declare(
    "PAYCORE_ADYEN_WEBHOOK_USERNAME", Text(printable=True), None, "the webhook's basic-auth user")
ADYEN_WEBHOOK_PASSWORD = ADYEN.declare(
    "PAYCORE_ADYEN_WEBHOOK_PASSWORD", SecretText(), None, "the webhook's basic-auth password")
ADYEN_WEBHOOK_PASSWORD_PREVIOUS = ADYEN.declare(
    "PAYCORE_ADYEN_WEBHOOK_PASSWORD_PREVIOUS", SecretText(), None,
    "during a rotation, the basic-auth password being replaced: accepted beside the current one")
ADYEN_RETURN_URL = ADYEN.declare(
    "PAYCORE_ADYEN_RETURN_URL", Url(), None,
    "`returnUrl` of every payment: where a redirected shopper comes back (Adyen requires it)",
    shown_default="— (required with the API key)")
ADYEN_API_VERSION_SETTING = ADYEN.declare(
    "PAYCORE_ADYEN_API_VERSION", Text(), ADYEN_API_VERSION,
    "the Checkout API version in the path; stamped on each attempt")
ADYEN_KEY_RETENTION = ADYEN.declare(
    "PAYCORE_ADYEN_KEY_RETENTION_S", RETENTION, 31.0 * DAY_S,
    "Adyen's idempotency-key retention (keys are kept at least 31 days)")
ADYEN_ESCALATION_MARGIN = ADYEN.declare(
    "PAYCORE_ADYEN_ESCALATION_MARGIN_S", MARGIN, None, "as `PAYCORE_CARDCO_ESCALATION_MARGIN_S`",
    shown_default="min(7200, retention/4)")
ADYEN_REPORT_USERNAME = ADYEN.declare(
    "PAYCORE_ADYEN_REPORT_USERNAME", Text(printable=True), None,
    "the report user (`report_<id>@Company.<company>`) that downloads Settlement details reports; "
    "without one, settlements are read from files only")
ADYEN_REPORT_PASSWORD = ADYEN.declare(
    "PAYCORE_ADYEN_REPORT_PASSWORD", SecretText(), None, "the report user's basic-auth password")
ADYEN_REPORTS_BASE_URL = ADYEN.declare(
    "PAYCORE_ADYEN_REPORTS_BASE_URL", Url(), None, "where reports are downloaded from (tests: the sandbox)",
    shown_default="`https://ca-test.adyen.com` (test), `https://ca-live.adyen.com` (live)")

# Why an Adyen account cannot start without its return URL, said where it is refused.
ADYEN_RETURN_URL_NEEDED: Final = (
    ": every Adyen payment carries a returnUrl (where the shopper comes back after a redirect or "
    "3-D Secure), e.g. https://shop.example/checkout/return")

# The keys of one PAYCORE_ACCOUNTS_FILE entry, as _file_account reads them.
ACCOUNTS_FILE_FIELDS = (
    FileField("provider", "`cardco`", "`cardco`, `stripe` or `adyen`"),
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
MARKERS: Final[Mapping[str, Setting[Any]]] = {
    "cardco": CARDCO_BASE_URL, "stripe": STRIPE_API_KEY, "adyen": ADYEN_API_KEY}

# The settings an account registers (paycore.accounts), each as the variable that sets it for
# the provider's default account -- None where only an accounts-file entry can (Adyen has no
# lookups to pace). An accounts-file entry sets each with the field of the same name.
REGISTERED_SETTINGS: Final = ("base_url", "api_version", "key_retention_s", "escalation_margin_s",
                              "lookup_rate_per_s")
REGISTERED_BY: Final[Mapping[str, Mapping[str, Setting[Any] | None]]] = {
    "cardco": {"base_url": CARDCO_BASE_URL, "api_version": CARDCO_API_VERSION_SETTING,
               "key_retention_s": CARDCO_KEY_RETENTION, "escalation_margin_s": CARDCO_ESCALATION_MARGIN,
               "lookup_rate_per_s": CARDCO_LOOKUP_RATE},
    "stripe": {"base_url": STRIPE_API_BASE, "api_version": STRIPE_API_VERSION_SETTING,
               "key_retention_s": STRIPE_KEY_RETENTION, "escalation_margin_s": STRIPE_ESCALATION_MARGIN,
               "lookup_rate_per_s": STRIPE_LOOKUP_RATE},
    "adyen": {"base_url": ADYEN_BASE_URL, "api_version": ADYEN_API_VERSION_SETTING,
              "key_retention_s": ADYEN_KEY_RETENTION, "escalation_margin_s": ADYEN_ESCALATION_MARGIN,
              "lookup_rate_per_s": None},
}


def registered_setting_variable(provider: str, setting: str) -> str | None:
    """The variable that sets ``setting`` for ``provider``'s default account, if one does."""
    declared = REGISTERED_BY[provider][setting]
    return declared.name if declared is not None else None


# --------------------------------------------------------------------------- the rules of one account


def margin_for(retention: int, margin: float | None, where: str) -> int:
    """The escalation margin: the configured one, else ``min(7200, retention // 4)``; below the retention."""
    chosen = min(ESCALATION_MARGIN_CAP_S, retention // 4) if margin is None else margin
    if chosen != int(chosen) or not 0 <= chosen < retention:
        raise ConfigError(where, "must be a whole number of seconds below the key retention")
    return int(chosen)


def stripe_environment(api_key: str, where: str) -> str:
    """A Stripe key's mode, from its prefix."""
    for prefix in ("sk_", "rk_"):
        for mode in ("test", "live"):
            if api_key.startswith(f"{prefix}{mode}_"):
                return mode
    raise ConfigError(where, "must be a Stripe secret or restricted key "
                             "(sk_test_, sk_live_, rk_test_, rk_live_)")


def adyen_base_url(environment: str, prefix: str | None, where: str) -> str:
    """The Checkout API's base URL: Adyen's test host, or the company's live prefix."""
    if environment == "test":
        return "https://checkout-test.adyen.com"
    if not prefix:
        raise ConfigError(where, "is required for a live Adyen account")
    return f"https://{prefix}-checkout-live.adyenpayments.com/checkout"


def adyen_reports_base_url(environment: str) -> str:
    """Where Adyen's reports are downloaded from: its Customer Area of the account's mode."""
    return "https://ca-live.adyen.com" if environment == "live" else "https://ca-test.adyen.com"


def check_hmac_key(secret: Secret | None, where: str) -> None:
    if secret is None:
        return
    try:
        if not secret.reveal() or binascii.a2b_hex(secret.reveal()) == b"":
            raise ValueError
    except (binascii.Error, ValueError):
        raise ConfigError(where, "must be the hex HMAC key from the Customer Area") from None


def check_previous(current: object | None, previous: object | None, where: str, current_name: str) -> None:
    """A previous secret is the one a rotation replaces: never without a current one."""
    if previous is not None and current is None:
        raise ConfigError(where, f"is the secret a rotation replaces: set {current_name} to the new one")


# --------------------------------------------------------------------------- from the environment


def _env_margin(env: Mapping[str, str], setting: Setting[float | None], retention: int) -> int:
    return margin_for(retention, setting.get(env), setting.name)


def _cardco(env: Mapping[str, str]) -> ProviderAccountConfig:
    base_url = CARDCO_BASE_URL.require(env, " (the Cardco API base URL)")
    account = CARDCO_ACCOUNT.require(env, ", e.g. acct_store")
    environment = CARDCO_ENVIRONMENT.read(env)
    api_key = CARDCO_API_KEY.require(env)
    if not api_key.reveal().startswith(f"sk_{environment}_"):
        raise ConfigError(CARDCO_API_KEY.name, f"must be a {environment}-mode key (sk_{environment}_...)")
    retention = int(CARDCO_KEY_RETENTION.read(env))
    secret, previous = CARDCO_WEBHOOK_SECRET.get(env), CARDCO_WEBHOOK_SECRET_PREVIOUS.get(env)
    check_previous(secret, previous, CARDCO_WEBHOOK_SECRET_PREVIOUS.name, CARDCO_WEBHOOK_SECRET.name)
    return ProviderAccountConfig(
        provider="cardco", account=account, environment=environment, base_url=base_url, api_key=api_key,
        webhook_secret=secret, webhook_secret_previous=previous,
        api_version=CARDCO_API_VERSION_SETTING.read(env),
        key_retention_s=retention,
        escalation_margin_s=_env_margin(env, CARDCO_ESCALATION_MARGIN, retention),
        lookup_rate_per_s=CARDCO_LOOKUP_RATE.read(env),
    )


def _stripe(env: Mapping[str, str]) -> ProviderAccountConfig:
    api_key = STRIPE_API_KEY.require(env)
    retention = int(STRIPE_KEY_RETENTION.read(env))
    secret, previous = STRIPE_WEBHOOK_SECRET.get(env), STRIPE_WEBHOOK_SECRET_PREVIOUS.get(env)
    check_previous(secret, previous, STRIPE_WEBHOOK_SECRET_PREVIOUS.name, STRIPE_WEBHOOK_SECRET.name)
    return ProviderAccountConfig(
        provider="stripe", account=STRIPE_ACCOUNT.read(env),
        environment=stripe_environment(api_key.reveal(), STRIPE_API_KEY.name),
        base_url=STRIPE_API_BASE.read(env), api_key=api_key, webhook_secret=secret,
        webhook_secret_previous=previous,
        api_version=STRIPE_API_VERSION_SETTING.read(env), key_retention_s=retention,
        escalation_margin_s=_env_margin(env, STRIPE_ESCALATION_MARGIN, retention),
        lookup_rate_per_s=STRIPE_LOOKUP_RATE.read(env), return_url=STRIPE_RETURN_URL.get(env),
    )


def _adyen(env: Mapping[str, str]) -> ProviderAccountConfig:
    api_key = ADYEN_API_KEY.require(env)
    environment = ADYEN_ENVIRONMENT.read(env)
    prefix = ADYEN_LIVE_URL_PREFIX.get(env)
    base_url = ADYEN_BASE_URL.get(env) or adyen_base_url(environment, prefix, ADYEN_LIVE_URL_PREFIX.name)
    hmac_key, hmac_previous = ADYEN_HMAC_KEY.get(env), ADYEN_HMAC_KEY_PREVIOUS.get(env)
    check_hmac_key(hmac_key, ADYEN_HMAC_KEY.name)
    check_hmac_key(hmac_previous, ADYEN_HMAC_KEY_PREVIOUS.name)
    check_previous(hmac_key, hmac_previous, ADYEN_HMAC_KEY_PREVIOUS.name, ADYEN_HMAC_KEY.name)
    username, password = ADYEN_WEBHOOK_USERNAME.get(env), ADYEN_WEBHOOK_PASSWORD.get(env)
    if (username is None) != (password is None):
        raise ConfigError(ADYEN_WEBHOOK_PASSWORD.name, "and PAYCORE_ADYEN_WEBHOOK_USERNAME are set together")
    password_previous = ADYEN_WEBHOOK_PASSWORD_PREVIOUS.get(env)
    check_previous(password, password_previous, ADYEN_WEBHOOK_PASSWORD_PREVIOUS.name,
                   ADYEN_WEBHOOK_PASSWORD.name)
    retention = int(ADYEN_KEY_RETENTION.read(env))
    report_username, report_password = ADYEN_REPORT_USERNAME.get(env), ADYEN_REPORT_PASSWORD.get(env)
    if (report_username is None) != (report_password is None):
        raise ConfigError(ADYEN_REPORT_PASSWORD.name, f"and {ADYEN_REPORT_USERNAME.name} are set together")
    return ProviderAccountConfig(
        provider="adyen", account=ADYEN_MERCHANT_ACCOUNT.require(env, " (the merchant account)"),
        environment=environment, base_url=base_url, api_key=api_key, webhook_secret=hmac_key,
        webhook_secret_previous=hmac_previous, webhook_password_previous=password_previous,
        api_version=ADYEN_API_VERSION_SETTING.read(env), key_retention_s=retention,
        escalation_margin_s=_env_margin(env, ADYEN_ESCALATION_MARGIN, retention),
        webhook_username=username, webhook_password=password, live_url_prefix=prefix,
        return_url=ADYEN_RETURN_URL.require(env, ADYEN_RETURN_URL_NEEDED),
        report_username=report_username, report_password=report_password,
        reports_base_url=ADYEN_REPORTS_BASE_URL.get(env) or adyen_reports_base_url(environment),
    )


_FROM_ENV: Final[Mapping[str, Callable[[Mapping[str, str]], ProviderAccountConfig]]] = {
    "cardco": _cardco, "stripe": _stripe, "adyen": _adyen}


def load_accounts(env: Mapping[str, str], *, require_account: bool) -> tuple[ProviderAccountConfig, ...]:
    """Every configured account, the default provider's first (it takes orders that name none).

    :param require_account: The default provider must have an account (every service that
        calls a provider); ``False`` for tools that never do (``paycore migrate``).
    """
    default = DEFAULT_PROVIDER.read(env)
    from_file = _accounts_file(env)
    needed = require_account and not any(a.provider == default for a in from_file)
    accounts = [_FROM_ENV[name](env) for name in PROVIDERS
                if MARKERS[name].get(env) is not None or (needed and name == default)]
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
    provider = e.get("provider", "cardco")
    if provider not in PROVIDERS:
        raise ConfigError(f"{where}.provider", f"must be one of {', '.join(PROVIDERS)}")
    account = _text(e, "account", where, required=True)
    assert account is not None
    if ACCOUNT_SEPARATOR in account:
        raise ConfigError(f"{where}.account", f"must not contain {ACCOUNT_SEPARATOR!r}")
    api_key = _secret_env(env, e, "api_key_env", where)
    if api_key is None:
        raise ConfigError(f"{where}.api_key_env", "is required")
    environment = e.get("environment")
    if provider == "stripe":
        keyed = stripe_environment(api_key.reveal(), f"{where}.api_key_env")
        if environment not in (None, keyed):
            raise ConfigError(f"{where}.environment", f"contradicts its key's mode ({keyed})")
        environment = keyed
    if environment not in ("test", "live"):
        raise ConfigError(f"{where}.environment", "must be 'test' or 'live'")
    if provider == "cardco" and not api_key.reveal().startswith(f"sk_{environment}_"):
        raise ConfigError(f"{where}.api_key_env", f"must name a variable holding a sk_{environment}_ key")
    retention = e.get("key_retention_s", 31 * DAY_S if provider == "adyen" else DAY_S)
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
        if provider == "cardco":
            raise ConfigError(f"{where}.base_url", "is required")
        base_url = ("https://api.stripe.com" if provider == "stripe"
                    else adyen_base_url(environment, prefix, f"{where}.live_url_prefix"))
    webhook_secret = _secret_env(env, e, "webhook_secret_env", where)
    secret_previous = _secret_env(env, e, "webhook_secret_previous_env", where)
    check_previous(webhook_secret, secret_previous, f"{where}.webhook_secret_previous_env",
                   "webhook_secret_env")
    username = _text(e, "webhook_username", where)
    password = _secret_env(env, e, "webhook_password_env", where)
    password_previous = _secret_env(env, e, "webhook_password_previous_env", where)
    if provider == "adyen":
        check_hmac_key(webhook_secret, f"{where}.webhook_secret_env")
        check_hmac_key(secret_previous, f"{where}.webhook_secret_previous_env")
        if (username is None) != (password is None):
            raise ConfigError(f"{where}.webhook_password_env", "and webhook_username are set together")
        check_previous(password, password_previous, f"{where}.webhook_password_previous_env",
                       "webhook_password_env")
    elif username is not None or password is not None or password_previous is not None:
        raise ConfigError(f"{where}.webhook_username", "is for Adyen accounts only")
    report_username = _text(e, "report_username", where)
    report_password = _secret_env(env, e, "report_password_env", where)
    reports_base_url = _url(e, "reports_base_url", where)
    if provider != "adyen" and (report_username or report_password or reports_base_url):
        raise ConfigError(f"{where}.report_username", "is for Adyen accounts only")
    if (report_username is None) != (report_password is None):
        raise ConfigError(f"{where}.report_password_env", "and report_username are set together")
    if provider == "adyen" and reports_base_url is None:
        reports_base_url = adyen_reports_base_url(environment)
    return_url = _url(e, "return_url", where)
    if provider == "adyen" and return_url is None:
        raise ConfigError(f"{where}.return_url", "is required" + ADYEN_RETURN_URL_NEEDED)
    versions = {"cardco": CARDCO_API_VERSION, "stripe": STRIPE_API_VERSION, "adyen": ADYEN_API_VERSION}
    return ProviderAccountConfig(
        provider=provider, account=account, environment=environment, base_url=base_url, api_key=api_key,
        webhook_secret=webhook_secret, api_version=_text(e, "api_version", where) or versions[provider],
        key_retention_s=retention,
        escalation_margin_s=margin_for(retention, margin, f"{where}.escalation_margin_s"),
        lookup_rate_per_s=float(rate), webhook_username=username, webhook_password=password,
        live_url_prefix=prefix, return_url=return_url, webhook_secret_previous=secret_previous,
        webhook_password_previous=password_previous, report_username=report_username,
        report_password=report_password, reports_base_url=reports_base_url,
    )
