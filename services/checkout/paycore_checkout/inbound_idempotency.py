"""The optional inbound ``Idempotency-Key`` layer (idempotency-keys-are-not-optional).

The record is inserted first and its primary key (key, endpoint, customer) decides
who runs: a second request with the key gets the stored response once the first
completes, ``409 request_in_progress`` with Retry-After while it runs, and ``422``
when its canonical fingerprint differs. Records expire after 24 hours; a claim
still in progress long after any request could hold it (its request died, or
the database went away before the release) is taken over by the next one.

It serves ``POST /orders`` (a retried create gets the same order) and the pay
route. There it sits in front of the order lock, never instead of it: a request
without a key, or after expiry, is still safe because the order lock and the
live-attempt index make it the same attempt.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import orjson

from paycore import queries
from paycore.db import delete_in_batches

RECORDS = queries.load("idempotency_records", directory=Path(__file__).with_name("queries"))


def fingerprint(value: Any) -> str:
    """SHA-256 of the canonical JSON (sorted keys, no whitespace) of what decides the outcome."""
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()


def valid_key(key: str) -> bool:
    return 1 <= len(key) <= 255 and all(0x21 <= ord(c) <= 0x7E for c in key)


class Claim(enum.Enum):
    PROCEED = "proceed"
    IN_PROGRESS = "in_progress"
    MISMATCH = "mismatch"
    REPLAY = "replay"


@dataclass(frozen=True)
class StoredResponse:
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class KeyScope:
    key: str
    endpoint: str
    customer_id: str

    def key_params(self) -> dict[str, str]:
        """The record's primary key, as the queries name it."""
        return {"idempotency_key": self.key, "endpoint": self.endpoint, "customer_id": self.customer_id}


async def claim(
    pool: asyncpg.Pool, scope: KeyScope, request_fingerprint: str, *, now: datetime, ttl_s: int,
    stale_after_s: float = 86_400,
) -> tuple[Claim, StoredResponse | None]:
    """Insert the in-progress record, or report what the existing one says.

    An in-progress record older than ``stale_after_s`` is an orphan and is
    replaced: the request that claimed it can no longer be running.
    """
    async with pool.acquire() as conn, conn.transaction():
        await RECORDS.delete_expired.execute(conn, **scope.key_params(), now=now,
                                             stale_before=now - timedelta(seconds=stale_after_s))
        won = await RECORDS.claim.fetchval(conn, **scope.key_params(),
                                           request_fingerprint=request_fingerprint, now=now,
                                           expires_at=now + timedelta(seconds=ttl_s))
        if won is not None:
            return Claim.PROCEED, None
        row = await RECORDS.by_key.fetchrow(conn, **scope.key_params())
    if row is None:  # expired and removed between the two statements: let the client retry
        return Claim.IN_PROGRESS, None
    if row["request_fingerprint"] != request_fingerprint:
        return Claim.MISMATCH, None
    if row["state"] == "in_progress":
        return Claim.IN_PROGRESS, None
    return Claim.REPLAY, StoredResponse(row["response_status"], row["response_headers"] or {},
                                        bytes(row["response_body"]))


async def complete(pool: asyncpg.Pool, scope: KeyScope, response: StoredResponse, *,
                   claimed_at: datetime) -> None:
    """Store the answer of the request that claimed the key at ``claimed_at`` (not of a successor)."""
    await RECORDS.complete.execute(pool, **scope.key_params(), response_status=response.status,
                                   response_headers=response.headers, response_body=response.body,
                                   claimed_at=claimed_at)


async def release(pool: asyncpg.Pool, scope: KeyScope, *, claimed_at: datetime) -> None:
    """Forget this request's claim (made at ``claimed_at``): it ended without a storable answer."""
    await RECORDS.release.execute(pool, **scope.key_params(), claimed_at=claimed_at)


async def sweep_expired(pool: asyncpg.Pool, *, now: datetime, batch_size: int = 5_000) -> int:
    """Delete every record expired at ``now``, in batches; the number deleted."""
    return await delete_in_batches(pool, RECORDS.sweep_expired, now=now, batch_size=batch_size)
