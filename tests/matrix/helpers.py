"""Shared builders for the database-level matrix tests.

Everything here talks to the real PostgreSQL database the ``pool`` fixture
provides; nothing is mocked. Concurrency helpers wait on PostgreSQL's own view
of who blocks whom (``pg_blocking_pids``) with a deadline, never on a sleep.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar

import asyncpg
import orjson

from paycore import accounts, orders
from paycore.attempts import Attempt, StartResult, get_or_create_live_attempt, try_mark_started
from paycore.clock import FakeClock
from paycore.config import ProviderAccountConfig, Secret
from paycore.providers.cardco.version import API_VERSION as CARDCO_API_VERSION

T = TypeVar("T")

CURRENCY = "EUR"
ABANDONMENT_S = 60.0
RECHECK_S = 50.0
WAIT_DEADLINE_S = 10.0


def account_config(
    environment: str = "test", retention_s: int = 86_400, margin_s: int = 7_200
) -> ProviderAccountConfig:
    return ProviderAccountConfig(
        provider="cardco",
        account="acct_store",
        environment=environment,
        base_url="http://127.0.0.1:9",
        api_key=Secret(f"sk_{environment}_x"),
        webhook_secret=None,
        api_version=CARDCO_API_VERSION,
        key_retention_s=retention_s,
        escalation_margin_s=margin_s,
    )


async def seed_account(
    pool: asyncpg.Pool, clock: FakeClock, retention_s: int = 86_400, margin_s: int = 7_200,
    environment: str = "test",
) -> ProviderAccountConfig:
    """Register cardco:acct_store:<environment>, or change its registered settings as an operator does."""
    account = account_config(environment, retention_s, margin_s)
    async with pool.acquire() as conn, conn.transaction():
        await accounts.apply_provider_account(conn, account, clock.now())
    return account


async def new_order(
    pool: asyncpg.Pool, clock: FakeClock, customer: str = "cus_1", amount: int = 4999
) -> orders.Order:
    return await orders.create_order(pool, customer_id=customer, amount_minor=amount, currency=CURRENCY,
                                     now=clock.now())


def body(reference: str, amount: int, currency: str) -> str:
    """The contract body the attempt stores and every send transmits."""
    return orjson.dumps(
        {"amount": amount, "currency": currency, "payment_method": "tok_visa", "reference": reference},
        option=orjson.OPT_SORT_KEYS,
    ).decode()


async def live_attempt(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig, order: orders.Order
) -> Attempt:
    return await get_or_create_live_attempt(
        pool, order_id=order.order_id, customer_id=order.customer_id, account=account, build_body=body,
        now=clock.now(), abandonment_threshold_s=ABANDONMENT_S,
    )


async def start(pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt) -> tuple[StartResult, Attempt | None]:
    return await try_mark_started(
        pool, attempt, now=clock.now(),
        next_check_at=clock.now() + timedelta(seconds=RECHECK_S),
    )


async def started_attempt(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig, *,
    customer: str = "cus_1", amount: int = 4999,
) -> Attempt:
    """A new order's first attempt, moved NotStarted -> Started by the repository."""
    order = await new_order(pool, clock, customer=customer, amount=amount)
    attempt = await live_attempt(pool, clock, account, order)
    result, started = await start(pool, clock, attempt)
    assert result is StartResult.STARTED and started is not None
    return started


# --- raw rows -------------------------------------------------------------------------------------------


async def insert_row(conn: asyncpg.Connection | asyncpg.Pool, table: str,
                     values: Mapping[str, Any]) -> asyncpg.Record:
    """``INSERT INTO table (...) VALUES (...) RETURNING *`` with exactly these columns."""
    cols = list(values)
    placeholders = ", ".join(f"${i}" for i in range(1, len(cols) + 1))
    sql = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({placeholders}) RETURNING *"
    row = await conn.fetchrow(sql, *values.values())
    assert row is not None
    return row


def attempt_values(
    order: orders.Order, account: ProviderAccountConfig | str, now: datetime, *,
    state: str = "NotStarted", number: int = 1, sent: bool | None = None, **overrides: Any,
) -> dict[str, Any]:
    """A valid payment_attempts row for ``order``; ``sent`` adds the send timestamps.

    By default the send timestamps are present exactly when the state has crossed
    the send boundary (anything but NotStarted), so the row satisfies every CHECK.
    """
    provider_account = account if isinstance(account, str) else account.provider_account
    reference = f"{order.order_id}-a{number}"
    values: dict[str, Any] = {
        "attempt_id": uuid.uuid4(),
        "order_id": order.order_id,
        "customer_id": order.customer_id,
        "attempt_number": number,
        "provider_account": provider_account,
        "endpoint": "http://127.0.0.1:9/v1/payments",
        "api_version": "2026-11-01",
        "client_reference": reference,
        "idempotency_key": str(uuid.uuid4()),
        "request_body": body(reference, order.amount_minor, order.currency),
        "amount_minor": order.amount_minor,
        "currency": order.currency,
        "state": state,
        "created_at": now,
        "next_check_at": now + timedelta(seconds=ABANDONMENT_S),
    }
    if sent is None:
        sent = state != "NotStarted"
    if sent:
        values["first_sent_at"] = now
        values["escalation_deadline"] = now + timedelta(hours=22)
    values.update(overrides)
    return values


def operation_values(payment: asyncpg.Record, now: datetime, *, kind: str = "refund",
                     state: str = "NotStarted", sent: bool | None = None,
                     **overrides: Any) -> dict[str, Any]:
    """A valid payment_operations row; ``sent`` adds the send timestamps (by default exactly when
    the state has crossed the send boundary)."""
    reference = f"op-{uuid.uuid4().hex[:12]}"
    values: dict[str, Any] = {
        "operation_id": uuid.uuid4(),
        "attempt_id": payment["attempt_id"],
        "kind": kind,
        "requested_by": "backoffice:store",
        "provider_account": payment["provider_account"],
        "endpoint": "http://127.0.0.1:9/v1/refunds",
        "api_version": "2026-11-01",
        "client_reference": reference,
        "idempotency_key": str(uuid.uuid4()),
        "request_body": f'{{"reference":"{reference}"}}',
        "amount_minor": 1000,
        "currency": "EUR",
        "state": state,
        "created_at": now,
        "next_check_at": now + timedelta(seconds=60),
    }
    if sent is None:
        sent = state != "NotStarted"
    if sent:
        values["first_sent_at"] = now
        values["escalation_deadline"] = now + timedelta(hours=22)
    values.update(overrides)
    return values


async def event_count(conn: asyncpg.Connection | asyncpg.Pool, attempt_id: uuid.UUID, kind: str) -> int:
    n: int = await conn.fetchval(
        "SELECT count(*) FROM payment_attempt_events WHERE attempt_id = $1 AND kind = $2", attempt_id, kind
    )
    return n


# --- explicit ordering between two real transactions ---------------------------------------------------


async def wait_until_blocked_by(
    observer: asyncpg.Pool | asyncpg.Connection, blocker_pid: int, task: asyncio.Task[Any] | None = None,
    *, deadline_s: float = WAIT_DEADLINE_S, in_query: str | None = None,
) -> asyncpg.Record:
    """Poll until some backend waits on a lock held by ``blocker_pid``; return its activity row.

    With ``in_query``, only a backend whose current query contains it counts: the activity
    row's query text and the lock manager's view are read apart, so a backend just blocked
    can still show its previous statement for a moment (seen once on a loaded machine).
    Fails if ``task`` finishes first (it did not block where the test expected)
    or if nothing blocks before the deadline.
    """
    async with asyncio.timeout(deadline_s):
        while True:
            row = await observer.fetchrow(
                """
                SELECT a.pid, a.wait_event_type, a.wait_event, a.query,
                       (SELECT l.locktype FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted LIMIT 1)
                         AS locktype
                FROM pg_stat_activity a
                WHERE $1 = ANY (pg_blocking_pids(a.pid))
                """,
                blocker_pid,
            )
            if row is not None and (in_query is None or in_query in row["query"]):
                return row
            if task is not None and task.done():
                raise AssertionError(f"the operation finished without blocking: {task.result()!r}")
            await asyncio.sleep(0.005)  # poll interval only; the condition above is the synchronisation


async def finish(awaitable: Awaitable[T], deadline_s: float = WAIT_DEADLINE_S) -> T:
    """Await with a deadline, so a lost wake-up fails the test instead of hanging it."""
    async with asyncio.timeout(deadline_s):
        return await awaitable
