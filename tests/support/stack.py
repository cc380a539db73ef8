"""The checkout path as tests run it: the sandbox and checkout as real HTTP servers.

The sandbox is the Cardco provider (its ledger counts charges); checkout runs
on a :class:`~paycore.clock.FakeClock` so budgets fire only when a test moves time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import asyncpg
import httpx
import jwt
from prometheus_client import CollectorRegistry, generate_latest

from harness.servers import serve_asgi
from paycore.clock import FakeClock
from paycore.config import Settings, load_settings
from paycore_checkout.app import create_app as create_checkout_app
from paycore_sandbox.app import create_app as create_sandbox_app
from paycore_sandbox.settings import SandboxSettings

JWT_SECRET = "test-secret-for-paycore-checkout-0123456789"
T = TypeVar("T")


def token_for(customer: str, secret: str = JWT_SECRET) -> str:
    now = int(time.time())
    return jwt.encode({"sub": customer, "iat": now, "exp": now + 3600}, secret, algorithm="HS256")


def checkout_settings(sandbox_url: str, db_dsn: str, **env: str) -> Settings:
    return load_settings({
        "PAYCORE_DATABASE_URL": db_dsn,
        "PAYCORE_JWT_SECRET": JWT_SECRET,
        "PAYCORE_CARDCO_BASE_URL": sandbox_url,
        "PAYCORE_CARDCO_ACCOUNT": "acct_store",
        "PAYCORE_CARDCO_ENVIRONMENT": "test",
        "PAYCORE_CARDCO_API_KEY": "sk_test_acct_store_local",
        **env,
    })


async def eventually(check: Callable[[], Awaitable[T | None]], *, within_s: float = 10.0,
                     what: str = "condition") -> T:
    """Poll ``check`` until it returns a truthy value, with a deadline (never a fixed sleep)."""
    deadline = time.monotonic() + within_s
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


class Sandbox:
    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx.AsyncClient(base_url=url, timeout=10)

    async def ledger(self) -> list[dict[str, Any]]:
        r = await self.http.get("/_sandbox/payments")
        r.raise_for_status()
        body = r.json()
        return list(body["data"] if isinstance(body, dict) else body)

    async def requests(self) -> list[dict[str, Any]]:
        r = await self.http.get("/_sandbox/requests")
        r.raise_for_status()
        body = r.json()
        return list(body["data"] if isinstance(body, dict) else body)

    async def create_requests(self) -> list[dict[str, Any]]:
        return [q for q in await self.requests()
                if q["method"] == "POST" and q["path"] == "/v1/payments"]

    async def fault(self, fault: str, **rule: Any) -> None:
        rule.setdefault("match", {"any": True})
        r = await self.http.post("/_sandbox/faults", json={"rules": [{"fault": fault, **rule}]})
        r.raise_for_status()

    async def clear_faults(self) -> None:
        (await self.http.delete("/_sandbox/faults")).raise_for_status()

    async def aclose(self) -> None:
        await self.http.aclose()


@dataclass
class Shop:
    """A storefront talking to checkout as one customer."""

    http: httpx.AsyncClient
    customer: str

    def as_customer(self, customer: str) -> Shop:
        return Shop(self.http, customer)

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {token_for(self.customer)}"}

    async def create_order(self, amount_minor: int = 4999, currency: str = "EUR", **fields: Any) -> str:
        r = await self.http.post("/orders", headers=self.auth,
                                 json={"amount_minor": amount_minor, "currency": currency, **fields})
        assert r.status_code == 201, r.text
        order_id: str = r.json()["order_id"]
        return order_id

    async def pay(self, order_id: str, method: str = "tok_visa", **kw: Any) -> httpx.Response:
        headers = {**self.auth, **kw.pop("headers", {})}
        return await self.http.post(f"/orders/{order_id}/payment", json={"payment_method": method},
                                    headers=headers, **kw)

    async def status(self, order_id: str) -> httpx.Response:
        return await self.http.get(f"/orders/{order_id}/payment/status", headers=self.auth)

    async def cancel(self, order_id: str) -> httpx.Response:
        return await self.http.post(f"/orders/{order_id}/cancel", headers=self.auth)


@dataclass
class Stack:
    sandbox: Sandbox
    shop: Shop
    clock: FakeClock
    pool: asyncpg.Pool
    checkout_url: str
    settings: Settings
    checkout_metrics: CollectorRegistry | None = None  # what checkout's admin port serves

    def metrics_text(self) -> str:
        assert self.checkout_metrics is not None
        return generate_latest(self.checkout_metrics).decode()


async def running_stack(pool: asyncpg.Pool, db_dsn: str, *,
                        env_for: Callable[[str], dict[str, str]] | None = None,
                        **env: str) -> AsyncIterator[Stack]:
    """The sandbox and checkout; ``env_for(sandbox_url)`` adds settings that need the sandbox's URL."""
    clock = FakeClock(current=datetime.now(UTC))
    async with serve_asgi(create_sandbox_app(SandboxSettings.default())) as sandbox_url:
        settings = checkout_settings(sandbox_url, db_dsn, **env, **(env_for(sandbox_url) if env_for else {}))
        app = create_checkout_app(settings, clock=clock, pool=pool)
        async with serve_asgi(app) as checkout_url:
            sandbox = Sandbox(sandbox_url)
            async with httpx.AsyncClient(base_url=checkout_url, timeout=30) as http:
                yield Stack(sandbox, Shop(http, "cus_alice"), clock, pool, checkout_url, settings,
                            app.state.metrics_registry)
            await sandbox.aclose()
