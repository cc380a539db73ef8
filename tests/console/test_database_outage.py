"""A database outage as an operator and a script see the console.

The console reaches the real PostgreSQL through the cuttable TCP proxy (``tests/support/pgproxy.py``),
as checkout and the intake do in ``tests/checkout/test_database_outage.py``. While it is cut, every
page answers a readable 503 page and every API route 503 ``database-unavailable`` problem+json, both
with Retry-After; ``/readyz`` says not ready; the log says so once, with no traceback per request;
and everything works again once the database is back.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import httpx
import pytest

from paycore.clock import FakeClock
from paycore.db import create_pool
from paycore_console.app import create_app
from paycore_console.settings import ConsoleSettings
from tests.console.conftest import ConsoleRig, console_env
from tests.console.test_actions import dead_end_episode
from tests.matrix.helpers import seed_account
from tests.support.pgproxy import CuttableProxy, proxy_to
from tests.support.stack import eventually

UNAVAILABLE = "https://paycore.dev/problems/database-unavailable"


@dataclass
class Outage:
    proxy: CuttableProxy
    rig: ConsoleRig  # its pool is the proxied one
    direct: asyncpg.Pool  # the test's own view of the database, never through the proxy


@pytest.fixture
async def outage(db_dsn: str, pool: asyncpg.Pool, clock: FakeClock) -> AsyncIterator[Outage]:
    async with proxy_to(db_dsn) as proxy:
        proxied = await create_pool(proxy.dsn(db_dsn), min_size=1, max_size=5)
        settings = ConsoleSettings.from_env(console_env(db_dsn))
        app = create_app(settings, clock=clock, pool=proxied)
        lifespan = app.router.lifespan_context(app)
        await lifespan.__aenter__()
        rig = ConsoleRig(app, proxied, clock, settings)
        try:
            yield Outage(proxy, rig, pool)
        finally:
            await proxy.restore_if_cut()
            for c in rig._clients:
                await c.aclose()
            await lifespan.__aexit__(None, None, None)
            await proxied.close()


def assert_problem_503(r: httpx.Response) -> None:
    assert r.status_code == 503, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["type"] == UNAVAILABLE, r.text
    assert int(r.headers["retry-after"]) > 0


def assert_page_503(r: httpx.Response) -> None:
    assert r.status_code == 503, r.text
    assert r.headers["content-type"].startswith("text/html")
    assert int(r.headers["retry-after"]) > 0
    assert "<title>Database unavailable · paycore console</title>" in r.text
    assert "may or may not have been applied" in r.text and "Traceback" not in r.text


async def test_during_an_outage_pages_and_the_api_answer_503_with_retry_after_said_once_then_recover(
    outage: Outage, caplog: pytest.LogCaptureFixture,
) -> None:
    rig = outage.rig
    attempt, eid = await dead_end_episode(outage.direct, rig.clock, await seed_account(outage.direct,
                                                                                         rig.clock))
    browser = await rig.browser("ops-1")
    assert (await browser.client.get("/readyz")).status_code == 200
    caplog.set_level(logging.INFO, logger="paycore")
    caplog.clear()

    await outage.proxy.cut()

    for path in ("/", "/escalations", f"/escalations/{eid}", f"/attempts/{attempt.attempt_id}",
                 "/notifications/unmatched", "/outbox"):
        assert_page_503(await browser.client.get(path))
    assert_page_503(await browser.post_form(f"/escalations/{eid}/ack", reason="during the outage"))
    assert_page_503(await rig.sign_in(rig.client(), "ops-1"))  # signing in needs the database too
    for path in ("/api/v1/overview", "/api/v1/escalations", f"/api/v1/attempts/{attempt.attempt_id}",
                 "/api/v1/outbox/dead-letters"):
        assert_problem_503(await browser.client.get(path))
    assert_problem_503(await browser.post_json(f"/api/v1/escalations/{eid}/ack", {"reason": "script"}))
    assert_problem_503(await browser.client.get("/readyz"))
    assert (await browser.client.get("/healthz")).status_code == 200  # the process itself is fine

    records = list(caplog.records)
    warnings = [r for r in records if r.name == "paycore.console" and r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "database unreachable" in warnings[0].getMessage(), [
        r.getMessage() for r in records]
    assert [r.getMessage() for r in records if r.exc_info or r.levelno >= logging.ERROR] == []

    await outage.proxy.restore()

    async def ready() -> bool:
        return (await browser.client.get("/readyz")).status_code == 200

    await eventually(ready, what="the console ready again")
    assert (await browser.client.get(f"/escalations/{eid}")).status_code == 200
    # Nothing sent during the outage was applied; the same action now is, once.
    assert await outage.direct.fetchval(
        "SELECT acknowledged_at FROM payment_escalations WHERE escalation_id = $1", eid) is None
    message = await browser.flash_after(await browser.post_form(f"/escalations/{eid}/ack", reason="back"))
    assert not message.startswith("Refused"), message
    assert [r["reason"] for r in await rig.actions()] == ["back"]
