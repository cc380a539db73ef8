"""A refund in real headless Chromium: a refunder opens a paid attempt, refunds part of it through
the page's form, and sees the refund listed with its timeline and what is left to refund."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest
import pytest_asyncio
from playwright.async_api import Page, expect

from harness.servers import serve_asgi
from paycore.operators import add_operator
from paycore_console.app import create_app
from paycore_console.settings import ConsoleSettings
from tests.operations.support import paid_order, refund_posts
from tests.support.stack import Stack, running_stack

pytestmark = pytest.mark.asyncio(loop_scope="module")

SECRET = "console-e2e-secret-" + "r" * 24
PASSWORD = "correct horse battery staple"


@pytest_asyncio.fixture(loop_scope="module")  # the browser's loop (see conftest.py)
async def stack(pool: asyncpg.Pool, db_dsn: str) -> AsyncIterator[Stack]:
    async for s in running_stack(pool, db_dsn):
        yield s


async def test_a_refunder_refunds_from_the_attempt_page_and_sees_the_refund_listed(
    page: Page, stack: Stack, db_dsn: str,
) -> None:
    _, attempt_id = await paid_order(stack, 5000)
    settings = ConsoleSettings.from_env({
        "PAYCORE_DATABASE_URL": db_dsn, "PAYCORE_CONSOLE_SECRET": SECRET,
        "PAYCORE_CONSOLE_INSECURE_COOKIES": "1",  # plain http on loopback
        "PAYCORE_CARDCO_BASE_URL": stack.sandbox.url, "PAYCORE_CARDCO_ACCOUNT": "acct_store",
        "PAYCORE_CARDCO_ENVIRONMENT": "test", "PAYCORE_CARDCO_API_KEY": "sk_test_acct_store_local"})
    await add_operator(stack.pool, "ops-rita", PASSWORD, "refunder", stack.clock.now(), operator="root")
    async with serve_asgi(create_app(settings, clock=stack.clock, pool=stack.pool)) as url:
        await page.goto(f"{url}/attempts/{attempt_id}")
        await page.locator("#login-name").fill("ops-rita")
        await page.locator("#login-password").fill(PASSWORD)
        await page.locator("#login-submit").click()
        await expect(page.locator("#no-operations")).to_be_visible()

        await page.locator("#refund-amount").fill("20.00")
        await page.locator("#refund-reason").fill("one item came back")
        await page.locator("#refund-submit").click()

        await expect(page.locator("#flash")).to_contain_text("Refund of 20.00 EUR succeeded")
        refund = page.locator("[data-testid=operation][data-kind=refund]")
        await expect(refund).to_have_count(1)
        await expect(refund).to_have_attribute("data-state", "Succeeded")
        await expect(refund.locator(".money")).to_have_text("20.00 EUR")
        await expect(refund.locator(".op-requested-by")).to_have_text("operator:ops-rita")
        await expect(refund.locator("[data-testid=operation-event]")).to_have_count(3)
        await expect(page.locator("#headroom-refundable")).to_have_text("30.00 EUR")
        await expect(page.locator("[data-action=refund-request] .operator")).to_have_text("ops-rita")
    assert len(await refund_posts(stack)) == 1
