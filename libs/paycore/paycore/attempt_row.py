"""Reading one ``payment_attempts`` row by id (the row's value is :class:`paycore.domain.Attempt`).

Kept apart from the writers (:mod:`paycore.attempts`, :mod:`paycore.leases`) so
both can read it without importing each other.
"""

from __future__ import annotations

from uuid import UUID

import asyncpg

from paycore import queries
from paycore.domain import Attempt
from paycore.errors import AttemptNotFound

__all__ = ["ATTEMPTS", "Attempt", "get_attempt", "succeeded_attempt_of_order"]

ATTEMPTS = queries.load("payment_attempts")  # every statement on the attempts table


async def get_attempt(conn: asyncpg.Connection | asyncpg.Pool, attempt_id: UUID) -> Attempt:
    row = await ATTEMPTS.by_id.fetchrow(conn, attempt_id=attempt_id)
    if row is None:
        raise AttemptNotFound(f"attempt {attempt_id} not found")
    return Attempt.from_record(row)


async def succeeded_attempt_of_order(conn: asyncpg.Connection | asyncpg.Pool,
                                     order_id: str) -> Attempt | None:
    """The order's payment, its Succeeded attempt (``None``: the order has none, or does not exist)."""
    row = await ATTEMPTS.succeeded_of_order.fetchrow(conn, order_id=order_id)
    return None if row is None else Attempt.from_record(row)
