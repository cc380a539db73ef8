"""The append-only attempt history (``payment_attempt_events``).

The database refuses UPDATE, DELETE and TRUNCATE on the table; this module only
ever inserts. Details never carry card data or secrets.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from paycore import queries


class EventKind(enum.StrEnum):
    SEND_INTENT = "send_intent"
    SEND_RESULT = "send_result"
    SEND_ABANDONED = "send_abandoned"
    NOTIFICATION = "notification"
    LOOKUP = "lookup"
    TRANSITION = "transition"


# Every statement on the history table, the notifications' too (paycore.notifications).
HISTORY = queries.load("payment_attempt_events")


async def append_event(
    conn: asyncpg.Connection,
    *,
    attempt_id: UUID,
    kind: EventKind,
    actor: str,
    detail: dict[str, Any],
    now: datetime,
) -> int:
    """Append one non-notification event; returns its id."""
    if kind is EventKind.NOTIFICATION:
        raise ValueError("notification events are recorded by the notification handler")
    event_id: int = await HISTORY.insert.fetchval(conn, attempt_id=attempt_id, now=now, kind=kind.value,
                                                  actor=actor, detail=detail)
    return event_id


async def append_events(
    conn: asyncpg.Connection,
    *,
    attempt_id: UUID,
    actor: str,
    now: datetime,
    events: Sequence[tuple[EventKind, dict[str, Any]]],
) -> None:
    """Append several non-notification events of one attempt, in the given order, in one statement."""
    if not events:
        return
    if any(kind is EventKind.NOTIFICATION for kind, _ in events):
        raise ValueError("notification events are recorded by the notification handler")
    await HISTORY.insert_many.execute(conn, attempt_id=attempt_id, now=now, actor=actor,
                                      kinds=[kind.value for kind, _ in events],
                                      details=[detail for _, detail in events])


async def history(conn: asyncpg.Connection | asyncpg.Pool, attempt_id: UUID) -> list[asyncpg.Record]:
    """Every event of one attempt, oldest first."""
    return await HISTORY.history.fetch(conn, attempt_id=attempt_id)


async def operation_events(conn: asyncpg.Connection | asyncpg.Pool,
                           operation_ids: Sequence[UUID]) -> list[asyncpg.Record]:
    """Every event naming one of ``operation_ids`` (their timelines), oldest first."""
    if not operation_ids:
        return []
    return await HISTORY.of_operations.fetch(conn, operation_ids=list(operation_ids))


# -- what recovery reads from an attempt's history -------------------------------------------

@dataclass(frozen=True)
class PassFacts:
    """What a recovery pass reads before it looks an attempt up. Nothing is decided here."""

    latest_send: EventKind | None  # the latest send_intent / send_result / send_abandoned: an intent
    # alone is an ambiguous send boundary
    lookups_so_far: int  # the backoff step
    paused_until: datetime | None  # the scope's 429 pause (paycore.rate_limits), if it is paused now


async def pass_facts(conn: asyncpg.Connection | asyncpg.Pool, attempt_id: UUID, scope: str,
                     now: datetime) -> PassFacts:
    """The attempt's latest send event and lookup count, and whether ``scope`` is paused at ``now``."""
    # One round trip for the three reads (payment_attempt_events.sql:pass_facts says why).
    row = await HISTORY.pass_facts.fetchrow(conn, attempt_id=attempt_id, scope=scope, now=now)
    assert row is not None  # a SELECT of scalar sub-selects always returns its one row
    latest = row["latest_send"]
    return PassFacts(latest_send=EventKind(latest) if latest is not None else None,
                     lookups_so_far=int(row["lookups"]), paused_until=row["paused_until"])


async def resend_was_rejected(conn: asyncpg.Connection | asyncpg.Pool, attempt_id: UUID) -> bool:
    return bool(await HISTORY.resend_was_rejected.fetchval(conn, attempt_id=attempt_id))


async def last_send_began_at(conn: asyncpg.Connection | asyncpg.Pool, attempt_id: UUID) -> datetime | None:
    """When the attempt's last send began (its latest ``send_intent``); ``None`` if it has none."""
    began: datetime | None = await HISTORY.last_send_began_at.fetchval(conn, attempt_id=attempt_id)
    return began
