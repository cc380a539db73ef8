"""The reminder job: one conditional claim per open episode, a stored count, an outbox alert.

Two instances racing one episode send one reminder: only the UPDATE that still
sees the ``next_reminder_at`` it read changes the row and queues
``escalation:<id>:reminder:<n>``.
"""

from __future__ import annotations

import logging

import asyncpg

from paycore import outbox
from paycore.clock import Clock
from paycore.config import Settings

log = logging.getLogger("paycore.recovery.reminders")

DUE_REMINDERS = """
SELECT e.escalation_id, e.escalation_key, e.attempt_id, e.reason, e.next_reminder_at, e.acknowledged_at,
       -- the account the alert is about (pages group by account and reason)
       COALESCE((SELECT a.provider_account FROM payment_attempts a WHERE a.attempt_id = e.attempt_id),
                e.detail ->> 'provider_account') AS provider_account
FROM payment_escalations e
WHERE e.resolved_at IS NULL AND e.next_reminder_at <= $1
ORDER BY e.next_reminder_at
LIMIT $2
"""

CLAIM_REMINDER = """
UPDATE payment_escalations
SET reminder_count = reminder_count + 1, next_reminder_at = $3
WHERE escalation_id = $1 AND resolved_at IS NULL AND next_reminder_at = $2
RETURNING reminder_count
"""


async def send_due_reminders(pool: asyncpg.Pool, clock: Clock, settings: Settings,
                             limit: int = 100) -> int:
    """Queue a reminder for every due open episode; returns how many this instance queued."""
    sent = 0
    for row in await pool.fetch(DUE_REMINDERS, clock.now(), limit):
        now = clock.now()
        acknowledged = row["acknowledged_at"] is not None
        interval = settings.reminder_ack_interval if acknowledged else settings.reminder_interval
        async with pool.acquire() as conn, conn.transaction():
            count = await conn.fetchval(CLAIM_REMINDER, row["escalation_id"], row["next_reminder_at"],
                                        now + interval)
            if count is None:
                continue  # another instance reminded, or the episode was resolved
            await outbox.enqueue(
                conn, dedup_key=f"escalation:{row['escalation_id']}:reminder:{count}", kind="operator-alert",
                payload={"escalation_id": row["escalation_id"], "escalation_key": row["escalation_key"],
                         "reason": row["reason"], "alert": "reminder", "reminder": count,
                         "attempt_id": str(row["attempt_id"]) if row["attempt_id"] else None,
                         "provider_account": row["provider_account"]},
                now=now, attempt_id=row["attempt_id"], ordering=None,
            )
            sent += 1
    return sent
