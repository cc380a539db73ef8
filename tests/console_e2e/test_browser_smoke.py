"""The browser harness itself: Chromium starts, loads a page from a real server, runs its script."""

from __future__ import annotations

import pytest
from playwright.async_api import Page, expect
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

from harness.servers import serve_asgi

pytestmark = pytest.mark.asyncio(loop_scope="module")

PAGE = """<!doctype html><title>smoke</title>
<button id="go" onclick="document.getElementById('out').textContent = 'clicked'">Go</button>
<p id="out">waiting</p>"""


async def smoke_page(request: object) -> HTMLResponse:
    return HTMLResponse(PAGE)


async def test_chromium_renders_a_served_page_and_runs_its_click_handler(page: Page) -> None:
    app = Starlette(routes=[Route("/", smoke_page)])
    async with serve_asgi(app) as url:
        await page.goto(url)
        await expect(page).to_have_title("smoke")
        await expect(page.locator("#out")).to_have_text("waiting")
        await page.get_by_role("button", name="Go").click()
        await expect(page.locator("#out")).to_have_text("clicked")
