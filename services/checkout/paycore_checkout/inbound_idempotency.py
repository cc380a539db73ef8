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
from typing import Any

import asyncpg
import orjson

from paycore.db import delete_in_batches

DELETE_EXPIRED = """
DELETE FROM idempotency_records
WHERE idempotency_key = $1 AND endpoint = $2 AND customer_id = $3
  AND (expires_at <= $4 OR (state = 'in_progress' AND created_at <= $5))
"""

CLAIM_KEY = """
INSERT INTO idempotency_records (idempotency_key, endpoint, customer_id, request_fingerprint, state,
                                 created_at, expires_at)
VALUES ($1, $2, $3, $4, 'in_progress', $5, $6)
ON CONFLICT (idempotency_key, endpoint, customer_id) DO NOTHING
RETURNING idempotency_key
"""

SELECT_RECORD = """
SELECT request_fingerprint, state, response_status, response_headers, response_body
FROM idempotency_records
WHERE idempotency_key = $1 AND endpoint = $2 AND customer_id = $3
"""

COMPLETE = """
UPDATE idempotency_records
SET state = 'completed', response_status = $4, response_headers = $5, response_body = $6
WHERE idempotency_key = $1 AND endpoint = $2 AND customer_id = $3 AND state = 'in_progress'
  AND created_at = $7
"""

RELEASE = """
DELETE FROM idempotency_records
WHERE idempotency_key = $1 AND endpoint = $2 AND customer_id = $3 AND state = 'in_progress'
  AND created_at = $4
"""


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


async def claim(
    pool: asyncpg.Pool, scope: KeyScope, request_fingerprint: str, *, now: datetime, ttl_s: int,
    stale_after_s: float = 86_400,
) -> tuple[Claim, StoredResponse | None]:
    """Insert the in-progress record, or report what the existing one says.

    An in-progress record older than ``stale_after_s`` is an orphan and is
    replaced: the request that claimed it can no longer be running.
    """
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(DELETE_EXPIRED, scope.key, scope.endpoint, scope.customer_id, now,
                           now - timedelta(seconds=stale_after_s))
        won = await conn.fetchval(CLAIM_KEY, scope.key, scope.endpoint, scope.customer_id,
                                  request_fingerprint, now, now + timedelta(seconds=ttl_s))
        if won is not None:
            return Claim.PROCEED, None
        row = await conn.fetchrow(SELECT_RECORD, scope.key, scope.endpoint, scope.customer_id)
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
    await pool.execute(COMPLETE, scope.key, scope.endpoint, scope.customer_id, response.status,
                       response.headers, response.body, claimed_at)


async def release(pool: asyncpg.Pool, scope: KeyScope, *, claimed_at: datetime) -> None:
    """Forget this request's claim (made at ``claimed_at``): it ended without a storable answer."""
    await pool.execute(RELEASE, scope.key, scope.endpoint, scope.customer_id, claimed_at)


# A record past its expiry answers nobody any more (``claim`` would delete it on the key's next
# request); the sweep removes the rest, a batch at a time, skipping rows a request holds.
SWEEP_EXPIRED = """
WITH expired AS (
    SELECT idempotency_key, endpoint, customer_id FROM idempotency_records
    WHERE expires_at <= $1
    ORDER BY expires_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM idempotency_records r USING expired e
WHERE r.idempotency_key = e.idempotency_key AND r.endpoint = e.endpoint AND r.customer_id = e.customer_id
"""


async def sweep_expired(pool: asyncpg.Pool, *, now: datetime, batch_size: int = 5_000) -> int:
    """Delete every record expired at ``now``, in batches; the number deleted."""
    return await delete_in_batches(pool, SWEEP_EXPIRED, now, batch_size=batch_size)
