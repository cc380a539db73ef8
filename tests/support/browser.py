"""Real headless Chromium for the console's end-to-end tests: Debian's package, driven by Playwright.

Playwright is pointed at ``/usr/bin/chromium`` (``make test`` installs it when missing) instead of
``playwright install``, whose browser downloads this network cannot reach. A browser that cannot
start fails the test: CI must never pass by skipping the only check that a person's clicks work.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from playwright.async_api import Browser, Playwright, ViewportSize

CHROMIUM = Path(os.environ.get("PAYCORE_CHROMIUM", "/usr/bin/chromium"))
# One window size for every test, so the screenshots in the README come out the same each time.
VIEWPORT: ViewportSize = {"width": 1280, "height": 900}
# As root (CI) Chromium refuses its own sandbox; /dev/shm in containers is often too small for it.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"]


async def launch_chromium(playwright: Playwright) -> Browser:
    """Start headless Chromium, or fail the test with what to install."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs it (as root), or run "
                    "`apt-get install -y --no-install-recommends chromium`", pytrace=False)
    started = time.monotonic()
    try:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                                   args=CHROMIUM_ARGS)
    except Exception as exc:  # any launch failure is the same news: no browser
        pytest.fail(f"headless Chromium at {CHROMIUM} did not start: {exc}", pytrace=False)
    print(f"chromium {browser.version} started in {time.monotonic() - started:.2f} s")
    return browser
