"""The console app on a fresh database and a fake clock, and browsers signed in to it.

The app runs in the test's event loop through httpx's ASGI transport (its lifespan entered by
hand: the transport does not run it), over ``https://`` so the Secure session cookie is sent.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import httpx
import pytest
from starlette.applications import Starlette

from paycore.clock import FakeClock
from paycore.operators import add_operator
from paycore_console.app import create_app
from paycore_console.credentials import ConsoleAuth
from paycore_console.settings import ConsoleSettings

SECRET = "console-test-secret-" + "x" * 20
PASSWORD = "correct horse battery"
BASE_URL = "https://console.test"


def hidden(html: str, name: str) -> str:
    """The value of the first hidden input called ``name`` in a page."""
    found = re.search(rf'<input type="hidden" name="{re.escape(name)}" value="([^"]*)"', html)
    assert found is not None, f"no hidden {name} on the page"
    return found.group(1)


@dataclass
class Browser:
    """A signed-in browser: its client (cookies kept) and its session's CSRF token."""

    client: httpx.AsyncClient
    name: str
    csrf: str

    async def post_form(self, path: str, **fields: str) -> httpx.Response:
        return await self.client.post(path, data={"csrf_token": self.csrf, **fields})

    async def post_json(self, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        return await self.client.post(path, json=body or {}, headers={"X-CSRF-Token": self.csrf})

    async def flash_after(self, response: httpx.Response) -> str:
        """Follow a POST's redirect and return the message the page shows."""
        assert response.status_code == 303, response.text
        page = await self.client.get(response.headers["location"])
        found = re.search(r'<p id="flash"[^>]*>([^<]*)</p>', page.text)
        assert found is not None, "the page shows no message"
        return found.group(1)


@dataclass
class ConsoleRig:
    app: Starlette
    pool: asyncpg.Pool
    clock: FakeClock
    settings: ConsoleSettings
    _clients: list[httpx.AsyncClient] = field(default_factory=list)

    @property
    def auth(self) -> ConsoleAuth:
        return ConsoleAuth(self.settings.auth)

    def client(self, **kw: Any) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=self.app, client=kw.pop("client_address", ("203.0.113.9", 4000)))
        c = httpx.AsyncClient(transport=transport, base_url=kw.pop("base_url", BASE_URL), **kw)
        self._clients.append(c)
        return c

    async def add(self, name: str, role: str = "operator") -> None:
        await add_operator(self.pool, name, PASSWORD, role, self.clock.now(), operator="root")

    async def sign_in(self, client: httpx.AsyncClient, name: str, password: str = PASSWORD) -> httpx.Response:
        form = await client.get("/login")
        return await client.post("/login", data={"csrf_token": hidden(form.text, "csrf_token"), "name": name,
                                                 "password": password, "next": "/"})

    async def browser(self, name: str = "ops-1", role: str = "operator") -> Browser:
        await self.add(name, role)
        client = self.client()
        signed = await self.sign_in(client, name)
        assert signed.status_code == 303, signed.text
        home = await client.get("/")
        assert home.status_code == 200, home.text
        return Browser(client, name, hidden(home.text, "csrf_token"))

    async def actions(self) -> list[asyncpg.Record]:
        """The operator actions on payments (adding the test's accounts is recorded too: left out)."""
        rows: list[asyncpg.Record] = await self.pool.fetch(
            "SELECT operator, action, reason FROM operator_actions"
            " WHERE action NOT IN ('operator-add', 'operator-disable') ORDER BY action_id")
        return rows


def console_env(dsn: str, **more: str) -> dict[str, str]:
    return {"PAYCORE_DATABASE_URL": dsn, "PAYCORE_CONSOLE_SECRET": SECRET, **more}


MakeRig = Callable[..., Awaitable[ConsoleRig]]


@pytest.fixture
async def make_rig(pool: asyncpg.Pool, db_dsn: str) -> AsyncIterator[MakeRig]:
    """Start a console on ``pool`` with a clock of your choice (the webhook stack's, say) and settings."""
    started: list[tuple[Any, ConsoleRig]] = []

    async def make(clock: FakeClock, **env: str) -> ConsoleRig:
        settings = ConsoleSettings.from_env(console_env(db_dsn, **env))
        app = create_app(settings, clock=clock, pool=pool)
        lifespan = app.router.lifespan_context(app)
        await lifespan.__aenter__()
        rig = ConsoleRig(app, pool, clock, settings)
        started.append((lifespan, rig))
        return rig

    yield make
    for lifespan, rig in reversed(started):
        for c in rig._clients:
            await c.aclose()
        await lifespan.__aexit__(None, None, None)


@pytest.fixture
async def rig(make_rig: MakeRig, clock: FakeClock) -> ConsoleRig:
    return await make_rig(clock)
