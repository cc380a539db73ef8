"""Closing a dead end as not charged (paycore.dead_ends): the refusals, the applied path, the
order payable again, and evidence that arrives later, against real PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from paycore import escalations
from paycore.attempts import Attempt, get_attempt, record_outcome
from paycore.clock import FakeClock
from paycore.config import ProviderAccountConfig
from paycore.dead_ends import CLOSED_REASON, CloseRefused, close_as_not_charged
from paycore.domain import AttemptState, EscalationReason, ProviderOutcome
from paycore.events import EventKind, append_event
from paycore.notifications import record_notification
from paycore.operator_actions import ActionKind, InvalidOperatorAction, list_actions
from paycore.orders import Order
from tests.matrix import test_notification_matrix as notification_matrix
from tests.matrix.helpers import (
    RECHECK_S,
    finish,
    live_attempt,
    seed_account,
    started_attempt,
    wait_until_blocked_by,
)
from tests.support.timings import REMINDER_INTERVAL
from tests.support.webhooks import WebhookStack


@pytest.fixture
async def account(pool: asyncpg.Pool, clock: FakeClock) -> ProviderAccountConfig:
    return await seed_account(pool, clock)


async def unknown_attempt(pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig,
                          from_send: bool = True, **outcome: Any) -> Attempt:
    """Sent, and the send's answer lost: Unknown."""
    started = await started_attempt(pool, clock, account)
    recorded = await record_outcome(pool, started.attempt_id,
                                    ProviderOutcome.unknown("provider.no-response.caller", **outcome),
                                    now=clock.now(), actor="endpoint", recheck_after_s=RECHECK_S,
                                    reminder_interval=REMINDER_INTERVAL, from_send=from_send)
    assert recorded.attempt.state is AttemptState.UNKNOWN
    return recorded.attempt


async def escalate(pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt, reason: str = "deadline") -> int:
    """The episode recovery opens when it gives up (writer.escalate_and_finish uses this key);
    ``reason`` as stored, qualified or not (``resend-not-safe:account-not-configured``)."""
    member, _, qualifier = reason.partition(":")
    async with pool.acquire() as conn, conn.transaction():
        escalation_id = await escalations.raise_escalation(
            conn, key=escalations.attempt_key(attempt.attempt_id, reason), reason=EscalationReason(member),
            qualifier=qualifier or None, attempt_id=attempt.attempt_id, now=clock.now(),
            reminder_interval=REMINDER_INTERVAL)
    assert escalation_id is not None
    return escalation_id


async def dead_end(pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig,
                   reason: str = "deadline") -> Attempt:
    attempt = await unknown_attempt(pool, clock, account)
    await escalate(pool, clock, attempt, reason)
    return attempt


async def close(pool: asyncpg.Pool | asyncpg.Connection, clock: FakeClock, attempt: Attempt,
                **kw: Any) -> Any:
    return await close_as_not_charged(
        pool, attempt_id=attempt.attempt_id, operator="ops-1", reason="customer asked; nothing at Cardco",
        checked_at_provider="Cardco dashboard: no payment with this reference or key", now=clock.now(), **kw)


async def nothing_recorded(pool: asyncpg.Pool, attempt: Attempt) -> bool:
    return not await list_actions(pool, attempt_id=attempt.attempt_id)


async def open_reasons(pool: asyncpg.Pool, attempt: Attempt) -> list[str]:
    rows = await pool.fetch("SELECT reason FROM payment_escalations"
                            " WHERE attempt_id = $1 AND resolved_at IS NULL ORDER BY escalation_id",
                            attempt.attempt_id)
    return [r["reason"] for r in rows]


# -- applied --------------------------------------------------------------------------------------

@pytest.mark.parametrize("reason", ["deadline", "resend-rejected", "resend-not-safe:account-not-configured"])
async def test_a_dead_end_is_closed_as_failed_with_history_escalations_resolved_and_the_action_recorded(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig, reason: str,
) -> None:
    attempt = await dead_end(pool, clock, account, reason)
    clock.advance(60)
    done = await close(pool, clock, attempt)

    after = await get_attempt(pool, attempt.attempt_id)
    assert after.state is AttemptState.FAILED and after.outcome_reason == CLOSED_REASON
    assert after.version == attempt.version + 1 and done.attempt == after
    [event] = await pool.fetch("SELECT * FROM payment_attempt_events"
                               " WHERE attempt_id = $1 AND kind = 'transition'"
                               " ORDER BY event_id DESC LIMIT 1", attempt.attempt_id)
    assert event["actor"] == "operator-ops-1" and event["occurred_at"] == clock.now()
    assert event["detail"]["from"] == "Unknown" and event["detail"]["to"] == "Failed"
    assert event["detail"]["operator_reason"] == "customer asked; nothing at Cardco"
    assert event["detail"]["checked_at_provider"] == "Cardco dashboard: no payment with this reference or key"
    assert await open_reasons(pool, attempt) == []
    assert len(done.resolved_escalations) == 1
    [action] = await list_actions(pool, attempt_id=attempt.attempt_id)
    assert action == done.recorded and action.action is ActionKind.ATTEMPT_CLOSE_NOT_CHARGED
    assert action.operator == "ops-1" and action.escalation_id == done.resolved_escalations[0]
    assert action.state_before == {"state": "Unknown", "version": attempt.version, "outcome_reason":
                                   "provider.no-response.caller", "provider_payment_id": None}
    assert action.state_after == {"state": "Failed", "version": attempt.version + 1,
                                  "outcome_reason": CLOSED_REASON, "provider_payment_id": None}
    assert action.detail["checked_at_provider"].startswith("Cardco dashboard")


async def test_closing_queues_the_same_outbox_rows_as_any_failed_outcome(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig,
) -> None:
    """record_outcome queues business effects for Succeeded only; a close queues none either."""
    declined = await unknown_attempt(pool, clock, account)
    await record_outcome(pool, declined.attempt_id, ProviderOutcome.failed("card_declined"), now=clock.now(),
                         actor="recovery", recheck_after_s=RECHECK_S, reminder_interval=REMINDER_INTERVAL,
                         from_send=False)
    closed = await dead_end(pool, clock, account)
    await close(pool, clock, closed)

    async def effects(a: Attempt) -> list[str]:
        rows = await pool.fetch("SELECT kind FROM outbox_messages"
                                " WHERE attempt_id = $1 AND kind <> 'operator-alert'"
                                " ORDER BY message_id", a.attempt_id)
        return [r["kind"] for r in rows]

    assert await effects(closed) == await effects(declined) == []


async def test_after_the_close_the_order_is_payable_again_and_checkout_records_the_next_attempt(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig,
) -> None:
    attempt = await dead_end(pool, clock, account)
    order = await pool.fetchrow("SELECT * FROM orders WHERE order_id = $1", attempt.order_id)
    same = await live_attempt(pool, clock, account, Order.from_record(order))
    assert same.attempt_id == attempt.attempt_id  # while Unknown, checkout reports the live attempt

    await close(pool, clock, attempt)
    following = await live_attempt(pool, clock, account, Order.from_record(order))
    assert following.attempt_id != attempt.attempt_id
    assert following.attempt_number == attempt.attempt_number + 1
    assert following.state is AttemptState.NOT_STARTED
    assert following.idempotency_key != attempt.idempotency_key


async def test_evidence_that_arrives_after_the_close_is_a_contradiction_and_changes_nothing(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig,
) -> None:
    attempt = await dead_end(pool, clock, account)
    closed = (await close(pool, clock, attempt)).attempt
    clock.advance(3600)
    late = await record_outcome(pool, attempt.attempt_id,
                                ProviderOutcome.succeeded("pay_late", attempt.amount_minor, attempt.currency),
                                now=clock.now(), actor="notification-handler", recheck_after_s=RECHECK_S,
                                reminder_interval=REMINDER_INTERVAL, from_send=False, evidence_key="evt_late")
    assert late.attempt == closed == await get_attempt(pool, attempt.attempt_id)
    keys = await pool.fetch(
        "SELECT escalation_key, detail FROM payment_escalations WHERE resolved_at IS NULL")
    assert [k["escalation_key"] for k in keys] == [f"attempt:{attempt.attempt_id}:contradiction:evt_late"]
    assert keys[0]["detail"]["recorded"] == "Failed" and keys[0]["detail"]["reported"] == "Succeeded"
    order = await pool.fetchrow("SELECT status FROM orders WHERE order_id = $1", attempt.order_id)
    assert order["status"] == "Open"  # a person decides (refund or re-confirm); nothing is automatic


async def test_the_close_runs_inside_a_callers_transaction_on_a_connection(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig,
) -> None:
    attempt = await dead_end(pool, clock, account)
    async with pool.acquire() as conn:
        done = await close(conn, clock, attempt)
    assert done.attempt.state is AttemptState.FAILED


# -- refused --------------------------------------------------------------------------------------

async def test_a_started_attempt_is_refused_even_when_escalated(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig,
) -> None:
    attempt = await started_attempt(pool, clock, account)
    await escalate(pool, clock, attempt)
    with pytest.raises(CloseRefused, match="is Started; only an Unknown attempt"):
        await close(pool, clock, attempt)
    assert await get_attempt(pool, attempt.attempt_id) == attempt
    assert await nothing_recorded(pool, attempt)


async def test_a_final_attempt_is_refused(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig,
) -> None:
    attempt = await dead_end(pool, clock, account)
    await close(pool, clock, attempt)
    with pytest.raises(CloseRefused, match="is Failed"):
        await close(pool, clock, attempt)
    assert len(await list_actions(pool, attempt_id=attempt.attempt_id)) == 1


async def test_an_unknown_attempt_without_an_open_dead_end_escalation_is_refused(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig,
) -> None:
    attempt = await unknown_attempt(pool, clock, account)
    with pytest.raises(CloseRefused, match="no open dead-end escalation"):
        await close(pool, clock, attempt)
    resolved = await escalate(pool, clock, attempt)  # an episode that is over does not count
    await escalations.resolve(pool, resolved, operator="ops-2", reason="looked", now=clock.now())
    other = await escalate(pool, clock, attempt, "unmatched-payment")  # nor another reason
    assert other
    with pytest.raises(CloseRefused, match="no open dead-end escalation"):
        await close(pool, clock, attempt)
    assert (await get_attempt(pool, attempt.attempt_id)).state is AttemptState.UNKNOWN
    assert await nothing_recorded(pool, attempt) is False  # only the resolve above
    assert [a.action for a in await list_actions(pool, attempt_id=attempt.attempt_id)] == [
        ActionKind.ESCALATION_RESOLVE]


Evidence = Callable[[asyncpg.Pool, FakeClock, Attempt], Awaitable[None]]


async def matched_notification(pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt) -> None:
    # e.g. one whose amount did not match: recorded on the attempt, escalated, applied to nothing
    async with pool.acquire() as conn, conn.transaction():
        await record_notification(conn, provider_account=attempt.provider_account, key="evt_1",
                                  attempt_id=attempt.attempt_id, now=clock.now(),
                                  detail={"reference": attempt.client_reference, "status": "succeeded"})


async def conflicting_notification(pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt) -> None:
    # an identity conflict stores the notification unmatched; its reference still names the attempt
    async with pool.acquire() as conn, conn.transaction():
        await record_notification(conn, provider_account=attempt.provider_account, key="evt_2",
                                  attempt_id=None, now=clock.now(),
                                  detail={"reference": attempt.client_reference,
                                          "provider_payment_id": "pay_other"})


async def lookup_found(pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt) -> None:
    async with pool.acquire() as conn:
        await append_event(conn, attempt_id=attempt.attempt_id, kind=EventKind.LOOKUP, actor="recovery-1",
                           now=clock.now(), detail={"by": "reference", "result": "found", "reason": None,
                                                    "payments": [{"provider_payment_id": "pay_9"}]})


async def send_answer_with_a_payment(pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt) -> None:
    async with pool.acquire() as conn:
        await append_event(conn, attempt_id=attempt.attempt_id, kind=EventKind.SEND_RESULT,
                           actor="recovery-1", now=clock.now(),
                           detail={"outcome": "unknown", "provider_payment_id": "pay_3",
                                   "provider_status": None})


async def mismatch_escalation(pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt) -> None:
    await escalate(pool, clock, attempt, "mismatch")


@pytest.mark.parametrize("evidence", [matched_notification, conflicting_notification, lookup_found,
                                      send_answer_with_a_payment, mismatch_escalation])
async def test_any_evidence_of_a_payment_refuses_the_close(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig, evidence: Evidence,
) -> None:
    attempt = await dead_end(pool, clock, account)
    await evidence(pool, clock, attempt)
    with pytest.raises(CloseRefused, match="has evidence of a payment"):
        await close(pool, clock, attempt)
    assert await get_attempt(pool, attempt.attempt_id) == attempt
    assert "deadline" in await open_reasons(pool, attempt)
    assert await nothing_recorded(pool, attempt)


async def test_a_provider_payment_id_on_the_attempt_refuses_the_close(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig,
) -> None:
    # An answer that named the payment but not its outcome (Unknown, with the provider's id). No
    # send_result event here: the id on the attempt is enough on its own.
    attempt = await unknown_attempt(pool, clock, account, from_send=False, provider_payment_id="pay_seen")
    assert attempt.provider_payment_id == "pay_seen"
    await escalate(pool, clock, attempt)
    with pytest.raises(CloseRefused, match="provider payment id pay_seen"):
        await close(pool, clock, attempt)
    assert await get_attempt(pool, attempt.attempt_id) == attempt
    assert await nothing_recorded(pool, attempt)


async def test_a_write_between_the_read_and_the_update_refuses_the_close_and_records_nothing(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig,
) -> None:
    attempt = await dead_end(pool, clock, account)
    async with pool.acquire() as writer:
        tx = writer.transaction()
        await tx.start()
        await writer.execute("SELECT 1 FROM orders WHERE order_id = $1 FOR UPDATE", attempt.order_id)
        task = asyncio.create_task(close(pool, clock, attempt))
        # it read version N and waits for the order lock
        await wait_until_blocked_by(pool, writer.get_server_pid(), task)
        # Another writer's conditional write that leaves the attempt Unknown (its version moves).
        await writer.execute("UPDATE payment_attempts SET version = version + 1, next_check_at = $2"
                             " WHERE attempt_id = $1", attempt.attempt_id, clock.now())
        await tx.commit()
        with pytest.raises(CloseRefused, match="changed underneath"):
            await finish(task)
    after = await get_attempt(pool, attempt.attempt_id)
    assert after.state is AttemptState.UNKNOWN and after.version == attempt.version + 1
    assert "deadline" in await open_reasons(pool, attempt)
    assert await nothing_recorded(pool, attempt)


async def test_a_version_the_operator_did_not_see_is_refused(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig,
) -> None:
    attempt = await dead_end(pool, clock, account)
    with pytest.raises(CloseRefused, match="changed since it was shown"):
        await close(pool, clock, attempt, expected_version=attempt.version - 1)
    assert await nothing_recorded(pool, attempt)
    done = await close(pool, clock, attempt, expected_version=attempt.version)
    assert done.attempt.state is AttemptState.FAILED


@pytest.mark.parametrize(("field", "value", "message"), [
    ("operator", " ", "operator name is required"),
    ("reason", "", "needs a reason"),
    ("checked_at_provider", "  ", "what was checked at the provider"),
])
async def test_an_operator_reason_and_a_note_of_what_was_checked_are_required(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig,
    field: str, value: str, message: str,
) -> None:
    attempt = await dead_end(pool, clock, account)
    kw = {"operator": "ops-1", "reason": "checked", "checked_at_provider": "dashboard", field: value}
    with pytest.raises(InvalidOperatorAction, match=message):
        await close_as_not_charged(pool, attempt_id=attempt.attempt_id, now=clock.now(), **kw)
    assert await nothing_recorded(pool, attempt)


# -- end to end: the real checkout and webhook intake ---------------------------------------------

async def test_after_a_close_the_customer_pays_again_and_a_late_webhook_raises_a_contradiction(
    hooks: WebhookStack,
) -> None:
    first = await notification_matrix.live_attempt(hooks)  # Unknown: the answer was lost
    await escalate(hooks.pool, hooks.clock, first)
    shop = hooks.shop.as_customer("cus_alice")
    pending = await shop.pay(first.order_id)
    assert pending.status_code == 202  # while Unknown, checkout only reports the live attempt

    await close(hooks.pool, hooks.clock, first)
    paid = await shop.pay(first.order_id)
    assert paid.status_code == 200 and paid.json()["state"] == "Succeeded"
    second = await hooks.pool.fetchrow(
        "SELECT * FROM payment_attempts WHERE order_id = $1 AND attempt_number = 2", first.order_id)
    assert second["state"] == "Succeeded"

    # The first attempt was charged after all: its webhook arrives late and wins nothing.
    late = notification_matrix.succeeded_event(first, "pay_first")
    assert (await hooks.deliver(late)).status_code == 200
    after = await get_attempt(hooks.pool, first.attempt_id)
    assert after.state is AttemptState.FAILED and after.provider_payment_id is None
    rows = await hooks.pool.fetch("SELECT escalation_key FROM payment_escalations WHERE resolved_at IS NULL")
    assert [r["escalation_key"] for r in rows] == [f"attempt:{first.attempt_id}:contradiction:{late['id']}"]
