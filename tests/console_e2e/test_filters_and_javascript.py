"""The escalation filters in real Chromium: with JavaScript off (every page works without it), and
with it on (htmx swaps the filtered list in place).

The console runs on a free port over a fresh database holding a few escalation episodes of two
reasons. With JavaScript disabled in the browser context an operator signs in, filters, opens an
episode and acknowledges it: plain forms and full page loads, no request from htmx. With it
enabled, changing a filter swaps only the list region: the same document (a marker set on it
survives), an ``HX-Request``, the URL pushed, the rows the filter selects.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta

import asyncpg
import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, Request, expect

from harness.servers import serve_asgi
from paycore.clock import FakeClock
from paycore.operators import add_operator
from paycore_console.app import create_app
from paycore_console.settings import ConsoleSettings
from tests.operators.test_inspection import episode
from tests.support.browser import VIEWPORT

pytestmark = pytest.mark.asyncio(loop_scope="module")

SECRET = "console-e2e-secret-" + "y" * 24
PASSWORD = "correct horse battery staple"
OPERATOR = "ops-noscript"


@dataclass
class Episodes:
    console_url: str
    deadlines: list[int]  # oldest first
    unmatched: int


@contextlib.asynccontextmanager
async def console_on(pool: asyncpg.Pool, db_dsn: str, clock: FakeClock) -> AsyncIterator[str]:
    settings = ConsoleSettings.from_env({"PAYCORE_DATABASE_URL": db_dsn, "PAYCORE_CONSOLE_SECRET": SECRET,
                                         "PAYCORE_CONSOLE_INSECURE_COOKIES": "1"})  # http on loopback
    async with serve_asgi(create_app(settings, clock=clock, pool=pool)) as url:
        yield url


@pytest_asyncio.fixture(loop_scope="module")  # the browser's loop (see conftest.py)
async def episodes(pool: asyncpg.Pool, db_dsn: str) -> AsyncIterator[Episodes]:
    clock = FakeClock()
    now = clock.now()
    deadlines = [await episode(pool, now - timedelta(minutes=30 - i), "deadline") for i in range(3)]
    unmatched = await episode(pool, now - timedelta(minutes=40), "unmatched-payment")
    await add_operator(pool, OPERATOR, PASSWORD, "operator", now, operator="root")
    async with console_on(pool, db_dsn, clock) as url:
        yield Episodes(url, deadlines, unmatched)


async def sign_in(page: Page, url: str) -> None:
    await page.goto(url + "/escalations")
    await expect(page.locator("#login-form")).to_be_visible()  # not signed in yet
    await page.locator("#login-name").fill(OPERATOR)
    await page.locator("#login-password").fill(PASSWORD)
    await page.locator("#login-submit").click()
    await expect(page.locator("#operator-name")).to_have_text(OPERATOR)
    await expect(page).to_have_url(url + "/escalations")  # back where it was going


async def row_ids(page: Page) -> list[int]:
    """The escalations the list shows, read from the DOM without running the page's own script."""
    ids = []
    for row in await page.locator("#escalation-list [data-testid=escalation-row]").all():
        ids.append(int((await row.get_attribute("id") or "").removeprefix("escalation-")))
    return ids


async def test_without_javascript_an_operator_signs_in_filters_and_acknowledges(
    browser: Browser, episodes: Episodes,
) -> None:
    context = await browser.new_context(viewport=VIEWPORT, java_script_enabled=False)
    page = await context.new_page()
    htmx_requests: list[Request] = []
    page.on("request", lambda r: htmx_requests.append(r) if "hx-request" in r.headers else None)
    try:
        await sign_in(page, episodes.console_url)
        assert await row_ids(page) == [episodes.unmatched, *episodes.deadlines]  # oldest first

        # Filter by reason: the form is submitted as a plain GET, a whole page load.
        await page.locator("#filter-reason").fill("deadline")
        async with page.expect_navigation():
            await page.locator("#filter-submit").click()
        await expect(page).to_have_url(f"{episodes.console_url}/escalations?reason=deadline&account="
                                       "&acknowledged=any&resolved=")
        assert await row_ids(page) == episodes.deadlines

        # Acknowledge the oldest deadline episode: its page, its form, the message after the redirect.
        target = episodes.deadlines[0]
        await page.locator(f"#escalation-{target} a[href='/escalations/{target}']").click()
        await page.locator("#ack-reason").fill("seen without javascript")
        await page.locator("#ack-submit").click()
        await expect(page.locator("#flash")).to_contain_text(f"Escalation {target} acknowledged")
        await expect(page.locator("#escalation-status")).to_have_text("acknowledged")

        # The filters read it back: acknowledged ones only, then not-yet-acknowledged deadlines.
        await page.goto(episodes.console_url + "/escalations")
        await page.locator("#filter-acknowledged").select_option("yes")
        async with page.expect_navigation():
            await page.locator("#filter-submit").click()
        assert await row_ids(page) == [target]
        await page.locator("#filter-reason").fill("deadline")
        await page.locator("#filter-acknowledged").select_option("no")
        async with page.expect_navigation():
            await page.locator("#filter-submit").click()
        assert await row_ids(page) == episodes.deadlines[1:]
        assert htmx_requests == []  # htmx never ran: everything above was plain HTML
    finally:
        await context.close()


async def test_with_javascript_a_filter_change_swaps_only_the_list(
    browser: Browser, episodes: Episodes,
) -> None:
    context = await browser.new_context(viewport=VIEWPORT)
    page = await context.new_page()
    try:
        await sign_in(page, episodes.console_url)
        await page.wait_for_function("() => window.htmx !== undefined")  # the vendored htmx loaded
        assert await row_ids(page) == [episodes.unmatched, *episodes.deadlines]
        await page.evaluate("() => { window.sameDocument = true; }")  # gone after any full page load

        # Changing the reason filter (no click on Filter): htmx fetches the page and swaps the list.
        async with page.expect_request(lambda r: "/escalations?" in r.url
                                       and r.headers.get("hx-request") == "true") as swapped:
            await page.locator("#filter-reason").fill("unmatched-payment")
            await page.locator("#filter-reason").dispatch_event("change")
        assert "reason=unmatched-payment" in (await swapped.value).url
        await expect(page.locator("#escalation-list [data-testid=escalation-row]")).to_have_count(1)
        assert await row_ids(page) == [episodes.unmatched]
        await expect(page).to_have_url(f"{episodes.console_url}/escalations?reason=unmatched-payment"
                                       "&account=&acknowledged=any&resolved=")  # hx-push-url
        assert await page.evaluate("() => window.sameDocument") is True
        assert await page.locator("#escalation-list").count() == 1  # swapped in place, not nested

        # Another change: a reason nothing has empties the list, with its message.
        async with page.expect_request(lambda r: r.headers.get("hx-request") == "true"):
            await page.locator("#filter-reason").fill("no-such-reason")
            await page.locator("#filter-reason").dispatch_event("change")
        await expect(page.locator("#no-escalations")).to_have_text("No escalations match.")
        assert await page.evaluate("() => window.sameDocument") is True
    finally:
        await context.close()
