"""The replay window: a verified webhook delivery is applied once, even replayed byte for byte.

A signature is valid for :data:`paycore.webhook_signatures.TOLERANCE_S` around
its timestamp, so a captured delivery could be replayed inside that window.
Keyed notifications would be duplicates anyway; an unkeyed one would be recorded
again. The intake therefore records ``(account, webhook-id, timestamp)`` in its
transaction: a second sight of the same triple is a replay, answered as a
duplicate. Rows older than the tolerance can never be replayed (the verifier
refuses them), so they are purged.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from paycore.webhook_signatures import TOLERANCE_S


@dataclass(frozen=True)
class SignedDelivery:
    """What identifies one signed delivery: its ``webhook-id`` and ``webhook-timestamp``."""

    webhook_id: str
    timestamp: int

    @property
    def id_sha256(self) -> str:
        return hashlib.sha256(self.webhook_id.encode("utf-8", "surrogateescape")).hexdigest()


# Waits on a concurrent uncommitted insert of the same delivery, like the notification
# insert: it commits -> this is a replay; it rolls back -> this one proceeds.
INSERT_SEEN = """
INSERT INTO webhook_deliveries_seen (provider_account, webhook_id_sha256, webhook_timestamp, seen_at)
VALUES ($1, $2, $3, $4)
ON CONFLICT ON CONSTRAINT pk_webhook_deliveries_seen DO NOTHING
RETURNING 1
"""


async def first_sight(conn: asyncpg.Connection, provider_account: str, delivery: SignedDelivery,
                      now: datetime) -> bool:
    """Record this delivery in the caller's transaction; ``False`` when it is a replay."""
    return await conn.fetchval(INSERT_SEEN, provider_account, delivery.id_sha256, delivery.timestamp,
                               now) is not None


PURGE_EXPIRED = "DELETE FROM webhook_deliveries_seen WHERE webhook_timestamp < $1"


async def purge_expired(conn: asyncpg.Connection | asyncpg.Pool, now: datetime) -> int:
    """Forget deliveries whose signature the verifier would now refuse anyway."""
    status: str = await conn.execute(PURGE_EXPIRED, int(now.timestamp()) - TOLERANCE_S - 1)
    return int(status.split()[-1])
