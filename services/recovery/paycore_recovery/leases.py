"""Recovery's conditional writes: claim, finish, escalate-and-finish, close, send intent.

Ownership is ``recovery_owner = me AND lease_token = my token AND
lease_expires_at > :now``. Claiming and scheduling are not state changes, so they
never change ``version``; every release presents the token, so a worker whose
lease expired cannot clear the new owner's lease. ``:now`` is always the
application clock, passed in.
"""

from __future__ import annotations

import enum
import uuid
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg

from paycore import escalations
from paycore.attempts import Attempt, Lease
from paycore.domain import AttemptState
from paycore.events import EventKind, append_event
from paycore.orders import lock_order, lock_order_of_attempt

# The reference's claim, applied to the next due attempt in its order:
# (next_check_at, created_at, attempt_id). SKIP LOCKED hands concurrent claimers
# (this worker's lanes, other instances) different attempts instead of making them
# queue on one row and find it taken; the outer predicate repeats the claim's.
CLAIM_NEXT_DUE = """
UPDATE payment_attempts
SET recovery_owner = $1, lease_token = $2, lease_acquired_at = $3, lease_expires_at = $4
WHERE attempt_id = (
        SELECT attempt_id FROM payment_attempts
        WHERE state IN ('NotStarted', 'Started', 'Unknown')
          AND next_check_at <= $3
          AND (recovery_owner IS NULL OR lease_expires_at <= $3)
        ORDER BY next_check_at, created_at, attempt_id
        LIMIT 1
        FOR NO KEY UPDATE SKIP LOCKED)
  AND state IN ('NotStarted', 'Started', 'Unknown')
  AND next_check_at <= $3
  AND (recovery_owner IS NULL OR lease_expires_at <= $3)
RETURNING *
"""

CLAIM = """
UPDATE payment_attempts
SET recovery_owner = $2, lease_token = $3, lease_acquired_at = $4, lease_expires_at = $5
WHERE attempt_id = $1
  AND state IN ('NotStarted', 'Started', 'Unknown')
  AND next_check_at <= $4
  AND (recovery_owner IS NULL OR lease_expires_at <= $4)
RETURNING *
"""

FINISH = """
UPDATE payment_attempts
SET next_check_at = $4,
    recovery_owner = NULL, lease_token = NULL, lease_acquired_at = NULL, lease_expires_at = NULL
WHERE attempt_id = $1 AND recovery_owner = $2 AND lease_token = $3 AND lease_expires_at > $5
"""

OWNS_LEASE = """
SELECT EXISTS (SELECT 1 FROM payment_attempts
               WHERE attempt_id = $1 AND recovery_owner = $2 AND lease_token = $3
                 AND lease_expires_at > $4)
"""

# FOR NO KEY UPDATE: the strongest lock a row update needs, and one that does not
# conflict with the KEY SHARE lock an event or outbox insert takes on its attempt.
LOCK_ATTEMPT = "SELECT * FROM payment_attempts WHERE attempt_id = $1 FOR NO KEY UPDATE"

CLOSE_NEVER_SENT = """
UPDATE payment_attempts
SET state = 'NotApplied', outcome_reason = 'never-sent', next_check_at = $5, version = version + 1,
    recovery_owner = NULL, lease_token = NULL, lease_acquired_at = NULL, lease_expires_at = NULL
WHERE attempt_id = $1 AND version = $2 AND state = 'NotStarted'
  AND recovery_owner = $3 AND lease_token = $4 AND lease_expires_at > $5
RETURNING *
"""

LATEST_SEND_EVENT = """
SELECT kind, occurred_at, detail FROM payment_attempt_events
WHERE attempt_id = $1 AND kind IN ('send_intent', 'send_result', 'send_abandoned')
ORDER BY event_id DESC
LIMIT 1
"""

# A resend the provider refused as invalid before executing it (recorded by
# paycore.attempts in its send_result): the same bytes would be refused again.
RESEND_WAS_REJECTED = """
SELECT EXISTS (SELECT 1 FROM payment_attempt_events
               WHERE attempt_id = $1 AND kind = 'send_result'
                 AND (detail ->> 'request_rejected')::boolean
                 AND detail ->> 'outcome' = 'unknown')
"""

COUNT_LOOKUPS = """
SELECT count(*) FROM payment_attempt_events WHERE attempt_id = $1 AND kind = 'lookup'
"""

PAUSED_UNTIL = """
SELECT paused_until FROM provider_rate_limit_pauses WHERE scope = $1 AND paused_until > $2
"""

PAUSE_SCOPE = """
INSERT INTO provider_rate_limit_pauses (scope, paused_until, reason, updated_at)
VALUES ($1, $2, $3, $4)
ON CONFLICT (scope) DO UPDATE
SET paused_until = GREATEST(provider_rate_limit_pauses.paused_until, EXCLUDED.paused_until),
    reason = EXCLUDED.reason, updated_at = EXCLUDED.updated_at
"""


def new_lease(owner: str) -> Lease:
    return Lease(owner=owner, token=uuid.uuid4())


async def claim_next_due(pool: asyncpg.Pool, lease: Lease, now: datetime, lease_s: float) -> Attempt | None:
    """Claim the next due, unresolved attempt whose lease is free or expired; ``None`` when none is."""
    row = await pool.fetchrow(CLAIM_NEXT_DUE, lease.owner, lease.token, now, now + timedelta(seconds=lease_s))
    return Attempt.from_record(row) if row is not None else None


async def claim(pool: asyncpg.Pool, attempt_id: UUID, lease: Lease, now: datetime,
                lease_s: float) -> Attempt | None:
    """Claim this due attempt with a fresh token; ``None`` when someone else has it or it is not due."""
    row = await pool.fetchrow(CLAIM, attempt_id, lease.owner, lease.token, now,
                              now + timedelta(seconds=lease_s))
    return Attempt.from_record(row) if row is not None else None


async def finish(conn: asyncpg.Pool | asyncpg.Connection, attempt_id: UUID, lease: Lease,
                 now: datetime, delay_s: float) -> bool:
    """Schedule the next check and release the lease, only while this worker owns it."""
    status = await conn.execute(FINISH, attempt_id, lease.owner, lease.token,
                                now + timedelta(seconds=max(delay_s, 0.0)), now)
    return bool(status == "UPDATE 1")


async def owns_lease(pool: asyncpg.Pool, attempt_id: UUID, lease: Lease, now: datetime) -> bool:
    return bool(await pool.fetchval(OWNS_LEASE, attempt_id, lease.owner, lease.token, now))


async def escalate_and_finish(
    pool: asyncpg.Pool, attempt_id: UUID, lease: Lease, *, reason: str, delay_s: float, now: datetime,
    reminder_interval: timedelta, detail: dict[str, Any] | None = None,
) -> bool:
    """In one transaction: re-read the attempt FOR UPDATE; only if it is still Started or
    Unknown and this worker owns the lease, open the episode ``attempt:<id>:<reason>``
    (its alert only if new), schedule the next check and release the lease.

    The attempt's state and version are not touched, so a concurrent outcome
    write never has to retry because of an escalation.
    """
    async with pool.acquire() as conn, conn.transaction():
        await lock_order_of_attempt(conn, attempt_id)
        row = await conn.fetchrow(LOCK_ATTEMPT, attempt_id)
        current = Attempt.from_record(row)
        owned = (current.recovery_owner == lease.owner and current.lease_token == lease.token
                 and current.lease_expires_at is not None and current.lease_expires_at > now)
        if current.state not in (AttemptState.STARTED, AttemptState.UNKNOWN) or not owned:
            return False  # resolved meanwhile (nobody is alerted about a settled payment), or not ours
        await escalations.raise_escalation(conn, key=f"attempt:{attempt_id}:{reason}", reason=reason,
                                           attempt_id=attempt_id, now=now, detail=detail or {},
                                           reminder_interval=reminder_interval)
        return await finish(conn, attempt_id, lease, now, delay_s)


async def close_never_sent(pool: asyncpg.Pool, attempt: Attempt, lease: Lease, now: datetime,
                           actor: str) -> Attempt | None:
    """NotStarted -> NotApplied(never-sent), releasing the lease; ``None`` if the endpoint won."""
    async with pool.acquire() as conn, conn.transaction():
        await lock_order(conn, attempt.order_id)  # the endpoint's Started transition takes it too
        row = await conn.fetchrow(CLOSE_NEVER_SENT, attempt.attempt_id, attempt.version, lease.owner,
                                  lease.token, now)
        if row is None:
            return None
        closed = Attempt.from_record(row)
        await append_event(conn, attempt_id=attempt.attempt_id, kind=EventKind.TRANSITION, actor=actor,
                           now=now, detail={"from": "NotStarted", "to": "NotApplied",
                                            "reason": "never-sent"})
        await escalations.resolve_for_attempt(conn, attempt.attempt_id, now)
        return closed


class IntentResult(enum.Enum):
    COMMITTED = "committed"
    REFUSED = "refused"  # confirmed not committed: nothing may be sent this cycle


async def commit_send_intent(
    pool: asyncpg.Pool, attempt: Attempt, lease: Lease, now: datetime, actor: str
) -> tuple[IntentResult, str | None]:
    """Commit a resend's ``send_intent`` under the order lock, or refuse it.

    Requires that this worker owns the lease, the order is still payable, the
    attempt is still sendable (Started or Unknown, unchanged since it was read),
    and ``now`` is before the stamped escalation deadline. A database error or an
    unconfirmed commit raises: the caller must not send and must not finish.
    """
    async with pool.acquire() as conn, conn.transaction():
        order = await lock_order(conn, attempt.order_id)
        if order.not_payable_reason is not None:
            return IntentResult.REFUSED, "order-not-payable"
        current = Attempt.from_record(await conn.fetchrow(LOCK_ATTEMPT, attempt.attempt_id))
        if current.state not in (AttemptState.STARTED, AttemptState.UNKNOWN):
            return IntentResult.REFUSED, "not-sendable"
        if current.version != attempt.version:
            return IntentResult.REFUSED, "changed"
        if not (current.recovery_owner == lease.owner and current.lease_token == lease.token
                and current.lease_expires_at is not None and current.lease_expires_at > now):
            return IntentResult.REFUSED, "lease-lost"
        if current.escalation_deadline is None or now >= current.escalation_deadline:
            return IntentResult.REFUSED, "deadline-passed"
        await append_event(
            conn, attempt_id=attempt.attempt_id, kind=EventKind.SEND_INTENT, actor=actor, now=now,
            detail={"endpoint": current.endpoint, "api_version": current.api_version,
                    "provider_account": current.provider_account, "first_send": False,
                    "lease_token": str(lease.token)},
        )
        return IntentResult.COMMITTED, None


async def record_send_abandoned(pool: asyncpg.Pool, attempt_id: UUID, now: datetime, actor: str,
                                why: str) -> None:
    """This worker chose not to dispatch after its intent; it proves nothing about the payment."""
    async with pool.acquire() as conn:
        await append_event(conn, attempt_id=attempt_id, kind=EventKind.SEND_ABANDONED, actor=actor,
                           now=now, detail={"why": why})


async def latest_send_event(pool: asyncpg.Pool, attempt_id: UUID) -> str | None:
    row = await pool.fetchrow(LATEST_SEND_EVENT, attempt_id)
    return str(row["kind"]) if row is not None else None


async def resend_was_rejected(pool: asyncpg.Pool, attempt_id: UUID) -> bool:
    return bool(await pool.fetchval(RESEND_WAS_REJECTED, attempt_id))


async def lookups_so_far(pool: asyncpg.Pool, attempt_id: UUID) -> int:
    return int(await pool.fetchval(COUNT_LOOKUPS, attempt_id))


async def paused_until(pool: asyncpg.Pool, scope: str, now: datetime) -> datetime | None:
    value: datetime | None = await pool.fetchval(PAUSED_UNTIL, scope, now)
    return value


async def pause_scope(pool: asyncpg.Pool, scope: str, until: datetime, reason: str, now: datetime) -> None:
    await pool.execute(PAUSE_SCOPE, scope, until, reason, now)
