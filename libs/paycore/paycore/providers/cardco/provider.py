"""Cardco as paycore knows it: its settings, its accounts' rules, and how its parts are built.

``PROVIDER`` is the package's :class:`~paycore.providers.package.ProviderPackage`; the client,
events and settlement modules load when first built, not with the settings.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
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
    env_margin,
)
from paycore.settings_spec import Choice, ConfigError, Group, Secret, SecretText, Text, Url

if TYPE_CHECKING:
    import httpx

    from paycore.clock import Clock
    from paycore.providers.base import NotificationFormat, Provider
    from paycore.settlement_lines import BadLine, SettlementBatch, SettlementLine, SettlementSource

NAME: Final = "cardco"
PAYMENTS_PATH: Final = "/v1/payments"

SETTINGS = Group("every service: the default Cardco account (set `PAYCORE_CARDCO_BASE_URL` to configure it)")
BASE_URL = SETTINGS.declare(
    "PAYCORE_CARDCO_BASE_URL", Url(), None, "the Cardco API",
    shown_default="— (required when Cardco is the default provider)")
ACCOUNT = SETTINGS.declare(
    "PAYCORE_CARDCO_ACCOUNT", Text(forbidden=ACCOUNT_SEPARATOR), None, "the account, e.g. `acct_store`",
    shown_default="— (required with the base URL)")
ENVIRONMENT = SETTINGS.declare(
    "PAYCORE_CARDCO_ENVIRONMENT", Choice(("test", "live")), "test", "the account's mode")
API_KEY = SETTINGS.declare(
    "PAYCORE_CARDCO_API_KEY", SecretText(), None, "its API key, `sk_test_…` or `sk_live_…` as the mode says",
    shown_default="— (required with the base URL)")
WEBHOOK_SECRET = SETTINGS.declare(
    "PAYCORE_CARDCO_WEBHOOK_SECRET", SecretText(), None,
    "its webhook signing secret (`whsec_…`); without one the webhook intake does not start")
WEBHOOK_SECRET_PREVIOUS = SETTINGS.declare(
    "PAYCORE_CARDCO_WEBHOOK_SECRET_PREVIOUS", SecretText(), None,
    "during a rotation, the signing secret being replaced: accepted beside the current one "
    "(docs/providers.md, Rotating credentials)")
API_VERSION_SETTING = SETTINGS.declare(
    "PAYCORE_CARDCO_API_VERSION", Text(), API_VERSION,
    "the `Cardco-Version` header of every request; stamped on each attempt, so a resend keeps its own")
KEY_RETENTION = SETTINGS.declare(
    "PAYCORE_CARDCO_KEY_RETENTION_S", RETENTION, float(DAY_S),
    "the provider's minimum idempotency-key retention")
ESCALATION_MARGIN = SETTINGS.declare(
    "PAYCORE_CARDCO_ESCALATION_MARGIN_S", MARGIN, None,
    "safety margin, below the retention: `escalation_deadline = first_sent_at + retention − margin`",
    shown_default="min(7200, retention/4)")
LOOKUP_RATE = SETTINGS.declare(
    "PAYCORE_CARDCO_LOOKUP_RATE_PER_S", RATE, 20.0,
    "recovery's pace of lookups on this account, across its concurrent lanes")

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


class Cardco(ProviderPackage):
    def from_env(self, env: Mapping[str, str]) -> ProviderAccountConfig:
        base_url = BASE_URL.require(env, " (the Cardco API base URL)")
        account = ACCOUNT.require(env, ", e.g. acct_store")
        environment = ENVIRONMENT.read(env)
        api_key = API_KEY.require(env)
        if not api_key.reveal().startswith(f"sk_{environment}_"):
            raise ConfigError(API_KEY.name, f"must be a {environment}-mode key (sk_{environment}_...)")
        retention = int(KEY_RETENTION.read(env))
        secret, previous = WEBHOOK_SECRET.get(env), WEBHOOK_SECRET_PREVIOUS.get(env)
        check_previous(secret, previous, WEBHOOK_SECRET_PREVIOUS.name, WEBHOOK_SECRET.name)
        return ProviderAccountConfig(
            provider=NAME, account=account, environment=environment, base_url=base_url, api_key=api_key,
            webhook_secret=secret, webhook_secret_previous=previous,
            api_version=API_VERSION_SETTING.read(env),
            key_retention_s=retention,
            escalation_margin_s=env_margin(env, ESCALATION_MARGIN, retention),
            lookup_rate_per_s=LOOKUP_RATE.read(env),
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
        return {BASE_URL.name: base_url, ACCOUNT.name: account, ENVIRONMENT.name: environment,
                API_KEY.name: credentials["api_key"], WEBHOOK_SECRET.name: credentials["webhook_secret"]}


PROVIDER: Final = Cardco(
    name=NAME, title="Cardco", settings=SETTINGS, marker=BASE_URL,
    registered_by={"base_url": BASE_URL, "api_version": API_VERSION_SETTING, "key_retention_s": KEY_RETENTION,
                   "escalation_margin_s": ESCALATION_MARGIN, "lookup_rate_per_s": LOOKUP_RATE},
    payments_path=PAYMENTS_PATH, api_version=API_VERSION, key_retention_s=DAY_S,
    webhook_security=WEBHOOK_SECURITY,
)
