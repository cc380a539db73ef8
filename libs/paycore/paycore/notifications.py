"""Provider notifications: the durable record, and applying one.

A :class:`~paycore.providers.base.Notification` is provider-neutral and its
deduplication key is its provider's rule (``Provider.notification_key``); this
module names no provider: a stored event is re-parsed by the provider of the
account that verified it (:func:`paycore.providers.registry.notification_format`).

- :func:`record_notification`: the first write of the handler's transaction,
  ``ON CONFLICT (provider_account, notification_key) DO NOTHING``.
- :func:`apply_notification`: the same conditional transition every writer uses
  (:func:`paycore.attempts.apply_outcome`), plus lifecycle effects (refunds).
- :func:`attach_notification`: the authorised reconciliation of a stored
  unmatched notification with its attempt; :func:`preview_attach` says what it
  would do, from the same checks and the very function the writer executes
  (:func:`paycore.domain.decide_outcome`), without writing.

The service that receives webhooks (``services/webhooks``) verifies, matches and
escalates; the rules for what a notification *does* live here, once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg
import orjson

from paycore import escalations, outbox
from paycore.attempts import Attempt, OutcomeResult, apply_outcome, get_attempt, judge_outcome
from paycore.domain import AttemptState, Decision, OrderFacts, Verdict, decide_outcome
from paycore.errors import PaycoreError, TransitionRefused
from paycore.events import HISTORY, EventKind, append_event
from paycore.operations import refunds_of_ours
from paycore.operator_actions import (
    ActionKind,
    OperatorAction,
    record_action,
    validate_operator,
    validate_reason,
)
from paycore.orders import find_order, lock_order
from paycore.providers.base import KEY_VERSION, InvalidNotification, Notification
from paycore.providers.registry import notification_format

log = logging.getLogger("paycore.notifications")

HANDLER_ACTOR = "notification-handler"


def event_detail(n: Notification, key: str | None) -> dict[str, Any]:
    """What the event row keeps: the canonical fields (so keys can be recomputed) and the event."""
    basis = "event-id" if n.event_id is not None else ("synthesized-" + KEY_VERSION if key else "none")
    return {
        "key_basis": basis,
        "canonical": n.canonical_fields(),
        "event_id": n.event_id,
        "type": n.event_type,
        "sequence": n.sequence,
        "provider_payment_id": n.payment_id,
        "reference": n.reference,
        "status": n.status,
        "amount_minor": n.amount_minor,
        "currency": n.currency,
        "payload_account": n.payload_account,
        "payload_livemode": n.payload_livemode,
        "object_account": n.object_account,
        "object_livemode": n.object_livemode,
        "event": n.event,
    }


async def is_recorded(conn: asyncpg.Connection | asyncpg.Pool, *, provider_account: str, key: str) -> bool:
    """Whether a notification with this key is already committed for this account.

    Only a shortcut for redeliveries: a ``False`` may be stale by the time the
    caller records, so :func:`record_notification` stays the arbiter.
    """
    return bool(await HISTORY.notification_recorded.fetchval(conn, account=provider_account,
                                                             notification_key=key))


@dataclass(frozen=True)
class Recorded:
    """The result of recording: a new event row, or a duplicate of a committed one."""

    event_id: int | None

    @property
    def is_duplicate(self) -> bool:
        return self.event_id is None


async def record_notification(
    conn: asyncpg.Connection, *, provider_account: str, key: str | None, attempt_id: UUID | None,
    detail: dict[str, Any], now: datetime, actor: str = HANDLER_ACTOR, operation_id: UUID | None = None,
) -> Recorded:
    """Record a notification first in the handler's transaction (about ``operation_id``, when
    it is a capture's, cancel's or refund's).

    A keyed insert that conflicts waits for the other transaction holding the
    same key: if it commits, this returns a duplicate; if it rolls back, this
    one proceeds. An unkeyed notification is always a new row.
    """
    if key is None:
        event_id = await HISTORY.insert_unkeyed_notification.fetchval(
            conn, attempt_id=attempt_id, operation_id=operation_id, now=now, actor=actor,
            account=provider_account, detail=detail)
        return Recorded(event_id)
    event_id = await HISTORY.insert_keyed_notification.fetchval(
        conn, attempt_id=attempt_id, operation_id=operation_id, now=now, actor=actor,
        account=provider_account, notification_key=key, detail=detail)
    return Recorded(event_id)


# -- applying ------------------------------------------------------------------------------

async def apply_notification(
    conn: asyncpg.Connection, *, attempt: Attempt, n: Notification, key: str | None, now: datetime,
    reminder_interval: timedelta, recheck_after_s: float, actor: str = HANDLER_ACTOR,
) -> OutcomeResult:
    """Apply verified, matched evidence to its attempt, inside the caller's transaction.

    Through the one writer of outcomes (:func:`paycore.attempts.apply_outcome`):
    the evidence is judged first, and evidence about another payment resolves
    nothing and is escalated under the verdict's reason, keyed by this
    notification. Final outcomes resolve a Started or Unknown attempt through the
    same conditional write as checkout and recovery (same effect-keyed outbox
    rows, same escalation resolution); processing and requires_action move
    Unknown to Started and store the action. A refund of a Succeeded attempt is
    recorded and, when more was refunded than paycore's own refunds hold (one made
    elsewhere), queues ``attempt:<id>:refund-request`` after the confirmation.
    """
    recorded = await apply_outcome(
        conn, attempt.attempt_id, n.outcome, now=now, actor=actor, recheck_after_s=recheck_after_s,
        reminder_interval=reminder_interval, from_send=False, evidence_key=key,
    )
    result = recorded.attempt
    if not recorded.verdict.accepted:
        return recorded
    if (n.is_refund and result.state is AttemptState.SUCCEEDED and result.provider_payment_id == n.payment_id
            and n.amount_refunded > await refunds_of_ours(conn, result.attempt_id)):
        # A refund made elsewhere (the provider's dashboard): paycore's own refunds announce
        # themselves (refund-succeeded), so one of them reported on the payment is not this.
        await outbox.enqueue_effect(
            conn, attempt_id=result.attempt_id, effect="refund-request", now=now,
            payload={"order_id": result.order_id, "amount_refunded_minor": n.amount_refunded,
                     "currency": result.currency, "provider_account": result.provider_account,
                     "provider_payment_id": result.provider_payment_id},
        )
    return recorded


class AttachRefused(PaycoreError):
    """The stored notification cannot be attached to that attempt."""


@dataclass(frozen=True)
class Attached:
    """The attempt after the attachment, and the operator action that records it."""

    attempt: Attempt
    recorded: OperatorAction


def _attempt_fields(a: Attempt) -> dict[str, Any]:
    return {"state": a.state.value, "version": a.version, "provider_payment_id": a.provider_payment_id}


def _refusal(event_id: int, row: asyncpg.Record | None, attempt: Attempt, *, attached: bool) -> str | None:
    """Why this stored notification cannot be attached to ``attempt`` at all, before its outcome is
    judged; ``None`` when it can be tried. The attach and its preview ask this same question."""
    if row is None:
        return f"no stored notification {event_id}"
    if row["attempt_id"] is not None:
        return f"notification {event_id} was matched on arrival"
    if row["provider_account"] != attempt.provider_account:
        return "the notification was verified for another provider account"
    if attached:
        return f"notification {event_id} is already attached"
    if "event" not in row["detail"]:  # kept as raw bytes: a person reads it, nothing applies it
        return (f"notification {event_id} was stored unparsed ({row['detail'].get('unparseable')}); "
                "it cannot be applied")
    if attempt.state is AttemptState.NOT_STARTED:  # never sent: no payment of it can exist
        return f"attempt {attempt.attempt_id} was never sent (NotStarted); no notification can be about it"
    return None


async def _attached(db: asyncpg.Pool | asyncpg.Connection, event_id: int, attempt_id: UUID) -> bool:
    """Whether stored notification ``event_id`` was already attached to the attempt."""
    # The attachment's detail holds the id as JSON; ->> compares it as text.
    return bool(await HISTORY.attachment.fetchval(db, attempt_id=attempt_id, event_id=str(event_id)))


def _stored(row: asyncpg.Record) -> Notification:
    """The stored event as evidence for the attempt the operator names: its reference is not judged.
    :class:`AttachRefused` if its provider cannot read it (any more)."""
    # In its provider's wire format: the verified account's provider re-parses it.
    stored_event = orjson.dumps(row["detail"]["event"])
    try:
        n = notification_format(row["provider_account"]).parse_notification(stored_event)
    except InvalidNotification as exc:
        raise AttachRefused(f"notification {row['event_id']} cannot be read as its provider's event "
                            f"({exc}); it cannot be applied") from None
    return n.identified_otherwise()


def _not_evidence(event_id: int, attempt_id: UUID, verdict: Verdict) -> str:
    return (f"notification {event_id} is not evidence about attempt {attempt_id}: "
            f"{verdict.reason} ({verdict.attribute})")


def _not_applicable(event_id: int, attempt_id: UUID, why: str) -> str:
    return f"notification {event_id} cannot be applied to attempt {attempt_id}: {why}"


async def attach_notification(
    pool: asyncpg.Pool, *, event_id: int, attempt_id: UUID, operator: str, reason: str, now: datetime,
    reminder_interval: timedelta, recheck_after_s: float,
) -> Attached:
    """Apply a stored unmatched notification to its attempt (authorised reconciliation).

    The notification is not pretended newly delivered: its stored event stays as
    it is (history is append-only), a ``transition`` event records the
    attachment by ``operator``, the outcome goes through the normal conditional
    transition, and the notification's unmatched escalation is resolved. The
    operator action (the attempt's state, version and provider payment id before
    and after) is recorded in the same transaction.
    """
    operator = validate_operator(operator)
    why = validate_reason(ActionKind.NOTIFICATION_ATTACH, reason)
    async with pool.acquire() as conn, conn.transaction():
        order_id = (await get_attempt(conn, attempt_id)).order_id
        await lock_order(conn, order_id)
        attempt = await get_attempt(conn, attempt_id)  # as it stands under the order lock
        row = await HISTORY.notification.fetchrow(conn, event_id=event_id)
        refusal = _refusal(event_id, row, attempt, attached=await _attached(conn, event_id, attempt_id))
        if refusal is not None:
            raise AttachRefused(refusal)
        assert row is not None
        n = _stored(row)
        key: str | None = row["notification_key"]
        await append_event(
            conn, attempt_id=attempt_id, kind=EventKind.TRANSITION, actor=f"operator-{operator}", now=now,
            detail={"attached_notification": event_id, "notification_key": key},
        )
        try:
            applied = await apply_notification(conn, attempt=attempt, n=n, key=key, now=now,
                                               reminder_interval=reminder_interval,
                                               recheck_after_s=recheck_after_s, actor=f"operator-{operator}")
        except TransitionRefused as exc:  # the transition table does not allow it: a refusal, not an error
            raise AttachRefused(_not_applicable(event_id, attempt_id, str(exc))) from None
        if not applied.verdict.accepted:  # rolls the whole attachment back
            raise AttachRefused(_not_evidence(event_id, attempt_id, applied.verdict))
        result = applied.attempt
        resolved = await escalations.resolve_by_key(
            conn, escalations.unmatched_key(attempt.provider_account, key, n.payment_id, n.reference), now)
        recorded = await record_action(
            conn, action=ActionKind.NOTIFICATION_ATTACH, operator=operator, reason=why, now=now,
            before=_attempt_fields(attempt), after=_attempt_fields(result),
            attempt_id=attempt_id, event_id=event_id,
            escalation_id=resolved[0] if resolved else None,  # one open episode per key
            detail={"notification_key": key, "resolved_escalations": resolved},
        )
        return Attached(result, recorded)


@dataclass(frozen=True)
class AttachPreview:
    """What :func:`attach_notification` would do, decided without writing (:func:`preview_attach`).

    ``refused``: the message the attach would be refused with (nothing would change). Otherwise
    ``foreseen`` is the decision the writer would execute (:func:`paycore.domain.decide_outcome`),
    ``refund_request`` whether a refund request would be queued, and ``unmatched_escalation`` the
    notification's open unmatched episode that the attach resolves.
    """

    attempt: Attempt
    refused: str | None
    foreseen: Decision | None = None
    refund_request: bool = False
    unmatched_escalation: int | None = None

    def describe(self) -> str:
        """``Unknown → Succeeded, order Paid; queues order-confirmation, …``, or ``Refused: …``."""
        if self.refused is not None:
            return f"Refused: {self.refused}"
        f = self.foreseen
        assert f is not None
        if not f.written:
            parts = [f"{f.before} stays {f.after}: the attempt does not change"]
        else:
            parts = [f"{f.before} → {f.after}" + (", order Paid" if f.order_paid else "")]
        effects = [*f.effects, *(["refund-request"] if self.refund_request else [])]
        if effects:
            parts.append("queues " + ", ".join(effects))
        if f.escalations:
            parts.append("raises " + ", ".join(e.text for e in f.escalations))
        if f.resolves_escalations:
            parts.append("resolves any open escalation of the attempt")
        if self.unmatched_escalation is not None:
            parts.append(f"resolves the notification's escalation {self.unmatched_escalation}")
        return "; ".join(parts)


async def preview_attach(db: asyncpg.Pool | asyncpg.Connection, *, event_id: int, attempt_id: UUID,
                         now: datetime, recheck_after_s: float, operator: str = "preview") -> AttachPreview:
    """What attaching stored notification ``event_id`` to ``attempt_id`` would do, as things stand:
    the attach's own checks and evidence verdict, and the decision the writer would execute
    (:func:`paycore.domain.decide_outcome`, the same function). Reads only; raises
    :class:`paycore.errors.NotFound` for no such attempt."""
    attempt = await get_attempt(db, attempt_id)
    row = await HISTORY.notification.fetchrow(db, event_id=event_id)
    refusal = _refusal(event_id, row, attempt, attached=await _attached(db, event_id, attempt_id))
    if refusal is not None:
        return AttachPreview(attempt, refusal)
    assert row is not None
    try:
        n = _stored(row)
    except AttachRefused as exc:
        return AttachPreview(attempt, str(exc))
    verdict = await judge_outcome(db, attempt, n.outcome)
    if not verdict.accepted:
        return AttachPreview(attempt, _not_evidence(event_id, attempt_id, verdict))
    order = await find_order(db, attempt.order_id)
    assert order is not None  # an attempt's order is never deleted (foreign key)
    foreseen = decide_outcome(attempt, n.outcome, verdict, now, recheck_after_s=recheck_after_s,
                              order=OrderFacts(order.status, order.cancel_requested_at is not None,
                                          order.capture == "manual"),
                              actor=f"operator-{operator}")
    if foreseen.refused is not None:
        return AttachPreview(attempt, _not_applicable(event_id, attempt_id, foreseen.refused), foreseen)
    # apply_notification's refund rule, on the payment id the attempt would then hold (a write
    # keeps a recorded id: COALESCE).
    payment_id = ((attempt.provider_payment_id or n.outcome.provider_payment_id) if foreseen.written
                  else attempt.provider_payment_id)
    refund = (n.is_refund and foreseen.after is AttemptState.SUCCEEDED and payment_id == n.payment_id
              and n.amount_refunded > await refunds_of_ours(db, attempt.attempt_id))
    unmatched = await HISTORY.open_unmatched_episode.fetchval(db, escalation_key=escalations.unmatched_key(
        attempt.provider_account, row["notification_key"], n.payment_id, n.reference))
    return AttachPreview(attempt, None, foreseen, refund_request=refund, unmatched_escalation=unmatched)
