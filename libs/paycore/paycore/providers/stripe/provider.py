"""Stripe as paycore knows it: its settings, its accounts' rules, and how its parts are built.

``PROVIDER`` is the package's :class:`~paycore.providers.package.ProviderPackage`; the client
(and the SDK), events and settlement modules load when first built, not with the settings.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Final

from paycore.providers.package import (
    ACCOUNT_SEPARATOR,
    DAY_S,
    MARGIN,
    RATE,
    RETENTION,
    AccountEntry,
    ProviderAccountConfig,
    ProviderPackage,
    WebhookSecurity,
    check_previous,
    registered_by,
    required,
    settings_margin,
    variable,
)
from paycore.settings_spec import ConfigError, Group, Secret, SecretText, Text, Url, load, setting_of

if TYPE_CHECKING:
    import httpx

    from paycore.clock import Clock
    from paycore.providers.base import NotificationFormat, Provider
    from paycore.settlement_lines import BadLine, SettlementBatch, SettlementLine, SettlementSource

NAME: Final = "stripe"
API_BASE: Final = "https://api.stripe.com"
API_VERSION: Final = "2026-10-28.endive"  # the version stripe==16.1.0 is generated for
PAYMENTS_PATH: Final = "/v1/payment_intents"

SETTINGS = Group("every service: the default Stripe account (set `PAYCORE_STRIPE_API_KEY` to configure it)")


@dataclass(frozen=True, kw_only=True)
class StripeAccountSettings:
    """The default Stripe account's ``PAYCORE_STRIPE_*`` settings, each declared once (its field)."""

    api_key: Secret | None = SETTINGS.field(
        "PAYCORE_STRIPE_API_KEY", SecretText(), None,
        "secret or restricted key; its prefix (`sk_test_`/`rk_test_` or `sk_live_`/`rk_live_`) is the mode",
        shown_default="— (required when Stripe is the default provider)")
    webhook_secret: Secret | None = SETTINGS.field(
        "PAYCORE_STRIPE_WEBHOOK_SECRET", SecretText(), None,
        "the endpoint's signing secret (`whsec_…`) for `Stripe-Signature`; "
        "without one the intake does not start")
    webhook_secret_previous: Secret | None = SETTINGS.field(
        "PAYCORE_STRIPE_WEBHOOK_SECRET_PREVIOUS", SecretText(), None,
        "during a rotation, the signing secret being replaced: accepted beside the current one")
    base_url: str = SETTINGS.field(
        "PAYCORE_STRIPE_API_BASE", Url(), API_BASE, "the Stripe API (another only for tests)")
    account: str = SETTINGS.field(
        "PAYCORE_STRIPE_ACCOUNT", Text(printable=True, forbidden=ACCOUNT_SEPARATOR), "default",
        "the account's label in provider-account ids (`stripe:<label>:<mode>`), e.g. its `acct_…` id")
    api_version: str = SETTINGS.field(
        "PAYCORE_STRIPE_API_VERSION", Text(), API_VERSION,
        "the `Stripe-Version` of every request; stamped on each attempt, so a resend keeps its own")
    return_url: str | None = SETTINGS.field(
        "PAYCORE_STRIPE_RETURN_URL", Url(), None,
        "where a customer returns after a redirect; unset, only card payments without redirects are offered")
    key_retention_s: int = SETTINGS.field(
        "PAYCORE_STRIPE_KEY_RETENTION_S", RETENTION, float(DAY_S),
        "Stripe's idempotency-key retention (keys are kept at least 24 h)", convert=int)
    escalation_margin_s: float | None = SETTINGS.field(
        "PAYCORE_STRIPE_ESCALATION_MARGIN_S", MARGIN, None, "as `PAYCORE_CARDCO_ESCALATION_MARGIN_S`",
        shown_default="min(7200, retention/4)")
    lookup_rate_per_s: float = SETTINGS.field(
        "PAYCORE_STRIPE_LOOKUP_RATE_PER_S", RATE, 20.0,
        "recovery's pace of lookups (Stripe's Search allows fewer requests than retrieve)")


WEBHOOK_SECURITY: Final = WebhookSecurity(
    "stripeSignature",
    {"type": "apiKey", "in": "header", "name": "Stripe-Signature",
     "description": "`t=<timestamp>,v1=<hex HMAC-SHA256>` with the endpoint secret"})


def stripe_environment(api_key: str, where: str) -> str:
    """A Stripe key's mode, from its prefix."""
    for prefix in ("sk_", "rk_"):
        for mode in ("test", "live"):
            if api_key.startswith(f"{prefix}{mode}_"):
                return mode
    raise ConfigError(where, "must be a Stripe secret or restricted key "
                             "(sk_test_, sk_live_, rk_test_, rk_live_)")


def _var(name: str) -> str:
    return variable(StripeAccountSettings, name)


class Stripe(ProviderPackage):
    def from_env(self, env: Mapping[str, str]) -> ProviderAccountConfig:
        s = load(StripeAccountSettings, env)
        api_key: Secret = required(s, "api_key")
        check_previous(s.webhook_secret, s.webhook_secret_previous, _var("webhook_secret_previous"),
                       _var("webhook_secret"))
        return ProviderAccountConfig(
            provider=NAME, account=s.account,
            environment=stripe_environment(api_key.reveal(), _var("api_key")),
            base_url=s.base_url, api_key=api_key, webhook_secret=s.webhook_secret,
            webhook_secret_previous=s.webhook_secret_previous, api_version=s.api_version,
            key_retention_s=s.key_retention_s, escalation_margin_s=settings_margin(s),
            lookup_rate_per_s=s.lookup_rate_per_s, return_url=s.return_url,
        )

    def file_environment(self, api_key: Secret, environment: object, where: str) -> object:
        # The key's prefix is the mode; an entry's environment may only repeat it.
        keyed = stripe_environment(api_key.reveal(), f"{where}.api_key_env")
        if environment not in (None, keyed):
            raise ConfigError(f"{where}.environment", f"contradicts its key's mode ({keyed})")
        return keyed

    def default_base_url(self, entry: AccountEntry, environment: str, where: str) -> str | None:
        return API_BASE

    def client(self, accounts: Sequence[ProviderAccountConfig], clock: Clock, *, max_call_duration_s: float,
               transport: httpx.AsyncBaseTransport | None = None) -> Provider:
        from paycore.providers.stripe.client import StripeProvider

        return StripeProvider(accounts, clock, max_call_duration_s=max_call_duration_s, transport=transport)

    def notification_format(self) -> NotificationFormat:
        from paycore.providers.stripe.events import STRIPE_EVENTS

        return STRIPE_EVENTS

    def settlement_source(self, config: ProviderAccountConfig, clock: Clock,
                          transport: httpx.AsyncBaseTransport | None = None) -> SettlementSource:
        from paycore.providers.stripe.settlements import StripeSettlements

        return StripeSettlements(config, clock, transport=transport)

    async def read_report_file(self, path: Path, provider_account: str, *, batch_id: str | None = None,
                               batch_date: date | None = None
                               ) -> tuple[SettlementBatch, AsyncIterator[SettlementLine | BadLine]]:
        from paycore.providers.stripe.settlements import read_report_file

        return await read_report_file(path, provider_account, batch_id=batch_id, batch_date=batch_date)

    def sandbox_env(self, base_url: str, account: str, environment: str, credentials: Mapping[str, str],
                    return_url: str) -> dict[str, str]:
        # The mode is the key's.
        return {_var("base_url"): base_url, _var("account"): account, _var("api_key"): credentials["api_key"],
                _var("webhook_secret"): credentials["webhook_secret"]}


PROVIDER: Final = Stripe(
    name=NAME, title="Stripe", settings=SETTINGS, marker=setting_of(StripeAccountSettings, "api_key"),
    registered_by=registered_by(StripeAccountSettings),
    payments_path=PAYMENTS_PATH, api_version=API_VERSION, key_retention_s=DAY_S,
    webhook_security=WEBHOOK_SECURITY,
)
