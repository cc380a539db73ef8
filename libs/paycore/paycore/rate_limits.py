"""Shared rate-limit pauses (``provider_rate_limit_pauses``): a provider's 429, honoured by every worker.

A pause names the scope the provider's limit applies to (here: one provider
account), so lookups in that scope stop until it passes and every other scope
goes on. Recovery reads a scope's pause with the attempt's other facts, in one
statement (:func:`paycore.events.pass_facts`).
"""

from __future__ import annotations

from datetime import datetime

import asyncpg

from paycore import queries

PAUSES = queries.load("provider_rate_limit_pauses")


async def pause(conn: asyncpg.Connection | asyncpg.Pool, scope: str, until: datetime, reason: str,
                now: datetime) -> None:
    await PAUSES.pause.execute(conn, scope=scope, paused_until=until, reason=reason, now=now)
