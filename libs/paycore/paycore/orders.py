"""Orders: the serialization point for payment attempts.

Every transaction that touches an order and its attempts locks the order row
first (``SELECT … FOR UPDATE``), then the attempt row. The SQL is in
``paycore/queries/orders.sql``.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import asyncpg

from paycore import queries
from paycore.attempt_row import ATTEMPTS
from paycore.domain import PAID_ORDER_STATUSES, OrderStatus
from paycore.errors import AttemptNotFound, NotFound, PaycoreError
from paycore.payment_methods import contains_card_number


class OrderNotFound(NotFound):
    """No such order for this customer (another customer's order is not found either)."""


class OrderNotPayable(PaycoreError):
    """The order is paid, cancelled or has a cancellation requested."""

    def __init__(self, order_id: str, why: str) -> None:
        super().__init__(f"order {order_id} is not payable: {why}")
        self.why = why


@dataclass(frozen=True)
class Order:
    order_id: str
    customer_id: str
    amount_minor: int
    currency: str
    status: OrderStatus
    cancel_requested_at: datetime | None
    created_at: datetime
    version: int
    provider_account: str | None = None  # the account it is paid on; None: the default one
    capture: str = "automatic"  # "manual": its payment is held (Authorized) for a capture later

    @classmethod
    def from_record(cls, r: asyncpg.Record) -> Order:
        values = dict(r)
        values["status"] = OrderStatus(values["status"])
        return cls(**values)

    @property
    def not_payable_reason(self) -> str | None:
        if self.status in PAID_ORDER_STATUSES:
            return "paid"
        if self.status in (OrderStatus.CANCELLED, OrderStatus.VOIDED) or self.cancel_requested_at is not None:
            return "cancelled"
        return None


ORDERS = queries.load("orders")  # every statement on the orders table


def new_order_id() -> str:
    """``ord_`` and 24 random hex digits, never holding what looks like a card number: the id is
    the provider's reference and description, which the adapters refuse to send with one (a
    bare hex id has a Luhn-valid run of 12+ digits about once in 500)."""
    while True:
        order_id = "ord_" + secrets.token_hex(12)
        if not contains_card_number(order_id):
            return order_id


async def create_order(
    conn: asyncpg.Connection | asyncpg.Pool, *, customer_id: str, amount_minor: int, currency: str,
    now: datetime, order_id: str | None = None, provider_account: str | None = None,
    capture: str = "automatic",
) -> Order:
    row = await ORDERS.insert.fetchrow(conn, order_id=order_id or new_order_id(), customer_id=customer_id,
                                       amount_minor=amount_minor, currency=currency, now=now,
                                       provider_account=provider_account, capture=capture)
    assert row is not None
    return Order.from_record(row)


async def order_account(conn: asyncpg.Connection | asyncpg.Pool, order_id: str) -> tuple[str | None, bool]:
    """The provider account the order names (``None``: the default one, or no such order), and
    whether its payment is held for a capture later (``capture = 'manual'``)."""
    row = await ORDERS.account_of.fetchrow(conn, order_id=order_id)
    if row is None:
        return None, False
    return row["provider_account"], row["capture"] == "manual"


async def get_order(conn: asyncpg.Connection | asyncpg.Pool, order_id: str, customer_id: str) -> Order:
    row = await ORDERS.by_id.fetchrow(conn, order_id=order_id)
    if row is None or row["customer_id"] != customer_id:
        raise OrderNotFound(order_id)
    return Order.from_record(row)


async def lock_order(conn: asyncpg.Connection, order_id: str, customer_id: str | None = None) -> Order:
    """Lock the order row (first in the lock order); must run inside a transaction."""
    row = await ORDERS.lock_order.fetchrow(conn, order_id=order_id)
    if row is None or (customer_id is not None and row["customer_id"] != customer_id):
        raise OrderNotFound(order_id)
    return Order.from_record(row)


async def lock_order_of_attempt(conn: asyncpg.Connection, attempt_id: UUID) -> Order:
    """Lock the order of ``attempt_id`` (first in the lock order); raises
    :class:`~paycore.errors.AttemptNotFound` if there is no such attempt."""
    row = await ORDERS.lock_order_of_attempt.fetchrow(conn, attempt_id=attempt_id)
    if row is None:
        raise AttemptNotFound(f"attempt {attempt_id} not found")
    return Order.from_record(row)


async def cancel_order(pool: asyncpg.Pool, order_id: str, customer_id: str, now: datetime) -> Order:
    """Cancel an order under its lock.

    With no live attempt the order is cancelled outright. With one, the
    cancellation is recorded as an intent: no new send intent can commit after
    it, but a dispatch an earlier intent authorised is left to reconciliation.
    """
    async with pool.acquire() as conn, conn.transaction():
        order = await lock_order(conn, order_id, customer_id)
        if order.status in PAID_ORDER_STATUSES:
            raise OrderNotPayable(order_id, "paid")
        if order.status in (OrderStatus.CANCELLED, OrderStatus.VOIDED):
            return order
        if await ATTEMPTS.order_has_live.fetchval(conn, order_id=order_id):
            row = await ORDERS.request_cancel.fetchrow(conn, order_id=order_id, now=now)
        else:
            row = await ORDERS.cancel_outright.fetchrow(conn, order_id=order_id, now=now)
        return Order.from_record(row) if row is not None else order


async def mark_paid(conn: asyncpg.Connection, order_id: str, *, held: bool = False) -> None:
    """The order is Paid, or Authorized when its payment is a hold (only an Open one changes); run
    in the transaction that records Succeeded."""
    await ORDERS.mark_paid.execute(conn, order_id=order_id, status="Authorized" if held else "Paid")


async def set_status_after_operation(conn: asyncpg.Connection, order_id: str, status: OrderStatus) -> None:
    """The status an operation gave the order (:func:`paycore.domain.order_status_after_operation`);
    run under the order's lock, in the operation's outcome transaction."""
    await ORDERS.set_status.execute(conn, order_id=order_id, status=status.value)


async def find_order(conn: asyncpg.Connection | asyncpg.Pool, order_id: str) -> Order | None:
    """The order, whoever its customer is (recovery's view; checkout uses :func:`get_order`)."""
    row = await ORDERS.by_id.fetchrow(conn, order_id=order_id)
    return Order.from_record(row) if row is not None else None
