"""Reading one ``payment_attempts`` row by id (the row's value is :class:`paycore.domain.Attempt`).

Kept apart from the writers (:mod:`paycore.attempts`, :mod:`paycore.leases`) so
both can read it without importing each other.
"""

from __future__ import annotations

from uuid import UUID

import asyncpg

from paycore.domain import Attempt
from paycore.errors import AttemptNotFound

__all__ = ["Attempt", "get_attempt"]

SELECT_ATTEMPT = "SELECT * FROM payment_attempts WHERE attempt_id = $1"


async def get_attempt(conn: asyncpg.Connection | asyncpg.Pool, attempt_id: UUID) -> Attempt:
    row = await conn.fetchrow(SELECT_ATTEMPT, attempt_id)
    if row is None:
        raise AttemptNotFound(f"attempt {attempt_id} not found")
    return Attempt.from_record(row)
