"""The operator console in real headless Chromium, against the real stack.

A checkout whose response was lost stays Unknown past its escalation deadline while the provider's
lookups fail, so recovery raises a ``deadline`` escalation; the provider's notification of that
payment arrives without its reference and is stored unmatched. The console serves both on a
free port. In the browser an operator signs in, sees the escalation, acknowledges it, attaches the
notification to the attempt (preview, then confirm), watches the attempt resolve and finds both
actions in the record; a viewer sees no action forms; a forged CSRF token is refused.

``PAYCORE_WRITE_SCREENSHOTS=1`` (``make screenshots``) also saves the README's two screenshots.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Page, expect

from harness.servers import serve_asgi
from paycore.attempts import Attempt
from paycore.operators import add_operator
from paycore_console.app import create_app
from paycore_console.settings import ConsoleSettings
from paycore_recovery.loop import Pass
from tests.support.browser import VIEWPORT
from tests.support.recovery import RecoveryStack
from tests.support.webhooks import event, payment_object

pytestmark = pytest.mark.asyncio(loop_scope="module")

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = os.environ.get("PAYCORE_WRITE_SCREENSHOTS") == "1"
SECRET = "console-e2e-secret-" + "x" * 24
PASSWORD = "correct horse battery staple"
OPERATOR, VIEWER = "ops-ana", "viewer-ben"


@dataclass
class Scene:
    """What the stack holds before the browser opens: one escalated attempt, one stray notification."""

    console_url: str
    attempt: Attempt
    escalation_id: int
    event_id: int


async def stuck_past_its_deadline(rec: RecoveryStack) -> tuple[Attempt, int]:
    """A charge whose response was lost, still Unknown at its deadline because lookups fail."""
    attempt = await rec.unknown_via_checkout("lose_response")
    assert attempt.escalation_deadline is not None
    rec.clock.advance((attempt.escalation_deadline - rec.clock.now()).total_seconds() + 1)
    await rec.sandbox.fault("not_processed_503", match={"operation": "lookup"})
    assert await rec.worker().run_pass() == [Pass.LOOKUP_FAILED]
    [row] = await rec.escalation_rows()
    assert (row["escalation_key"], row["reason"]) == (f"attempt:{attempt.attempt_id}:deadline", "deadline")
    return attempt, int(row["escalation_id"])


async def unmatched_notification_of(rec: RecoveryStack, attempt: Attempt) -> int:
    """The provider's notification of the attempt's payment without its reference (dropped on the
    provider's side), so nothing matches it: the attempt never learnt the payment's id."""
    [payment] = await rec.payments_for(attempt)
    stray = payment_object(payment_id=payment["id"], reference=None, amount=attempt.amount_minor,
                           currency=attempt.currency)
    r = await rec.hooks.deliver(event(stray), timestamp=int(rec.clock.now().timestamp()))
    assert r.json()["result"] == "unmatched", r.text
    event_id: int = await rec.pool.fetchval(
        "SELECT event_id FROM payment_attempt_events WHERE kind = 'notification' AND attempt_id IS NULL")
    return event_id


@contextlib.asynccontextmanager
async def console_for(rec: RecoveryStack, db_dsn: str) -> AsyncIterator[str]:
    """The console on a free port, on the stack's database and clock, with one account per role."""
    settings = ConsoleSettings.from_env({
        "PAYCORE_DATABASE_URL": db_dsn, "PAYCORE_CONSOLE_SECRET": SECRET,
        "PAYCORE_CONSOLE_INSECURE_COOKIES": "1",  # plain http on loopback
    })
    for name, role in ((OPERATOR, "operator"), (VIEWER, "viewer")):
        await add_operator(rec.pool, name, PASSWORD, role, rec.clock.now(), operator="root")
    async with serve_asgi(create_app(settings, clock=rec.clock, pool=rec.pool)) as url:
        yield url


@pytest_asyncio.fixture(loop_scope="module")  # the browser's loop (see conftest.py)
async def scene(rec: RecoveryStack, db_dsn: str) -> AsyncIterator[Scene]:
    attempt, escalation_id = await stuck_past_its_deadline(rec)
    event_id = await unmatched_notification_of(rec, attempt)
    async with console_for(rec, db_dsn) as url:
        yield Scene(url, attempt, escalation_id, event_id)


async def sign_in(page: Page, scene: Scene, name: str) -> None:
    await page.goto(scene.console_url + "/")
    await expect(page.locator("#login-form")).to_be_visible()  # not signed in: the sign-in page
    await page.locator("#login-name").fill(name)
    await page.locator("#login-password").fill(PASSWORD)
    await page.locator("#login-submit").click()
    await expect(page.locator("#operator-name")).to_have_text(name)


async def screenshot(page: Page, name: str) -> None:
    if SCREENSHOTS:
        await page.screenshot(path=str(ROOT / "docs" / "images" / name), full_page=False)


async def reload_until_state(page: Page, state: str, *, within_s: float = 10.0) -> None:
    """Reload the attempt page until it shows ``state`` (a deadline, no sleeps: each reload waits on
    the server)."""
    deadline = time.monotonic() + within_s
    while await page.locator("#attempt-state").inner_text() != state:
        assert time.monotonic() < deadline, f"the attempt page never showed {state}"
        await page.reload()


async def test_an_operator_acknowledges_the_escalation_attaches_the_notification_and_finds_both_recorded(
    page: Page, scene: Scene, rec: RecoveryStack,
) -> None:
    attempt_id = str(scene.attempt.attempt_id)
    await sign_in(page, scene, OPERATOR)

    # The overview counts it; the escalations page lists it.
    await expect(page.locator("#escalations-by-reason")).to_contain_text("deadline")
    await expect(page.locator("#state-Unknown .total")).to_have_text("1")
    await screenshot(page, "console-overview.png")
    await page.locator("#nav-escalations").click()
    row = page.locator(f"#escalation-{scene.escalation_id}")
    await expect(row).to_contain_text("deadline")
    await expect(row).to_contain_text(attempt_id)
    await expect(row.locator(".status")).to_have_text("open")

    # Acknowledge it.
    await row.get_by_role("link", name=str(scene.escalation_id), exact=True).click()
    await page.locator("#ack-reason").fill("looking at the provider's dashboard")
    await page.locator("#ack-submit").click()
    await expect(page.locator("#flash")).to_contain_text("acknowledged")
    await expect(page.locator("#escalation-status")).to_have_text("acknowledged")
    await expect(page.locator("#ack-form")).to_have_count(0)

    # Attach the stray notification: preview first, then confirm. Its list fits the window.
    await page.locator("#nav-notifications").click()
    assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    received = page.locator(f"#notification-{scene.event_id} td.nowrap time").first
    assert (await received.bounding_box() or {"height": 99})["height"] < 30  # "Received" on one line
    await page.locator(f"#attach-{scene.event_id}").click()
    await page.locator("#preview-attempt-id").fill(attempt_id)
    await page.locator("#preview-submit").click()
    await expect(page.locator("#preview-state")).to_have_text("Unknown")
    await expect(page.locator("#attach-checks .mismatch")).to_have_count(0)
    await page.locator("#attach-reason").fill("the provider dropped the reference; same payment id")
    await page.locator("#attach-submit").click()

    # The attempt resolves; both actions are in its record.
    await expect(page).to_have_url(f"{scene.console_url}/attempts/{attempt_id}")
    await expect(page.locator("#flash")).to_contain_text("attached")
    await reload_until_state(page, "Succeeded")
    record = page.locator("#attempt-record")
    await expect(record.locator("[data-action=notification-attach]")).to_contain_text(OPERATOR)
    await expect(record.locator("[data-action=escalation-acknowledge]")).to_contain_text(OPERATOR)
    # The transition names the person who attached the evidence.
    last_transition = page.locator("#timeline [data-kind=transition]").last
    await expect(last_transition).to_contain_text(f"operator-{OPERATOR}")
    await expect(page.locator("#attempt-amount .money")).to_have_text("49.99 EUR")  # as people read money
    await expect(page.locator("#attempt-next-check")).to_have_count(0)  # nothing pending on a final state
    await screenshot(page, "console-attempt.png")
    assert (await rec.current(scene.attempt)).state == "Succeeded"  # the page shows what is stored

    # The attempts list: newest first, filtered in place, the amount readable.
    await page.locator("#nav-attempts").click()
    listed = page.locator(f"#attempt-{attempt_id}")
    await expect(listed).to_have_attribute("data-state", "Succeeded")
    await expect(listed.locator("[data-testid=attempt-amount]")).to_have_text("49.99 EUR")
    await page.locator("#filter-state").select_option("Unknown")
    await expect(page.locator("#no-attempts")).to_be_visible()
    await expect(page).to_have_url(f"{scene.console_url}/attempts?q=&state=Unknown&account=&age=")
    await page.locator("#filter-state").select_option("Succeeded")
    await expect(page.locator(f"#attempt-{attempt_id}")).to_be_visible()
    await screenshot(page, "console-attempts.png")


async def test_a_viewer_sees_no_action_forms_and_a_forged_csrf_token_is_refused(
    browser: Browser, scene: Scene, rec: RecoveryStack,
) -> None:
    viewer = await (await browser.new_context(viewport=VIEWPORT)).new_page()
    await sign_in(viewer, scene, VIEWER)
    await expect(viewer.locator("#operator-role")).to_have_text("viewer")
    await viewer.goto(f"{scene.console_url}/escalations/{scene.escalation_id}")
    await expect(viewer.locator("#escalation-status")).to_have_text("open")
    await expect(viewer.locator("#escalation-actions")).to_have_count(0)
    await viewer.goto(f"{scene.console_url}/notifications/unmatched")
    await expect(viewer.locator(f"#notification-{scene.event_id}")).to_be_visible()
    await expect(viewer.locator(f"#attach-{scene.event_id}")).to_have_count(0)
    await viewer.goto(f"{scene.console_url}/notifications/{scene.event_id}/attach"
                      f"?attempt_id={scene.attempt.attempt_id}")
    await expect(viewer.locator("#attach-preview")).to_be_visible()
    await expect(viewer.locator("#attach-form")).to_have_count(0)
    await viewer.context.close()

    # An operator's own form, its token replaced: refused, nothing acknowledged or recorded.
    operator = await (await browser.new_context(viewport=VIEWPORT)).new_page()
    await sign_in(operator, scene, OPERATOR)
    await operator.goto(f"{scene.console_url}/escalations/{scene.escalation_id}")
    await operator.locator("#ack-form input[name=csrf_token]").evaluate("input => input.value = 'forged'")
    async with operator.expect_response(f"**/escalations/{scene.escalation_id}/ack") as answer:
        await operator.locator("#ack-submit").click()
    assert (await answer.value).status == 403
    await operator.goto(f"{scene.console_url}/escalations/{scene.escalation_id}")
    await expect(operator.locator("#escalation-status")).to_have_text("open")
    assert await rec.pool.fetchval("SELECT count(*) FROM operator_actions WHERE escalation_id = $1",
                                   scene.escalation_id) == 0
    await operator.context.close()
