"""The shipped providers' wire: the local sandbox (``services/sandbox``), speaking one dialect.

The sandbox serves every dialect at once over one ledger, one request capture and the same
faults; an adapter of a shipped provider is its dialect's name, payment methods and what its
signature can tell. An account is configured from the dialect's development credentials
through the package's own ``sandbox_env`` and ``from_env``, as ``paycore up`` configures it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import httpx

from harness.servers import serve_asgi
from paycore.providers.package import ProviderAccountConfig
from paycore.providers.registry import PACKAGES
from paycore_sandbox.app import create_app
from paycore_sandbox.dialects import dialect_named
from paycore_sandbox.settings import SandboxSettings

RETURN_URL = "https://shop.example/return"
# The search lag the sandbox plays for a dialect whose lookup by reference is a search
# (sandbox-clock seconds a new payment stays unfindable).
SEARCH_LAG_S = 30.0


@dataclasses.dataclass
class SandboxServer:
    """The sandbox at ``url``, as the provider ``dialect`` sees it."""

    dialect: str
    url: str
    settings: SandboxSettings
    http: httpx.AsyncClient
    index_lag_s: float = 0.0

    def account(self, label: str) -> ProviderAccountConfig:
        [acct] = [a for a in self.settings.accounts if (a.account, a.environment) == (label, "test")]
        package = PACKAGES[self.dialect]
        env = package.sandbox_env(self.url, acct.account, acct.environment,
                                  dialect_named(self.dialect).credentials(acct), RETURN_URL)
        return package.from_env(env)

    async def fault(self, fault: str, *, operation: str = "create", delay_ms: int | None = None) -> None:
        rule: dict[str, Any] = {"fault": fault, "times": 1,
                                "match": {"dialect": self.dialect, "operation": operation}}
        if delay_ms is not None:
            rule["delay_ms"] = delay_ms
        (await self.http.post("/_sandbox/faults", json={"rules": [rule]})).raise_for_status()

    async def _data(self, path: str) -> list[dict[str, Any]]:
        r = await self.http.get(path)
        r.raise_for_status()
        return list(r.json()["data"])

    async def payments(self) -> list[dict[str, Any]]:
        return [p for p in await self._data("/_sandbox/payments") if p["dialect"] == self.dialect]

    async def received(self, method: str, path: str = "") -> list[str]:
        return [str(q["body"]) for q in await self._data("/_sandbox/requests")
                if q["method"] == method and str(q["path"]).startswith(path)]

    async def subscribe(self, url: str) -> None:
        r = await self.http.post("/_sandbox/webhooks/endpoints", json={"url": url, "dialect": self.dialect})
        r.raise_for_status()

    async def now(self) -> datetime:
        r = await self.http.get("/_sandbox/clock")
        r.raise_for_status()
        return datetime.fromtimestamp(r.json()["now"], UTC)

    async def advance(self, seconds: float) -> None:
        (await self.http.post("/_sandbox/clock", json={"advance_seconds": seconds})).raise_for_status()


def serving(dialect: str, *,
            index_lag_s: float = 0.0) -> Callable[[], AbstractAsyncContextManager[SandboxServer]]:
    """The adapter's ``serve``: a fresh sandbox on a free port (webhook retries 10,000 times
    faster; a search dialect's index lagging ``index_lag_s``)."""

    @asynccontextmanager
    async def serve() -> AsyncIterator[SandboxServer]:
        settings = dataclasses.replace(SandboxSettings.default(), webhook_time_scale=0.0001,
                                       stripe_search_lag_s=index_lag_s)
        async with serve_asgi(create_app(settings)) as url, \
                httpx.AsyncClient(base_url=url, timeout=10) as http:
            yield SandboxServer(dialect, url, settings, http, index_lag_s)

    return serve
