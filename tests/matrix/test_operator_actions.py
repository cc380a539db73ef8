"""Who did what: every operator action leaves one append-only ``operator_actions`` row.

Real PostgreSQL, fake clock. Each action is tried through its library entry
point; the record must commit with the action (same transaction), carry the
state before and after, and be absent when the action is refused.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import pytest

from paycore import escalations, outbox, outbox_admin
from paycore.attempts import Attempt
from paycore.clock import FakeClock
from paycore.domain import EscalationReason
from paycore.operator_actions import (
    ActionKind,
    InvalidOperatorAction,
    list_actions,
    record_action,
    validate_operator,
    validate_reason,
)

from .helpers import seed_account, started_attempt

Refused = asyncpg.exceptions.InsufficientPrivilegeError
REMINDER = timedelta(minutes=15)
ACK_INTERVAL = timedelta(hours=1)


@pytest.fixture
async def attempt(pool: asyncpg.Pool, clock: FakeClock) -> Attempt:
    account = await seed_account(pool, clock)
    return await started_attempt(pool, clock, account)


async def open_episode(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt | None, key: str = "deadline"
) -> int:
    async with pool.acquire() as conn, conn.transaction():
        eid = await escalations.raise_escalation(
            conn, key=f"test:{uuid.uuid4()}:{key}", reason=EscalationReason.DEADLINE, now=clock.now(),
            attempt_id=attempt.attempt_id if attempt else None, reminder_interval=REMINDER)
    assert eid is not None
    return eid


async def dead_lettered(pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt) -> tuple[int, int]:
    """A confirmation dead-lettered the way the relay does it: the row and its escalation, one transaction."""
    async with pool.acquire() as conn, conn.transaction():
        mid = await outbox.enqueue_effect(conn, attempt_id=attempt.attempt_id, effect="order-confirmation",
                                          payload={}, now=clock.now())
        assert mid is not None
        await conn.execute("UPDATE outbox_messages SET delivery_attempts = 10, last_error = 'broker down',"
                           " dead_lettered_at = $2 WHERE message_id = $1", mid, clock.now())
        eid = await escalations.raise_escalation(
            conn, key=escalations.dead_letter_key(mid), reason=EscalationReason.OUTBOX_DEAD_LETTER,
            attempt_id=attempt.attempt_id, now=clock.now(), reminder_interval=REMINDER)
    assert eid is not None
    return mid, eid


async def action_rows(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await pool.fetch("SELECT * FROM operator_actions ORDER BY action_id")
    return rows


def when(value: Any) -> datetime | None:
    """A timestamp as stored in a before/after object (ISO 8601 text), or None."""
    return None if value is None else datetime.fromisoformat(value)


# --------------------------------------------------------------------------- escalations


async def test_acknowledging_an_escalation_records_one_action_with_its_schedule_before_and_after(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    eid = await open_episode(pool, clock, attempt)
    raised_at = clock.now()
    clock.advance(120)
    recorded = await escalations.acknowledge(pool, eid, operator="alice", reason=None, now=clock.now(),
                                             reminder_interval=ACK_INTERVAL)
    [row] = await action_rows(pool)
    assert row["action_id"] == recorded.action_id
    assert (row["operator"], row["action"], row["reason"]) == ("alice", "escalation-acknowledge", None)
    assert row["occurred_at"] == clock.now()
    assert (row["escalation_id"], row["attempt_id"], row["message_id"], row["event_id"]) == (
        eid, attempt.attempt_id, None, None)
    before, after = row["state_before"], row["state_after"]
    assert set(before) == set(after) == {"acknowledged_at", "resolved_at", "next_reminder_at"}
    assert when(before["acknowledged_at"]) is None and when(before["resolved_at"]) is None
    assert when(before["next_reminder_at"]) == raised_at + REMINDER
    assert when(after["acknowledged_at"]) == clock.now() and when(after["resolved_at"]) is None
    assert when(after["next_reminder_at"]) == clock.now() + ACK_INTERVAL


async def test_resolving_an_escalation_records_one_action_with_its_reason(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    eid = await open_episode(pool, clock, attempt)
    clock.advance(60)
    recorded = await escalations.resolve(pool, eid, operator="bob", reason="refunded by hand",
                                         now=clock.now())
    [row] = await action_rows(pool)
    assert recorded.action is ActionKind.ESCALATION_RESOLVE and row["action"] == "escalation-resolve"
    assert (row["operator"], row["reason"], row["escalation_id"]) == ("bob", "refunded by hand", eid)
    assert when(row["state_before"]["resolved_at"]) is None
    assert when(row["state_before"]["next_reminder_at"]) is not None
    assert when(row["state_after"]["resolved_at"]) == clock.now()
    assert row["state_after"]["next_reminder_at"] is None
    episode = await pool.fetchrow("SELECT * FROM payment_escalations WHERE escalation_id = $1", eid)
    assert episode["resolved_at"] == clock.now()


async def test_a_refused_escalation_action_records_nothing(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    eid = await open_episode(pool, clock, attempt)
    await escalations.resolve(pool, eid, operator="bob", reason="done", now=clock.now())
    with pytest.raises(escalations.EscalationActionRefused, match="is not open"):
        await escalations.resolve(pool, eid, operator="bob", reason="again", now=clock.now())
    with pytest.raises(escalations.EscalationActionRefused, match="is not open"):
        await escalations.acknowledge(pool, eid, operator="bob", reason=None, now=clock.now(),
                                      reminder_interval=ACK_INTERVAL)
    with pytest.raises(escalations.EscalationActionRefused, match="does not exist"):
        await escalations.acknowledge(pool, eid + 100, operator="bob", reason=None, now=clock.now(),
                                      reminder_interval=ACK_INTERVAL)
    other = await open_episode(pool, clock, attempt, key="other")
    with pytest.raises(InvalidOperatorAction, match="reason"):
        await escalations.resolve(pool, other, operator="bob", reason="  ", now=clock.now())
    with pytest.raises(InvalidOperatorAction, match="operator"):
        await escalations.acknowledge(pool, other, operator="bob\x1b[2J", reason=None, now=clock.now(),
                                      reminder_interval=ACK_INTERVAL)
    assert [r["action"] for r in await action_rows(pool)] == ["escalation-resolve"]
    episode = await pool.fetchrow("SELECT * FROM payment_escalations WHERE escalation_id = $1", other)
    assert episode["resolved_at"] is None and episode["acknowledged_at"] is None


# --------------------------------------------------------------------------- outbox


async def test_requeueing_a_dead_letter_records_one_action_with_the_rows_dispatch_fields(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    mid, eid = await dead_lettered(pool, clock, attempt)
    dead_at = clock.now()
    clock.advance(300)
    done = await outbox_admin.requeue(pool, mid, operator="carol", reason="broker fixed", now=clock.now())
    [row] = await action_rows(pool)
    assert done.recorded.action_id == row["action_id"]
    assert (row["action"], row["operator"], row["reason"]) == ("outbox-requeue", "carol", "broker fixed")
    assert (row["message_id"], row["attempt_id"], row["escalation_id"]) == (mid, attempt.attempt_id, eid)
    before, after = row["state_before"], row["state_after"]
    assert when(before["dead_lettered_at"]) == dead_at and before["delivery_attempts"] == 10
    assert before["last_error"] == "broker down" and before["dispatched_at"] is None
    assert after["dead_lettered_at"] is None and after["delivery_attempts"] == 0
    assert when(after["next_attempt_at"]) == clock.now() and after["dispatched_at"] is None
    assert row["detail"]["resolved_escalations"] == [eid]


async def test_skipping_a_dead_letter_records_one_action_with_the_rows_dispatch_fields(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    mid, eid = await dead_lettered(pool, clock, attempt)
    clock.advance(300)
    await outbox_admin.skip(pool, mid, operator="carol", reason="sent by hand", now=clock.now())
    [row] = await action_rows(pool)
    assert (row["action"], row["message_id"], row["escalation_id"]) == ("outbox-skip", mid, eid)
    assert row["state_before"]["dispatched_at"] is None
    assert when(row["state_after"]["dispatched_at"]) == clock.now()
    assert row["state_after"]["dead_lettered_at"] is None
    assert "skipped by operator carol" in row["state_after"]["last_error"]


async def test_a_refused_outbox_action_records_nothing(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    async with pool.acquire() as conn, conn.transaction():
        pending = await outbox.enqueue_effect(conn, attempt_id=attempt.attempt_id, effect="refund-request",
                                              payload={}, now=clock.now())
    assert pending is not None
    with pytest.raises(outbox_admin.OutboxActionRefused, match="not dead-lettered"):
        await outbox_admin.skip(pool, pending, operator="carol", reason="x", now=clock.now())
    with pytest.raises(outbox_admin.OutboxActionRefused, match="does not exist"):
        await outbox_admin.requeue(pool, pending + 100, operator="carol", reason="x", now=clock.now())
    mid, _ = await dead_lettered(pool, clock, attempt)
    with pytest.raises(InvalidOperatorAction, match="reason"):
        await outbox_admin.requeue(pool, mid, operator="carol", reason="", now=clock.now())
    assert await action_rows(pool) == []
    assert (await pool.fetchrow("SELECT * FROM outbox_messages WHERE message_id = $1", mid))[
        "dead_lettered_at"] is not None


# --------------------------------------------------------------------------- the record itself


async def test_an_update_delete_or_truncate_of_operator_actions_is_refused_by_the_database(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    eid = await open_episode(pool, clock, attempt)
    await escalations.resolve(pool, eid, operator="dave", reason="done", now=clock.now())
    before = await action_rows(pool)
    with pytest.raises(Refused, match="operator_actions is append-only: UPDATE refused"):
        await pool.execute("UPDATE operator_actions SET operator = 'mallory'")
    with pytest.raises(Refused, match="operator_actions is append-only: DELETE refused"):
        await pool.execute("DELETE FROM operator_actions")
    with pytest.raises(Refused, match="operator_actions is append-only: TRUNCATE refused"):
        await pool.execute("TRUNCATE operator_actions")
    assert await action_rows(pool) == before


async def test_the_database_refuses_an_action_without_target_reason_or_a_known_kind(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    eid = await open_episode(pool, clock, attempt)
    insert = ("INSERT INTO operator_actions (occurred_at, operator, action, reason, escalation_id,"
              " message_id, state_before, state_after) VALUES ($1, $2, $3, $4, $5, $6, '{}', '{}')")
    now = clock.now()
    with pytest.raises(asyncpg.CheckViolationError, match="ck_operator_action_target"):
        await pool.execute(insert, now, "ed", "escalation-resolve", "why", None, None)
    with pytest.raises(asyncpg.CheckViolationError, match="ck_operator_action_reason"):
        await pool.execute(insert, now, "ed", "escalation-resolve", None, eid, None)
    with pytest.raises(asyncpg.CheckViolationError, match="ck_operator_action_kind"):
        await pool.execute(insert, now, "ed", "escalation-delete", "why", eid, None)
    with pytest.raises(asyncpg.CheckViolationError, match="ck_operator_action_operator"):
        await pool.execute(insert, now, "ed\nforged line", "escalation-resolve", "why", eid, None)
    with pytest.raises(asyncpg.CheckViolationError, match="ck_operator_action_target"):
        await pool.execute(insert, now, "ed", "outbox-skip", "why", eid, None)  # no message id
    await pool.execute(insert, now, "ed", "escalation-acknowledge", None, eid, None)  # no reason: fine
    assert len(await action_rows(pool)) == 1


async def test_record_action_runs_only_inside_the_callers_transaction_and_rolls_back_with_it(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    eid = await open_episode(pool, clock, attempt)
    kwargs: dict[str, Any] = dict(action=ActionKind.ESCALATION_RESOLVE, operator="fay", reason="why",
                                  now=clock.now(), before={}, after={}, escalation_id=eid)
    async with pool.acquire() as conn:
        with pytest.raises(InvalidOperatorAction, match="transaction"):
            await record_action(conn, **kwargs)
        with pytest.raises(RuntimeError, match="the action failed"):
            async with conn.transaction():
                await record_action(conn, **kwargs)
                raise RuntimeError("the action failed")
    assert await action_rows(pool) == []


async def test_an_action_whose_record_cannot_be_written_does_not_happen(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    """Same transaction: when the database refuses the record, the action rolls back with it."""
    eid = await open_episode(pool, clock, attempt)
    mid, dead_eid = await dead_lettered(pool, clock, attempt)
    await pool.execute("""
        CREATE FUNCTION refuse_records() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'record refused for this test'; END; $$;
        CREATE TRIGGER refuse_records BEFORE INSERT ON operator_actions
            FOR EACH ROW EXECUTE FUNCTION refuse_records();""")
    with pytest.raises(asyncpg.RaiseError, match="record refused"):
        await escalations.resolve(pool, eid, operator="gus", reason="done", now=clock.now())
    with pytest.raises(asyncpg.RaiseError, match="record refused"):
        await outbox_admin.requeue(pool, mid, operator="gus", reason="retry", now=clock.now())
    episodes = await pool.fetch("SELECT resolved_at FROM payment_escalations WHERE escalation_id = ANY($1)",
                                [eid, dead_eid])
    assert [e["resolved_at"] for e in episodes] == [None, None]
    row = await pool.fetchrow("SELECT * FROM outbox_messages WHERE message_id = $1", mid)
    assert row["dead_lettered_at"] is not None and row["delivery_attempts"] == 10


@pytest.mark.parametrize("name", ["", "   ", "a" * 65, "ops\n1", "ops\x00", "ops\u202e1", "ops\t1"])
def test_an_operator_name_must_be_a_short_printable_handle(name: str) -> None:
    with pytest.raises(InvalidOperatorAction, match="operator"):
        validate_operator(name)


def test_a_valid_operator_handle_is_kept_without_surrounding_space() -> None:
    assert validate_operator("  ops@example  ") == "ops@example"
    assert validate_operator("a" * 64) == "a" * 64
    assert validate_reason(ActionKind.ESCALATION_ACKNOWLEDGE, None) is None
    assert validate_reason(ActionKind.ESCALATION_ACKNOWLEDGE, " ") is None
    with pytest.raises(InvalidOperatorAction, match="reason"):
        validate_reason(ActionKind.OUTBOX_SKIP, None)
    with pytest.raises(InvalidOperatorAction, match="reason"):
        validate_reason(ActionKind.NOTIFICATION_ATTACH, "x" * 2001)


async def test_list_actions_filters_by_attempt_escalation_and_operator_newest_first(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    first = await open_episode(pool, clock, attempt)
    second = await open_episode(pool, clock, None, key="unrelated")
    clock.advance(1)
    await escalations.acknowledge(pool, first, operator="alice", reason=None, now=clock.now(),
                                  reminder_interval=ACK_INTERVAL)
    clock.advance(1)
    await escalations.acknowledge(pool, second, operator="bob", reason="looking", now=clock.now(),
                                  reminder_interval=ACK_INTERVAL)
    clock.advance(1)
    await escalations.resolve(pool, first, operator="bob", reason="fixed", now=clock.now())
    everything = await list_actions(pool)
    assert [(a.operator, a.action.value) for a in everything] == [
        ("bob", "escalation-resolve"), ("bob", "escalation-acknowledge"), ("alice", "escalation-acknowledge")]
    on_attempt = await list_actions(pool, attempt_id=attempt.attempt_id)
    assert [a.escalation_id for a in on_attempt] == [first, first]
    assert [a.action_id for a in await list_actions(pool, escalation_id=second)] == [everything[1].action_id]
    assert [a.escalation_id for a in await list_actions(pool, operator="bob")] == [first, second]
    by_bob_on_attempt = await list_actions(pool, operator="bob", attempt_id=attempt.attempt_id)
    assert [a.escalation_id for a in by_bob_on_attempt] == [first]
    assert len(await list_actions(pool, limit=1)) == 1
    assert await list_actions(pool, operator="nobody") == []
