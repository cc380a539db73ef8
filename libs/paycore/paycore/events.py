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


class EventKind(enum.StrEnum):
    SEND_INTENT = "send_intent"
    SEND_RESULT = "send_result"
    SEND_ABANDONED = "send_abandoned"
    NOTIFICATION = "notification"
    LOOKUP = "lookup"
    TRANSITION = "transition"


INSERT_EVENT = """
INSERT INTO payment_attempt_events (attempt_id, occurred_at, kind, actor, detail)
VALUES ($1, $2, $3, $4, $5)
RETURNING event_id
"""

# Several events of one attempt in one round trip; WITH ORDINALITY and ORDER BY keep
# their ids (the history's tie-break within one instant) in the order given.
INSERT_EVENTS = """
INSERT INTO payment_attempt_events (attempt_id, occurred_at, kind, actor, detail)
SELECT $1, $2, e.kind, $3, e.detail
FROM unnest($4::text[], $5::jsonb[]) WITH ORDINALITY AS e(kind, detail, position)
ORDER BY e.position
"""

SELECT_HISTORY = """
SELECT event_id, attempt_id, occurred_at, kind, actor, provider_account, notification_key, detail
FROM payment_attempt_events
WHERE attempt_id = $1
ORDER BY occurred_at, event_id
"""


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
    event_id: int = await conn.fetchval(INSERT_EVENT, attempt_id, now, kind.value, actor, detail)
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
    await conn.execute(INSERT_EVENTS, attempt_id, now, actor, [kind.value for kind, _ in events],
                       [detail for _, detail in events])


async def history(conn: asyncpg.Connection | asyncpg.Pool, attempt_id: UUID) -> list[asyncpg.Record]:
    """Every event of one attempt, oldest first."""
    rows: list[asyncpg.Record] = await conn.fetch(SELECT_HISTORY, attempt_id)
    return rows


# -- what recovery reads from an attempt's history -------------------------------------------

@dataclass(frozen=True)
class PassFacts:
    """What a recovery pass reads before it looks an attempt up. Nothing is decided here."""

    latest_send: EventKind | None  # the latest send_intent / send_result / send_abandoned: an intent
    # alone is an ambiguous send boundary
    lookups_so_far: int  # the backoff step
    paused_until: datetime | None  # the scope's 429 pause (paycore.rate_limits), if it is paused now


# $1 attempt, $2 the account's rate-limit scope, $3 now. Three reads in one round trip: at
# thousands of due attempts the round trips, not the reads, were a pass's cost; the scope's
# pause (provider_rate_limit_pauses, written by paycore.rate_limits) rides along for that reason.
PASS_FACTS = """
SELECT
    (SELECT kind FROM payment_attempt_events
     WHERE attempt_id = $1 AND kind IN ('send_intent', 'send_result', 'send_abandoned')
     ORDER BY event_id DESC
     LIMIT 1) AS latest_send,
    (SELECT count(*) FROM payment_attempt_events WHERE attempt_id = $1 AND kind = 'lookup') AS lookups,
    (SELECT paused_until FROM provider_rate_limit_pauses
     WHERE scope = $2 AND paused_until > $3) AS paused_until
"""


async def pass_facts(conn: asyncpg.Connection | asyncpg.Pool, attempt_id: UUID, scope: str,
                     now: datetime) -> PassFacts:
    """The attempt's latest send event and lookup count, and whether ``scope`` is paused at ``now``."""
    row = await conn.fetchrow(PASS_FACTS, attempt_id, scope, now)
    assert row is not None  # a SELECT of scalar sub-selects always returns its one row
    latest = row["latest_send"]
    return PassFacts(latest_send=EventKind(latest) if latest is not None else None,
                     lookups_so_far=int(row["lookups"]), paused_until=row["paused_until"])


# A resend the provider refused as invalid before executing it (paycore.attempts records
# it in its send_result): the same bytes would be refused again.
RESEND_WAS_REJECTED = """
SELECT EXISTS (SELECT 1 FROM payment_attempt_events
               WHERE attempt_id = $1 AND kind = 'send_result'
                 AND (detail ->> 'request_rejected')::boolean
                 AND detail ->> 'outcome' = 'unknown')
"""


async def resend_was_rejected(conn: asyncpg.Connection | asyncpg.Pool, attempt_id: UUID) -> bool:
    return bool(await conn.fetchval(RESEND_WAS_REJECTED, attempt_id))


# Every send, the first (checkout's) and each resend (recovery's), commits its send_intent
# before it is dispatched, so the latest intent is when the attempt's last send began.
LAST_SEND_BEGAN_AT = """
SELECT max(occurred_at) FROM payment_attempt_events
WHERE attempt_id = $1 AND kind = 'send_intent'
"""


async def last_send_began_at(conn: asyncpg.Connection | asyncpg.Pool, attempt_id: UUID) -> datetime | None:
    """When the attempt's last send began (its latest ``send_intent``); ``None`` if it has none."""
    began: datetime | None = await conn.fetchval(LAST_SEND_BEGAN_AT, attempt_id)
    return began
