"""One headless Chromium per module; each test gets a fresh context (its own cookies) and page.

Playwright's objects belong to the event loop that started them, and the servers under test run
in the test's loop (``serve_asgi``), so everything here lives in the module's loop: the browser,
and the database and stack fixtures, redefined with ``loop_scope="module"`` over the suite's
function-loop ones (a pool or server from another loop would never answer).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest_asyncio
from playwright.async_api import Browser, Page, async_playwright

from harness import postgres
from paycore.db import create_pool
from tests.support.browser import VIEWPORT, launch_chromium
from tests.support.recovery import RecoveryStack, running_recovery_stack
from tests.support.webhooks import WebhookStack, running_webhook_stack


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        chromium = await launch_chromium(playwright)
        yield chromium
        await chromium.close()


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport=VIEWPORT)
    page = await context.new_page()
    yield page
    await context.close()


@pytest_asyncio.fixture(loop_scope="module")
async def db_dsn(pg_admin_dsn: str, pg_template: str) -> AsyncIterator[str]:
    name = await postgres.create_test_database(pg_admin_dsn, pg_template)
    yield postgres.with_database(pg_admin_dsn, name)
    await postgres.drop_database(pg_admin_dsn, name)


@pytest_asyncio.fixture(loop_scope="module")
async def pool(db_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(db_dsn, min_size=1, max_size=20)
    yield p
    await p.close()


@pytest_asyncio.fixture(loop_scope="module")
async def hooks(pool: asyncpg.Pool, db_dsn: str) -> AsyncIterator[WebhookStack]:
    async for s in running_webhook_stack(pool, db_dsn):
        yield s


@pytest_asyncio.fixture(loop_scope="module")
async def rec(hooks: WebhookStack) -> AsyncIterator[RecoveryStack]:
    async for s in running_recovery_stack(hooks):
        yield s
