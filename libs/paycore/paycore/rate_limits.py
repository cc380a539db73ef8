"""Shared rate-limit pauses (``provider_rate_limit_pauses``): a provider's 429, honoured by every worker.

A pause names the scope the provider's limit applies to (here: one provider
account), so lookups in that scope stop until it passes and every other scope
goes on.
"""

from __future__ import annotations

from datetime import datetime

import asyncpg

PAUSED_UNTIL = """
SELECT paused_until FROM provider_rate_limit_pauses WHERE scope = $1 AND paused_until > $2
"""

# A later pause never shortens an earlier, longer one.
PAUSE_SCOPE = """
INSERT INTO provider_rate_limit_pauses (scope, paused_until, reason, updated_at)
VALUES ($1, $2, $3, $4)
ON CONFLICT (scope) DO UPDATE
SET paused_until = GREATEST(provider_rate_limit_pauses.paused_until, EXCLUDED.paused_until),
    reason = EXCLUDED.reason, updated_at = EXCLUDED.updated_at
"""


async def paused_until(conn: asyncpg.Connection | asyncpg.Pool, scope: str, now: datetime) -> datetime | None:
    """When the pause of ``scope`` ends, if it is paused at ``now``."""
    value: datetime | None = await conn.fetchval(PAUSED_UNTIL, scope, now)
    return value


async def pause(conn: asyncpg.Connection | asyncpg.Pool, scope: str, until: datetime, reason: str,
                now: datetime) -> None:
    await conn.execute(PAUSE_SCOPE, scope, until, reason, now)
