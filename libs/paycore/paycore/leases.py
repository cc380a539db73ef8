"""Recovery's leases on attempts: claim, ownership, finish, escalate-and-finish.

A lease is local coordination: one healthy worker at a time works an attempt.
Ownership is written once (:data:`OWNED`): this worker's name, its token for
this claim, and a lease that has not expired, at the application clock's
``:now``. Every statement that needs ownership says it in SQL, so nothing is
re-checked in Python after the row was read. Claiming and scheduling are not
state changes: they never change ``version``. Every release presents the token,
so a worker whose lease expired cannot clear the new owner's lease.

An outcome write is the one release that asks less (:func:`release_if_held_by`, used by
:data:`paycore.attempts.APPLY_OUTCOME`): evidence is never refused for want of a lease
(the write is conditional on the attempt's version and state alone, so an outcome
is never lost), and it clears the lease only while the row still carries the
writer's claim -- owner and token, expired or not. A claim always writes a fresh
token, so a token that still matches means nobody has claimed since: clearing that
lease takes nothing from anyone, and leaves the row as :func:`finish` would have.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg

from paycore import escalations
from paycore.attempt_row import Attempt
from paycore.domain import LIVE_STATE_PREDICATE, RESOLVABLE_STATES
from paycore.orders import lock_order_of_attempt


@dataclass(frozen=True)
class Lease:
    """A recovery worker's claim on an attempt: owner name and fencing token."""

    owner: str
    token: UUID


def new_lease(owner: str) -> Lease:
    return Lease(owner=owner, token=uuid.uuid4())


# The columns a lease occupies, set and cleared together (the schema's CHECK refuses half a lease).
LEASE_COLUMNS = ("recovery_owner", "lease_token", "lease_acquired_at", "lease_expires_at")
# A release, in an UPDATE's SET list: no owner, no token, no lease.
RELEASED = ", ".join(f"{column} = NULL" for column in LEASE_COLUMNS)


def held_by(owner: str, token: str) -> str:
    """SQL: the row carries this claim (owner and token, the given parameters), expired or not."""
    return f"recovery_owner = {owner} AND lease_token = {token}"


def release_if_held_by(owner: str, token: str) -> str:
    """SQL for an UPDATE's SET list: clear the lease if the row carries this claim, else keep it."""
    held = held_by(owner, token)
    return ",\n    ".join(f"{column} = CASE WHEN {held} THEN NULL ELSE {column} END"
                          for column in LEASE_COLUMNS)


# Owned by this worker, at :now. In every statement: $1 attempt, $2 owner, $3 token, $4 now.
OWNED = held_by("$2", "$3") + " AND lease_expires_at > $4"

# Due, unresolved, and free or expired, at :now. In both claims: $3 now.
CLAIMABLE = (LIVE_STATE_PREDICATE
             + " AND next_check_at <= $3 AND (recovery_owner IS NULL OR lease_expires_at <= $3)")

# $1 owner, $2 token, $3 now, $4 lease expiry, $5 attempt.
CLAIM = """
UPDATE payment_attempts
SET recovery_owner = $1, lease_token = $2, lease_acquired_at = $3, lease_expires_at = $4
WHERE attempt_id = $5 AND """ + CLAIMABLE + """
RETURNING *
"""

# The claim, applied to the next due attempts in the reference's order
# (next_check_at, created_at, attempt_id), one fresh token each: $2 holds the
# tokens, and as many attempts are claimed as tokens are given. SKIP LOCKED hands
# concurrent claimers (lanes, other instances) different attempts instead of
# making them queue on one row and find it taken; the outer predicate repeats the
# claim's. The CTEs are MATERIALIZED so each is evaluated exactly once: as a
# sub-select joined in FROM, the planner may re-run the locking scan per target
# row, handing every attempt the same token and ignoring the LIMIT (a test saw
# both). One statement for several attempts: each claim walks the due index past
# the entries of attempts resolved since the last vacuum, so a sweep pays that walk
# once per batch, not once per attempt.
CLAIM_DUE = """
WITH next_due AS MATERIALIZED (
        SELECT attempt_id FROM payment_attempts
        WHERE """ + CLAIMABLE + """
        ORDER BY next_check_at, created_at, attempt_id
        LIMIT cardinality($2::uuid[])
        FOR NO KEY UPDATE SKIP LOCKED
), due AS MATERIALIZED (
    -- Which fresh token goes with which attempt does not matter, only that each has its own.
    SELECT attempt_id, ($2::uuid[])[row_number() OVER ()] AS token FROM next_due
)
UPDATE payment_attempts
SET recovery_owner = $1, lease_token = due.token, lease_acquired_at = $3, lease_expires_at = $4
FROM due
WHERE payment_attempts.attempt_id = due.attempt_id
  AND """ + CLAIMABLE + """
RETURNING payment_attempts.*
"""  # noqa: S608 -- composed of this module's constants only

OWNS = "SELECT EXISTS (SELECT 1 FROM payment_attempts WHERE attempt_id = $1 AND " + OWNED + ")"  # noqa: S608

# Schedules the next check and releases the lease in one conditional write; $5 the next check.
FINISH = """
UPDATE payment_attempts
SET next_check_at = $5, """ + RELEASED + """
WHERE attempt_id = $1 AND """ + OWNED

# FOR NO KEY UPDATE: the strongest lock a row update needs, and one that does not
# conflict with the KEY SHARE lock an event or outbox insert takes on its attempt.
LOCK_OWNED_ATTEMPT = ("SELECT * FROM payment_attempts WHERE attempt_id = $1 AND "  # noqa: S608
                      + OWNED + " FOR NO KEY UPDATE")


async def claim(conn: asyncpg.Pool | asyncpg.Connection, attempt_id: UUID, lease: Lease, now: datetime,
                lease_s: float) -> Attempt | None:
    """Claim this due attempt with a fresh token; ``None`` when someone else has it or it is not due."""
    row = await conn.fetchrow(CLAIM, lease.owner, lease.token, now, now + timedelta(seconds=lease_s),
                              attempt_id)
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
    rows = await conn.fetch(CLAIM_DUE, owners.pop(), list(by_token), now, now + timedelta(seconds=lease_s))
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
    return bool(await conn.fetchval(OWNS, attempt_id, lease.owner, lease.token, now))


async def finish(conn: asyncpg.Pool | asyncpg.Connection, attempt_id: UUID, lease: Lease,
                 now: datetime, delay_s: float) -> bool:
    """Schedule the next check and release the lease, only while this worker owns it."""
    status = await conn.execute(FINISH, attempt_id, lease.owner, lease.token, now,
                                now + timedelta(seconds=max(delay_s, 0.0)))
    return bool(status == "UPDATE 1")


async def lock_owned(conn: asyncpg.Connection, attempt_id: UUID, lease: Lease,
                     now: datetime) -> Attempt | None:
    """The attempt, locked, while this worker owns it; ``None`` when it does not (run in a transaction)."""
    row = await conn.fetchrow(LOCK_OWNED_ATTEMPT, attempt_id, lease.owner, lease.token, now)
    return Attempt.from_record(row) if row is not None else None


async def escalate_and_finish(
    pool: asyncpg.Pool, attempt_id: UUID, lease: Lease, *, reason: str, delay_s: float, now: datetime,
    reminder_interval: timedelta, detail: dict[str, Any] | None = None,
) -> bool:
    """In one transaction, while this worker owns the attempt and it is still Started or
    Unknown: open the episode ``attempt:<id>:<reason>`` (its alert only if new), schedule
    the next check and release the lease. ``False`` when it was resolved meanwhile (nobody
    is alerted about a settled payment) or is not this worker's any more.

    The attempt's state and version are not touched, so a concurrent outcome write
    never has to retry because of an escalation.
    """
    async with pool.acquire() as conn, conn.transaction():
        await lock_order_of_attempt(conn, attempt_id)
        current = await lock_owned(conn, attempt_id, lease, now)
        if current is None or current.state not in RESOLVABLE_STATES:
            return False
        await escalations.raise_escalation(conn, key=escalations.attempt_key(attempt_id, reason),
                                           reason=reason, attempt_id=attempt_id, now=now, detail=detail or {},
                                           reminder_interval=reminder_interval)
        return await finish(conn, attempt_id, lease, now, delay_s)
