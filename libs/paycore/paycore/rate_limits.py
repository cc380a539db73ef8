"""Shared rate-limit pauses (``provider_rate_limit_pauses``): a provider's 429, honoured by every worker.

A pause names the scope the provider's limit applies to (here: one provider
account), so lookups in that scope stop until it passes and every other scope
goes on. Recovery reads a scope's pause with the attempt's other facts, in one
statement (:func:`paycore.events.pass_facts`).
"""

from __future__ import annotations

from datetime import datetime

import asyncpg

# A later pause never shortens an earlier, longer one.
PAUSE_SCOPE = """
INSERT INTO provider_rate_limit_pauses (scope, paused_until, reason, updated_at)
VALUES ($1, $2, $3, $4)
ON CONFLICT (scope) DO UPDATE
SET paused_until = GREATEST(provider_rate_limit_pauses.paused_until, EXCLUDED.paused_until),
    reason = EXCLUDED.reason, updated_at = EXCLUDED.updated_at
"""


async def pause(conn: asyncpg.Connection | asyncpg.Pool, scope: str, until: datetime, reason: str,
                now: datetime) -> None:
    await conn.execute(PAUSE_SCOPE, scope, until, reason, now)
