"""Webhook intake as tests run it: checkout, sandbox and intake as real HTTP servers.

Intake is configured with three Cardco accounts (acct_store test and live,
acct_other test) and the sandbox's webhook secrets, so a test can sign a
delivery as any of them, or let the sandbox deliver.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import httpx
import orjson
from prometheus_client import CollectorRegistry, generate_latest

from harness.servers import serve_asgi
from paycore.clock import FakeClock
from paycore.config import ProviderAccountConfig, Secret, Settings
from paycore.providers.cardco.version import API_VERSION as CARDCO_API_VERSION
from paycore.webhook_signatures import signed_headers
from paycore_checkout.app import create_app as create_checkout_app
from paycore_sandbox.app import create_app as create_sandbox_app
from paycore_sandbox.settings import SandboxSettings
from paycore_webhooks.app import create_app as create_webhooks_app
from tests.support.stack import Sandbox, Shop, checkout_settings

TEST = "cardco:acct_store:test"
LIVE = "cardco:acct_store:live"
OTHER = "cardco:acct_other:test"


def sandbox_secrets() -> dict[str, str]:
    accounts = SandboxSettings.default().accounts
    return {f"cardco:{a.account}:{a.environment}": a.webhook_secret for a in accounts}


def sandbox_api_keys() -> dict[str, str]:
    return {f"cardco:{a.account}:{a.environment}": a.api_key for a in SandboxSettings.default().accounts}


def intake_settings(sandbox_url: str, db_dsn: str) -> Settings:
    base = checkout_settings(sandbox_url, db_dsn)
    secrets, keys = sandbox_secrets(), sandbox_api_keys()
    accounts = []
    for pa in (TEST, LIVE, OTHER):
        _, account, environment = pa.split(":")
        accounts.append(ProviderAccountConfig(
            provider="cardco", account=account, environment=environment, base_url=sandbox_url,
            api_key=Secret(keys[pa]), webhook_secret=Secret(secrets[pa]), api_version=CARDCO_API_VERSION,
        ))
    return dataclasses.replace(base, accounts=tuple(accounts))


def payment_object(*, payment_id: str, reference: str | None, status: str = "succeeded",
                   amount: int = 4999, currency: str = "EUR", account: str = "acct_store",
                   livemode: bool = False, **extra: Any) -> dict[str, Any]:
    return {"id": payment_id, "object": "payment", "account": account, "livemode": livemode,
            "amount": amount, "currency": currency, "reference": reference, "status": status,
            "decline_code": extra.pop("decline_code", None),
            "amount_refunded": extra.pop("amount_refunded", 0),
            "next_action": extra.pop("next_action", None), "created": int(time.time()), **extra}


def event(payment: dict[str, Any], *, event_type: str | None = None, event_id: str | None = "auto",
          sequence: int | None = 1, account: str = "acct_store", livemode: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": ("evt_" + uuid.uuid4().hex[:16]) if event_id == "auto" else event_id,
        "type": event_type or f"payment.{payment['status']}",
        "created": int(time.time()), "account": account, "livemode": livemode,
        "data": {"object": payment},
    }
    if sequence is not None:
        body["sequence"] = sequence
    return body


@dataclass
class WebhookStack:
    sandbox: Sandbox
    shop: Shop
    intake: httpx.AsyncClient
    intake_url: str
    clock: FakeClock
    pool: asyncpg.Pool
    settings: Settings
    intake_metrics: CollectorRegistry | None = None  # what the intake's admin port serves

    def intake_metrics_text(self) -> str:
        assert self.intake_metrics is not None
        return generate_latest(self.intake_metrics).decode()

    async def deliver(self, body: dict[str, Any] | bytes, *, account: str = TEST, msg_id: str | None = None,
                      timestamp: int | None = None, secret: str | None = None,
                      headers: dict[str, str] | None = None) -> httpx.Response:
        """Sign and POST one delivery, as Cardco would (a fresh signature per delivery)."""
        raw = body if isinstance(body, bytes) else orjson.dumps(body)
        if msg_id is None:
            msg_id = (body.get("id") if isinstance(body, dict) else None) or "msg_" + uuid.uuid4().hex
        signed = signed_headers(secret or sandbox_secrets()[account], msg_id,
                                timestamp if timestamp is not None else int(time.time()), raw)
        return await self.intake.post("/webhooks/cardco", content=raw, headers={**signed, **(headers or {})})

    async def subscribe(self) -> None:
        """Have the sandbox deliver its webhooks to this intake."""
        r = await self.sandbox.http.post("/_sandbox/webhooks/endpoints",
                                         json={"url": self.intake_url + "/webhooks/cardco"})
        r.raise_for_status()

    async def deliveries_settled(self) -> bool:
        r = await self.sandbox.http.get("/_sandbox/webhooks/pending")
        return bool(r.json()["pending"] == 0)

    async def count(self, sql: str, *args: Any) -> int:
        return int(await self.pool.fetchval(sql, *args))


async def running_webhook_stack(pool: asyncpg.Pool, db_dsn: str) -> AsyncIterator[WebhookStack]:
    clock = FakeClock(current=datetime.now(UTC))
    # Webhook retries run 10,000 times faster than Cardco's 3-day schedule; async
    # payments complete quickly. Endpoints are added by the tests that want delivery.
    sandbox_settings = dataclasses.replace(SandboxSettings.default(), webhook_time_scale=0.0001,
                                           async_delay_s=0.2)
    async with serve_asgi(create_sandbox_app(sandbox_settings)) as sandbox_url:
        settings = intake_settings(sandbox_url, db_dsn)
        checkout = create_checkout_app(settings, clock=clock, pool=pool)
        intake_app = create_webhooks_app(settings, clock=clock, pool=pool)
        async with serve_asgi(checkout) as checkout_url, serve_asgi(intake_app) as intake_url:
            sandbox = Sandbox(sandbox_url)
            async with httpx.AsyncClient(base_url=checkout_url, timeout=30) as shop_http, \
                    httpx.AsyncClient(base_url=intake_url, timeout=30) as intake_http:
                yield WebhookStack(sandbox, Shop(shop_http, "cus_alice"), intake_http, intake_url, clock,
                                   pool, settings, intake_app.state.metrics_registry)
            await sandbox.aclose()
