"""Recovery's leases on attempts: claim, ownership, finish (escalate-and-finish is the writer's).

A lease is local coordination: one healthy worker at a time works an attempt.
Ownership is always the same predicate (paycore/queries/payment_attempts.sql): this
worker's name, its token for this claim, and a lease that has not expired, at the
application clock's ``:now``. Every statement that needs ownership says it in SQL,
so nothing is re-checked in Python after the row was read. Claiming and scheduling
are not state changes: they never change ``version``. Every release presents the
token, so a worker whose lease expired cannot clear the new owner's lease.

An outcome write is the one release that asks less (the writer's ``apply_outcome``):
evidence is never refused for want of a lease (the write is conditional on the
attempt's version and state alone, so an outcome is never lost), and it clears the
lease only while the row still carries the writer's claim -- owner and token,
expired or not. A claim always writes a fresh token, so a token that still matches
means nobody has claimed since: clearing that lease takes nothing from anyone, and
leaves the row as :func:`finish` would have.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

import asyncpg

from paycore.attempt_row import ATTEMPTS, Attempt


@dataclass(frozen=True)
class Lease:
    """A recovery worker's claim on an attempt: owner name and fencing token."""

    owner: str
    token: UUID


def new_lease(owner: str) -> Lease:
    return Lease(owner=owner, token=uuid.uuid4())


async def claim(conn: asyncpg.Pool | asyncpg.Connection, attempt_id: UUID, lease: Lease, now: datetime,
                lease_s: float) -> Attempt | None:
    """Claim this due attempt with a fresh token; ``None`` when someone else has it or it is not due."""
    row = await ATTEMPTS.claim.fetchrow(conn, attempt_id=attempt_id, owner=lease.owner, token=lease.token,
                                        now=now, expires_at=now + timedelta(seconds=lease_s))
    return Attempt.from_record(row) if row is not None else None


async def claim_due(conn: asyncpg.Pool | asyncpg.Connection, leases: Sequence[Lease], now: datetime,
                    lease_s: float) -> list[tuple[Attempt, Lease]]:
    """Claim up to ``len(leases)`` due, unresolved attempts whose lease is free or expired,
    each under its own lease (one owner, a token each), in the reference's order."""
    if not leases:
        return []
    owners = {lease.owner for lease in leases}
    if len(owners) != 1:
        raise ValueError("one claim statement claims for one owner")
    by_token = {lease.token: lease for lease in leases}
    rows = await ATTEMPTS.claim_due.fetch(conn, owner=owners.pop(), tokens=list(by_token), now=now,
                                          expires_at=now + timedelta(seconds=lease_s))
    claimed = sorted((Attempt.from_record(row) for row in rows),
                     key=lambda a: (a.next_check_at, a.created_at, a.attempt_id))
    return [(a, by_token[a.lease_token]) for a in claimed if a.lease_token is not None]


async def claim_next_due(conn: asyncpg.Pool | asyncpg.Connection, lease: Lease, now: datetime,
                         lease_s: float) -> Attempt | None:
    """Claim the next due, unresolved attempt whose lease is free or expired; ``None`` when none is."""
    claimed = await claim_due(conn, [lease], now, lease_s)
    return claimed[0][0] if claimed else None


async def owns(conn: asyncpg.Pool | asyncpg.Connection, attempt_id: UUID, lease: Lease,
               now: datetime) -> bool:
    return bool(await ATTEMPTS.owns.fetchval(conn, attempt_id=attempt_id, owner=lease.owner,
                                             token=lease.token, now=now))


async def finish(conn: asyncpg.Pool | asyncpg.Connection, attempt_id: UUID, lease: Lease,
                 now: datetime, delay_s: float) -> bool:
    """Schedule the next check and release the lease, only while this worker owns it."""
    status = await ATTEMPTS.finish.execute(conn, attempt_id=attempt_id, owner=lease.owner, token=lease.token,
                                           now=now, next_check_at=now + timedelta(seconds=max(delay_s, 0.0)))
    return bool(status == "UPDATE 1")


async def lock_owned(conn: asyncpg.Connection, attempt_id: UUID, lease: Lease,
                     now: datetime) -> Attempt | None:
    """The attempt, locked, while this worker owns it; ``None`` when it does not (run in a transaction)."""
    row = await ATTEMPTS.lock_owned.fetchrow(conn, attempt_id=attempt_id, owner=lease.owner,
                                             token=lease.token, now=now)
    return Attempt.from_record(row) if row is not None else None
