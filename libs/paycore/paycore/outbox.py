"""Writing downstream work and alerts to the transactional outbox.

Rows are written in the same transaction as their cause. ``dedup_key`` names the
effect (``attempt:<id>:order-confirmation``), never the trigger and never a fresh
UUID, so the same effect reached by the endpoint, a notification or a lookup is
queued once. Business effects carry ``ordering_key = 'attempt:<id>'``; operator
alerts carry none so they never wait behind business rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from paycore import queries, tracing
from paycore.contracts import SCHEMA_VERSION

OUTBOX = queries.load("outbox_messages")  # every statement on the outbox, the relay's too


def _body(dedup_key: str, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    # Every payload names its contract (paycore.contracts); a caller may pass another version.
    return {"dedup_key": dedup_key, "kind": kind, "schema_version": SCHEMA_VERSION, **payload}


def effect_key(attempt_id: UUID, effect: str) -> str:
    """The dedup key of one business effect of one attempt."""
    return f"attempt:{attempt_id}:{effect}"


def ordering_key(attempt_id: UUID) -> str:
    return f"attempt:{attempt_id}"


def initial_alert_key(escalation_id: int) -> str:
    """The dedup key of an episode's first alert: the episode, not its reusable reason key, so a
    condition that recurs after resolution alerts again."""
    return f"escalation:{escalation_id}:initial"


def reminder_alert_key(escalation_id: int, reminder: int) -> str:
    """The dedup key of an episode's ``reminder``-th reminder (its stored count: sent once)."""
    return f"escalation:{escalation_id}:reminder:{reminder}"


async def enqueue(
    conn: asyncpg.Connection,
    *,
    dedup_key: str,
    kind: str,
    payload: dict[str, Any],
    now: datetime,
    attempt_id: UUID | None = None,
    ordering: str | None = None,
) -> int | None:
    """Queue one message unless its effect is already queued; returns the new id or None."""
    body = _body(dedup_key, kind, payload)
    # The trace this row belongs to, for the relay to continue (None when tracing is off).
    message_id: int | None = await OUTBOX.enqueue.fetchval(
        conn, dedup_key=dedup_key, attempt_id=attempt_id, ordering_key=ordering, kind=kind, payload=body,
        now=now, traceparent=tracing.current_traceparent(),
    )
    return message_id


async def enqueue_effects(
    conn: asyncpg.Connection,
    *,
    attempt_id: UUID,
    effects: Sequence[str],
    payload: dict[str, Any],
    now: datetime,
) -> None:
    """Queue business effects of an attempt, in per-attempt order (the order given), each
    unless already queued; one statement however many."""
    if not effects:
        return
    keys = [effect_key(attempt_id, effect) for effect in effects]
    bodies = [_body(key, effect, {"attempt_id": str(attempt_id), **payload})
              for key, effect in zip(keys, effects, strict=True)]
    await OUTBOX.enqueue_effects.execute(
        conn, attempt_id=attempt_id, ordering_key=ordering_key(attempt_id), now=now,
        traceparent=tracing.current_traceparent(), dedup_keys=keys, kinds=list(effects), payloads=bodies)


async def enqueue_effect(
    conn: asyncpg.Connection,
    *,
    attempt_id: UUID,
    effect: str,
    payload: dict[str, Any],
    now: datetime,
) -> int | None:
    """Queue one business effect of an attempt, in per-attempt order; returns the new id or None."""
    return await enqueue(
        conn,
        dedup_key=effect_key(attempt_id, effect),
        kind=effect,
        payload={"attempt_id": str(attempt_id), **payload},
        now=now,
        attempt_id=attempt_id,
        ordering=ordering_key(attempt_id),
    )


# -- the relay's marks, in its pass's transaction (the dispatcher's relay) ---
# Each is conditional on the row still being pending (outbox_messages.sql).


async def mark_dispatched(conn: asyncpg.Connection, message_ids: list[int], now: datetime) -> None:
    """The broker acknowledged these rows: they are finished."""
    await OUTBOX.mark_dispatched.execute(conn, message_ids=message_ids, now=now)


async def mark_failed(conn: asyncpg.Connection, message_id: int, error: str, *, retry_at: datetime) -> None:
    """A send of this row failed: count it, keep the error, try again at ``retry_at``."""
    await OUTBOX.mark_failed.execute(conn, message_id=message_id, error=error, retry_at=retry_at)


async def mark_dead_lettered(conn: asyncpg.Connection, message_id: int, error: str, now: datetime) -> None:
    """The relay gives up on this row: it waits for an operator (``paycore.outbox_admin``) and keeps
    blocking its attempt's later rows; the caller raises its escalation in the same transaction."""
    await OUTBOX.mark_dead_lettered.execute(conn, message_id=message_id, error=error, now=now)
