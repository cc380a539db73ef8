"""What a pass reads about an attempt before it looks it up, in one round trip.

The same three reads as :func:`paycore.events.latest_send_event`,
:func:`paycore.events.lookups_so_far` and :func:`paycore.rate_limits.paused_until`,
asked in one statement: at thousands of due attempts the round trips, not the
reads, were a pass's cost. Nothing is decided here; the loop decides as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import asyncpg

from paycore.events import EventKind

# $1 attempt, $2 the account's rate-limit scope, $3 now.
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


@dataclass(frozen=True)
class PassFacts:
    latest_send: EventKind | None  # an intent alone: an ambiguous send boundary
    lookups_so_far: int  # the backoff step
    paused_until: datetime | None  # the scope's 429 pause, if it is paused now


async def read_pass_facts(conn: asyncpg.Pool | asyncpg.Connection, attempt_id: UUID, scope: str,
                          now: datetime) -> PassFacts:
    row = await conn.fetchrow(PASS_FACTS, attempt_id, scope, now)
    assert row is not None  # a SELECT of scalar sub-selects always returns its one row
    latest = row["latest_send"]
    return PassFacts(latest_send=EventKind(latest) if latest is not None else None,
                     lookups_so_far=int(row["lookups"]), paused_until=row["paused_until"])
