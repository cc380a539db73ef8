"""The attempt history is evidence: the database itself refuses to change or remove it."""

from __future__ import annotations

import asyncpg
import pytest

from paycore.attempts import Attempt
from paycore.clock import FakeClock
from paycore.events import EventKind, append_events, history

from .helpers import seed_account, started_attempt

Refused = asyncpg.exceptions.InsufficientPrivilegeError


@pytest.fixture
async def attempt_with_history(pool: asyncpg.Pool, clock: FakeClock) -> Attempt:
    account = await seed_account(pool, clock)
    attempt = await started_attempt(pool, clock, account)
    events = await history(pool, attempt.attempt_id)
    assert [e["kind"] for e in events] == ["transition", "send_intent", "transition"]
    return attempt


async def _snapshot(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await pool.fetch(
        "SELECT event_id, kind, actor, detail FROM payment_attempt_events ORDER BY event_id")
    return rows


async def test_an_update_of_an_attempt_event_is_refused_by_the_database(
    pool: asyncpg.Pool, attempt_with_history: Attempt
) -> None:
    before = await _snapshot(pool)
    with pytest.raises(Refused, match="append-only: UPDATE refused"):
        await pool.execute(
            "UPDATE payment_attempt_events SET actor = 'operator-x' WHERE kind = 'send_intent'")
    assert await _snapshot(pool) == before


async def test_a_delete_of_an_attempt_event_is_refused_by_the_database(
    pool: asyncpg.Pool, attempt_with_history: Attempt
) -> None:
    before = await _snapshot(pool)
    with pytest.raises(Refused, match="append-only: DELETE refused"):
        await pool.execute("DELETE FROM payment_attempt_events WHERE kind = 'send_intent'")
    assert await _snapshot(pool) == before


async def test_a_truncate_of_the_event_history_is_refused_by_the_database(
    pool: asyncpg.Pool, attempt_with_history: Attempt
) -> None:
    before = await _snapshot(pool)
    with pytest.raises(Refused, match="append-only: TRUNCATE refused"):
        await pool.execute("TRUNCATE payment_attempt_events")
    assert await _snapshot(pool) == before


async def test_appending_an_event_still_works(
    pool: asyncpg.Pool, clock: FakeClock, attempt_with_history: Attempt
) -> None:
    attempt = attempt_with_history
    event_id = await pool.fetchval(
        "INSERT INTO payment_attempt_events (attempt_id, occurred_at, kind, actor, detail) "
        "VALUES ($1, $2, 'lookup', 'recovery-1', $3) RETURNING event_id",
        attempt.attempt_id, clock.now(), {"status": "processing"})
    events = await history(pool, attempt.attempt_id)
    assert events[-1]["event_id"] == event_id
    assert events[-1]["detail"] == {"status": "processing"}
    assert len(events) == 4


async def test_several_events_appended_in_one_statement_keep_their_order_and_details(
    pool: asyncpg.Pool, clock: FakeClock, attempt_with_history: Attempt
) -> None:
    # One instant for all of them: only the event ids order them in the history, so the
    # one-statement insert must assign ids in the order given (many kinds, to catch a sort).
    attempt = attempt_with_history
    given = [(EventKind.SEND_RESULT, {"n": 1, "outcome": "unknown"}), (EventKind.LOOKUP, {"n": 2}),
             (EventKind.TRANSITION, {"n": 3, "to": "Unknown"}), (EventKind.LOOKUP, {"n": 4}),
             (EventKind.SEND_ABANDONED, {"n": 5})]
    async with pool.acquire() as conn:
        await append_events(conn, attempt_id=attempt.attempt_id, actor="recovery-1", now=clock.now(),
                            events=given)
        with pytest.raises(ValueError, match="notification"):
            await append_events(conn, attempt_id=attempt.attempt_id, actor="x", now=clock.now(),
                                events=[(EventKind.NOTIFICATION, {})])
    appended = (await history(pool, attempt.attempt_id))[3:]
    assert [(e["kind"], e["detail"], e["actor"]) for e in appended] == \
        [(kind.value, detail, "recovery-1") for kind, detail in given]
    assert len({e["occurred_at"] for e in appended}) == 1
