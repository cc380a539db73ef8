"""Durable escalations: one open episode per reason key, alerted through the outbox.

Raising inserts ``payment_escalations`` with ``ON CONFLICT (escalation_key) WHERE
resolved_at IS NULL DO NOTHING``; only a newly opened episode queues an
operator alert, keyed by the episode (``escalation:<id>:initial``) rather than by
the reusable reason, so a condition that recurs after resolution alerts again.

:func:`acknowledge` and :func:`resolve` are operator actions: each runs in its own
transaction and records itself in ``operator_actions`` (:mod:`paycore.operator_actions`).
Reminders are claimed here too (:func:`due_reminders`, :func:`remind`); recovery's
reminder job only decides which interval applies. Every escalation key is built here.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg

from paycore import outbox, queries
from paycore.domain import EscalationReason, reason_text
from paycore.errors import PaycoreError
from paycore.operator_actions import (
    ActionKind,
    OperatorAction,
    record_action,
    validate_operator,
    validate_reason,
)


def attempt_key(attempt_id: UUID, reason: str, evidence_key: str | None = None) -> str:
    """``attempt:<id>:<reason>``, plus ``:<evidence key>`` when a notification caused it (one
    episode per piece of evidence, so two distinct notifications alert separately)."""
    key = f"attempt:{attempt_id}:{reason}"
    return f"{key}:{evidence_key}" if evidence_key else key


def operation_key(operation_id: UUID, reason: str) -> str:
    """``operation:<id>:<reason>``: a capture's, cancel's or refund's own episode (one per reason)."""
    return f"operation:{operation_id}:{reason}"


def unmatched_key(provider_account: str, notification_key: str | None, provider_payment_id: str | None,
                  reference: str | None) -> str:
    """A notification no attempt matched: never per delivery (by its key, else its payment id
    or reference); without any of them, one episode per account."""
    subject = notification_key or provider_payment_id or reference
    if subject is None:
        return f"notification:{provider_account}:unmatched-unidentified"
    return f"notification:{provider_account}:{subject}:unmatched"


def identity_conflict_key(provider_account: str, notification_key: str | None,
                          provider_payment_id: str | None) -> str:
    """A notification whose reference and payment id name two attempts (a conflict needs both)."""
    subject = notification_key or provider_payment_id
    if subject is None:
        raise ValueError("an identity conflict requires a provider payment id")
    return f"notification:{provider_account}:{subject}:identity-conflict"


def unparseable_key(provider_account: str, body_sha256: str) -> str:
    """A verified notification PostgreSQL cannot store as parsed: one episode per body
    (redeliveries, even under new webhook-ids, carry the same bytes)."""
    return f"notification:{provider_account}:unparseable:{body_sha256}"


def dead_letter_key(message_id: int) -> str:
    """An outbox row the relay gave up on (and its operator decision, which resolves it)."""
    return f"outbox:{message_id}:dead-letter"


def consumer_poison_key(consumer_group: str, topic: str, partition: int, offset: int) -> str:
    """A record a consumer can never handle: one episode per record (a redelivery finds it open)."""
    return f"consumer:{consumer_group}:poison:{topic}/{partition}@{offset}"


ESCALATIONS = queries.load("payment_escalations")  # every statement on the escalations table


async def raise_escalation(
    conn: asyncpg.Connection,
    *,
    key: str,
    reason: EscalationReason,
    qualifier: str | None = None,
    now: datetime,
    attempt_id: UUID | None = None,
    reminder_interval: timedelta,
    detail: dict[str, Any] | None = None,
) -> int | None:
    """Open an episode for ``key`` unless one is open; returns the new id or None.

    ``reason`` is a member of the one vocabulary; ``qualifier`` narrows it as stored
    (``resend-not-safe:<condition>``, ``settlement-exception:<kind>``: :func:`reason_text`).

    Must run inside the caller's transaction, after the attempt row is locked or
    conditionally written, so the alert commits with its cause. The first
    reminder falls due after ``reminder_interval``: every caller passes
    ``Settings.reminder_interval`` (``PAYCORE_REMINDER_INTERVAL_S``), whichever
    service raised the episode.
    """
    text = reason_text(reason, qualifier)
    row = await ESCALATIONS.raise_episode.fetchrow(
        conn, escalation_key=key, attempt_id=attempt_id, reason=text, detail=detail or {}, now=now,
        next_reminder_at=now + reminder_interval,
    )
    if row is None:
        return None
    escalation_id: int = row["escalation_id"]
    await outbox.enqueue(
        conn,
        dedup_key=outbox.initial_alert_key(escalation_id),
        kind="operator-alert",
        payload={
            "escalation_id": escalation_id,
            "escalation_key": key,
            "reason": text,
            "attempt_id": str(attempt_id) if attempt_id else None,
            "alert": "initial",
            "provider_account": row["provider_account"],
        },
        now=now,
        attempt_id=attempt_id,
        ordering=None,
    )
    return escalation_id


async def resolve_for_attempt(conn: asyncpg.Connection, attempt_id: UUID, now: datetime) -> list[int]:
    """Close every open episode of an attempt (its payment is settled); no reminder follows."""
    rows = await ESCALATIONS.resolve_for_attempt.fetch(conn, attempt_id=attempt_id, now=now)
    return [r["escalation_id"] for r in rows]


# -- reminders: due episodes, and one conditional claim per reminder ---------------------------


async def due_reminders(conn: asyncpg.Connection | asyncpg.Pool, now: datetime,
                        limit: int) -> list[asyncpg.Record]:
    """Open episodes whose next reminder is due at ``now``, the longest overdue first."""
    rows: list[asyncpg.Record] = await ESCALATIONS.due_reminders.fetch(conn, now=now, limit=limit)
    return rows


async def remind(conn: asyncpg.Connection, episode: asyncpg.Record, *, now: datetime,
                 next_reminder_at: datetime) -> int | None:
    """Queue the next reminder of a due ``episode`` (a :func:`due_reminders` row) and schedule the
    one after it, in the caller's transaction; its number, or ``None`` when another instance
    reminded first or the episode was resolved meanwhile (nothing is queued)."""
    count: int | None = await ESCALATIONS.claim_reminder.fetchval(
        conn, escalation_id=episode["escalation_id"], due_at=episode["next_reminder_at"],
        next_reminder_at=next_reminder_at)
    if count is None:
        return None
    await outbox.enqueue(
        conn, dedup_key=outbox.reminder_alert_key(episode["escalation_id"], count), kind="operator-alert",
        payload={"escalation_id": episode["escalation_id"], "escalation_key": episode["escalation_key"],
                 "reason": episode["reason"], "alert": "reminder", "reminder": count,
                 "attempt_id": str(episode["attempt_id"]) if episode["attempt_id"] else None,
                 "provider_account": episode["provider_account"]},
        now=now, attempt_id=episode["attempt_id"], ordering=None,
    )
    return count


class EscalationActionRefused(PaycoreError):
    """The episode does not exist or is already resolved; nothing was changed or recorded."""


# What an operator action on an episode changes; recorded before and after.
SCHEDULE_FIELDS = ("acknowledged_at", "resolved_at", "next_reminder_at")


async def _lock_open_episode(conn: asyncpg.Connection, escalation_id: int) -> asyncpg.Record:
    row = await ESCALATIONS.lock_schedule.fetchrow(conn, escalation_id=escalation_id)
    if row is None:
        raise EscalationActionRefused(f"escalation {escalation_id} does not exist")
    if row["resolved_at"] is not None:
        raise EscalationActionRefused(f"escalation {escalation_id} is not open (resolved at "
                                      f"{row['resolved_at'].isoformat()})")
    return row


async def _act(
    pool: asyncpg.Pool, escalation_id: int, action: ActionKind, change: queries.Query, *,
    operator: str, reason: str | None, now: datetime, **params: Any,
) -> OperatorAction:
    """Lock the open episode, change it, and record the action: one transaction.

    The record's foreign key takes KEY SHARE on the episode's attempt row, which no
    writer's NO KEY UPDATE blocks, so locking the episode first cannot deadlock with
    the order -> attempt -> escalation lock order.
    """
    operator = validate_operator(operator)
    reason = validate_reason(action, reason)
    async with pool.acquire() as conn, conn.transaction():
        before = await _lock_open_episode(conn, escalation_id)
        after = await change.fetchrow(conn, escalation_id=escalation_id, now=now, **params)
        assert after is not None  # the row is locked and open
        return await record_action(
            conn, action=action, operator=operator, reason=reason, now=now,
            before={f: before[f] for f in SCHEDULE_FIELDS}, after={f: after[f] for f in SCHEDULE_FIELDS},
            escalation_id=escalation_id, attempt_id=before["attempt_id"],
        )


async def acknowledge(
    pool: asyncpg.Pool, escalation_id: int, *, operator: str, reason: str | None, now: datetime,
    reminder_interval: timedelta,
) -> OperatorAction:
    """A person has seen it: resets the reminder schedule; open episodes only; recorded."""
    return await _act(pool, escalation_id, ActionKind.ESCALATION_ACKNOWLEDGE, ESCALATIONS.acknowledge,
                      operator=operator, reason=reason, now=now, next_reminder_at=now + reminder_interval)


async def resolve(
    pool: asyncpg.Pool, escalation_id: int, *, operator: str, reason: str, now: datetime
) -> OperatorAction:
    """Close an episode whose condition has ended; no reminder follows. Changes no attempt; recorded."""
    return await _act(pool, escalation_id, ActionKind.ESCALATION_RESOLVE, ESCALATIONS.resolve,
                      operator=operator, reason=reason, now=now)


async def lock_episode(conn: asyncpg.Connection, escalation_id: int) -> asyncpg.Record | None:
    """The whole episode row, locked for an operator's transaction (after the order and attempt)."""
    row: asyncpg.Record | None = await ESCALATIONS.lock_episode.fetchrow(conn, escalation_id=escalation_id)
    return row


async def close_episode(conn: asyncpg.Connection, escalation_id: int, now: datetime) -> asyncpg.Record | None:
    """Resolve one open episode inside the caller's transaction; its schedule after, or None if not open."""
    return await ESCALATIONS.resolve.fetchrow(conn, escalation_id=escalation_id, now=now)


async def resolve_by_key(conn: asyncpg.Connection, key: str, now: datetime) -> list[int]:
    """Close the open episode of ``key`` (a reconciliation ended its condition); its ids."""
    rows = await ESCALATIONS.resolve_by_key.fetch(conn, escalation_key=key, now=now)
    return [r["escalation_id"] for r in rows]
