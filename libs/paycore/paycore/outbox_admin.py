"""Operator actions on the outbox: requeue or skip a dead-lettered row; retention.

A dead-lettered business row keeps blocking the later rows of its attempt
(``ordering_key``): whether a refund may go out after a confirmation that never
arrived is a business decision, so the dispatcher waits for an operator.

- :func:`requeue` puts the row back to pending, due now, with its attempt count
  reset; the relay then delivers it before its successors.
- :func:`skip` gives up on the row: it is marked finished (``dispatched_at`` set,
  although nothing was published) so its successors flow; ``last_error`` says who
  skipped it and why.

Both resolve the row's open ``outbox:<message_id>:dead-letter`` escalation in the
same transaction and record who decided, why, and the row's dispatch fields
before and after in ``operator_actions`` (:mod:`paycore.operator_actions`).

:func:`purge_dispatched` is the retention job: it deletes rows dispatched before
``now - older_than`` and keeps their dedup keys in ``outbox_dedup_keys`` so a
late replay of their cause is still recognised (the migration's trigger makes an
insert of an archived key a no-op).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg

from paycore import escalations, queries
from paycore.errors import PaycoreError
from paycore.operator_actions import (
    ActionKind,
    OperatorAction,
    record_action,
    validate_operator,
    validate_reason,
)

OUTBOX = queries.load("outbox_messages")
DEDUP_KEYS = queries.load("outbox_dedup_keys")  # the archived keys of purged rows

# What an operator decision changes; recorded before and after.
DISPATCH_FIELDS = ("dead_lettered_at", "dispatched_at", "delivery_attempts", "next_attempt_at", "last_error")


class OutboxActionRefused(PaycoreError):
    """The row does not exist or is not in a state the action applies to."""


@dataclass(frozen=True)
class ActionResult:
    message_id: int
    action: str
    resolved_escalations: list[int]
    recorded: OperatorAction


async def _act(
    pool: asyncpg.Pool, message_id: int, action: ActionKind, *, operator: str, reason: str, now: datetime
) -> ActionResult:
    operator = validate_operator(operator)
    why = validate_reason(action, reason)
    assert why is not None  # both outbox actions need a reason
    async with pool.acquire() as conn, conn.transaction():
        row = await OUTBOX.lock_message.fetchrow(conn, message_id=message_id)
        if row is None:
            raise OutboxActionRefused(f"outbox message {message_id} does not exist")
        if row["dispatched_at"] is not None:
            raise OutboxActionRefused(f"outbox message {message_id} is already dispatched")
        if row["dead_lettered_at"] is None:
            raise OutboxActionRefused(
                f"outbox message {message_id} is not dead-lettered (it is pending or backing off; "
                "the dispatcher is still trying it)")
        if action is ActionKind.OUTBOX_REQUEUE:
            after = await OUTBOX.requeue.fetchrow(conn, message_id=message_id, now=now)
        else:
            note = f"skipped by operator {operator}: {why}; last error: {row['last_error']}"
            after = await OUTBOX.skip.fetchrow(conn, message_id=message_id, now=now, note=note[:2000])
        assert after is not None  # the row is locked and undispatched
        resolved = await escalations.resolve_by_key(conn, escalations.dead_letter_key(message_id), now)
        recorded = await record_action(
            conn, action=action, operator=operator, reason=why, now=now,
            before={f: row[f] for f in DISPATCH_FIELDS}, after={f: after[f] for f in DISPATCH_FIELDS},
            message_id=message_id, attempt_id=row["attempt_id"],
            escalation_id=resolved[0] if resolved else None,  # one open episode per key
            detail={"resolved_escalations": resolved},
        )
    short = "requeue" if action is ActionKind.OUTBOX_REQUEUE else "skip"
    return ActionResult(message_id, short, resolved, recorded)


async def requeue(
    pool: asyncpg.Pool, message_id: int, *, operator: str, reason: str, now: datetime
) -> ActionResult:
    """Put a dead-lettered row back to pending, due ``now``, attempts reset."""
    return await _act(pool, message_id, ActionKind.OUTBOX_REQUEUE, operator=operator, reason=reason, now=now)


async def skip(
    pool: asyncpg.Pool, message_id: int, *, operator: str, reason: str, now: datetime
) -> ActionResult:
    """Give up on a dead-lettered row so the rows after it in its attempt can flow."""
    return await _act(pool, message_id, ActionKind.OUTBOX_SKIP, operator=operator, reason=reason, now=now)


@dataclass(frozen=True)
class PurgeResult:
    deleted: int
    archived: int
    keys_expired: int


async def purge_dispatched(
    pool: asyncpg.Pool, *, now: datetime, older_than: timedelta, batch_size: int = 5_000,
    key_horizon: timedelta | None = None,
) -> PurgeResult:
    """Delete rows dispatched before ``now - older_than``, archiving their dedup keys.

    Runs in batches of ``batch_size``, one transaction each, until nothing is left.
    ``key_horizon`` (default: keep forever) expires archived keys older than it.
    """
    cutoff = now - older_than
    deleted = archived = 0
    while True:
        async with pool.acquire() as conn, conn.transaction():
            row = await OUTBOX.purge_dispatched.fetchrow(conn, cutoff=cutoff, batch_size=batch_size, now=now)
        assert row is not None
        deleted += int(row["deleted"])
        archived += int(row["archived"])
        if int(row["deleted"]) < batch_size:
            break
    expired = 0
    if key_horizon is not None:
        status = await DEDUP_KEYS.expire.execute(pool, cutoff=now - key_horizon)
        expired = int(status.split()[-1])
    return PurgeResult(deleted, archived, expired)
