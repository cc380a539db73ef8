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

from paycore import queries
from paycore.webhook_signatures import TOLERANCE_S


@dataclass(frozen=True)
class SignedDelivery:
    """What identifies one signed delivery: its ``webhook-id`` and ``webhook-timestamp``."""

    webhook_id: str
    timestamp: int

    @property
    def id_sha256(self) -> str:
        return hashlib.sha256(self.webhook_id.encode("utf-8", "surrogateescape")).hexdigest()


SEEN = queries.load("webhook_deliveries_seen")


async def first_sight(conn: asyncpg.Connection, provider_account: str, delivery: SignedDelivery,
                      now: datetime) -> bool:
    """Record this delivery in the caller's transaction; ``False`` when it is a replay."""
    return await SEEN.insert_seen.fetchval(conn, account=provider_account,
                                           webhook_id_sha256=delivery.id_sha256,
                                           webhook_timestamp=delivery.timestamp, now=now) is not None


async def purge_expired(conn: asyncpg.Connection | asyncpg.Pool, now: datetime) -> int:
    """Forget deliveries whose signature the verifier would now refuse anyway."""
    status = await SEEN.purge_expired.execute(conn, expired_before=int(now.timestamp()) - TOLERANCE_S - 1)
    return int(status.split()[-1])
