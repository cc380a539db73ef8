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

__all__ = ["ATTEMPTS", "Attempt", "get_attempt"]

ATTEMPTS = queries.load("payment_attempts")  # every statement on the attempts table


async def get_attempt(conn: asyncpg.Connection | asyncpg.Pool, attempt_id: UUID) -> Attempt:
    row = await ATTEMPTS.by_id.fetchrow(conn, attempt_id=attempt_id)
    if row is None:
        raise AttemptNotFound(f"attempt {attempt_id} not found")
    return Attempt.from_record(row)
