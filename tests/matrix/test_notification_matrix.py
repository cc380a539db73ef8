"""Notification lines of the reference's test matrix, over HTTP into the intake service.

Deliveries are signed with the sandbox accounts' secrets (or delivered by the
sandbox itself); everything lands in a real PostgreSQL database.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import Any
from uuid import UUID

import asyncpg
import httpx
import orjson
import pytest

from harness.servers import serve_asgi
from paycore.attempts import (
    Attempt,
    get_attempt,
    record_outcome,
)
from paycore.config import ProviderAccountConfig
from paycore.domain import ProviderOutcome
from paycore.notifications import AttachRefused, attach_notification
from paycore.operator_actions import InvalidOperatorAction
from paycore.providers.base import synthesized_key
from paycore.webhook_signatures import signed_headers
from paycore_webhooks.app import create_app as create_webhooks_app
from tests.support.attempts import someone_waits_on_a_lock, started_attempt
from tests.support.stack import eventually
from tests.support.timings import REMINDER_INTERVAL
from tests.support.webhooks import LIVE, OTHER, TEST, WebhookStack, event, payment_object, sandbox_secrets


def account(hooks: WebhookStack, provider_account: str = TEST) -> ProviderAccountConfig:
    found = hooks.settings.account(provider_account)
    assert found is not None
    return found


async def live_attempt(hooks: WebhookStack, provider_account: str = TEST, *, unknown: bool = True,
                       customer: str = "cus_alice") -> Attempt:
    """An attempt whose send crossed the boundary (Started), optionally timed out (Unknown)."""
    order = await hooks.shop.as_customer(customer).create_order()
    acct = account(hooks, provider_account)
    started = await started_attempt(hooks.pool, hooks.clock, acct, order, customer)
    if unknown:
        return (await record_outcome(hooks.pool, started.attempt_id,
                                    ProviderOutcome.unknown("provider.no-response.caller"),
                                    now=hooks.clock.now(), actor="endpoint", recheck_after_s=60,
                                    reminder_interval=REMINDER_INTERVAL)).attempt
    return started


def succeeded_event(attempt: Attempt, payment_id: str = "pay_1", **kw: Any) -> dict[str, Any]:
    env = attempt.provider_account.split(":")
    pay = payment_object(payment_id=payment_id, reference=attempt.client_reference,
                         amount=kw.pop("amount", attempt.amount_minor), currency=kw.pop("currency", "EUR"),
                         account=env[1], livemode=env[2] == "live", status=kw.pop("status", "succeeded"))
    return event(pay, account=env[1], livemode=env[2] == "live", **kw)


async def state_of(hooks: WebhookStack, attempt: Attempt) -> str:
    return str((await get_attempt(hooks.pool, attempt.attempt_id)).state)


async def outbox_keys(hooks: WebhookStack) -> list[str]:
    rows = await hooks.pool.fetch("SELECT dedup_key FROM outbox_messages ORDER BY message_id")
    return [r["dedup_key"] for r in rows]


async def open_escalations(hooks: WebhookStack) -> list[str]:
    rows = await hooks.pool.fetch(
        "SELECT escalation_key FROM payment_escalations WHERE resolved_at IS NULL ORDER BY escalation_id")
    return [r["escalation_key"] for r in rows]


async def notification_rows(hooks: WebhookStack) -> list[asyncpg.Record]:
    return await hooks.pool.fetch(
        "SELECT * FROM payment_attempt_events WHERE kind = 'notification' ORDER BY event_id")


async def transitions_to(hooks: WebhookStack, attempt: Attempt, state: str) -> int:
    return await hooks.count(
        "SELECT count(*) FROM payment_attempt_events WHERE attempt_id = $1 AND kind = 'transition'"
        " AND detail ->> 'to' = $2", attempt.attempt_id, state)


# -- deduplication ----------------------------------------------------------------------------

async def test_redelivered_keyed_notification_is_recorded_once_returns_success_and_queues_work_once(
    hooks: WebhookStack,
) -> None:
    attempt = await live_attempt(hooks)
    body = succeeded_event(attempt)
    first = await hooks.deliver(body)
    again = await hooks.deliver(body)
    assert first.status_code == again.status_code == 200
    assert first.json() == {"result": "applied"} and again.json() == {"result": "duplicate"}
    assert len(await notification_rows(hooks)) == 1
    assert await state_of(hooks, attempt) == "Succeeded"
    assert await outbox_keys(hooks) == [f"attempt:{attempt.attempt_id}:order-confirmation",
                                        f"attempt:{attempt.attempt_id}:fulfillment-request"]


async def test_a_redelivery_of_a_committed_notification_answers_without_waiting_on_the_order_lock(
    hooks: WebhookStack,
) -> None:
    # A provider's retry storm must not queue behind a checkout holding the order:
    # a key already committed is a duplicate, known from one indexed read.
    attempt = await live_attempt(hooks)
    body = succeeded_event(attempt)
    assert (await hooks.deliver(body)).json() == {"result": "applied"}
    async with hooks.pool.acquire() as holder, holder.transaction():
        await holder.execute("SELECT 1 FROM orders WHERE order_id = $1 FOR UPDATE", attempt.order_id)
        again = await asyncio.wait_for(hooks.deliver(body), timeout=10)
        assert again.status_code == 200 and again.json() == {"result": "duplicate"}
    assert len(await notification_rows(hooks)) == 1


async def test_same_event_id_under_another_account_is_recorded_separately(hooks: WebhookStack) -> None:
    test_attempt = await live_attempt(hooks, TEST)
    other_attempt = await live_attempt(hooks, OTHER)
    shared_id = "evt_shared_0001"
    r1 = await hooks.deliver(succeeded_event(test_attempt, "pay_t", event_id=shared_id), account=TEST)
    r2 = await hooks.deliver(succeeded_event(other_attempt, "pay_o", event_id=shared_id), account=OTHER)
    assert r1.json()["result"] == r2.json()["result"] == "applied"
    rows = await notification_rows(hooks)
    assert sorted((r["provider_account"], r["notification_key"]) for r in rows) == [
        (OTHER, shared_id), (TEST, shared_id)]
    assert await state_of(hooks, test_attempt) == await state_of(hooks, other_attempt) == "Succeeded"


async def test_unkeyed_notification_delivered_twice_synthesizes_one_key_one_row_one_transition(
    hooks: WebhookStack,
) -> None:
    attempt = await live_attempt(hooks)
    body = succeeded_event(attempt, event_id=None, sequence=2)
    # Different webhook-ids, timestamps and signatures per delivery: the key ignores them.
    first = await hooks.deliver(body, msg_id="msg_a")
    second = await hooks.deliver(body, msg_id="msg_b", timestamp=int(hooks.clock.now().timestamp()) - 60)
    assert first.json()["result"] == "applied" and second.json()["result"] == "duplicate"
    [row] = await notification_rows(hooks)
    assert row["notification_key"].startswith("v1:")
    assert await transitions_to(hooks, attempt, "Succeeded") == 1
    assert len(await outbox_keys(hooks)) == 2


async def test_two_distinct_notifications_with_the_same_status_do_not_collide(hooks: WebhookStack) -> None:
    attempt = await live_attempt(hooks)
    first = succeeded_event(attempt, event_id=None, sequence=1, status="processing")
    second = succeeded_event(attempt, event_id=None, sequence=2, status="processing")
    assert (await hooks.deliver(first)).json()["result"] == "applied"
    assert (await hooks.deliver(second)).json()["result"] == "applied"
    rows = await notification_rows(hooks)
    assert len({r["notification_key"] for r in rows}) == 2


async def test_notification_with_no_basis_for_a_key_is_recorded_twice_changes_once_effects_once(
    hooks: WebhookStack,
) -> None:
    attempt = await live_attempt(hooks)
    body = succeeded_event(attempt, event_id=None, sequence=None)  # no id, no sequence: no basis
    assert (await hooks.deliver(body)).json()["result"] == "applied"
    assert (await hooks.deliver(body)).json()["result"] == "applied"
    rows = await notification_rows(hooks)
    assert len(rows) == 2 and all(r["notification_key"] is None for r in rows)
    assert await transitions_to(hooks, attempt, "Succeeded") == 1
    assert len(await outbox_keys(hooks)) == 2


async def test_an_empty_event_id_is_treated_as_missing(hooks: WebhookStack) -> None:
    attempt = await live_attempt(hooks)
    for blank in ("", "   "):
        body = succeeded_event(attempt, event_id=blank, sequence=4)
        r = await hooks.deliver(body, msg_id="msg_" + str(len(blank)))
        assert r.status_code == 200
    rows = await notification_rows(hooks)
    # Both synthesize the same key from their fields instead of sharing an empty one.
    assert len(rows) == 1 and rows[0]["notification_key"].startswith("v1:")


async def test_an_unkeyed_notification_is_always_recorded_and_handled(hooks: WebhookStack) -> None:
    attempt = await live_attempt(hooks)
    r = await hooks.deliver(succeeded_event(attempt, event_id=None, sequence=None))
    assert r.json()["result"] == "applied"
    assert await state_of(hooks, attempt) == "Succeeded"


async def test_stored_canonical_fields_recompute_the_synthesized_key(hooks: WebhookStack) -> None:
    # The basis of a future algorithm migration: keys can be recomputed from the rows.
    attempt = await live_attempt(hooks)
    await hooks.deliver(succeeded_event(attempt, event_id=None, sequence=3))
    [row] = await notification_rows(hooks)
    assert synthesized_key(row["detail"]["canonical"]) == row["notification_key"]
    assert row["detail"]["key_basis"] == "synthesized-v1"


async def deliver_behind_an_uncommitted_insert(hooks: WebhookStack, attempt: Attempt, *,
                                               commit: bool) -> dict[str, Any]:
    """Deliver a notification while another handler's insert of its key is uncommitted,
    then commit or roll back that insert; returns the delivery's answer."""
    body = succeeded_event(attempt)
    conn = await hooks.pool.acquire()
    tx = conn.transaction()
    await tx.start()
    await conn.execute(
        "INSERT INTO payment_attempt_events (attempt_id, occurred_at, kind, actor, provider_account,"
        " notification_key, detail) VALUES ($1, now(), 'notification', 'notification-handler', $2, $3, '{}')",
        attempt.attempt_id, TEST, body["id"])
    try:
        pending = asyncio.create_task(hooks.deliver(body))
        await eventually(lambda: someone_waits_on_a_lock(hooks.pool), what="the delivery to wait on it")
        await (tx.commit() if commit else tx.rollback())
    finally:
        await hooks.pool.release(conn)
    r = await pending
    assert r.status_code == 200
    answer: dict[str, Any] = r.json()
    return answer


async def test_two_concurrent_deliveries_of_one_notification_produce_one_handling(
    hooks: WebhookStack,
) -> None:
    attempt = await live_attempt(hooks)
    answer = await deliver_behind_an_uncommitted_insert(hooks, attempt, commit=True)
    assert answer["result"] == "duplicate"
    assert await state_of(hooks, attempt) == "Unknown"  # the committed first handler did nothing else


async def test_a_delivery_waiting_on_an_insert_that_rolls_back_handles_the_notification(
    hooks: WebhookStack,
) -> None:
    attempt = await live_attempt(hooks)
    answer = await deliver_behind_an_uncommitted_insert(hooks, attempt, commit=False)
    assert answer["result"] == "applied"
    assert await state_of(hooks, attempt) == "Succeeded"


async def test_failure_before_commit_returns_an_error_and_the_redelivery_is_handled(
    hooks: WebhookStack,
) -> None:
    attempt = await live_attempt(hooks)
    body = succeeded_event(attempt)
    # A real database failure inside the handler's transaction, after the notification insert.
    await hooks.pool.execute("""
        CREATE FUNCTION fail_outbox() RETURNS trigger LANGUAGE plpgsql AS
        $$ BEGIN RAISE EXCEPTION 'injected outbox failure'; END; $$;
        CREATE TRIGGER fail_outbox BEFORE INSERT ON outbox_messages
        FOR EACH ROW EXECUTE FUNCTION fail_outbox();
    """)
    failed = await hooks.deliver(body)
    assert failed.status_code == 500
    assert failed.headers["content-type"] == "application/problem+json"
    assert await notification_rows(hooks) == []  # nothing was acknowledged or kept
    assert await state_of(hooks, attempt) == "Unknown"
    await hooks.pool.execute("DROP TRIGGER fail_outbox ON outbox_messages; DROP FUNCTION fail_outbox()")
    redelivered = await hooks.deliver(body)
    assert redelivered.status_code == 200 and redelivered.json()["result"] == "applied"
    assert await state_of(hooks, attempt) == "Succeeded"


# -- resolution rules -------------------------------------------------------------------------

async def test_a_notification_that_arrives_before_checkout_records_its_timeout_wins(
    hooks: WebhookStack,
) -> None:
    await hooks.sandbox.fault("lose_response", times=1)
    order = await hooks.shop.create_order()
    pending = asyncio.create_task(hooks.shop.pay(order))

    async def charged() -> list[dict[str, Any]]:
        return await hooks.sandbox.ledger()

    [payment] = await eventually(charged, what="the provider to charge")
    evt = event(payment_object(payment_id=payment["id"], reference=payment["reference"]))
    assert (await hooks.deliver(evt)).json()["result"] == "applied"
    hooks.clock.advance(hooks.settings.budgets.call_s)  # now checkout's call times out
    r = await pending
    assert r.status_code == 200 and r.json()["state"] == "Succeeded"  # the late Unknown lost


async def test_lookup_then_notification_for_the_same_attempt_queue_one_confirmation(
    hooks: WebhookStack,
) -> None:
    attempt = await live_attempt(hooks)
    await record_outcome(hooks.pool, attempt.attempt_id, ProviderOutcome.succeeded("pay_1", 4999, "EUR"),
                         now=hooks.clock.now(), actor="recovery-1", recheck_after_s=60, from_send=False,
                         reminder_interval=REMINDER_INTERVAL)
    r = await hooks.deliver(succeeded_event(attempt, "pay_1"))
    assert r.json()["result"] == "applied"
    assert await outbox_keys(hooks) == [f"attempt:{attempt.attempt_id}:order-confirmation",
                                        f"attempt:{attempt.attempt_id}:fulfillment-request"]


async def test_a_refund_of_a_succeeded_attempt_is_recorded_and_queued_after_the_confirmation(
    hooks: WebhookStack,
) -> None:
    attempt = await live_attempt(hooks)
    await hooks.deliver(succeeded_event(attempt, "pay_1", sequence=1))
    refund = succeeded_event(attempt, "pay_1", sequence=2, event_type="payment.refunded")
    refund["data"]["object"]["amount_refunded"] = 4999
    r = await hooks.deliver(refund)
    assert r.json()["result"] == "applied"
    assert await outbox_keys(hooks) == [f"attempt:{attempt.attempt_id}:order-confirmation",
                                        f"attempt:{attempt.attempt_id}:fulfillment-request",
                                        f"attempt:{attempt.attempt_id}:refund-request"]
    assert not any(":contradiction" in k for k in await open_escalations(hooks))
    assert await state_of(hooks, attempt) == "Succeeded"


async def test_a_failed_notification_for_a_succeeded_attempt_escalates_a_contradiction(
    hooks: WebhookStack,
) -> None:
    attempt = await live_attempt(hooks)
    await hooks.deliver(succeeded_event(attempt, "pay_1", sequence=1))
    failed = succeeded_event(attempt, "pay_1", sequence=2, status="failed")
    assert (await hooks.deliver(failed)).json()["result"] == "applied"
    assert await state_of(hooks, attempt) == "Succeeded"
    assert await open_escalations(hooks) == [f"attempt:{attempt.attempt_id}:contradiction:{failed['id']}"]


async def test_processing_and_requires_action_move_unknown_to_started_with_the_action(
    hooks: WebhookStack,
) -> None:
    attempt = await live_attempt(hooks)
    action = {"type": "redirect_to_url", "url": "https://sandbox.cardco.test/3ds/x",
              "expires_at": int(hooks.clock.now().timestamp()) + 900}
    pay = payment_object(payment_id="pay_1", reference=attempt.client_reference, status="requires_action",
                         next_action=action)
    assert (await hooks.deliver(event(pay))).json()["result"] == "applied"
    row = await get_attempt(hooks.pool, attempt.attempt_id)
    assert row.state == "Started" and row.provider_status == "requires_action"
    assert row.next_action == action and row.next_action_expires_at is not None
    assert row.provider_payment_id == "pay_1"


async def test_unknown_reference_raises_one_alert_and_resolves_nothing(hooks: WebhookStack) -> None:
    evt = event(payment_object(payment_id="pay_ghost", reference="ORD-unknown-a1"))
    assert (await hooks.deliver(evt)).json()["result"] == "unmatched"
    assert (await hooks.deliver(evt)).json()["result"] == "duplicate"  # a redelivery: no second alert
    assert await open_escalations(hooks) == [f"notification:{TEST}:{evt['id']}:unmatched"]
    alerts = await hooks.count("SELECT count(*) FROM outbox_messages WHERE kind = 'operator-alert'")
    assert alerts == 1


async def test_mismatched_amount_alerts_once_per_notification_and_resolves_nothing(
    hooks: WebhookStack,
) -> None:
    attempt = await live_attempt(hooks)
    first = succeeded_event(attempt, amount=1, sequence=1)
    second = succeeded_event(attempt, amount=2, sequence=2)
    for body in (first, first, second):
        r = await hooks.deliver(body)
        assert r.status_code == 200
    assert await state_of(hooks, attempt) == "Unknown"
    assert await open_escalations(hooks) == [f"attempt:{attempt.attempt_id}:mismatch:{first['id']}",
                                             f"attempt:{attempt.attempt_id}:mismatch:{second['id']}"]
    assert await hooks.count("SELECT count(*) FROM outbox_messages WHERE kind = 'operator-alert'") == 2


async def test_a_payload_naming_another_environment_raises_an_alert_and_resolves_nothing(
    hooks: WebhookStack,
) -> None:
    attempt = await live_attempt(hooks)
    body = succeeded_event(attempt)
    body["livemode"] = True  # signed with the test secret, but says live
    assert (await hooks.deliver(body)).json()["result"] == "mismatch"
    assert await state_of(hooks, attempt) == "Unknown"


async def test_test_and_live_attempts_with_the_same_reference_do_not_collide(hooks: WebhookStack) -> None:
    test_attempt = await live_attempt(hooks, TEST)
    live = await live_attempt(hooks, LIVE, customer="cus_bob")
    # Give the live attempt the test attempt's reference: distinct scopes must not collide.
    await hooks.pool.execute("UPDATE payment_attempts SET client_reference = $1 WHERE attempt_id = $2",
                             test_attempt.client_reference, live.attempt_id)
    r = await hooks.deliver(succeeded_event(test_attempt, "pay_t"), account=TEST)
    assert r.json()["result"] == "applied"
    assert await state_of(hooks, test_attempt) == "Succeeded"
    assert await state_of(hooks, live) == "Unknown"


async def test_a_test_mode_event_can_never_touch_a_live_attempt(hooks: WebhookStack) -> None:
    live = await live_attempt(hooks, LIVE)
    body = succeeded_event(live)  # claims live in its payload...
    r = await hooks.deliver(body, account=TEST)  # ...but only the test secret verified it
    assert r.json()["result"] == "unmatched"
    assert await state_of(hooks, live) == "Unknown"


async def test_a_notification_verified_by_another_accounts_secret_never_matches_the_default_accounts_attempt(
    hooks: WebhookStack,
) -> None:
    """acct_other's event carries the default account's reference and recorded payment id; the
    account that counts is the one whose secret verified it, so it is unmatched there and escalated."""
    attempt = await live_attempt(hooks, TEST)
    await hooks.deliver(succeeded_event(attempt, "pay_1", status="processing", sequence=1), account=TEST)
    before = await get_attempt(hooks.pool, attempt.attempt_id)
    assert before.provider_payment_id == "pay_1" and before.state.value == "Started"
    events_before = await hooks.count("SELECT count(*) FROM payment_attempt_events WHERE attempt_id = $1",
                                      attempt.attempt_id)

    other = payment_object(payment_id="pay_1", reference=attempt.client_reference, account="acct_other")
    body = event(other, account="acct_other", sequence=2)
    r = await hooks.deliver(body, account=OTHER)
    assert r.status_code == 200 and r.json()["result"] == "unmatched"

    assert await get_attempt(hooks.pool, attempt.attempt_id) == before  # untouched
    assert await hooks.count("SELECT count(*) FROM payment_attempt_events WHERE attempt_id = $1",
                             attempt.attempt_id) == events_before
    [recorded] = await hooks.pool.fetch(
        "SELECT * FROM payment_attempt_events WHERE kind = 'notification' AND notification_key = $1",
        body["id"])
    assert recorded["provider_account"] == OTHER and recorded["attempt_id"] is None
    assert await open_escalations(hooks) == [f"notification:{OTHER}:{body['id']}:unmatched"]
    esc = await hooks.pool.fetchrow("SELECT * FROM payment_escalations WHERE reason = 'unmatched-payment'")
    assert esc["attempt_id"] is None and esc["detail"]["provider_account"] == OTHER
    assert await outbox_keys(hooks) == [f"escalation:{esc['escalation_id']}:initial"]  # no business effect


async def test_a_recorded_payment_id_matches_without_a_reference_or_with_a_wrong_one(
    hooks: WebhookStack,
) -> None:
    attempt = await live_attempt(hooks)
    processing = succeeded_event(attempt, "pay_1", status="processing", sequence=1)
    await hooks.deliver(processing)  # records pay_1 on the attempt
    for n, reference in enumerate((None, "ORD-wrong-a9"), start=2):
        body = succeeded_event(attempt, "pay_1", status="processing", sequence=n)
        body["data"]["object"]["reference"] = reference
        assert (await hooks.deliver(body)).json()["result"] == "applied"
    final = succeeded_event(attempt, "pay_1", sequence=9)
    final["data"]["object"]["reference"] = None
    assert (await hooks.deliver(final)).json()["result"] == "applied"
    assert await state_of(hooks, attempt) == "Succeeded"


async def test_a_different_provider_payment_id_raises_an_escalation_and_replaces_nothing(
    hooks: WebhookStack,
) -> None:
    attempt = await live_attempt(hooks)
    await hooks.deliver(succeeded_event(attempt, "pay_1", status="processing", sequence=1))
    other = succeeded_event(attempt, "pay_2", sequence=1)
    await hooks.deliver(other)
    row = await get_attempt(hooks.pool, attempt.attempt_id)
    assert row.provider_payment_id == "pay_1" and row.state == "Started"
    assert await open_escalations(hooks) == [
        f"attempt:{attempt.attempt_id}:provider-id-conflict:{other['id']}"]


async def test_identity_conflict_is_recorded_escalated_with_both_attempts_and_applied_to_neither(
    hooks: WebhookStack,
) -> None:
    a = await live_attempt(hooks)
    b = await live_attempt(hooks, customer="cus_bob")
    await hooks.deliver(succeeded_event(b, "pay_b", status="processing", sequence=1))  # b owns pay_b
    conflicting = succeeded_event(a, "pay_b", sequence=2)  # a's reference, b's payment id
    assert (await hooks.deliver(conflicting)).json()["result"] == "conflict"
    assert await state_of(hooks, a) == "Unknown" and await state_of(hooks, b) == "Started"
    row = await hooks.pool.fetchrow(
        "SELECT * FROM payment_escalations WHERE reason = 'identity-conflict'")
    assert row["escalation_key"] == f"notification:{TEST}:{conflicting['id']}:identity-conflict"
    assert row["attempt_id"] == a.attempt_id
    detail = row["detail"]
    assert detail["reference_attempt_id"] == str(a.attempt_id)
    assert detail["provider_payment_id_attempt_id"] == str(b.attempt_id)
    assert detail["client_reference"] == a.client_reference and detail["provider_payment_id"] == "pay_b"
    assert detail["notification_event_id"] is not None
    # Closing the alert without reconciliation changes neither attempt.
    before = [await get_attempt(hooks.pool, x.attempt_id) for x in (a, b)]
    await hooks.pool.execute(
        "UPDATE payment_escalations SET resolved_at = $1, next_reminder_at = NULL WHERE escalation_id = $2",
        hooks.clock.now(), row["escalation_id"])
    assert [await get_attempt(hooks.pool, x.attempt_id) for x in (a, b)] == before


async def test_an_unkeyed_unmatched_notification_without_identifiers_delivered_twice_alerts_once(
    hooks: WebhookStack,
) -> None:
    pay = payment_object(payment_id=" ", reference=None)
    body = event(pay, event_id=None, sequence=None)
    for _ in range(2):
        assert (await hooks.deliver(body)).json()["result"] == "unmatched"
    assert len(await notification_rows(hooks)) == 2
    assert await open_escalations(hooks) == [f"notification:{TEST}:unmatched-unidentified"]
    assert await hooks.count("SELECT count(*) FROM outbox_messages WHERE kind = 'operator-alert'") == 1


async def test_a_stored_unmatched_notification_attached_later_resolves_its_attempt_and_escalation(
    hooks: WebhookStack,
) -> None:
    attempt = await live_attempt(hooks)
    evt = succeeded_event(attempt, "pay_1")
    evt["data"]["object"]["reference"] = "ORD-typo-a1"  # the reference problem
    assert (await hooks.deliver(evt)).json()["result"] == "unmatched"
    [row] = await notification_rows(hooks)
    result = await attach_notification(hooks.pool, event_id=row["event_id"], attempt_id=attempt.attempt_id,
                                       operator="ops-1", reason="reference typo", now=hooks.clock.now(),
                                       reminder_interval=REMINDER_INTERVAL, recheck_after_s=60)
    assert result.attempt.state == "Succeeded"
    assert await open_escalations(hooks) == []
    assert f"attempt:{attempt.attempt_id}:order-confirmation" in await outbox_keys(hooks)
    history = await hooks.pool.fetch(
        "SELECT actor, detail FROM payment_attempt_events WHERE attempt_id = $1 AND kind = 'transition'"
        " ORDER BY event_id", attempt.attempt_id)
    assert history[-2]["detail"]["attached_notification"] == row["event_id"]
    assert history[-2]["actor"] == "operator-ops-1"


async def test_attaching_a_notification_records_one_operator_action_with_the_attempt_before_and_after(
    hooks: WebhookStack,
) -> None:
    attempt = await live_attempt(hooks)
    evt = succeeded_event(attempt, "pay_7")
    evt["data"]["object"]["reference"] = "ORD-typo-a1"
    assert (await hooks.deliver(evt)).json()["result"] == "unmatched"
    [row] = await notification_rows(hooks)
    [unmatched] = await hooks.pool.fetch(
        "SELECT escalation_id FROM payment_escalations WHERE resolved_at IS NULL")
    hooks.clock.advance(30)
    result = await attach_notification(hooks.pool, event_id=row["event_id"], attempt_id=attempt.attempt_id,
                                       operator="ops-1", reason="reference typo", now=hooks.clock.now(),
                                       reminder_interval=REMINDER_INTERVAL, recheck_after_s=60)
    [action] = await hooks.pool.fetch("SELECT * FROM operator_actions")
    assert action["action_id"] == result.recorded.action_id
    assert (action["action"], action["operator"], action["reason"]) == (
        "notification-attach", "ops-1", "reference typo")
    assert (action["attempt_id"], action["event_id"], action["escalation_id"]) == (
        attempt.attempt_id, row["event_id"], unmatched["escalation_id"])
    assert action["occurred_at"] == hooks.clock.now() and action["message_id"] is None
    assert action["state_before"] == {"state": "Unknown", "version": attempt.version,
                                      "provider_payment_id": None}
    assert action["state_after"] == {"state": "Succeeded", "version": result.attempt.version,
                                     "provider_payment_id": "pay_7"}
    assert result.attempt.version > attempt.version
    assert action["detail"]["resolved_escalations"] == [unmatched["escalation_id"]]


async def test_a_refused_attachment_records_no_operator_action(hooks: WebhookStack) -> None:
    attempt = await live_attempt(hooks)
    matched = succeeded_event(attempt, "pay_8", status="processing")
    assert (await hooks.deliver(matched)).json()["result"] == "applied"
    [row] = await notification_rows(hooks)
    with pytest.raises(AttachRefused, match="matched on arrival"):
        await attach_notification(hooks.pool, event_id=row["event_id"], attempt_id=attempt.attempt_id,
                                  operator="ops-1", reason="try", now=hooks.clock.now(),
                                  reminder_interval=REMINDER_INTERVAL, recheck_after_s=60)
    with pytest.raises(AttachRefused, match="no stored notification"):
        await attach_notification(hooks.pool, event_id=row["event_id"] + 100, attempt_id=attempt.attempt_id,
                                  operator="ops-1", reason="try", now=hooks.clock.now(),
                                  reminder_interval=REMINDER_INTERVAL, recheck_after_s=60)
    with pytest.raises(InvalidOperatorAction, match="reason"):
        await attach_notification(hooks.pool, event_id=row["event_id"], attempt_id=attempt.attempt_id,
                                  operator="ops-1", reason="", now=hooks.clock.now(),
                                  reminder_interval=REMINDER_INTERVAL, recheck_after_s=60)
    assert await hooks.count("SELECT count(*) FROM operator_actions") == 0


async def test_a_concurrent_writer_makes_the_notification_reapply_without_losing_its_record(
    hooks: WebhookStack,
) -> None:
    attempt = await live_attempt(hooks, unknown=False)  # Started
    conn = await hooks.pool.acquire()
    tx = conn.transaction()
    await tx.start()
    # Another writer (without the order lock) moves Started -> Unknown, uncommitted.
    await conn.execute("UPDATE payment_attempts SET state = 'Unknown', outcome_reason = 'x',"
                       " version = version + 1 WHERE attempt_id = $1", attempt.attempt_id)
    try:
        pending = asyncio.create_task(hooks.deliver(succeeded_event(attempt)))

        await eventually(lambda: someone_waits_on_a_lock(hooks.pool), what="the notification's write to wait")
        await tx.commit()
    finally:
        await hooks.pool.release(conn)
    assert (await pending).json()["result"] == "applied"
    assert await state_of(hooks, attempt) == "Succeeded"
    assert len(await notification_rows(hooks)) == 1


async def test_a_notification_event_stores_no_secret_and_its_canonical_fields(hooks: WebhookStack) -> None:
    attempt = await live_attempt(hooks)
    await hooks.deliver(succeeded_event(attempt))
    [row] = await notification_rows(hooks)
    text = orjson.dumps(row["detail"]).decode()
    assert "whsec_" not in text and "sk_test" not in text and "webhook-signature" not in text
    assert row["detail"]["canonical"]["payment_id"] == "pay_1"
    assert isinstance(row["attempt_id"], UUID)


async def test_a_payment_object_of_another_account_or_mode_inside_a_correct_envelope_resolves_nothing(
    hooks: WebhookStack,
) -> None:
    attempt = await live_attempt(hooks)
    for said in ({"livemode": True}, {"account": "acct_other"}):
        body = succeeded_event(attempt)  # the envelope names this account and mode
        body["data"]["object"].update(said)  # the payment it carries does not
        assert (await hooks.deliver(body)).json()["result"] == "mismatch"
    assert await state_of(hooks, attempt) == "Unknown"
    rows = await hooks.pool.fetch("SELECT reason, detail FROM payment_escalations WHERE attempt_id = $1"
                                  " ORDER BY escalation_id", attempt.attempt_id)
    assert [(r["reason"], r["detail"]["field"]) for r in rows] == [
        ("mismatch", "environment"), ("mismatch", "account")]
    assert f"attempt:{attempt.attempt_id}:order-confirmation" not in await outbox_keys(hooks)


async def test_a_byte_identical_replay_inside_the_signature_tolerance_is_a_duplicate_never_recorded_again(
    hooks: WebhookStack,
) -> None:
    attempt = await live_attempt(hooks)
    # Unkeyed (no event id, no sequence): only the replay window can tell a replay apart.
    body = orjson.dumps(succeeded_event(attempt, event_id=None, sequence=None))
    signed_at = int(hooks.clock.now().timestamp())
    first = await hooks.deliver(body, msg_id="msg_captured", timestamp=signed_at)
    replay = await hooks.deliver(body, msg_id="msg_captured", timestamp=signed_at)
    assert first.json()["result"] == "applied" and replay.json()["result"] == "duplicate"
    assert replay.status_code == 200
    assert len(await notification_rows(hooks)) == 1

    # A genuine redelivery is signed again with a new timestamp: a delivery of its own.
    again = await hooks.deliver(body, msg_id="msg_captured", timestamp=signed_at + 1)
    assert again.json()["result"] == "applied"
    assert len(await notification_rows(hooks)) == 2

    # Once no signature of it could verify any more, the window forgets the delivery.
    hooks.clock.advance(400)
    later = succeeded_event(attempt, event_id=None, sequence=None)
    await hooks.deliver(later, timestamp=int(hooks.clock.now().timestamp()))
    seen = await hooks.pool.fetch("SELECT webhook_timestamp FROM webhook_deliveries_seen")
    assert [r["webhook_timestamp"] for r in seen] == [int(hooks.clock.now().timestamp())]


async def test_an_escalation_the_intake_raises_reminds_on_the_configured_reminder_interval(
    hooks: WebhookStack,
) -> None:
    settings = dataclasses.replace(hooks.settings, reminder_interval_s=120)
    intake = create_webhooks_app(settings, clock=hooks.clock, pool=hooks.pool)
    unmatched = event(payment_object(payment_id="pay_nobody", reference="ORD-nobody-a1"))
    body = orjson.dumps(unmatched)
    signed_at = int(hooks.clock.now().timestamp())
    headers = signed_headers(sandbox_secrets()[TEST], unmatched["id"], signed_at, body)
    async with serve_asgi(intake) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        r = await http.post("/webhooks/cardco", content=body, headers=headers)
    assert r.json().get("result") == "unmatched", r.text
    [episode] = await hooks.pool.fetch("SELECT raised_at, next_reminder_at FROM payment_escalations")
    assert episode["next_reminder_at"] == episode["raised_at"] + timedelta(seconds=120)
