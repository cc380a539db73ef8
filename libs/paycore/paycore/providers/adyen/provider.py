"""Adyen as paycore knows it: its settings, its accounts' rules, and how its parts are built.

``PROVIDER`` is the package's :class:`~paycore.providers.package.ProviderPackage`; the client,
notification and settlement modules load when first built, not with the settings.
"""

from __future__ import annotations

import binascii
import dataclasses
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from paycore.providers.package import (
    ACCOUNT_SEPARATOR,
    DAY_S,
    MARGIN,
    RETENTION,
    AccountEntry,
    FileSecret,
    FileText,
    ProviderAccountConfig,
    ProviderPackage,
    WebhookSecurity,
    check_previous,
    entry_key,
    registered_by,
    required,
    settings_margin,
    variable,
)
from paycore.settings_spec import Choice, ConfigError, Group, Secret, SecretText, Text, Url, load, setting_of

if TYPE_CHECKING:
    import httpx

    from paycore.clock import Clock
    from paycore.providers.base import NotificationFormat, Provider
    from paycore.settlement_lines import BadLine, SettlementBatch, SettlementLine, SettlementSource

NAME: Final = "adyen"
API_VERSION: Final = "v71"
PAYMENTS_PATH: Final = "/{api_version}/payments"

SETTINGS = Group("every service: the default Adyen account (set `PAYCORE_ADYEN_API_KEY` to configure it)")


@dataclass(frozen=True, kw_only=True)
class AdyenAccountSettings:
    """The default Adyen account's ``PAYCORE_ADYEN_*`` settings, each declared once (its field)."""

    api_key: Secret | None = SETTINGS.field(
        "PAYCORE_ADYEN_API_KEY", SecretText(), None, "the API credential's key (`X-API-Key`)",
        shown_default="— (required when Adyen is the default provider)")
    account: str | None = SETTINGS.field(
        "PAYCORE_ADYEN_MERCHANT_ACCOUNT", Text(printable=True, forbidden=ACCOUNT_SEPARATOR), None,
        "the merchant account payments are made on",
        shown_default="— (required with the API key)")
    environment: str = SETTINGS.field(
        "PAYCORE_ADYEN_ENVIRONMENT", Choice(("test", "live")), "test", "the account's mode")
    live_url_prefix: str | None = SETTINGS.field(
        "PAYCORE_ADYEN_LIVE_URL_PREFIX", Text(printable=True), None,
        "live: the company's endpoint prefix (`https://<prefix>-checkout-live.adyenpayments.com/checkout`)",
        shown_default="— (required for live)")
    base_url: str | None = SETTINGS.field(
        "PAYCORE_ADYEN_BASE_URL", Url(), None, "overrides the Checkout API base URL (tests, the sandbox)",
        shown_default="`https://checkout-test.adyen.com` (test), from the prefix (live)")
    webhook_secret: Secret | None = SETTINGS.field(
        "PAYCORE_ADYEN_HMAC_KEY", SecretText(), None,
        "the webhook's HMAC key (hex); without it the intake does not start")
    webhook_secret_previous: Secret | None = SETTINGS.field(
        "PAYCORE_ADYEN_HMAC_KEY_PREVIOUS", SecretText(), None,
        "during a rotation, the HMAC key being replaced: accepted beside the current one")
    webhook_username: str | None = SETTINGS.field(
        "PAYCORE_ADYEN_WEBHOOK_USERNAME", Text(printable=True), None, "the webhook's basic-auth user")
    webhook_password: Secret | None = SETTINGS.field(
        "PAYCORE_ADYEN_WEBHOOK_PASSWORD", SecretText(), None, "the webhook's basic-auth password")
    webhook_password_previous: Secret | None = SETTINGS.field(
        "PAYCORE_ADYEN_WEBHOOK_PASSWORD_PREVIOUS", SecretText(), None,
        "during a rotation, the basic-auth password being replaced: accepted beside the current one")
    return_url: str | None = SETTINGS.field(
        "PAYCORE_ADYEN_RETURN_URL", Url(), None,
        "`returnUrl` of every payment: where a redirected shopper comes back (Adyen requires it)",
        shown_default="— (required with the API key)")
    api_version: str = SETTINGS.field(
        "PAYCORE_ADYEN_API_VERSION", Text(), API_VERSION,
        "the Checkout API version in the path; stamped on each attempt")
    key_retention_s: int = SETTINGS.field(
        "PAYCORE_ADYEN_KEY_RETENTION_S", RETENTION, 31.0 * DAY_S,
        "Adyen's idempotency-key retention (keys are kept at least 31 days)", convert=int)
    escalation_margin_s: float | None = SETTINGS.field(
        "PAYCORE_ADYEN_ESCALATION_MARGIN_S", MARGIN, None, "as `PAYCORE_CARDCO_ESCALATION_MARGIN_S`",
        shown_default="min(7200, retention/4)")
    report_username: str | None = SETTINGS.field(
        "PAYCORE_ADYEN_REPORT_USERNAME", Text(printable=True), None,
        "the report user (`report_<id>@Company.<company>`) that downloads Settlement details reports; "
        "without one, settlements are read from files only")
    report_password: Secret | None = SETTINGS.field(
        "PAYCORE_ADYEN_REPORT_PASSWORD", SecretText(), None, "the report user's basic-auth password")
    reports_base_url: str | None = SETTINGS.field(
        "PAYCORE_ADYEN_REPORTS_BASE_URL", Url(), None,
        "where reports are downloaded from (tests: the sandbox)",
        shown_default="`https://ca-test.adyen.com` (test), `https://ca-live.adyen.com` (live)")


@dataclass(frozen=True)
class AdyenAccountConfig(ProviderAccountConfig):
    """An Adyen account: the shared fields, and Adyen's own (what :class:`AdyenAccountSettings` and
    :class:`AdyenEntry` read; the notification verifier and the settlement report reader read them here).

    :param webhook_username: The basic-auth user its notifications carry.
    :param webhook_password: That user's password.
    :param webhook_password_previous: During a rotation, the password it replaces.
    :param live_url_prefix: Live: the company's endpoint prefix.
    :param report_username: The report user whose basic auth downloads settlement reports
        (none: the account's settlements are read from files only).
    :param report_password: That user's password.
    :param reports_base_url: Where reports are downloaded (the Customer Area's host).
    """

    webhook_username: str | None = None
    webhook_password: Secret | None = None
    webhook_password_previous: Secret | None = None
    live_url_prefix: str | None = None
    report_username: str | None = None
    report_password: Secret | None = None
    reports_base_url: str | None = None

    @classmethod
    def of(cls, account: ProviderAccountConfig) -> AdyenAccountConfig:
        """``account`` as an Adyen account: itself, or (one built as the shared class) with none of
        Adyen's own settings."""
        if isinstance(account, cls):
            return account
        return cls(**{f.name: getattr(account, f.name) for f in dataclasses.fields(ProviderAccountConfig)})


# Why an Adyen account cannot start without its return URL, said where it is refused.
RETURN_URL_NEEDED: Final = (
    ": every Adyen payment carries a returnUrl (where the shopper comes back after a redirect or "
    "3-D Secure), e.g. https://shop.example/checkout/return")

WEBHOOK_SECURITY: Final = WebhookSecurity(
    "adyenBasic",
    {"type": "http", "scheme": "basic",
     "description": "the webhook's Basic credentials; each item also carries its HMAC "
                    "signature in additionalData.hmacSignature"})


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


def _var(name: str) -> str:
    return variable(AdyenAccountSettings, name)


@dataclass(frozen=True, kw_only=True)
class AdyenEntry(AccountEntry):
    """An Adyen accounts-file entry: the shared keys, its webhook's basic auth and its report user."""

    webhook_username: str | None = entry_key(FileText(), "—", "Adyen: the webhook's basic-auth user",
                                             listed_after="webhook_secret_previous_env")
    webhook_password_env: Secret | None = entry_key(FileSecret(), "—",
                                                    "Adyen: the variable holding that user's password")
    webhook_password_previous_env: Secret | None = entry_key(
        FileSecret(), "—", "Adyen, during a rotation: the variable holding the password being replaced")
    report_username: str | None = entry_key(
        FileText(), "—", "Adyen: the report user that downloads settlement reports",
        listed_after="lookup_rate_per_s")
    report_password_env: Secret | None = entry_key(
        FileSecret(), "—", "Adyen: the variable holding the report user's password")
    reports_base_url: str | None = entry_key(FileText(Url()), "Adyen: by `environment`",
                                             "Adyen: where reports are downloaded from")

    def account_fields(self, package: ProviderPackage, environment: str, where: str) -> dict[str, Any]:
        del package
        if (self.webhook_username is None) != (self.webhook_password_env is None):
            raise ConfigError(f"{where}.webhook_password_env", "and webhook_username are set together")
        check_previous(self.webhook_password_env, self.webhook_password_previous_env,
                       f"{where}.webhook_password_previous_env", "webhook_password_env")
        if (self.report_username is None) != (self.report_password_env is None):
            raise ConfigError(f"{where}.report_password_env", "and report_username are set together")
        return {"webhook_username": self.webhook_username, "webhook_password": self.webhook_password_env,
                "webhook_password_previous": self.webhook_password_previous_env,
                "report_username": self.report_username, "report_password": self.report_password_env,
                "reports_base_url": self.reports_base_url or adyen_reports_base_url(environment),
                "live_url_prefix": self.live_url_prefix}


class Adyen(ProviderPackage):
    def from_env(self, env: Mapping[str, str]) -> AdyenAccountConfig:
        s = load(AdyenAccountSettings, env)
        api_key: Secret = required(s, "api_key")
        base_url = s.base_url or adyen_base_url(s.environment, s.live_url_prefix, _var("live_url_prefix"))
        check_hmac_key(s.webhook_secret, _var("webhook_secret"))
        check_hmac_key(s.webhook_secret_previous, _var("webhook_secret_previous"))
        check_previous(s.webhook_secret, s.webhook_secret_previous, _var("webhook_secret_previous"),
                       _var("webhook_secret"))
        if (s.webhook_username is None) != (s.webhook_password is None):
            raise ConfigError(_var("webhook_password"), f"and {_var('webhook_username')} are set together")
        check_previous(s.webhook_password, s.webhook_password_previous, _var("webhook_password_previous"),
                       _var("webhook_password"))
        if (s.report_username is None) != (s.report_password is None):
            raise ConfigError(_var("report_password"), f"and {_var('report_username')} are set together")
        return AdyenAccountConfig(
            provider=NAME, account=required(s, "account", " (the merchant account)"),
            environment=s.environment, base_url=base_url, api_key=api_key, webhook_secret=s.webhook_secret,
            webhook_secret_previous=s.webhook_secret_previous,
            webhook_password_previous=s.webhook_password_previous, api_version=s.api_version,
            key_retention_s=s.key_retention_s, escalation_margin_s=settings_margin(s),
            webhook_username=s.webhook_username, webhook_password=s.webhook_password,
            live_url_prefix=s.live_url_prefix, return_url=required(s, "return_url", RETURN_URL_NEEDED),
            report_username=s.report_username, report_password=s.report_password,
            reports_base_url=s.reports_base_url or adyen_reports_base_url(s.environment),
        )

    def default_base_url(self, entry: AccountEntry, environment: str, where: str) -> str | None:
        return adyen_base_url(environment, entry.live_url_prefix, f"{where}.live_url_prefix")

    def check_webhook_secret(self, secret: Secret | None, where: str) -> None:
        check_hmac_key(secret, where)

    def client(self, accounts: Sequence[ProviderAccountConfig], clock: Clock, *, max_call_duration_s: float,
               transport: httpx.AsyncBaseTransport | None = None) -> Provider:
        from paycore.providers.adyen.client import AdyenProvider

        return AdyenProvider(accounts, clock, max_call_duration_s=max_call_duration_s, transport=transport)

    def notification_format(self) -> NotificationFormat:
        from paycore.providers.adyen.notifications import ADYEN_EVENTS

        return ADYEN_EVENTS

    def settlement_source(self, config: ProviderAccountConfig, clock: Clock,
                          transport: httpx.AsyncBaseTransport | None = None) -> SettlementSource:
        from paycore.providers.adyen.settlements import AdyenSettlements

        return AdyenSettlements(config, transport=transport)

    async def read_report_file(self, path: Path, provider_account: str, *, batch_id: str | None = None,
                               batch_date: date | None = None
                               ) -> tuple[SettlementBatch, AsyncIterator[SettlementLine | BadLine]]:
        from paycore.providers.adyen.settlements import read_report_file

        return await read_report_file(path, provider_account, batch_id=batch_id, batch_date=batch_date)

    def sandbox_env(self, base_url: str, account: str, environment: str, credentials: Mapping[str, str],
                    return_url: str) -> dict[str, str]:
        return {_var("base_url"): base_url, _var("account"): account, _var("environment"): environment,
                _var("api_key"): credentials["api_key"], _var("webhook_secret"): credentials["hmac_key"],
                _var("webhook_username"): credentials["webhook_username"],
                _var("webhook_password"): credentials["webhook_password"], _var("return_url"): return_url}


PROVIDER: Final = Adyen(
    name=NAME, title="Adyen", settings=SETTINGS, marker=setting_of(AdyenAccountSettings, "api_key"),
    # No lookups to pace: only an accounts-file entry sets lookup_rate_per_s.
    registered_by=registered_by(AdyenAccountSettings),
    payments_path=PAYMENTS_PATH, api_version=API_VERSION, key_retention_s=31 * DAY_S,
    webhook_security=WEBHOOK_SECURITY, return_url_needed=RETURN_URL_NEEDED, file_entry=AdyenEntry,
    account_class=AdyenAccountConfig,
)
