"""Durable escalations: one open episode per reason key, alerted through the outbox.

Raising inserts ``payment_escalations`` with ``ON CONFLICT (escalation_key) WHERE
resolved_at IS NULL DO NOTHING``; only a newly opened episode queues an
operator alert, keyed by the episode (``escalation:<id>:initial``) rather than by
the reusable reason, so a condition that recurs after resolution alerts again.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg

from paycore import outbox

RAISE_ESCALATION = """
INSERT INTO payment_escalations (escalation_key, attempt_id, reason, detail, raised_at, next_reminder_at)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (escalation_key) WHERE resolved_at IS NULL DO NOTHING
RETURNING escalation_id
"""

RESOLVE_FOR_ATTEMPT = """
UPDATE payment_escalations
SET resolved_at = $2, next_reminder_at = NULL
WHERE attempt_id = $1 AND resolved_at IS NULL
RETURNING escalation_id
"""


async def raise_escalation(
    conn: asyncpg.Connection,
    *,
    key: str,
    reason: str,
    now: datetime,
    attempt_id: UUID | None = None,
    reminder_interval: timedelta,
    detail: dict[str, Any] | None = None,
) -> int | None:
    """Open an episode for ``key`` unless one is open; returns the new id or None.

    Must run inside the caller's transaction, after the attempt row is locked or
    conditionally written, so the alert commits with its cause. The first
    reminder falls due after ``reminder_interval``: every caller passes
    ``Settings.reminder_interval`` (``PAYCORE_REMINDER_INTERVAL_S``), whichever
    service raised the episode.
    """
    escalation_id: int | None = await conn.fetchval(
        RAISE_ESCALATION, key, attempt_id, reason, detail or {}, now, now + reminder_interval
    )
    if escalation_id is None:
        return None
    await outbox.enqueue(
        conn,
        dedup_key=f"escalation:{escalation_id}:initial",
        kind="operator-alert",
        payload={
            "escalation_id": escalation_id,
            "escalation_key": key,
            "reason": reason,
            "attempt_id": str(attempt_id) if attempt_id else None,
            "alert": "initial",
        },
        now=now,
        attempt_id=attempt_id,
        ordering=None,
    )
    return escalation_id


async def resolve_for_attempt(conn: asyncpg.Connection, attempt_id: UUID, now: datetime) -> list[int]:
    """Close every open episode of an attempt (its payment is settled); no reminder follows."""
    rows = await conn.fetch(RESOLVE_FOR_ATTEMPT, attempt_id, now)
    return [r["escalation_id"] for r in rows]


ACKNOWLEDGE = """
UPDATE payment_escalations SET acknowledged_at = $2, next_reminder_at = $3
WHERE escalation_id = $1 AND resolved_at IS NULL
RETURNING escalation_id
"""

RESOLVE = """
UPDATE payment_escalations SET resolved_at = $2, next_reminder_at = NULL
WHERE escalation_id = $1 AND resolved_at IS NULL
RETURNING escalation_id
"""


async def acknowledge(
    pool: asyncpg.Pool, escalation_id: int, now: datetime, reminder_interval: timedelta
) -> bool:
    """A person has seen it: its own transaction, resetting the reminder schedule; open episodes only."""
    return await pool.fetchval(ACKNOWLEDGE, escalation_id, now, now + reminder_interval) is not None


async def resolve(pool: asyncpg.Pool, escalation_id: int, now: datetime) -> bool:
    """Close an episode whose condition has ended; no reminder follows. Changes no attempt."""
    return await pool.fetchval(RESOLVE, escalation_id, now) is not None
