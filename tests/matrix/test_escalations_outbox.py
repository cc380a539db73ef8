"""Durable escalations and the transactional outbox: one alert per open episode, one row per effect."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import asyncpg
import pytest

from paycore import escalations, outbox
from paycore.attempts import Attempt
from paycore.clock import FakeClock
from paycore.domain import EscalationReason
from tests.support.timings import REMINDER_INTERVAL

from .helpers import finish, seed_account, started_attempt, wait_until_blocked_by


@pytest.fixture
async def attempt(pool: asyncpg.Pool, clock: FakeClock) -> Attempt:
    account = await seed_account(pool, clock)
    return await started_attempt(pool, clock, account)


async def _raise(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt,
    reason: EscalationReason = EscalationReason.DEADLINE,
) -> int | None:
    async with pool.acquire() as conn, conn.transaction():
        return await escalations.raise_escalation(
            conn, key=f"attempt:{attempt.attempt_id}:{reason}", reason=reason,
            attempt_id=attempt.attempt_id, now=clock.now(), detail={"why": reason.value},
            reminder_interval=REMINDER_INTERVAL)


async def _alerts(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await pool.fetch(
        "SELECT * FROM outbox_messages WHERE kind = 'operator-alert' ORDER BY message_id")
    return rows


async def _episodes(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await pool.fetch("SELECT * FROM payment_escalations ORDER BY escalation_id")
    return rows


async def test_raising_the_same_escalation_twice_opens_one_episode_and_one_initial_alert(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    first = await _raise(pool, clock, attempt)
    clock.advance(60)
    second = await _raise(pool, clock, attempt)
    assert first is not None and second is None

    [episode] = await _episodes(pool)
    assert episode["escalation_id"] == first
    assert episode["escalation_key"] == f"attempt:{attempt.attempt_id}:deadline"
    assert episode["raised_at"] == clock.now() - timedelta(seconds=60)
    assert episode["reminder_count"] == 0
    assert episode["next_reminder_at"] == episode["raised_at"] + REMINDER_INTERVAL
    assert episode["resolved_at"] is None and episode["acknowledged_at"] is None

    [alert] = await _alerts(pool)
    assert alert["dedup_key"] == f"escalation:{first}:initial"
    assert alert["ordering_key"] is None  # alerts never wait behind the attempt's business rows
    assert alert["attempt_id"] == attempt.attempt_id  # traceability only
    assert alert["payload"] == {
        "dedup_key": f"escalation:{first}:initial", "kind": "operator-alert", "schema_version": 1,
        "escalation_id": first,
        "escalation_key": episode["escalation_key"], "reason": "deadline",
        "attempt_id": str(attempt.attempt_id), "alert": "initial",
        "provider_account": attempt.provider_account,  # for incident grouping by (account, reason)
    }


async def test_two_workers_raising_the_same_escalation_at_once_alert_once(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    key = f"attempt:{attempt.attempt_id}:deadline"
    async with pool.acquire() as first:
        tx = first.transaction()
        await tx.start()
        first_id = await escalations.raise_escalation(first, key=key, reason=EscalationReason.DEADLINE,
                                                      attempt_id=attempt.attempt_id, now=clock.now(),
                                                      reminder_interval=REMINDER_INTERVAL)
        second = asyncio.create_task(_raise(pool, clock, attempt))
        try:
            await wait_until_blocked_by(pool, first.get_server_pid(), second)
        finally:
            await tx.commit()
    assert await finish(second) is None
    assert [e["escalation_id"] for e in await _episodes(pool)] == [first_id]
    assert [a["dedup_key"] for a in await _alerts(pool)] == [f"escalation:{first_id}:initial"]


async def test_a_resolved_escalation_that_recurs_opens_a_new_episode_with_its_own_alert(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    first = await _raise(pool, clock, attempt)
    clock.advance(60)
    async with pool.acquire() as conn, conn.transaction():
        assert await escalations.resolve_for_attempt(conn, attempt.attempt_id, clock.now()) == [first]
    clock.advance(60)
    second = await _raise(pool, clock, attempt)
    assert first is not None and second is not None and second != first

    old, new = await _episodes(pool)
    assert old["resolved_at"] == clock.now() - timedelta(seconds=60) and old["next_reminder_at"] is None
    assert new["escalation_key"] == old["escalation_key"] and new["resolved_at"] is None
    assert [a["dedup_key"] for a in await _alerts(pool)] == [
        f"escalation:{first}:initial", f"escalation:{second}:initial"]


async def test_a_different_reason_for_the_same_attempt_opens_its_own_episode(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    deadline = await _raise(pool, clock, attempt, EscalationReason.DEADLINE)
    expired = await _raise(pool, clock, attempt, EscalationReason.RESEND_NOT_SAFE)
    assert deadline is not None and expired is not None and deadline != expired
    assert len(await _alerts(pool)) == 2


async def test_enqueueing_the_same_dedup_key_twice_queues_one_row(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    key = outbox.effect_key(attempt.attempt_id, "order-confirmation")
    async with pool.acquire() as conn, conn.transaction():
        first = await outbox.enqueue_effect(conn, attempt_id=attempt.attempt_id, effect="order-confirmation",
                                            payload={"order_id": attempt.order_id}, now=clock.now())
    clock.advance(5)
    async with pool.acquire() as conn, conn.transaction():
        again = await outbox.enqueue(
            conn, dedup_key=key, kind="order-confirmation", payload={"order_id": "changed"},
            now=clock.now(), attempt_id=attempt.attempt_id, ordering=outbox.ordering_key(attempt.attempt_id))
    assert first is not None and again is None
    [row] = await pool.fetch("SELECT * FROM outbox_messages")
    assert row["message_id"] == first
    assert row["dedup_key"] == key == f"attempt:{attempt.attempt_id}:order-confirmation"
    assert row["ordering_key"] == f"attempt:{attempt.attempt_id}"
    assert row["payload"] == {"dedup_key": key, "kind": "order-confirmation", "schema_version": 1,
                              "attempt_id": str(attempt.attempt_id), "order_id": attempt.order_id}
    assert row["created_at"] == clock.now() - timedelta(seconds=5)
    assert (row["delivery_attempts"], row["dispatched_at"], row["dead_lettered_at"]) == (0, None, None)
