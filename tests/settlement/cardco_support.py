"""What the Cardco end-to-end settlement tests share: the stack (checkout and the sandbox as real
HTTP servers on a real database) with paycore's clock on the sandbox's day, payments and refunds
made through paycore's own flows, the sandbox's settlement controls, and the database read back.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx

from paycore.config import ProviderAccountConfig
from paycore.domain import OperationKind, OperationState
from paycore.operations import Operation
from paycore.providers.settlement_sources import settlement_source
from paycore.settlements import AccountRun, reconcile_account
from tests.operations.support import sender
from tests.sandbox.settlement_support import control, next_noon
from tests.support.stack import Stack

ACCOUNT = "cardco:acct_store:test"
REMIND = dt.timedelta(minutes=15)
GRACE = dt.timedelta(days=3)
# What one reconciliation writes; a rerun that records nothing leaves every count as it was.
@dataclass(frozen=True)
class Payment:
    order_id: str
    attempt_id: uuid.UUID
    provider_payment_id: str
    reference: str
    amount: int


def account_of(stack: Stack, name: str = ACCOUNT) -> ProviderAccountConfig:
    account = stack.settings.account(name)
    assert account is not None, name
    return account


async def sandbox_now(sandbox: httpx.AsyncClient) -> dt.datetime:
    now = (await sandbox.get("/_sandbox/clock")).json()["now"]
    return dt.datetime.fromtimestamp(now, dt.UTC)


async def sync_clock(stack: Stack) -> None:
    """paycore's fake clock to the sandbox's time (never backwards), so a payment's
    ``first_sent_at`` falls on the day of the batch it settles in."""
    ahead = (await sandbox_now(stack.sandbox.http) - stack.clock.now()).total_seconds()
    assert ahead >= 0, ahead
    stack.clock.advance(ahead)


async def settlement_day(stack: Stack) -> dt.date:
    """Both clocks at noon UTC of the next day: nothing the test does crosses midnight."""
    day = await next_noon(stack.sandbox.http)
    await sync_clock(stack)
    return day


async def next_day(stack: Stack, day: dt.date) -> dt.date:
    """Both clocks at noon of the day after ``day``."""
    sandbox = stack.sandbox.http
    target = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(12), dt.UTC)
    seconds = (target - await sandbox_now(sandbox)).total_seconds()
    response = await sandbox.post("/_sandbox/clock", json={"advance_seconds": seconds})
    assert response.status_code == 200, response.text
    await sync_clock(stack)
    return target.date()


async def pay(stack: Stack, amount: int = 5000, *, currency: str = "EUR") -> Payment:
    """An order paid through checkout against the sandbox: the ids paycore recorded."""
    order_id = await stack.shop.create_order(amount_minor=amount, currency=currency)
    r = await stack.shop.pay(order_id)
    assert r.status_code == 200 and r.json()["state"] == "Succeeded", r.text
    attempt_id = uuid.UUID(r.json()["attempt_id"])
    row = await stack.pool.fetchrow(
        "SELECT provider_payment_id, client_reference FROM payment_attempts WHERE attempt_id = $1",
        attempt_id)
    assert row is not None and row["provider_payment_id"], row
    return Payment(order_id, attempt_id, row["provider_payment_id"], row["client_reference"], amount)


async def refund(stack: Stack, payment: Payment, amount: int) -> Operation:
    """A refund through paycore's operation sender, Succeeded at the sandbox."""
    async with sender(stack) as s:
        op = await s.request(payment.attempt_id, OperationKind.REFUND, amount, requested_by="test")
    assert isinstance(op, Operation) and op.state is OperationState.SUCCEEDED, op
    assert op.provider_operation_id
    return op


async def plant(stack: Stack, day: dt.date, *lines: dict[str, Any]) -> None:
    await control(stack.sandbox.http, "lines", {"account": "acct_store", "date": day.isoformat(),
                                                "lines": list(lines)})


async def close(stack: Stack, day: dt.date) -> dict[str, Any]:
    [closed] = (await control(stack.sandbox.http, "close",
                              {"date": day.isoformat(), "account": "acct_store"}))["data"]
    assert closed["status"] == "paid"
    return dict(closed)


async def reconcile(stack: Stack, day_from: dt.date, day_to: dt.date | None = None, *,
                    now: dt.datetime | None = None, account: str = ACCOUNT) -> AccountRun:
    """``reconcile_account`` with the account's real Cardco reader, as the daily run does."""
    source = settlement_source(account_of(stack, account))
    return await reconcile_account(stack.pool, source, account, day_from, day_to or day_from,
                                   now=now or stack.clock.now(), grace=GRACE, reminder_interval=REMIND)


async def exceptions(pool: asyncpg.Pool) -> list[dict[str, Any]]:
    """Every exception with its escalation (reason, detail), in the order found."""
    rows = await pool.fetch(
        "SELECT e.exception_id, e.kind, e.batch_id, e.line_no, e.attempt_id, e.operation_id, e.detail, "
        "       e.escalation_id, p.reason, p.detail AS escalation_detail, p.resolved_at "
        "FROM settlement_exceptions e LEFT JOIN payment_escalations p USING (escalation_id) "
        "ORDER BY e.exception_id")
    return [dict(r) for r in rows]


async def batch_row(pool: asyncpg.Pool, provider_batch_id: str) -> dict[str, Any]:
    row = await pool.fetchrow("SELECT * FROM settlement_batches WHERE provider_batch_id = $1",
                              provider_batch_id)
    assert row is not None, provider_batch_id
    return dict(row)


async def reconciled_messages(pool: asyncpg.Pool) -> list[dict[str, Any]]:
    rows = await pool.fetch("SELECT payload FROM outbox_messages WHERE kind = 'settlement-reconciled' "
                            "ORDER BY message_id")
    return [dict(r["payload"]) for r in rows]


def batch_id_of(day: dt.date, account: str = "acct_store") -> str:
    return f"stl_{day:%Y%m%d}_{account}"
