"""Refunds from the console (issue 29): the attempt page's operations, the refunder role, and a
second refunder's approval above the threshold -- against checkout, the sandbox as a real HTTP
server and real PostgreSQL, the console signed in through its own pages."""

from __future__ import annotations

import asyncio
import html
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from paycore.operations import operations_of
from tests.console.conftest import Browser, ConsoleRig, MakeRig
from tests.console.test_api_schemas import conforms
from tests.operations.support import paid_order, refund_posts
from tests.support.stack import Stack

THRESHOLD = 3000  # 30.00 EUR: above it, a second refunder approves


@pytest.fixture
async def rig(stack: Stack, make_rig: MakeRig) -> AsyncIterator[ConsoleRig]:
    """The console on the stack's database and clock, sending to the stack's sandbox."""
    yield await make_rig(stack.clock, PAYCORE_CARDCO_BASE_URL=stack.sandbox.url,
                         PAYCORE_CARDCO_ACCOUNT="acct_store", PAYCORE_CARDCO_ENVIRONMENT="test",
                         PAYCORE_CARDCO_API_KEY="sk_test_acct_store_local",
                         PAYCORE_CONSOLE_REFUND_APPROVAL_ABOVE_MINOR=str(THRESHOLD))


async def refund_actions(pool: asyncpg.Pool) -> list[dict[str, Any]]:
    rows = await pool.fetch("SELECT operator, action, reason, attempt_id, state_after, detail"
                            " FROM operator_actions WHERE action LIKE 'refund-%' ORDER BY action_id")
    return [dict(r) for r in rows]


def message(flash: str) -> str:
    return html.unescape(flash)


def section(page: str, element_id: str) -> str:
    found = re.search(rf'<(\w+) id="{re.escape(element_id)}".*?</\1>', page, re.S)
    assert found is not None, f"no #{element_id} on the page"
    return found.group(0)


async def refund_form(browser: Browser, attempt_id: uuid.UUID, amount: str,
                      reason: str = "customer returned it") -> str:
    return message(await browser.flash_after(await browser.post_form(
        f"/attempts/{attempt_id}/refund", amount=amount, reason=reason)))


# -- what the attempt page shows -----------------------------------------------------------------


async def test_the_attempt_page_and_api_show_each_operation_with_its_timeline_and_the_headroom(
    stack: Stack, rig: ConsoleRig,
) -> None:
    _, attempt_id = await paid_order(stack, 5000)
    ana = await rig.browser("ana", role="refunder")
    assert (await refund_form(ana, attempt_id, "20")).startswith("Refund of 20.00 EUR succeeded")

    viewer = await rig.browser("vic", role="viewer")
    page = (await viewer.client.get(f"/attempts/{attempt_id}")).text
    [op] = await operations_of(rig.pool, attempt_id)
    found = re.search(rf'<li id="operation-{op.operation_id}".*?</ol>\s*</li>', page, re.S)
    assert found is not None, page
    shown = found.group(0)
    assert 'data-kind="refund"' in shown and 'data-state="Succeeded"' in shown
    assert '<span class="money">20.00 EUR</span>' in shown
    assert op.provider_operation_id and op.provider_operation_id in shown
    assert '<dd class="op-requested-by">operator:ana</dd>' in shown
    assert f'<time datetime="{op.created_at.isoformat()}">' in shown
    # Its timeline, oldest first: recorded, the send intent, the outcome.
    kinds = re.findall(r'data-testid="operation-event" data-kind="(\w+)"', shown)
    assert kinds == ["transition", "send_intent", "transition"], kinds
    timeline = shown[shown.index("operation-timeline"):]
    assert timeline.index("NotStarted") < timeline.index("Started</dd>") < timeline.index("Succeeded")
    headroom = section(page, "headroom")
    assert re.findall(r'class="money">([^<]*)<', headroom) == ["50.00 EUR", "30.00 EUR", "0.00 EUR"]
    assert 'id="refund-form"' not in page  # a viewer sees no refund form

    # The JSON API says the same, as its schema says.
    answer = await viewer.client.get(f"/api/v1/attempts/{attempt_id}")
    assert answer.status_code == 200
    body = answer.json()
    conforms("get", f"/api/v1/attempts/{attempt_id}", body)
    assert body["headroom"] == {"captured_minor": 5000, "capturable_minor": 0, "refundable_minor": 3000}
    [listed] = body["operations"]
    assert (listed["kind"], listed["amount_minor"], listed["state"], listed["requested_by"]) == (
        "refund", 2000, "Succeeded", "operator:ana")
    assert [e["kind"] for e in listed["timeline"]] == kinds


# -- the role -----------------------------------------------------------------------------------


async def test_a_refunder_refunds_below_the_threshold_at_once_and_it_is_recorded(
    stack: Stack, rig: ConsoleRig,
) -> None:
    order_id, attempt_id = await paid_order(stack, 5000)
    ana = await rig.browser("ana", role="refunder")
    page = (await ana.client.get(f"/attempts/{attempt_id}")).text
    assert 'id="refund-form"' in page
    done = await refund_form(ana, attempt_id, "25.50", "damaged in transit")
    [op] = await operations_of(rig.pool, attempt_id)
    assert done == f"Refund of 25.50 EUR succeeded (operation {op.operation_id})."
    assert (op.amount_minor, op.state.value, op.requested_by) == (2550, "Succeeded", "operator:ana")
    assert len(await refund_posts(stack)) == 1
    [recorded] = await refund_actions(rig.pool)
    assert (recorded["operator"], recorded["action"], recorded["reason"], recorded["attempt_id"]) == (
        "ana", "refund-request", "damaged in transit", attempt_id)
    assert recorded["detail"] == {"operation_id": str(op.operation_id), "amount_minor": 2550,
                                  "currency": "EUR"}
    assert await rig.pool.fetchval("SELECT status FROM orders WHERE order_id = $1", order_id) == \
        "PartiallyRefunded"


@pytest.mark.parametrize("role", ["viewer", "operator"])
async def test_only_a_refunder_may_refund_or_decide(stack: Stack, rig: ConsoleRig, role: str) -> None:
    _, attempt_id = await paid_order(stack, 5000)
    asker = await rig.browser("ana", role="refunder")
    pending = await asker.post_json(f"/api/v1/attempts/{attempt_id}/refund",
                                    {"amount_minor": 4000, "reason": "whole order returned"})
    assert pending.status_code == 200 and pending.json()["status"] == "pending"
    approval_id = pending.json()["approval_id"]
    someone = await rig.browser("sam", role=role)
    page = (await someone.client.get(f"/attempts/{attempt_id}")).text
    assert 'id="refund-form"' not in page and "approve-form" not in page
    for answer in (await someone.post_form(f"/attempts/{attempt_id}/refund", amount="10", reason="r"),
                   await someone.post_json(f"/api/v1/attempts/{attempt_id}/refund",
                                           {"amount_minor": 1000, "reason": "r"}),
                   await someone.post_form(f"/refund-approvals/{approval_id}/approve"),
                   await someone.post_json(f"/api/v1/refund-approvals/{approval_id}/reject",
                                           {"reason": "r"})):
        assert answer.status_code == 403, answer.text
        assert f"sam is a {role}" in html.unescape(answer.text)
    assert await refund_posts(stack) == []
    assert [r["action"] for r in await refund_actions(rig.pool)] == ["refund-request"]
    assert await operations_of(rig.pool, attempt_id) == []


async def test_a_refund_the_payment_cannot_give_or_an_amount_not_typed_as_money_is_a_clear_refusal(
    stack: Stack, rig: ConsoleRig,
) -> None:
    _, attempt_id = await paid_order(stack, 5000)
    ana = await rig.browser("ana", role="refunder")
    refused = await refund_form(ana, attempt_id, "50.01")
    assert refused == ("Refused: refund refused (amount-exceeds-refundable): 50.01 EUR is more than this "
                       "payment can still refund (50.00 EUR; refunds sent or not yet settled count)")
    assert (await refund_form(ana, attempt_id, "1,000.00")).startswith(
        "Refused: '1,000.00' is not an amount: type digits and a point before the decimals, as in 25.50")
    assert await refund_form(ana, attempt_id, "12.345") == "Refused: EUR has 2 decimals, not 3"
    no_reason = await refund_form(ana, attempt_id, "10", reason=" ")
    assert no_reason.startswith("Refused: refund-request needs a reason")
    api = await ana.post_json(f"/api/v1/attempts/{attempt_id}/refund", {"amount_minor": 5001, "reason": "r"})
    assert api.status_code == 409 and "amount-exceeds-refundable" in api.json()["detail"]
    assert (await ana.post_json(f"/api/v1/attempts/{attempt_id}/refund", {"reason": "r"})).status_code == 400
    assert await refund_posts(stack) == [] and await refund_actions(rig.pool) == []


# -- a second refunder's approval ------------------------------------------------------------------


async def ask_above_the_threshold(stack: Stack, rig: ConsoleRig, paid_minor: int = 10000
                                  ) -> tuple[uuid.UUID, int, Browser]:
    """A paid order (100.00 EUR: room for two such refunds, so only the approval's own guard stops
    a second); ana asks for 40.00 back (above 30.00): it waits."""
    _, attempt_id = await paid_order(stack, paid_minor)
    ana = await rig.browser("ana", role="refunder")
    said = await refund_form(ana, attempt_id, "40")
    found = re.fullmatch(r"Refund of 40\.00 EUR is above 30\.00 EUR: it waits for another refunder's "
                         r"approval \(request (\d+)\)\. Nothing was sent\.", said)
    assert found is not None, said
    return attempt_id, int(found.group(1)), ana


async def test_above_the_threshold_a_refund_waits_and_its_requester_cannot_approve_it(
    stack: Stack, rig: ConsoleRig,
) -> None:
    attempt_id, approval_id, ana = await ask_above_the_threshold(stack, rig)
    assert await refund_posts(stack) == [] and await operations_of(rig.pool, attempt_id) == []
    [asked] = await refund_actions(rig.pool)
    assert (asked["action"], asked["state_after"]["status"], asked["detail"]["approval_id"]) == (
        "refund-request", "pending", approval_id)
    # Listed on the attempt page and among the pending approvals; the requester gets no buttons.
    for path in (f"/attempts/{attempt_id}", "/refund-approvals"):
        shown = section((await ana.client.get(path)).text, f"refund-approval-{approval_id}")
        assert 'data-status="pending"' in shown and "40.00 EUR" in shown and "ana" in shown
        assert "approve-form" not in shown and "You asked for it" in shown
    listed = await ana.client.get("/api/v1/refund-approvals")
    conforms("get", "/api/v1/refund-approvals", listed.json())
    assert [(i["approval_id"], i["amount_minor"], i["requested_by"], i["decision"])
            for i in listed.json()["items"]] == [(approval_id, 4000, "ana", None)]

    # Her own approval is refused, by the page, the API, and the database whatever the code does.
    refused = message(await ana.flash_after(await ana.post_form(f"/refund-approvals/{approval_id}/approve")))
    assert refused == f"Refused: ana asked for refund approval {approval_id}: another operator must decide it"
    api = await ana.post_json(f"/api/v1/refund-approvals/{approval_id}/reject", {"reason": "changed my mind"})
    assert api.status_code == 409
    with pytest.raises(asyncpg.CheckViolationError, match="ck_refund_approval_second_operator"):
        await rig.pool.execute("UPDATE refund_approvals SET decision = 'rejected', decided_by = requested_by,"
                               " decided_at = requested_at WHERE approval_id = $1", approval_id)
    assert await refund_posts(stack) == []
    assert [r["action"] for r in await refund_actions(rig.pool)] == ["refund-request"]


async def test_another_refunder_approves_it_once_even_posted_twice_at_the_same_time(
    stack: Stack, rig: ConsoleRig,
) -> None:
    attempt_id, approval_id, _ = await ask_above_the_threshold(stack, rig)
    bob, dan = await rig.browser("bob", role="refunder"), await rig.browser("dan", role="refunder")
    path = f"/refund-approvals/{approval_id}/approve"
    # A double click (the same form posted twice at once, once through the API) and, at the same
    # time, a second refunder approving it too. The payment has room for two such refunds: only
    # the approval's own guard (decided once, under its lock) stops a second one.
    page_answer, bob_api, dan_api = await asyncio.gather(
        bob.post_form(path, next=f"/attempts/{attempt_id}"), bob.post_json(f"/api/v1{path}", {}),
        dan.post_json(f"/api/v1{path}", {}))
    flash = message(await bob.flash_after(page_answer))
    outcomes = {"bob (page)": not flash.startswith("Refused"), "bob (api)": bob_api.status_code == 200,
                "dan (api)": dan_api.status_code == 200}
    assert sum(outcomes.values()) == 1, (outcomes, flash, bob_api.text, dan_api.text)
    winner = "dan" if outcomes["dan (api)"] else "bob"
    refused = [a.json()["detail"] for a in (bob_api, dan_api) if a.status_code != 200]
    refused += [flash] if not outcomes["bob (page)"] else []
    already = f"refund approval {approval_id} was approved already, by {winner}"
    assert len(refused) == 2 and all(already in r for r in refused), refused
    assert all(a.status_code in (200, 409) for a in (bob_api, dan_api))
    for answer in (a for a in (bob_api, dan_api) if a.status_code == 200):
        conforms("post", f"/api/v1{path}", answer.json())
        assert answer.json()["state"] == "Succeeded"
    if outcomes["bob (page)"]:
        assert flash.startswith(f"Approved request {approval_id}. Refund of 40.00 EUR succeeded")

    assert len(await refund_posts(stack)) == 1  # one refund reached the provider
    [op] = await operations_of(rig.pool, attempt_id)
    assert (op.amount_minor, op.state.value, op.requested_by) == (
        4000, "Succeeded", f"operator:ana approved by operator:{winner}")
    decided = await rig.pool.fetchrow("SELECT * FROM refund_approvals WHERE approval_id = $1", approval_id)
    assert (decided["decision"], decided["decided_by"], decided["operation_id"]) == (
        "approved", winner, op.operation_id)
    recorded = await refund_actions(rig.pool)
    assert [(r["operator"], r["action"]) for r in recorded] == [("ana", "refund-request"),
                                                                 (winner, "refund-approve")]
    assert recorded[-1]["detail"]["operation_id"] == str(op.operation_id)
    assert recorded[-1]["detail"]["amount_minor"] == 4000
    # Approved, it no longer waits.
    assert (await bob.client.get("/api/v1/refund-approvals")).json()["items"] == []


async def test_a_rejected_refund_is_never_sent(stack: Stack, rig: ConsoleRig) -> None:
    attempt_id, approval_id, _ = await ask_above_the_threshold(stack, rig)
    carol = await rig.browser("carol", role="refunder")
    said = message(await carol.flash_after(await carol.post_form(
        f"/refund-approvals/{approval_id}/reject", reason="the goods never came back")))
    assert said == f"Rejected request {approval_id}: the refund of 40.00 EUR will not be sent."
    again = message(await carol.flash_after(
        await carol.post_form(f"/refund-approvals/{approval_id}/approve")))
    assert again.startswith(f"Refused: refund approval {approval_id} was rejected already, by carol")
    assert await refund_posts(stack) == [] and await operations_of(rig.pool, attempt_id) == []
    assert [(r["operator"], r["action"], r["reason"]) for r in await refund_actions(rig.pool)] == [
        ("ana", "refund-request", "customer returned it"),
        ("carol", "refund-reject", "the goods never came back")]
    page = (await carol.client.get(f"/attempts/{attempt_id}")).text
    shown = section(page, f"refund-approval-{approval_id}")
    assert 'data-status="rejected"' in shown and "rejected by carol" in shown
    assert "approve-form" not in shown


async def test_an_approval_the_payment_can_no_longer_give_is_refused_and_stays_pending(
    stack: Stack, rig: ConsoleRig,
) -> None:
    attempt_id, approval_id, ana = await ask_above_the_threshold(stack, rig, paid_minor=5000)
    refunded = await refund_form(ana, attempt_id, "20")  # 30.00 left
    assert refunded.startswith("Refund of 20.00 EUR succeeded")
    bob = await rig.browser("bob", role="refunder")
    answer = await bob.post_json(f"/api/v1/refund-approvals/{approval_id}/approve", {"reason": "ok"})
    assert answer.status_code == 409
    assert "40.00 EUR is more than this payment can still refund (30.00 EUR" in answer.json()["detail"]
    assert len(await refund_posts(stack)) == 1
    assert await rig.pool.fetchval("SELECT decision IS NULL FROM refund_approvals WHERE approval_id = $1",
                                   approval_id)


async def test_a_console_without_provider_accounts_refuses_refunds(
    stack: Stack, make_rig: MakeRig,
) -> None:
    _, attempt_id = await paid_order(stack, 5000)
    bare = await make_rig(stack.clock)
    ana = await bare.browser("ana", role="refunder")
    assert 'id="refund-unavailable"' in (await ana.client.get(f"/attempts/{attempt_id}")).text
    said = await refund_form(ana, attempt_id, "10")
    assert said.startswith("Refused: this console sends no refunds: no provider account is configured")
    assert await refund_posts(stack) == [] and await refund_actions(bare.pool) == []


async def test_a_hold_shows_what_can_be_captured_and_offers_no_refund(stack: Stack, rig: ConsoleRig) -> None:
    _, attempt_id = await paid_order(stack, 5000, capture="manual")
    ana = await rig.browser("ana", role="refunder")
    page = (await ana.client.get(f"/attempts/{attempt_id}")).text
    assert re.findall(r'class="money">([^<]*)<', section(page, "headroom")) == [
        "0.00 EUR", "0.00 EUR", "50.00 EUR"]
    assert 'id="refund-form"' not in page
    refused = await refund_form(ana, attempt_id, "10")
    assert refused == ("Refused: refund refused (payment-not-captured): this payment is an uncaptured hold: "
                       "nothing was charged to refund")
    assert await refund_posts(stack) == [] and await refund_actions(rig.pool) == []
