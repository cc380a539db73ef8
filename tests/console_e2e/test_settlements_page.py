"""The Settlements page in real Chromium: an operator opens it from the navigation, sees the batches
and the chart, follows a batch's link and sees its exceptions, each linked to its escalation.

The console runs on a free port over a fresh database holding two batches of one account (one
with exceptions), written as the reconciliation engine writes them (tests/console/settlement_rows).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta

import asyncpg
import pytest
import pytest_asyncio
from playwright.async_api import Page, expect

from harness.servers import serve_asgi
from paycore.clock import FakeClock
from paycore.operators import add_operator
from paycore_console.app import create_app
from paycore_console.settings import ConsoleSettings
from tests.console.settlement_rows import batch, exception
from tests.matrix.helpers import seed_account

pytestmark = pytest.mark.asyncio(loop_scope="module")

SECRET = "console-e2e-secret-" + "s" * 24
PASSWORD = "correct horse battery staple"
OPERATOR = "ops-settlements"


@dataclass
class Settled:
    console_url: str
    clean: int
    troubled: int
    exceptions: list[int]
    escalations: list[int]


@contextlib.asynccontextmanager
async def console_on(pool: asyncpg.Pool, db_dsn: str, clock: FakeClock) -> AsyncIterator[str]:
    settings = ConsoleSettings.from_env({"PAYCORE_DATABASE_URL": db_dsn, "PAYCORE_CONSOLE_SECRET": SECRET,
                                         "PAYCORE_CONSOLE_INSECURE_COOKIES": "1"})  # http on loopback
    async with serve_asgi(create_app(settings, clock=clock, pool=pool)) as url:
        yield url


@pytest_asyncio.fixture(loop_scope="module")  # the browser's loop (see conftest.py)
async def settled(pool: asyncpg.Pool, db_dsn: str) -> AsyncIterator[Settled]:
    clock = FakeClock()
    now = clock.now()
    account = (await seed_account(pool, clock)).provider_account
    clean = await batch(pool, account, "stl_clean", now.date() - timedelta(days=1), now,
                        lines=[("charge", 4999, 150, None, "matched")])
    troubled = await batch(pool, account, "stl_troubled", now.date() - timedelta(days=2), now,
                           lines=[("charge", 1000, 30, None, "exception"),
                                  ("refund", -500, 0, None, "exception")],
                           exceptions=2)
    made = [await exception(pool, account, "unknown-payment", now, batch_id=troubled, line_no=1,
                            evidence={"provider_payment_id": "pay_stranger"}),
            await exception(pool, account, "unknown-refund", now, batch_id=troubled, line_no=2,
                            evidence={"provider_operation_id": "re_stranger"})]
    await add_operator(pool, OPERATOR, PASSWORD, "operator", now, operator="root")
    async with console_on(pool, db_dsn, clock) as url:
        yield Settled(url, clean, troubled, [e for e, _ in made], [s for _, s in made])


async def test_an_operator_opens_settlements_follows_a_batch_and_sees_its_exceptions(
    page: Page, settled: Settled,
) -> None:
    url = settled.console_url
    await page.goto(url + "/")
    await page.locator("#login-name").fill(OPERATOR)
    await page.locator("#login-password").fill(PASSWORD)
    await page.locator("#login-submit").click()
    await expect(page.locator("#operator-name")).to_have_text(OPERATOR)

    await page.locator("#nav-settlements").click()
    await expect(page).to_have_url(url + "/settlements")
    batches = page.locator("[data-testid=settlement-batch]")
    await expect(batches).to_have_count(2)
    await expect(page.locator(f"#batch-{settled.troubled} .exceptions")).to_have_text("2")
    # The chart: drawn, 30 days of fees and of exceptions, both found today.
    chart = page.locator("[data-testid=settlement-chart]")
    await expect(chart).to_be_visible()
    await expect(chart.locator("rect[data-series=fees]")).to_have_count(30)
    await expect(chart.locator("rect[data-series=exceptions][data-value='2']")).to_have_count(1)

    await page.locator(f"#batch-{settled.troubled} a.batch-link").click()
    await expect(page).to_have_url(f"{url}/settlements/batches/{settled.troubled}")
    await expect(page.locator("#page-title")).to_have_text("Settlement batch stl_troubled")
    rows = page.locator("[data-testid=settlement-exception]")
    await expect(rows).to_have_count(2)
    await expect(rows.nth(0)).to_contain_text("unknown-payment")
    await expect(rows.nth(0)).to_contain_text("pay_stranger")
    await expect(rows.nth(1)).to_contain_text("unknown-refund")
    # Each exception's escalation, one click away, where the operator resolves it.
    await rows.nth(0).locator("a.escalation").click()
    await expect(page).to_have_url(f"{url}/escalations/{settled.escalations[0]}")
