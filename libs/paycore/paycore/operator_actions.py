"""Who did what: the append-only record of operator actions (``operator_actions``).

Every operator command -- acknowledging or resolving an escalation, attaching a
stored notification, requeueing or skipping a dead-lettered outbox row, closing a
dead end as not charged (:mod:`paycore.dead_ends`), resolving a conflict by choosing
the owner (:mod:`paycore.conflicts`), requesting, approving or rejecting a refund
(:mod:`paycore.operator_refunds`) -- calls
:func:`record_action` inside the transaction that performs it, so the record
commits with the action or not at all; a refused action records nothing. The
database refuses UPDATE, DELETE and TRUNCATE on the table.

``operator`` is an operator *handle* (``alice``, ``ops@example``), the name a
person acts under on the console: short (at most 64 characters), printable, and
nothing more personal than that. ``reason`` is the operator's own note; it is
stored and shown, never logged.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import asyncpg
import orjson

from paycore import queries
from paycore.errors import PaycoreError

log = logging.getLogger("paycore.operator_actions")

ACTIONS = queries.load("operator_actions")

OPERATOR_MAX_LENGTH = 64
REASON_MAX_LENGTH = 2000
DEFAULT_LIST_LIMIT = 50


class ActionKind(enum.StrEnum):
    """The vocabulary the database CHECKs (``ck_operator_action_kind``)."""

    ESCALATION_ACKNOWLEDGE = "escalation-acknowledge"
    ESCALATION_RESOLVE = "escalation-resolve"
    NOTIFICATION_ATTACH = "notification-attach"
    OUTBOX_REQUEUE = "outbox-requeue"
    OUTBOX_SKIP = "outbox-skip"
    ACCOUNT_APPLY = "account-apply"
    ATTEMPT_CLOSE_NOT_CHARGED = "attempt-close-not-charged"  # paycore.dead_ends (migration 0009)
    ESCALATION_RESOLVE_CONFLICT = "escalation-resolve-conflict"  # paycore.conflicts (migration 0009)
    OPERATOR_ADD = "operator-add"  # an operator account was added (paycore.operators)
    OPERATOR_DISABLE = "operator-disable"
    OPERATOR_PASSWORD = "operator-password"  # a new password; the account's other sessions end (0012)
    OPERATOR_ENABLE = "operator-enable"
    OPERATOR_ROLE = "operator-role"
    OPERATOR_END_SESSIONS = "operator-end-sessions"
    # paycore.operator_refunds (migration 0017): a refund sent at once or left for approval,
    # and a second operator's decision on one.
    REFUND_REQUEST = "refund-request"
    REFUND_APPROVE = "refund-approve"
    REFUND_REJECT = "refund-reject"


# An acknowledgement only says "I have seen it"; adding an account, a new password and ending
# sessions are their own reason (the record names who did it), and an approval carries the
# request's. Everything else says why.
REASON_OPTIONAL = frozenset({ActionKind.ESCALATION_ACKNOWLEDGE, ActionKind.OPERATOR_ADD,
                             ActionKind.OPERATOR_PASSWORD, ActionKind.OPERATOR_END_SESSIONS,
                             ActionKind.REFUND_APPROVE})


class InvalidOperatorAction(PaycoreError, ValueError):
    """The operator handle, the reason or the target is not acceptable; nothing was done."""


def validate_operator(name: str) -> str:
    """The handle without surrounding space; refuses empty, overlong or unprintable handles."""
    handle = name.strip()
    if not handle:
        raise InvalidOperatorAction("an operator name is required")
    if len(handle) > OPERATOR_MAX_LENGTH:
        raise InvalidOperatorAction(f"the operator name is longer than {OPERATOR_MAX_LENGTH} characters")
    if not handle.isprintable():
        raise InvalidOperatorAction("the operator name must be printable (no control or format characters)")
    return handle


def validate_reason(action: ActionKind, reason: str | None) -> str | None:
    """The reason without surrounding space, or None where the action allows none."""
    text = (reason or "").strip()
    if not text:
        if action in REASON_OPTIONAL:
            return None
        raise InvalidOperatorAction(f"{action.value} needs a reason")
    if len(text) > REASON_MAX_LENGTH:
        raise InvalidOperatorAction(f"the reason is longer than {REASON_MAX_LENGTH} characters")
    if not text.isprintable():
        raise InvalidOperatorAction("the reason must be one printable line (no control characters)")
    return text


@dataclass(frozen=True)
class OperatorAction:
    """One recorded action, as stored (timestamps in ``state_*`` are ISO 8601 text)."""

    action_id: int
    occurred_at: datetime
    operator: str
    action: ActionKind
    reason: str | None
    attempt_id: UUID | None
    escalation_id: int | None
    message_id: int | None
    event_id: int | None
    provider_account: str | None
    target_operator: str | None  # the operator account an operator-* action is about
    state_before: dict[str, Any]
    state_after: dict[str, Any]
    detail: dict[str, Any]

    @classmethod
    def from_record(cls, r: asyncpg.Record) -> OperatorAction:
        values = dict(r)
        values["action"] = ActionKind(values["action"])
        return cls(**values)

    @property
    def target(self) -> str:
        """``outbox message 5, escalation 9, attempt …``: the action's own target first."""
        parts = []
        if self.message_id is not None:
            parts.append(f"outbox message {self.message_id}")
        if self.event_id is not None:
            parts.append(f"notification {self.event_id}")
        if self.escalation_id is not None:
            parts.append(f"escalation {self.escalation_id}")
        if self.attempt_id is not None:
            parts.append(f"attempt {self.attempt_id}")
        if self.provider_account is not None:
            parts.append(f"provider account {self.provider_account}")
        if self.target_operator is not None:
            parts.append(f"operator account {self.target_operator}")
        return ", ".join(parts)

    def as_json(self) -> dict[str, Any]:
        return {
            "action_id": self.action_id,
            "occurred_at": self.occurred_at.isoformat(),
            "operator": self.operator,
            "action": self.action.value,
            "reason": self.reason,
            "attempt_id": str(self.attempt_id) if self.attempt_id else None,
            "escalation_id": self.escalation_id,
            "message_id": self.message_id,
            "event_id": self.event_id,
            "provider_account": self.provider_account,
            "target_operator": self.target_operator,
            "state_before": self.state_before,
            "state_after": self.state_after,
            "detail": self.detail,
        }


async def record_action(
    conn: asyncpg.Connection,
    *,
    action: ActionKind,
    operator: str,
    reason: str | None,
    now: datetime,
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    attempt_id: UUID | None = None,
    escalation_id: int | None = None,
    message_id: int | None = None,
    event_id: int | None = None,
    provider_account: str | None = None,
    target_operator: str | None = None,
    detail: Mapping[str, Any] | None = None,
) -> OperatorAction:
    """Record one action inside the caller's transaction, after the action succeeded.

    Refuses to run outside a transaction: a record committed apart from its
    action could claim something that was rolled back, or miss something done.
    """
    if not conn.is_in_transaction():
        raise InvalidOperatorAction("record_action must run inside the action's own transaction")
    handle = validate_operator(operator)
    why = validate_reason(action, reason)
    if all(t is None for t in (attempt_id, escalation_id, message_id, event_id, provider_account,
                               target_operator)):
        raise InvalidOperatorAction("an operator action needs a target")
    row = await ACTIONS.insert.fetchrow(
        conn, now=now, operator=handle, action=action.value, reason=why, attempt_id=attempt_id,
        escalation_id=escalation_id, message_id=message_id, event_id=event_id,
        provider_account=provider_account, target_operator=target_operator, state_before=dict(before),
        state_after=dict(after), detail=dict(detail or {}))
    assert row is not None
    recorded = OperatorAction.from_record(row)
    log.info("operator action %d: %s by %s on %s", recorded.action_id, recorded.action.value,
             recorded.operator, recorded.target)
    return recorded


async def list_actions(
    conn: asyncpg.Connection | asyncpg.Pool,
    *,
    attempt_id: UUID | None = None,
    escalation_id: int | None = None,
    operator: str | None = None,
    limit: int = DEFAULT_LIST_LIMIT,
) -> list[OperatorAction]:
    """Recorded actions matching every given filter, newest first."""
    if limit <= 0:
        raise InvalidOperatorAction("limit must be positive")
    who = operator.strip() if operator is not None else None
    rows = await ACTIONS.matching.fetch(conn, attempt_id=attempt_id, escalation_id=escalation_id,
                                        operator=who, limit=limit)
    return [OperatorAction.from_record(r) for r in rows]


# -- presentation (the paycore CLI) --------------------------------------------------------------

def _shown(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def describe(recorded: OperatorAction) -> list[str]:
    """The record as a few readable lines: who, what, on which target, why, before → after."""
    when = recorded.occurred_at.astimezone(UTC).isoformat()
    lines = [f"operator action {recorded.action_id}: {recorded.action.value} by {recorded.operator} "
             f"on {recorded.target} at {when}"]
    if recorded.reason is not None:
        lines.append(f"  reason: {recorded.reason}")
    before, after = recorded.state_before, recorded.state_after
    for field in [*before, *(k for k in after if k not in before)]:
        old, new = before.get(field), after.get(field)
        if old == new:
            lines.append(f"  {field}: {_shown(old)} (unchanged)")
        else:
            lines.append(f"  {field}: {_shown(old)} → {_shown(new)}")
    for key, value in recorded.detail.items():
        lines.append(f"  {key.replace('_', ' ')}: {_shown(value)}")
    return lines


TABLE_REASON_WIDTH = 60


def table(actions: list[OperatorAction]) -> list[str]:
    """Aligned columns ID, WHEN (UTC), OPERATOR, ACTION, TARGET, REASON; the reason shortened."""
    rows = [["ID", "WHEN (UTC)", "OPERATOR", "ACTION", "TARGET", "REASON"]]
    for a in actions:
        reason = a.reason or ""
        if len(reason) > TABLE_REASON_WIDTH:
            reason = reason[: TABLE_REASON_WIDTH - 1] + "…"
        rows.append([str(a.action_id), a.occurred_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"),
                     a.operator, a.action.value, a.target, reason])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
