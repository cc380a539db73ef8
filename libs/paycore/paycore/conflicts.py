"""Resolving an identity or provider-id conflict by choosing who owns the provider payment.

An ``identity-conflict`` (a notification whose reference and payment id name two
attempts) and a ``provider-id-conflict`` (evidence carrying a payment id other than the
one recorded, or one another attempt owns) resolve nothing on their own: a person
decides. :func:`resolve_conflict` records that decision:

- an owner: the stored notification the episode refers to is applied to that attempt
  through the normal conditional reconciliation path
  (:func:`paycore.notifications.apply_notification`, the one writer of outcomes), and
  the evidence rules of :mod:`paycore.evidence` still decide -- an owner whose amount,
  currency, account or recorded payment id disagrees is refused, nothing is written;
- neither: the episode is resolved with the reason, and no attempt changes.

Either way the episode is resolved and one ``escalation-resolve-conflict`` operator
action records it, in the same transaction. Closing the alert alone
(``paycore escalations resolve``) changes no attempt.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg
import orjson

from paycore import escalations
from paycore.attempt_row import Attempt, get_attempt
from paycore.db import transaction_on
from paycore.domain import EscalationReason
from paycore.errors import PaycoreError
from paycore.events import HISTORY, EventKind, append_event
from paycore.notifications import apply_notification
from paycore.operator_actions import (
    ActionKind,
    OperatorAction,
    record_action,
    validate_operator,
    validate_reason,
)
from paycore.orders import lock_order
from paycore.providers.registry import notification_format

CONFLICT_REASONS = (EscalationReason.IDENTITY_CONFLICT.value, EscalationReason.PROVIDER_ID_CONFLICT.value)


class ConflictResolutionRefused(PaycoreError):
    """The conflict cannot be resolved that way; ``str()`` says why. Nothing was changed or recorded."""


@dataclass(frozen=True)
class ConflictResolved:
    """The owner after the evidence was applied (None: neither), and the operator action."""

    escalation_id: int
    owner: Attempt | None
    recorded: OperatorAction


def candidates(episode: asyncpg.Record) -> list[UUID]:
    """The attempts the episode names, one of which may own the payment."""
    detail = episode["detail"]
    named = [detail.get("reference_attempt_id"), detail.get("provider_payment_id_attempt_id"),
             str(episode["attempt_id"]) if episode["attempt_id"] else None, detail.get("owned_by_attempt")]
    found: list[UUID] = []
    for value in named:
        if value is not None and UUID(value) not in found:
            found.append(UUID(value))
    return found


async def stored_evidence(conn: asyncpg.Connection, episode: asyncpg.Record) -> asyncpg.Record | None:
    """The stored notification the episode is about: an identity conflict names it in its detail;
    a provider-id conflict raised by a notification carries its key in the episode key
    (``attempt:<id>:provider-id-conflict:<notification key>``). ``None``: a lookup or a send
    answer raised it, and there is no stored notification to apply."""
    event_id = episode["detail"].get("notification_event_id")
    if event_id is not None:
        return await HISTORY.notification.fetchrow(conn, event_id=int(event_id))
    if episode["attempt_id"] is None:
        return None
    prefix = escalations.attempt_key(episode["attempt_id"], episode["reason"]) + ":"
    key: str = episode["escalation_key"]
    if not key.startswith(prefix) or key == prefix:
        return None
    attempt = await get_attempt(conn, episode["attempt_id"])
    return await HISTORY.notification_by_key.fetchrow(conn, account=attempt.provider_account,
                                                      notification_key=key[len(prefix):])


def _attempt_fields(a: Attempt) -> dict[str, Any]:
    return {"state": a.state.value, "version": a.version, "provider_payment_id": a.provider_payment_id}


def _schedule(row: asyncpg.Record) -> dict[str, Any]:
    return {f: row[f] for f in escalations.SCHEDULE_FIELDS}


async def _open_conflict(conn: asyncpg.Connection, escalation_id: int) -> asyncpg.Record:
    episode = await escalations.lock_episode(conn, escalation_id)
    if episode is None:
        raise ConflictResolutionRefused(f"escalation {escalation_id} does not exist")
    if episode["reason"] not in CONFLICT_REASONS:
        raise ConflictResolutionRefused(f"escalation {escalation_id} is {episode['reason']}, not an identity "
                                        f"or provider-id conflict; resolve it with `escalations resolve`")
    if episode["resolved_at"] is not None:
        raise ConflictResolutionRefused(f"escalation {escalation_id} is not open (resolved at "
                                        f"{episode['resolved_at'].isoformat()})")
    return episode


async def resolve_conflict(
    db: asyncpg.Pool | asyncpg.Connection, *, escalation_id: int, owner_attempt_id: UUID | None,
    operator: str, reason: str, now: datetime, reminder_interval: timedelta, recheck_after_s: float,
) -> ConflictResolved:
    """Resolve an open identity or provider-id conflict: ``owner_attempt_id`` owns the payment, or
    ``None`` for neither. One transaction; see the module's docstring.

    Raises :class:`ConflictResolutionRefused` (nothing changed or recorded) when the episode
    is not an open conflict, the owner is not one of the attempts it names, there is no
    stored notification to apply, or the evidence rules refuse the notification as evidence
    about the chosen owner.
    """
    operator = validate_operator(operator)
    why = validate_reason(ActionKind.ESCALATION_RESOLVE_CONFLICT, reason)
    async with transaction_on(db) as conn:
        if owner_attempt_id is None:
            episode = await _open_conflict(conn, escalation_id)
            after = await escalations.close_episode(conn, escalation_id, now)
            assert after is not None  # locked and open
            recorded = await record_action(
                conn, action=ActionKind.ESCALATION_RESOLVE_CONFLICT, operator=operator, reason=why, now=now,
                before=_schedule(episode), after=_schedule(after), escalation_id=escalation_id,
                attempt_id=episode["attempt_id"],
                detail={"owner": None, "candidates": [str(c) for c in candidates(episode)]},
            )
            return ConflictResolved(escalation_id, None, recorded)

        # The lock order of every writer: the owner's order, its attempt (in the outcome
        # write), then the episode.
        owner = await get_attempt(conn, owner_attempt_id)
        await lock_order(conn, owner.order_id)
        episode = await _open_conflict(conn, escalation_id)
        named = candidates(episode)
        if owner_attempt_id not in named:
            raise ConflictResolutionRefused(
                f"attempt {owner_attempt_id} is not named by escalation {escalation_id} "
                f"(it names {', '.join(str(c) for c in named)})")
        stored = await stored_evidence(conn, episode)
        if stored is None:
            raise ConflictResolutionRefused(
                f"escalation {escalation_id} refers to no stored notification (a lookup or a send answer "
                f"raised it); check at the provider, then resolve it with --neither")
        if stored["provider_account"] != owner.provider_account:
            raise ConflictResolutionRefused("the notification was verified for another provider account")
        if "event" not in stored["detail"]:
            raise ConflictResolutionRefused(f"notification {stored['event_id']} was stored unparsed; "
                                            f"it cannot be applied")
        owner = await get_attempt(conn, owner_attempt_id)  # as it stands under the order lock
        n = notification_format(stored["provider_account"]).parse_notification(
            orjson.dumps(stored["detail"]["event"]))
        if n.reference != owner.client_reference:
            # The operator identified the owner; the reference the notification carries is
            # the other attempt's and is not judged (as for a match by payment id).
            n = n.identified_otherwise()
        actor = f"operator-{operator}"
        await append_event(conn, attempt_id=owner_attempt_id, kind=EventKind.TRANSITION, actor=actor, now=now,
                           detail={"resolved_conflict": escalation_id,
                                   "applied_notification": stored["event_id"],
                                   "notification_key": stored["notification_key"]})
        applied = await apply_notification(conn, attempt=owner, n=n, key=stored["notification_key"], now=now,
                                           reminder_interval=reminder_interval,
                                           recheck_after_s=recheck_after_s, actor=actor)
        if not applied.verdict.accepted:  # rolls the whole resolution back
            raise ConflictResolutionRefused(
                f"notification {stored['event_id']} is not evidence about attempt {owner_attempt_id}: "
                f"{applied.verdict.reason} ({applied.verdict.attribute}); nothing was applied")
        after = await escalations.close_episode(conn, escalation_id, now)
        result = applied.attempt
        recorded = await record_action(
            conn, action=ActionKind.ESCALATION_RESOLVE_CONFLICT, operator=operator, reason=why, now=now,
            before={**_attempt_fields(owner), "escalation_resolved_at": episode["resolved_at"]},
            after={**_attempt_fields(result),
                   "escalation_resolved_at": after["resolved_at"] if after is not None else now},
            escalation_id=escalation_id, attempt_id=owner_attempt_id, event_id=stored["event_id"],
            detail={"owner": str(owner_attempt_id), "candidates": [str(c) for c in named],
                    "notification_key": stored["notification_key"]},
        )
        return ConflictResolved(escalation_id, result, recorded)
