"""Every console action, through the page and through the API: applied by the library, recorded
with the signed-in operator, and a refusal shown as a message (a problem on the API), never a 500."""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest

from paycore import escalations
from paycore.attempts import get_attempt
from paycore.clock import FakeClock
from paycore.config import ProviderAccountConfig
from paycore.notifications import record_notification
from tests.console.conftest import ConsoleRig, MakeRig
from tests.matrix.helpers import seed_account
from tests.matrix.test_notification_matrix import live_attempt, notification_rows, succeeded_event
from tests.operators.test_conflicts import identity_conflict
from tests.operators.test_dead_ends import dead_end
from tests.operators.test_inspection import queued
from tests.support.webhooks import WebhookStack


@pytest.fixture
async def account(pool: asyncpg.Pool, clock: FakeClock) -> ProviderAccountConfig:
    return await seed_account(pool, clock)


async def dead_end_episode(pool: asyncpg.Pool, clock: FakeClock,
                           account: ProviderAccountConfig) -> tuple[Any, int]:
    attempt = await dead_end(pool, clock, account)
    eid = await pool.fetchval("SELECT escalation_id FROM payment_escalations WHERE attempt_id = $1",
                              attempt.attempt_id)
    return attempt, eid


@dataclass(frozen=True)
class Case:
    """One action: where its form and its API post, what they send, and how to see it applied."""

    kind: str
    setup: Callable[[asyncpg.Pool, FakeClock, ProviderAccountConfig], Awaitable[tuple[str, str, Any]]]
    form: dict[str, str]
    applied: Callable[[asyncpg.Pool, Any], Awaitable[bool]]


async def _episode(pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig,
                   action: str) -> tuple[str, str, Any]:
    _, eid = await dead_end_episode(pool, clock, account)
    return f"/escalations/{eid}/{action}", f"/api/v1/escalations/{eid}/{action}", eid


async def _close(pool: asyncpg.Pool, clock: FakeClock,
                 account: ProviderAccountConfig) -> tuple[str, str, Any]:
    attempt, _ = await dead_end_episode(pool, clock, account)
    aid = attempt.attempt_id
    return f"/attempts/{aid}/close", f"/api/v1/attempts/{aid}/close", aid


async def _dead_letter(pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig,
                       action: str) -> tuple[str, str, Any]:
    mid = await queued(pool, clock, "order-confirmation", dead=True)
    return f"/outbox/{mid}/{action}", f"/api/v1/outbox/{mid}/{action}", mid


async def _escalation_field(pool: asyncpg.Pool, eid: int, column: str) -> bool:
    return bool(await pool.fetchval(f"SELECT {column} IS NOT NULL FROM payment_escalations"
                                    " WHERE escalation_id = $1", eid))


async def _failed(pool: asyncpg.Pool, aid: uuid.UUID) -> bool:
    return (await get_attempt(pool, aid)).state.value == "Failed"


async def _outbox(pool: asyncpg.Pool, mid: int, condition: str) -> bool:
    return bool(await pool.fetchval(f"SELECT {condition} FROM outbox_messages WHERE message_id = $1", mid))


CASES = [
    Case("escalation-acknowledge", lambda p, c, a: _episode(p, c, a, "ack"), {"reason": "looking at it"},
         lambda p, eid: _escalation_field(p, eid, "acknowledged_at")),
    Case("escalation-resolve", lambda p, c, a: _episode(p, c, a, "resolve"), {"reason": "handled by phone"},
         lambda p, eid: _escalation_field(p, eid, "resolved_at")),
    Case("attempt-close-not-charged", _close,
         {"reason": "customer asked",
          "checked_at_provider": "Cardco dashboard: no payment for the reference"},
         _failed),
    Case("outbox-requeue", lambda p, c, a: _dead_letter(p, c, a, "requeue"), {"reason": "broker is back"},
         lambda p, mid: _outbox(p, mid, "dead_lettered_at IS NULL AND dispatched_at IS NULL")),
    Case("outbox-skip", lambda p, c, a: _dead_letter(p, c, a, "skip"),
         {"reason": "customer was told by phone"},
         lambda p, mid: _outbox(p, mid, "dispatched_at IS NOT NULL")),
]


@pytest.mark.parametrize("case", CASES, ids=[c.kind for c in CASES])
@pytest.mark.parametrize("via", ["page", "api"])
async def test_an_action_applies_through_the_library_and_records_the_signed_in_operator(
    rig: ConsoleRig, account: ProviderAccountConfig, case: Case, via: str,
) -> None:
    page_path, api_path, target = await case.setup(rig.pool, rig.clock, account)
    browser = await rig.browser("ops-7")
    if via == "page":
        message = await browser.flash_after(await browser.post_form(page_path, **case.form))
        assert not message.startswith("Refused"), message
    else:
        answer = await browser.post_json(api_path, case.form)
        assert answer.status_code == 200, answer.text
        assert answer.json()["operator_action"]["operator"] == "ops-7"
    assert await case.applied(rig.pool, target)
    assert [(r["operator"], r["action"]) for r in await rig.actions()] == [("ops-7", case.kind)]


async def test_a_refusal_because_the_state_changed_underneath_is_a_clear_message_not_an_error(
    rig: ConsoleRig, account: ProviderAccountConfig,
) -> None:
    attempt, eid = await dead_end_episode(rig.pool, rig.clock, account)
    browser = await rig.browser()
    shown = await browser.client.get(f"/escalations/{eid}")
    assert 'id="ack-form"' in shown.text
    # Someone else resolves it between the page being shown and the click.
    await escalations.resolve(rig.pool, eid, operator="ops-2", reason="done elsewhere", now=rig.clock.now())
    message = await browser.flash_after(await browser.post_form(f"/escalations/{eid}/ack"))
    assert message.startswith("Refused: ") and f"escalation {eid} is not open" in message
    api = await browser.post_json(f"/api/v1/escalations/{eid}/ack")
    assert api.status_code == 409
    assert api.headers["content-type"] == "application/problem+json"
    assert f"escalation {eid} is not open" in api.json()["detail"]
    # The attempt page's close form carries the version shown; a write since refuses the close.
    page = await browser.client.get(f"/attempts/{attempt.attempt_id}")
    assert 'id="close-form"' not in page.text  # its dead-end episode was resolved: nothing to close
    assert [r["operator"] for r in await rig.actions()] == ["ops-2"]


async def test_a_close_against_a_version_the_operator_did_not_see_is_refused_with_a_message(
    rig: ConsoleRig, account: ProviderAccountConfig,
) -> None:
    attempt, _ = await dead_end_episode(rig.pool, rig.clock, account)
    browser = await rig.browser()
    page = await browser.client.get(f"/attempts/{attempt.attempt_id}")
    assert 'id="close-form"' in page.text
    await rig.pool.execute("UPDATE payment_attempts SET version = version + 1 WHERE attempt_id = $1",
                           attempt.attempt_id)
    message = await browser.flash_after(await browser.post_form(
        f"/attempts/{attempt.attempt_id}/close", reason="customer asked", checked_at_provider="dashboard",
        expected_version=str(attempt.version)))
    assert "changed since it was shown" in message
    assert (await get_attempt(rig.pool, attempt.attempt_id)).state.value == "Unknown"
    assert await rig.actions() == []


async def test_a_missing_reason_is_a_message_on_the_page_and_a_422_on_the_api(
    rig: ConsoleRig, account: ProviderAccountConfig,
) -> None:
    _, eid = await dead_end_episode(rig.pool, rig.clock, account)
    browser = await rig.browser()
    message = await browser.flash_after(await browser.post_form(f"/escalations/{eid}/resolve", reason=""))
    assert message.startswith("Refused: ")
    api = await browser.post_json(f"/api/v1/escalations/{eid}/resolve", {})
    assert api.status_code == 422 and api.headers["content-type"] == "application/problem+json"
    assert await rig.actions() == []


async def test_attaching_an_unmatched_notification_previews_then_applies_and_records_it(
    hooks: WebhookStack, make_rig: MakeRig,
) -> None:
    rig = await make_rig(hooks.clock)
    attempt = await live_attempt(hooks)
    evt = succeeded_event(attempt, "pay_1")
    evt["data"]["object"]["reference"] = "ORD-typo-a1"
    assert (await hooks.deliver(evt)).json()["result"] == "unmatched"
    [row] = await notification_rows(hooks)
    browser = await rig.browser("ops-3")
    listed = await browser.client.get("/notifications/unmatched")
    assert f'id="notification-{row["event_id"]}"' in listed.text
    preview = await browser.client.get(f"/notifications/{row['event_id']}/attach",
                                       params={"attempt_id": str(attempt.attempt_id)})
    assert preview.status_code == 200
    assert 'id="attach-preview"' in preview.text and 'id="attach-form"' in preview.text
    # The reference differs (the typo the operator is fixing): shown, and not announced as a
    # refusal, because attaching asserts the attempt and the library accepts it.
    assert "differs: attaching asserts this attempt anyway" in preview.text
    assert "will be refused" not in preview.text
    # What the attach will do, by the attach's own rules: the transition and its effects.
    outcome = re.search(r'<p id="attach-outcome"[^>]*data-refused="no"[^>]*data-after="Succeeded"[^>]*>'
                        r'<strong>([^<]*)</strong>', preview.text)
    assert outcome is not None, preview.text
    assert outcome.group(1).startswith("Unknown → Succeeded, order Paid; queues order-confirmation, "
                                       "fulfillment-request")
    api_preview = (await browser.client.get(f"/api/v1/notifications/{row['event_id']}/attach-preview",
                                            params={"attempt_id": str(attempt.attempt_id)})).json()
    assert (api_preview["refused"], api_preview["after"]["state"], api_preview["after"]["order_paid"]) == (
        None, "Succeeded", True)
    assert api_preview["summary"] == html.unescape(outcome.group(1))
    # Previewing another attempt of the account: the refusal the evidence rules will give, no form.
    other = await live_attempt(hooks, customer="cus_bob")
    await rig.pool.execute("UPDATE payment_attempts SET provider_payment_id = 'pay_other'"
                           " WHERE attempt_id = $1", other.attempt_id)
    wrong = await browser.client.get(f"/notifications/{row['event_id']}/attach",
                                     params={"attempt_id": str(other.attempt_id)})
    assert 'data-refused="yes"' in wrong.text and 'id="attach-form"' not in wrong.text
    assert (f"Refused: notification {row['event_id']} is not evidence about attempt {other.attempt_id}: "
            "provider-id-conflict (provider_payment_id)") in wrong.text
    # A preview changes nothing.
    assert (await get_attempt(rig.pool, attempt.attempt_id)).state.value == "Unknown"
    assert await rig.actions() == []
    done = await browser.post_form(f"/notifications/{row['event_id']}/attach",
                                   attempt_id=str(attempt.attempt_id), reason="reference typo")
    assert done.headers["location"] == f"/attempts/{attempt.attempt_id}"
    assert "attached to attempt" in await browser.flash_after(done)
    assert (await get_attempt(rig.pool, attempt.attempt_id)).state.value == "Succeeded"
    assert [(r["operator"], r["action"]) for r in await rig.actions()] == [("ops-3", "notification-attach")]
    again = await browser.post_json(f"/api/v1/notifications/{row['event_id']}/attach",
                                    {"attempt_id": str(attempt.attempt_id), "reason": "again"})
    assert again.status_code == 409 and "already attached" in again.json()["detail"]


async def test_attaching_through_the_api(hooks: WebhookStack, make_rig: MakeRig) -> None:
    rig = await make_rig(hooks.clock)
    attempt = await live_attempt(hooks)
    evt = succeeded_event(attempt, "pay_1")
    evt["data"]["object"]["reference"] = "ORD-typo-a1"
    await hooks.deliver(evt)
    [row] = await notification_rows(hooks)
    browser = await rig.browser("ops-3")
    unmatched = (await browser.client.get("/api/v1/notifications/unmatched")).json()
    assert [u["notification"]["event_id"] for u in unmatched["items"]] == [row["event_id"]]
    answer = await browser.post_json(f"/api/v1/notifications/{row['event_id']}/attach",
                                     {"attempt_id": str(attempt.attempt_id), "reason": "reference typo"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["state"] == "Succeeded"
    assert [(r["operator"], r["action"]) for r in await rig.actions()] == [("ops-3", "notification-attach")]


@pytest.mark.parametrize("via", ["page", "api"])
async def test_resolving_an_identity_conflict_by_choosing_the_owner(
    hooks: WebhookStack, make_rig: MakeRig, via: str,
) -> None:
    rig = await make_rig(hooks.clock)
    a, b, episode = await identity_conflict(hooks)
    eid = episode["escalation_id"]
    browser = await rig.browser("ops-4")
    page = await browser.client.get(f"/escalations/{eid}")
    assert 'id="conflict-form"' in page.text
    assert f'value="{b.attempt_id}"' in page.text and f'value="{a.attempt_id}"' in page.text
    if via == "page":
        message = await browser.flash_after(await browser.post_form(
            f"/escalations/{eid}/resolve-conflict", owner=str(b.attempt_id), reason="pay_b is b's"))
        assert f"attempt {b.attempt_id} owns the payment" in message
    else:
        answer = await browser.post_json(f"/api/v1/escalations/{eid}/resolve-conflict",
                                         {"owner_attempt_id": str(b.attempt_id), "reason": "pay_b is b's"})
        assert answer.status_code == 200, answer.text
    assert (await get_attempt(rig.pool, b.attempt_id)).state.value == "Succeeded"
    assert (await get_attempt(rig.pool, a.attempt_id)).state.value == a.state.value
    assert [(r["operator"], r["action"]) for r in await rig.actions()] == [
        ("ops-4", "escalation-resolve-conflict")]


@pytest.mark.parametrize("via", ["page", "api"])
async def test_resolving_a_conflict_with_neither_changes_no_attempt_and_records_it(
    hooks: WebhookStack, make_rig: MakeRig, via: str,
) -> None:
    rig = await make_rig(hooks.clock)
    a, b, episode = await identity_conflict(hooks)
    eid = episode["escalation_id"]
    browser = await rig.browser("ops-4")
    page = await browser.client.get(f"/escalations/{eid}")
    assert 'id="owner-neither"' in page.text and 'value="neither"' in page.text
    if via == "page":
        message = await browser.flash_after(await browser.post_form(
            f"/escalations/{eid}/resolve-conflict", owner="neither", reason="neither: a refund was issued"))
        assert message == f"Escalation {eid} resolved: neither attempt owns the payment; no attempt changed."
    else:
        answer = await browser.post_json(f"/api/v1/escalations/{eid}/resolve-conflict",
                                         {"owner_attempt_id": None, "reason": "neither: a refund was issued"})
        assert answer.status_code == 200, answer.text
        assert (answer.json()["owner_attempt_id"], answer.json()["owner_state"]) == (None, None)
    assert await get_attempt(rig.pool, a.attempt_id) == a  # neither attempt moved, not even its version
    assert await get_attempt(rig.pool, b.attempt_id) == b
    assert await rig.pool.fetchval("SELECT resolved_at IS NOT NULL FROM payment_escalations"
                                   " WHERE escalation_id = $1", eid)
    assert [(r["operator"], r["action"], r["reason"]) for r in await rig.actions()] == [
        ("ops-4", "escalation-resolve-conflict", "neither: a refund was issued")]
    shown = (await browser.client.get(f"/escalations/{eid}")).text
    assert 'data-status="resolved"' in shown and 'id="conflict-form"' not in shown


async def test_a_close_refused_because_evidence_of_a_payment_exists_is_the_librarys_message(
    rig: ConsoleRig, account: ProviderAccountConfig,
) -> None:
    attempt, eid = await dead_end_episode(rig.pool, rig.clock, account)
    browser = await rig.browser()
    page = await browser.client.get(f"/attempts/{attempt.attempt_id}")
    assert 'id="close-form"' in page.text
    # The provider's notification of a payment for this attempt arrives after the page was shown.
    async with rig.pool.acquire() as conn, conn.transaction():
        await record_notification(
            conn, provider_account=account.provider_account, key="evt_paid", attempt_id=attempt.attempt_id,
            now=rig.clock.now(), detail={"type": "payment.processing", "status": "processing",
                                         "provider_payment_id": "pay_late", "event": {"id": "evt_paid"}})
    form = {"reason": "customer asked", "checked_at_provider": "Cardco dashboard: nothing found",
            "expected_version": str(attempt.version)}
    closing = f"/attempts/{attempt.attempt_id}/close"
    message = await browser.flash_after(await browser.post_form(closing, **form))
    assert message.startswith(f"Refused: attempt {attempt.attempt_id} has evidence of a payment: ")
    assert message.endswith("; it cannot be closed as not charged")
    api = await browser.post_json(f"/api/v1{closing}", form | {"expected_version": None})
    assert api.status_code == 409 and api.headers["content-type"] == "application/problem+json"
    assert "has evidence of a payment" in api.json()["detail"]
    assert (await get_attempt(rig.pool, attempt.attempt_id)).state.value == "Unknown"
    assert await rig.pool.fetchval("SELECT resolved_at IS NULL FROM payment_escalations"
                                   " WHERE escalation_id = $1", eid)
    assert await rig.actions() == []
