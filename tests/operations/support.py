"""What the after-payment tests share: a paid order on the real stack, and a sender for it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

import asyncpg

from paycore.clock import FakeClock
from paycore.config import Settings
from paycore.operation_sends import OperationSender
from paycore.providers.registry import for_accounts
from tests.sandbox.support import eventually
from tests.support.stack import Sandbox, Shop

__all__ = ["Stack", "effects_of", "eventually", "order_status", "paid_order", "refund_posts", "sender"]


class Stack(Protocol):
    """What these tests need of a running stack (checkout's, or the intake's with checkout)."""

    @property
    def sandbox(self) -> Sandbox: ...
    @property
    def shop(self) -> Shop: ...
    @property
    def clock(self) -> FakeClock: ...
    @property
    def pool(self) -> asyncpg.Pool: ...
    @property
    def settings(self) -> Settings: ...


async def paid_order(stack: Stack, amount_minor: int = 5000, *,
                     capture: str = "automatic") -> tuple[str, uuid.UUID]:
    """An order paid through checkout against the sandbox (held for a capture later when
    ``capture`` is ``manual``): its id and its Succeeded attempt's."""
    order_id = await stack.shop.create_order(amount_minor=amount_minor, capture=capture)
    r = await stack.shop.pay(order_id)
    assert r.status_code == 200 and r.json()["state"] == "Succeeded", r.text
    return order_id, uuid.UUID(r.json()["attempt_id"])


@asynccontextmanager
async def sender(stack: Stack) -> AsyncIterator[OperationSender]:
    client = for_accounts(stack.settings.accounts, stack.clock,
                          max_call_duration_s=stack.settings.budgets.max_call_duration_s)
    try:
        yield OperationSender(pool=stack.pool, client=client, clock=stack.clock, settings=stack.settings)
    finally:
        await client.aclose()


async def effects_of(pool: asyncpg.Pool, attempt_id: uuid.UUID) -> list[str]:
    """The attempt's business effects on the outbox, in the order the relay sends them."""
    rows = await pool.fetch("SELECT kind FROM outbox_messages WHERE attempt_id = $1 "
                            "AND ordering_key IS NOT NULL ORDER BY message_id", attempt_id)
    return [r["kind"] for r in rows]


async def order_status(pool: asyncpg.Pool, order_id: str) -> str:
    status: str = await pool.fetchval("SELECT status FROM orders WHERE order_id = $1", order_id)
    return status


async def refund_posts(stack: Stack) -> list[dict[str, Any]]:
    """Every refund POST the sandbox received, as received (headers, body), oldest first."""
    return [r for r in await stack.sandbox.requests() if r["path"] == "/v1/refunds" and r["method"] == "POST"]
