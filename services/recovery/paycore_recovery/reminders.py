"""The reminder job: which interval applies to each due episode; the writes are the library's.

Each due open episode gets one conditional claim, a stored count and an outbox alert
(:func:`paycore.escalations.remind`): two instances racing one episode send one
reminder, ``escalation:<id>:reminder:<n>``.
"""

from __future__ import annotations

import logging

import asyncpg

from paycore import escalations
from paycore.clock import Clock
from paycore.config import Settings

log = logging.getLogger("paycore.recovery.reminders")


async def send_due_reminders(pool: asyncpg.Pool, clock: Clock, settings: Settings,
                             limit: int = 100) -> int:
    """Queue a reminder for every due open episode; returns how many this instance queued."""
    sent = 0
    for episode in await escalations.due_reminders(pool, clock.now(), limit):
        now = clock.now()
        acknowledged = episode["acknowledged_at"] is not None
        interval = settings.reminder_ack_interval if acknowledged else settings.reminder_interval
        async with pool.acquire() as conn, conn.transaction():
            if await escalations.remind(conn, episode, now=now, next_reminder_at=now + interval) is not None:
                sent += 1
    return sent
