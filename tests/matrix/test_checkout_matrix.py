"""Checkout lines of the reference's test matrix, end to end over HTTP.

Checkout and the Cardco sandbox run as real HTTP servers on a real PostgreSQL
database; the sandbox ledger counts charges; checkout's fake clock fires budgets.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any
from uuid import UUID

import asyncpg
import httpx
import pytest

from harness.servers import serve_asgi
from paycore.attempts import get_attempt, get_or_create_live_attempt, record_outcome, try_mark_started
from paycore.clock import FakeClock
from paycore.domain import ProviderOutcome
from paycore.providers.cardco import CardcoClient, StoredRequest, build_request_body
from paycore_checkout.app import create_app
from tests.support.attempts import recorded_attempt, someone_waits_on_a_lock
from tests.support.stack import Shop, Stack, checkout_settings, eventually, running_stack
from tests.support.timings import REMINDER_INTERVAL


async def attempts_of(stack: Stack, order_id: str) -> list[dict[str, Any]]:
    rows = await stack.pool.fetch(
        "SELECT * FROM payment_attempts WHERE order_id = $1 ORDER BY attempt_number", order_id)
    return [dict(r) for r in rows]


async def wait_for_create_requests(stack: Stack, n: int) -> None:
    async def arrived() -> bool:
        return len(await stack.sandbox.create_requests()) >= n
    await eventually(arrived, what=f"{n} create request(s) at the sandbox")


async def pay_in_background(
    shop: Shop, order_id: str, method: str = "tok_visa"
) -> asyncio.Task[httpx.Response]:
    return asyncio.create_task(shop.pay(order_id, method))


async def test_lost_response_is_unknown_202_with_status_url_never_failed(stack: Stack) -> None:
    await stack.sandbox.fault("lose_response", times=1)
    order = await stack.shop.create_order()
    pending = await pay_in_background(stack.shop, order)
    await wait_for_create_requests(stack, 1)
    stack.clock.advance(stack.settings.budgets.call_s)  # the call budget fires: no answer
    r = await pending
    assert r.status_code == 202
    assert r.headers["location"] == f"/orders/{order}/payment/status"
    body = r.json()
    assert body["state"] == "Unknown"
    assert body["outcome_reason"] == "provider.no-response.caller"
    assert body["status_url"] == f"/orders/{order}/payment/status"
    # The provider did charge: the store must not call it Failed, and must not charge again.
    assert len(await stack.sandbox.ledger()) == 1
    again = await stack.shop.pay(order)
    assert again.status_code == 202 and again.json()["attempt_id"] == body["attempt_id"]
    assert len(await stack.sandbox.create_requests()) == 1


async def test_double_click_twenty_concurrent_posts_make_one_attempt_and_one_payment(stack: Stack) -> None:
    order = await stack.shop.create_order()
    responses = await asyncio.gather(*(stack.shop.pay(order) for _ in range(20)))
    assert all(r.status_code in (200, 202) for r in responses), [(r.status_code, r.text) for r in responses]
    attempt_ids = {r.json()["attempt_id"] for r in responses}
    assert len(attempt_ids) == 1
    assert len(await attempts_of(stack, order)) == 1
    assert len(await stack.sandbox.ledger()) == 1
    assert len(await stack.sandbox.create_requests()) == 1


async def test_second_tab_while_attempt_is_live_returns_its_status_and_sends_nothing(stack: Stack) -> None:
    order = await stack.shop.create_order()
    first = await stack.shop.pay(order, "tok_async")  # processing: live and Started
    assert first.status_code == 202 and first.json()["state"] == "Started"
    second = await stack.shop.pay(order, "tok_visa")  # another tab, another card
    assert second.status_code == 202
    assert second.json()["attempt_id"] == first.json()["attempt_id"]
    assert len(await stack.sandbox.create_requests()) == 1


async def test_browser_retry_after_success_reports_the_payment_and_sends_nothing(stack: Stack) -> None:
    order = await stack.shop.create_order()
    first = await stack.shop.pay(order)
    retry = await stack.shop.pay(order)
    assert retry.status_code == 200
    assert retry.json() == first.json()
    assert len(await stack.sandbox.create_requests()) == 1


async def test_status_get_never_sends(stack: Stack) -> None:
    await stack.sandbox.fault("lose_response", times=1)
    order = await stack.shop.create_order()
    pending = await pay_in_background(stack.shop, order)
    await wait_for_create_requests(stack, 1)
    during = await stack.shop.status(order)
    assert during.status_code == 202 and during.json()["state"] == "Started"
    stack.clock.advance(stack.settings.budgets.call_s)
    await pending
    for _ in range(5):
        r = await stack.shop.status(order)
        assert r.status_code == 202 and r.json()["state"] == "Unknown"
    assert len(await stack.sandbox.requests()) == 1


async def test_status_get_for_order_without_payment_is_404_problem(stack: Stack) -> None:
    order = await stack.shop.create_order()
    r = await stack.shop.status(order)
    assert r.status_code == 404
    assert r.headers["content-type"] == "application/problem+json"


async def test_success_recorded_while_new_checkout_arrives_leaves_one_attempt(stack: Stack) -> None:
    order = await stack.shop.create_order()
    attempt = await recorded_attempt(stack.pool, stack.clock, stack.settings.default_account, order,
                               "cus_alice")
    _, started = await try_mark_started(stack.pool, attempt,
                                        now=stack.clock.now(), next_check_at=stack.clock.now())
    assert started is not None
    success = ProviderOutcome.succeeded("pay_elsewhere", 4999, "EUR")
    results = await asyncio.gather(
        record_outcome(stack.pool, attempt.attempt_id, success, now=stack.clock.now(),
                       actor="notification-handler", recheck_after_s=60, from_send=False,
                       reminder_interval=REMINDER_INTERVAL),
        *(stack.shop.pay(order) for _ in range(3)),
    )
    responses = results[1:]
    assert all(isinstance(r, httpx.Response) and r.status_code in (200, 202) for r in responses)
    rows = await attempts_of(stack, order)
    assert [r["state"] for r in rows] == ["Succeeded"]
    assert await stack.pool.fetchval("SELECT status FROM orders WHERE order_id = $1", order) == "Paid"
    assert await stack.sandbox.create_requests() == []


async def test_every_resend_carries_same_key_endpoint_version_account_and_identical_bytes(
    stack: Stack,
) -> None:
    await stack.sandbox.fault("lose_response", times=1)
    order = await stack.shop.create_order()
    pending = await pay_in_background(stack.shop, order)
    await wait_for_create_requests(stack, 1)
    stack.clock.advance(stack.settings.budgets.call_s)
    assert (await pending).json()["state"] == "Unknown"

    [row] = await attempts_of(stack, order)
    async with CardcoClient(stack.settings.accounts, stack.clock, max_call_duration_s=30) as client:
        for _ in range(2):
            outcome = await client.create_payment(StoredRequest.from_record(row), budget_s=15,
                                                  first_send=False)
            assert outcome.kind.value == "succeeded" and outcome.replayed

    sends = await stack.sandbox.create_requests()
    assert len(sends) == 3
    first = sends[0]
    for resend in sends[1:]:
        assert resend["body"] == first["body"] == row["request_body"]
        assert resend["path"] == first["path"]
        for header in ("idempotency-key", "cardco-version", "cardco-account", "authorization"):
            assert resend["headers"][header] == first["headers"][header]
    assert first["headers"]["idempotency-key"] == f'"{row["idempotency_key"]}"'
    assert len(await stack.sandbox.ledger()) == 1


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("malformed_body", "provider.body-unreadable"),
        ("empty_body", "provider.body-unreadable"),
        ("error_500_after", "provider.http-500"),
        ("not_processed_503", "provider.http-503"),
    ],
)
async def test_unreadable_or_5xx_answers_are_unknown(stack: Stack, fault: str, reason: str) -> None:
    await stack.sandbox.fault(fault, times=1)
    order = await stack.shop.create_order()
    r = await stack.shop.pay(order)
    assert r.status_code == 202
    assert r.json()["state"] == "Unknown"
    assert r.json()["outcome_reason"] == reason


async def test_client_timeout_is_unknown(stack: Stack) -> None:
    await stack.sandbox.fault("drop_request", times=1)
    order = await stack.shop.create_order()
    pending = await pay_in_background(stack.shop, order)
    await wait_for_create_requests(stack, 1)
    stack.clock.advance(stack.settings.budgets.call_s)
    r = await pending
    assert r.status_code == 202 and r.json()["state"] == "Unknown"
    assert await stack.sandbox.ledger() == []  # never processed, and still not called Failed


async def test_rejection_before_any_connection_is_unknown_like_an_open_circuit(
    pool: asyncpg.Pool, db_dsn: str, free_tcp_port: int,
) -> None:
    # No provider listens: the transport refuses before anything is sent. Like an
    # open circuit, that refuses this send but cannot prove there was no earlier one.
    settings = checkout_settings(f"http://127.0.0.1:{free_tcp_port}", db_dsn)
    app = create_app(settings, clock=FakeClock(), pool=pool)
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        shop = Shop(http, "cus_bob")
        order = await shop.create_order()
        r = await shop.pay(order)
    assert r.status_code == 202
    assert r.json()["state"] == "Unknown"
    assert r.json()["outcome_reason"].startswith("provider.transport.")


async def test_validation_rejection_of_only_send_is_not_applied_and_a_new_checkout_succeeds(
    stack: Stack,
) -> None:
    order = await stack.shop.create_order()
    r = await stack.shop.pay(order, "tok_expired")
    assert r.status_code == 200
    assert r.json()["state"] == "NotApplied"
    assert r.json()["outcome_reason"] == "rejected:parameter_invalid:payment_method"
    again = await stack.shop.pay(order, "tok_visa")
    assert again.status_code == 200 and again.json()["state"] == "Succeeded"
    assert again.json()["attempt_id"] != r.json()["attempt_id"]
    rows = await attempts_of(stack, order)
    assert [(a["attempt_number"], a["state"]) for a in rows] == [(1, "NotApplied"), (2, "Succeeded")]
    assert rows[0]["idempotency_key"] != rows[1]["idempotency_key"]
    assert len(await stack.sandbox.ledger()) == 1


async def test_decline_is_failed_with_reason(stack: Stack) -> None:
    order = await stack.shop.create_order()
    r = await stack.shop.pay(order, "tok_decline")
    assert r.status_code == 200
    assert r.json()["state"] == "Failed"
    assert r.json()["outcome_reason"] == "declined:card_declined"


async def test_customer_action_is_returned_while_current_and_never_once_expired(stack: Stack) -> None:
    order = await stack.shop.create_order()
    r = await stack.shop.pay(order, "tok_3ds")
    assert r.status_code == 200
    body = r.json()
    assert body["state"] == "Started" and body["provider_status"] == "requires_action"
    assert body["next_action"]["type"] == "redirect_to_url"
    status = await stack.shop.status(order)
    assert status.status_code == 200 and status.json()["next_action"] == body["next_action"]
    stack.clock.advance(16 * 60)  # past the provider's 15-minute expiry
    expired = await stack.shop.status(order)
    assert expired.status_code == 202
    assert expired.json()["next_action"] is None


async def test_unknown_attempt_never_surfaces_an_action(stack: Stack) -> None:
    await stack.sandbox.fault("lose_response", times=1)
    order = await stack.shop.create_order()
    pending = await pay_in_background(stack.shop, order, "tok_3ds")
    await wait_for_create_requests(stack, 1)
    stack.clock.advance(stack.settings.budgets.call_s)
    r = await pending
    assert r.json()["state"] == "Unknown" and r.json()["next_action"] is None


async def test_closed_connection_during_the_call_does_not_cancel_the_call_or_its_recording(
    stack: Stack,
) -> None:
    await stack.sandbox.fault("delay", delay_ms=300, times=1)
    order = await stack.shop.create_order()
    with pytest.raises(httpx.TimeoutException):
        # The customer closes the tab while the provider is still working.
        await stack.shop.pay(order, timeout=httpx.Timeout(0.05))

    async def recorded() -> bool:
        rows = await attempts_of(stack, order)
        return bool(rows) and rows[0]["state"] == "Succeeded"

    await eventually(recorded, what="the outcome recorded after the client left")
    assert len(await stack.sandbox.ledger()) == 1
    assert (await stack.shop.status(order)).json()["state"] == "Succeeded"


async def _hold_attempt_row(stack: Stack, order: str) -> tuple[Any, Any]:
    conn = await stack.pool.acquire()
    tx = conn.transaction()
    await tx.start()
    await conn.execute("SELECT 1 FROM payment_attempts WHERE order_id = $1 FOR UPDATE", order)
    return conn, tx


async def test_unconfirmed_started_commit_returns_503_retry_after_and_status_202_not_started(
    stack: Stack,
) -> None:
    order = await stack.shop.create_order()
    account = stack.settings.default_account
    # The attempt exists (a first click created it); the start transition will block.
    await get_or_create_live_attempt(
        stack.pool, order_id=order, customer_id="cus_alice", account=account,
        build_body=lambda ref, amt, cur: build_request_body(
            amount_minor=amt, currency=cur, payment_method="tok_visa", reference=ref),
        now=stack.clock.now(), abandonment_threshold_s=60)
    conn, tx = await _hold_attempt_row(stack, order)
    try:
        pending = await pay_in_background(stack.shop, order)
        await eventually(lambda: someone_waits_on_a_lock(stack.pool), what="start transition blocked")
        stack.clock.advance(stack.settings.budgets.start_s)  # the start budget fires
        r = await pending
    finally:
        await tx.rollback()
        await stack.pool.release(conn)
    assert r.status_code == 503
    assert r.headers["retry-after"] == "2"
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["state"] == "NotStarted"
    status = await stack.shop.status(order)
    assert status.status_code == 202 and status.json()["state"] == "NotStarted"
    assert await stack.sandbox.requests() == []
    # The page's bounded retry sends it exactly once.
    retry = await stack.shop.pay(order)
    assert retry.status_code == 200 and retry.json()["state"] == "Succeeded"
    assert len(await stack.sandbox.create_requests()) == 1


async def test_unconfirmed_outcome_write_returns_durable_status(stack: Stack) -> None:
    await stack.sandbox.fault("delay", delay_ms=200, times=1)
    order = await stack.shop.create_order()
    pending = await pay_in_background(stack.shop, order)
    await wait_for_create_requests(stack, 1)
    conn, tx = await _hold_attempt_row(stack, order)  # the record step will block
    try:
        async def record_blocked() -> bool:
            return stack.clock.pending_timers > 0 and await someone_waits_on_a_lock(stack.pool)
        await eventually(record_blocked, what="outcome write blocked")
        stack.clock.advance(stack.settings.budgets.record_s)  # the record budget fires
        r = await pending
    finally:
        await tx.rollback()
        await stack.pool.release(conn)
    assert r.status_code == 202
    assert r.json()["state"] == "Started"  # durable state: recovery establishes the outcome
    assert len(await stack.sandbox.ledger()) == 1


async def test_order_cancelled_before_the_started_transition_prevents_the_send(stack: Stack) -> None:
    order = await stack.shop.create_order()
    await recorded_attempt(stack.pool, stack.clock, stack.settings.default_account, order,
                               "cus_alice")
    cancelled = await stack.shop.cancel(order)
    assert cancelled.status_code == 200 and cancelled.json()["cancel_requested"] is True
    r = await stack.shop.pay(order)
    assert r.status_code == 409
    assert r.headers["content-type"] == "application/problem+json"
    assert await stack.sandbox.requests() == []
    [row] = await attempts_of(stack, order)
    assert row["state"] == "NotStarted" and row["first_sent_at"] is None


async def test_cancel_without_live_attempt_cancels_outright_and_refuses_payment(stack: Stack) -> None:
    order = await stack.shop.create_order()
    r = await stack.shop.cancel(order)
    assert r.json()["status"] == "Cancelled"
    pay = await stack.shop.pay(order)
    assert pay.status_code == 409
    assert await attempts_of(stack, order) == []


async def test_another_customers_order_is_404(stack: Stack) -> None:
    order = await stack.shop.create_order()
    mallory = stack.shop.as_customer("cus_mallory")
    assert (await mallory.pay(order)).status_code == 404
    assert (await mallory.status(order)).status_code == 404
    assert (await mallory.cancel(order)).status_code == 404
    assert await attempts_of(stack, order) == []


async def test_paying_an_unknown_order_is_404(stack: Stack) -> None:
    r = await stack.shop.pay("ord_" + uuid.uuid4().hex[:24])
    assert r.status_code == 404


async def test_stored_customer_action_is_returned_by_status_get_after_a_restart(
    stack: Stack, db_dsn: str,
) -> None:
    order = await stack.shop.create_order()
    action = (await stack.shop.pay(order, "tok_3ds")).json()["next_action"]
    assert action is not None
    # A new checkout process on the same database: the action comes from the row.
    restarted = create_app(checkout_settings(stack.sandbox.url, db_dsn), clock=stack.clock)
    async with serve_asgi(restarted) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        r = await Shop(http, "cus_alice").status(order)
    assert r.status_code == 200
    assert r.json()["next_action"] == action


async def test_customer_closing_the_tab_during_the_started_transition_leaves_it_confirmed(
    stack: Stack,
) -> None:
    order = await stack.shop.create_order()
    await recorded_attempt(stack.pool, stack.clock, stack.settings.default_account, order,
                               "cus_alice")
    conn, tx = await _hold_attempt_row(stack, order)  # the Started transition will wait
    try:
        leaving = asyncio.create_task(stack.shop.pay(order, timeout=httpx.Timeout(0.3)))
        await eventually(lambda: someone_waits_on_a_lock(stack.pool), what="start transition blocked")
        with pytest.raises(httpx.TimeoutException):
            await leaving  # the customer gives up and the connection closes
    finally:
        await tx.rollback()
        await stack.pool.release(conn)

    async def settled() -> bool:
        rows = await attempts_of(stack, order)
        return rows[0]["state"] == "Succeeded"

    await eventually(settled, what="the transition and the payment to complete without the client")
    [row] = await attempts_of(stack, order)
    assert row["first_sent_at"] is not None
    assert len(await stack.sandbox.ledger()) == 1


async def test_an_attempt_checkout_leaves_unknown_is_looked_at_again_after_the_configured_recheck(
    pool: asyncpg.Pool, db_dsn: str,
) -> None:
    async for stack in running_stack(pool, db_dsn, PAYCORE_RECHECK_AFTER_S="7"):
        await stack.sandbox.fault("lose_response", times=1)
        order = await stack.shop.create_order()
        pending = await pay_in_background(stack.shop, order)
        await wait_for_create_requests(stack, 1)
        stack.clock.advance(stack.settings.budgets.call_s)
        r = await pending
        assert r.json()["state"] == "Unknown"
        attempt = await get_attempt(pool, UUID(r.json()["attempt_id"]))
        assert attempt.next_check_at == stack.clock.now() + timedelta(seconds=7)
