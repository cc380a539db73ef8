"""An operation's writes (issue 29): start and apply, each one conditional statement with its history.

Real PostgreSQL, nothing mocked: the write moves the row and appends exactly one event naming the
operation; a write decided on a stale version (or state) writes nothing at all.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import asyncpg
import pytest

from paycore import operations
from paycore.clock import FakeClock
from paycore.config import ProviderAccountConfig
from paycore.domain import OperationKind, OperationState, decide_operation_outcome
from paycore.operations import Operation
from paycore.providers.base import OperationEnding, OperationOutcome

from .helpers import attempt_values, insert_row, new_order, operation_values, seed_account

S = OperationState
HOUR = timedelta(hours=1)


@pytest.fixture
async def account(pool: asyncpg.Pool, clock: FakeClock) -> ProviderAccountConfig:
    return await seed_account(pool, clock, retention_s=86_400, margin_s=7_200)


async def operation(pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig,
                    state: str = "NotStarted") -> Operation:
    order = await new_order(pool, clock, amount=5000)
    paid = await insert_row(pool, "payment_attempts", attempt_values(
        order, account, clock.now(), state="Succeeded", provider_payment_id="pay_" + uuid.uuid4().hex[:8],
        provider_status="succeeded"))
    row = await insert_row(pool, "payment_operations", operation_values(paid, clock.now(), state=state))
    return Operation.from_record(row)


async def events(pool: asyncpg.Pool, op: Operation) -> list[tuple[str, str | None]]:
    rows = await pool.fetch("SELECT kind, detail->>'operation_id' AS named FROM payment_attempt_events "
                            "WHERE attempt_id = $1 AND operation_id = $2 ORDER BY event_id",
                            op.attempt_id, op.operation_id)
    return [(r["kind"], r["named"]) for r in rows]


async def test_start_moves_a_not_started_operation_with_one_send_intent(
        pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig) -> None:
    op = await operation(pool, clock, account)
    now, due = clock.now(), clock.now() + timedelta(seconds=30)
    async with pool.acquire() as conn:
        started = await operations.start(conn, op, now=now, next_check_at=due, actor="test")
    assert started is not None and (started.state, started.version, started.next_check_at) == (
        S.STARTED, op.version + 1, due)
    row = await pool.fetchrow("SELECT first_sent_at, escalation_deadline FROM payment_operations "
                              "WHERE operation_id = $1", op.operation_id)
    assert (row["first_sent_at"], row["escalation_deadline"]) == (now, now + timedelta(hours=22))
    assert await events(pool, op) == [("send_intent", str(op.operation_id))]


async def test_a_stale_start_writes_nothing(pool: asyncpg.Pool, clock: FakeClock,
                                            account: ProviderAccountConfig) -> None:
    op = await operation(pool, clock, account)
    async with pool.acquire() as conn:
        now = clock.now()
        assert await operations.start(conn, op, now=now, next_check_at=now, actor="a") is not None
        # The same read again: its version is gone.
        assert await operations.start(conn, op, now=now, next_check_at=now, actor="b") is None
    assert await events(pool, op) == [("send_intent", str(op.operation_id))]


async def started(pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig) -> Operation:
    op = await operation(pool, clock, account)
    async with pool.acquire() as conn:
        moved = await operations.start(conn, op, now=clock.now(), next_check_at=clock.now(), actor="test")
    assert moved is not None
    return moved


def succeeded(kind: OperationKind) -> OperationOutcome:
    return OperationOutcome(kind, OperationEnding.SUCCEEDED, reason="ok", provider_status="succeeded",
                            provider_operation_id="re_" + uuid.uuid4().hex[:8])


async def test_apply_moves_the_row_and_appends_exactly_one_transition(
        pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig) -> None:
    op = await started(pool, clock, account)
    outcome = succeeded(op.kind)
    decision = decide_operation_outcome(op.kind, op.state, op.version, outcome,
                                        provider_status=op.provider_status, now=clock.now(),
                                        recheck_after_s=60)
    async with pool.acquire() as conn:
        done = await operations.apply(conn, op, decision, clock.now(), actor="test", reminder_interval=HOUR)
    assert done is not None and (done.state, done.version) == (S.SUCCEEDED, op.version + 1)
    row = await pool.fetchrow("SELECT provider_status, provider_operation_id FROM payment_operations "
                              "WHERE operation_id = $1", op.operation_id)
    recorded = (row["provider_status"], row["provider_operation_id"])
    assert recorded == ("succeeded", outcome.provider_operation_id)
    assert await events(pool, op) == [("send_intent", str(op.operation_id)),
                                      ("transition", str(op.operation_id))]


async def test_a_stale_version_writes_nothing(pool: asyncpg.Pool, clock: FakeClock,
                                              account: ProviderAccountConfig) -> None:
    op = await started(pool, clock, account)
    first = decide_operation_outcome(op.kind, op.state, op.version, OperationOutcome(
        op.kind, OperationEnding.PENDING, provider_status="pending"), provider_status=op.provider_status,
        now=clock.now(), recheck_after_s=60)
    async with pool.acquire() as conn:
        # Started -> Started
        assert await operations.apply(conn, op, first, clock.now(), reminder_interval=HOUR) is not None
        # Decided on the version before that write: the state still matches, the version does not.
        late = decide_operation_outcome(op.kind, op.state, op.version, succeeded(op.kind),
                                        provider_status=op.provider_status, now=clock.now(),
                                        recheck_after_s=60)
        assert await operations.apply(conn, op, late, clock.now(), reminder_interval=HOUR) is None
    row = await pool.fetchrow("SELECT state, version FROM payment_operations WHERE operation_id = $1",
                              op.operation_id)
    assert (row["state"], row["version"]) == ("Started", op.version + 1)
    assert [kind for kind, _ in await events(pool, op)] == ["send_intent", "transition"]
