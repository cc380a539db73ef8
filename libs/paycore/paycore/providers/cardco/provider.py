"""Cardco as paycore knows it: its settings, its accounts' rules, and how its parts are built.

``PROVIDER`` is the package's :class:`~paycore.providers.package.ProviderPackage`; the client,
events and settlement modules load when first built, not with the settings.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Final

from paycore.providers.cardco.version import API_VERSION as API_VERSION  # re-exported
from paycore.providers.package import (
    ACCOUNT_SEPARATOR,
    DAY_S,
    MARGIN,
    RATE,
    RETENTION,
    ProviderAccountConfig,
    ProviderPackage,
    WebhookSecurity,
    check_previous,
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

NAME: Final = "cardco"
PAYMENTS_PATH: Final = "/v1/payments"

SETTINGS = Group("every service: the default Cardco account (set `PAYCORE_CARDCO_BASE_URL` to configure it)")


@dataclass(frozen=True, kw_only=True)
class CardcoAccountSettings:
    """The default Cardco account's ``PAYCORE_CARDCO_*`` settings, each declared once (its field)."""

    base_url: str | None = SETTINGS.field(
        "PAYCORE_CARDCO_BASE_URL", Url(), None, "the Cardco API",
        shown_default="— (required when Cardco is the default provider)")
    account: str | None = SETTINGS.field(
        "PAYCORE_CARDCO_ACCOUNT", Text(forbidden=ACCOUNT_SEPARATOR), None, "the account, e.g. `acct_store`",
        shown_default="— (required with the base URL)")
    environment: str = SETTINGS.field(
        "PAYCORE_CARDCO_ENVIRONMENT", Choice(("test", "live")), "test", "the account's mode")
    api_key: Secret | None = SETTINGS.field(
        "PAYCORE_CARDCO_API_KEY", SecretText(), None,
        "its API key, `sk_test_…` or `sk_live_…` as the mode says",
        shown_default="— (required with the base URL)")
    webhook_secret: Secret | None = SETTINGS.field(
        "PAYCORE_CARDCO_WEBHOOK_SECRET", SecretText(), None,
        "its webhook signing secret (`whsec_…`); without one the webhook intake does not start")
    webhook_secret_previous: Secret | None = SETTINGS.field(
        "PAYCORE_CARDCO_WEBHOOK_SECRET_PREVIOUS", SecretText(), None,
        "during a rotation, the signing secret being replaced: accepted beside the current one "
        "(docs/providers.md, Rotating credentials)")
    api_version: str = SETTINGS.field(
        "PAYCORE_CARDCO_API_VERSION", Text(), API_VERSION,
        "the `Cardco-Version` header of every request; stamped on each attempt, so a resend keeps its own")
    key_retention_s: int = SETTINGS.field(
        "PAYCORE_CARDCO_KEY_RETENTION_S", RETENTION, float(DAY_S),
        "the provider's minimum idempotency-key retention", convert=int)
    escalation_margin_s: float | None = SETTINGS.field(
        "PAYCORE_CARDCO_ESCALATION_MARGIN_S", MARGIN, None,
        "safety margin, below the retention: `escalation_deadline = first_sent_at + retention − margin`",
        shown_default="min(7200, retention/4)")
    lookup_rate_per_s: float = SETTINGS.field(
        "PAYCORE_CARDCO_LOOKUP_RATE_PER_S", RATE, 20.0,
        "recovery's pace of lookups on this account, across its concurrent lanes")


KEY_RETENTION: Final = setting_of(CardcoAccountSettings, "key_retention_s")  # the tests name it

# Standard Webhooks: the signature header, with the delivery's id and time beside it.
WEBHOOK_SECURITY: Final = WebhookSecurity(
    "webhookSignature",
    {"type": "apiKey", "in": "header", "name": "webhook-signature",
     "description": "Standard Webhooks: `v1,<base64 HMAC-SHA256>` of "
                    "`id.timestamp.body` with the account's webhook secret"},
    [{"name": "webhook-id", "in": "header", "required": True, "schema": {"type": "string"},
      "description": "the delivery's id (Standard Webhooks)"},
     {"name": "webhook-timestamp", "in": "header", "required": True, "schema": {"type": "string"},
      "description": "integer seconds since the epoch; outside the tolerance is refused"}])


def _var(name: str) -> str:
    return variable(CardcoAccountSettings, name)


class Cardco(ProviderPackage):
    def from_env(self, env: Mapping[str, str]) -> ProviderAccountConfig:
        s = load(CardcoAccountSettings, env)
        base_url = required(s, "base_url", " (the Cardco API base URL)")
        account = required(s, "account", ", e.g. acct_store")
        api_key: Secret = required(s, "api_key")
        if not api_key.reveal().startswith(f"sk_{s.environment}_"):
            raise ConfigError(_var("api_key"), f"must be a {s.environment}-mode key (sk_{s.environment}_...)")
        check_previous(s.webhook_secret, s.webhook_secret_previous, _var("webhook_secret_previous"),
                       _var("webhook_secret"))
        return ProviderAccountConfig(
            provider=NAME, account=account, environment=s.environment, base_url=base_url, api_key=api_key,
            webhook_secret=s.webhook_secret, webhook_secret_previous=s.webhook_secret_previous,
            api_version=s.api_version, key_retention_s=s.key_retention_s,
            escalation_margin_s=settings_margin(s), lookup_rate_per_s=s.lookup_rate_per_s,
        )

    def check_file_key(self, api_key: Secret, environment: str, where: str) -> None:
        if not api_key.reveal().startswith(f"sk_{environment}_"):
            raise ConfigError(where, f"must name a variable holding a sk_{environment}_ key")

    def client(self, accounts: Sequence[ProviderAccountConfig], clock: Clock, *, max_call_duration_s: float,
               transport: httpx.AsyncBaseTransport | None = None) -> Provider:
        from paycore.providers.cardco.client import CardcoClient

        return CardcoClient(accounts, clock, max_call_duration_s=max_call_duration_s, transport=transport)

    def notification_format(self) -> NotificationFormat:
        from paycore.providers.cardco.events import CARDCO_EVENTS

        return CARDCO_EVENTS

    def settlement_source(self, config: ProviderAccountConfig, clock: Clock,
                          transport: httpx.AsyncBaseTransport | None = None) -> SettlementSource:
        from paycore.providers.cardco.settlements import CardcoSettlements

        return CardcoSettlements(config, transport=transport)

    async def read_report_file(self, path: Path, provider_account: str, *, batch_id: str | None = None,
                               batch_date: date | None = None
                               ) -> tuple[SettlementBatch, AsyncIterator[SettlementLine | BadLine]]:
        from paycore.providers.cardco.settlements import read_report_file

        return await read_report_file(path, provider_account, batch_id=batch_id, batch_date=batch_date)

    def sandbox_env(self, base_url: str, account: str, environment: str, credentials: Mapping[str, str],
                    return_url: str) -> dict[str, str]:
        return {_var("base_url"): base_url, _var("account"): account, _var("environment"): environment,
                _var("api_key"): credentials["api_key"],
                _var("webhook_secret"): credentials["webhook_secret"]}


PROVIDER: Final = Cardco(
    name=NAME, title="Cardco", settings=SETTINGS, marker=setting_of(CardcoAccountSettings, "base_url"),
    registered_by=registered_by(CardcoAccountSettings),
    payments_path=PAYMENTS_PATH, api_version=API_VERSION, key_retention_s=DAY_S,
    webhook_security=WEBHOOK_SECURITY,
)
