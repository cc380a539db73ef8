"""What operators can see: read-only queries behind the console and ``paycore … list|show``.

It lives in the console, which shows it; the CLI (which depends on the console) imports it from
here. Its SQL is ``queries/inspection.sql``, each statement named.

Nothing here writes. Every function takes a connection (or pool) and, where
ages or windows matter, the caller's ``now`` -- the one clock. Listings are
keyset-paginated: the cursor is an opaque string (URL-safe base64 of the last
row's sort key), so a page never repeats or skips a row however many rows
arrive meanwhile; a cursor this module did not make is refused with
:class:`InvalidCursor`.

No card data, secrets or provider payloads are returned. An attempt's stored
request body may hold a payment-method token or a provider's encrypted card
fields, so it is shown only as its field names (:func:`request_field_names`),
never a value. A stored notification is shown as its identifiers (type, status,
payment id, reference, amount), never the provider's event it was parsed from.
History and escalation details keep their fields and those of the evidence
objects in them (ids, statuses, amounts: ``PaymentRecord.evidence()`` holds
no card data) and only name the fields of anything nested deeper
(:func:`identifiers_only`).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, TypeAlias
from urllib.parse import parse_qsl
from uuid import UUID

import asyncpg
import orjson

from paycore import escalations, events, operations, operator_refunds, queries
from paycore.domain import LIVE_STATES, AttemptState, Headroom
from paycore.errors import PaycoreError
from paycore.operator_actions import OperatorAction, list_actions
from paycore.operator_refunds import RefundApproval

DEFAULT_PAGE = 50
MAX_PAGE = 500
# Every action on one attempt or episode: far more than a person ever takes on one.
ACTIONS_SHOWN = 500
HOURS_CHARTED = 24
NESTING_SHOWN = 1  # a detail's own fields and the fields of the objects in it; deeper: names only

Conn: TypeAlias = asyncpg.Connection | asyncpg.Pool

QUERIES = Path(__file__).with_name("queries")  # the console's own named queries
READS = queries.load("inspection", directory=QUERIES)  # every statement here, and the pages' lookups


class InvalidCursor(PaycoreError, ValueError):
    """The cursor was not made by this listing (or was altered); no page is returned."""


# -- shared shapes ----------------------------------------------------------------------------


def jsonable(value: Any) -> Any:
    """Any result of this module as plain JSON values (dates and datetimes ISO 8601, ages in seconds)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, OperatorAction):
        return value.as_json()
    if isinstance(value, date):  # a datetime too
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def identifiers_only(detail: Mapping[str, Any], *, depth: int = 0) -> dict[str, Any]:
    """Scalars kept, and one level below them: the provider evidence a lookup or an escalation
    records (``payments``, ``reported_payment``: ids, statuses, amounts, accounts). Anything
    nested deeper is replaced by the sorted names of its fields (or a list by its length)."""
    shown: dict[str, Any] = {}
    for key, value in detail.items():
        if isinstance(value, Mapping):
            shown[key] = (identifiers_only(value, depth=depth + 1) if depth < NESTING_SHOWN
                          else {"fields": sorted(str(k) for k in value)})
        elif isinstance(value, list):
            shown[key] = ([identifiers_only(v, depth=depth + 1) if isinstance(v, Mapping) else v
                           for v in value] if depth < NESTING_SHOWN else {"items": len(value)})
        else:
            shown[key] = value
    return shown


def request_field_names(body: str) -> list[str]:
    """The names in a stored request body, never its values (they may hold a token or encrypted card
    fields): dotted paths of a JSON body, or the keys of a form-encoded one (Stripe's)."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return sorted({k for k, _ in parse_qsl(body, keep_blank_values=True)})
    names: list[str] = []

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}.{k}" if prefix else str(k))
        elif prefix:
            names.append(prefix)

    walk(parsed, "")
    return sorted(names)


def _encode_cursor(key: Sequence[Any]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(list(key))).decode("ascii")


def _decode_cursor(cursor: str, types: Sequence[type]) -> list[Any]:
    """The sort key back, checked against the listing's key types; else :class:`InvalidCursor`."""
    try:
        key = orjson.loads(base64.urlsafe_b64decode(cursor.encode("ascii")))
    except (binascii.Error, ValueError, UnicodeError):
        raise InvalidCursor("the cursor is not one this listing made") from None
    if not isinstance(key, list) or len(key) != len(types):
        raise InvalidCursor("the cursor is not one this listing made")
    decoded: list[Any] = []
    for value, kind in zip(key, types, strict=True):
        try:
            if kind is datetime:
                decoded.append(datetime.fromisoformat(value))
                if decoded[-1].tzinfo is None:
                    raise ValueError
            elif ((kind is bool and isinstance(value, bool)) or (kind is int and type(value) is int)
                  or (kind is str and isinstance(value, str))):
                decoded.append(value)
            else:
                raise ValueError
        except (TypeError, ValueError):
            raise InvalidCursor("the cursor is not one this listing made") from None
    return decoded


def _page_limit(limit: int) -> int:
    if not 0 < limit <= MAX_PAGE:
        raise ValueError(f"limit must be between 1 and {MAX_PAGE}")
    return limit


# -- the overview -----------------------------------------------------------------------------

AGE_BUCKETS = ("under_1m", "under_1h", "under_24h", "older")


@dataclass(frozen=True)
class StateAges:
    """Live attempts in one state, by age since the attempt was created."""

    state: str
    under_1m: int
    under_1h: int
    under_24h: int
    older: int

    @property
    def total(self) -> int:
        return self.under_1m + self.under_1h + self.under_24h + self.older


@dataclass(frozen=True)
class OldestUnknown:
    attempt_id: UUID
    created_at: datetime
    age: timedelta


@dataclass(frozen=True)
class EscalationTally:
    """Unresolved episodes under one reason or one provider account (``None``: the episode names none)."""

    key: str | None
    unacknowledged: int
    acknowledged: int


@dataclass(frozen=True)
class OutboxKind:
    kind: str
    pending: int
    dead_lettered: int
    oldest_pending_at: datetime | None


@dataclass(frozen=True)
class PausedScope:
    scope: str
    paused_until: datetime
    reason: str


@dataclass(frozen=True)
class HourCount:
    """One hour of the chart, ``[hour, hour + 1 h)``; the last hour ends at ``now``."""

    hour: datetime
    entered_unknown: int
    escalations_raised: int


@dataclass(frozen=True)
class Overview:
    at: datetime
    attempts: tuple[StateAges, ...]
    oldest_unknown: OldestUnknown | None
    escalations_by_reason: tuple[EscalationTally, ...]
    escalations_by_account: tuple[EscalationTally, ...]
    outbox: tuple[OutboxKind, ...]
    paused_scopes: tuple[PausedScope, ...]
    last_24h: tuple[HourCount, ...]


def first_charted_hour(now: datetime) -> datetime:
    """The start of the oldest of the 24 charted hours: the chart's last hour is the one ``now`` is in."""
    return now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=HOURS_CHARTED - 1)


def _tallies(rows: Sequence[asyncpg.Record], column: str) -> tuple[EscalationTally, ...]:
    counts: dict[str | None, list[int]] = {}
    for r in rows:
        c = counts.setdefault(r[column], [0, 0])
        c[0] += r["unacknowledged"]
        c[1] += r["acknowledged"]
    ordered = sorted(counts.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))
    return tuple(EscalationTally(k, u, a) for k, (u, a) in ordered)


async def overview(conn: Conn, now: datetime) -> Overview:
    """The state of the system at ``now``: live attempts by age, the oldest Unknown, unresolved
    escalations by reason and account, the outbox backlog, paused provider scopes, and the last
    24 hours of attempts entering Unknown and escalations raised, per hour."""
    ages: dict[str, list[int]] = {s.value: [0, 0, 0, 0] for s in AttemptState if s in LIVE_STATES}
    for r in await READS.live_attempts_by_age.fetch(conn, now=now):
        ages[r["state"]][r["bucket"]] = r["n"]
    oldest = await READS.oldest_unknown.fetchrow(conn)
    open_rows = await READS.open_escalations_by_reason_and_account.fetch(conn)
    start = first_charted_hour(now)
    unknown = {r["hour"]: r["n"]
               for r in await READS.entered_unknown_per_hour.fetch(conn, first_hour=start, now=now)}
    raised = {r["hour"]: r["n"]
              for r in await READS.escalations_raised_per_hour.fetch(conn, first_hour=start, now=now)}
    return Overview(
        at=now,
        attempts=tuple(StateAges(s, *counts) for s, counts in ages.items()),
        oldest_unknown=OldestUnknown(oldest["attempt_id"], oldest["created_at"],
                                     now - oldest["created_at"]) if oldest else None,
        escalations_by_reason=_tallies(open_rows, "reason"),
        escalations_by_account=_tallies(open_rows, "provider_account"),
        outbox=tuple(OutboxKind(**dict(r)) for r in await READS.outbox_backlog.fetch(conn)),
        paused_scopes=tuple(PausedScope(**dict(r)) for r in await READS.paused_scopes.fetch(conn, now=now)),
        last_24h=tuple(HourCount(start + timedelta(hours=h), unknown.get(h, 0), raised.get(h, 0))
                       for h in range(HOURS_CHARTED)),
    )


# -- escalations ------------------------------------------------------------------------------


@dataclass(frozen=True)
class EscalationItem:
    escalation_id: int
    escalation_key: str
    reason: str
    attempt_id: UUID | None
    provider_account: str | None
    raised_at: datetime
    acknowledged_at: datetime | None
    resolved_at: datetime | None
    reminder_count: int
    next_reminder_at: datetime | None

    @property
    def status(self) -> str:
        if self.resolved_at is not None:
            return "resolved"
        return "acknowledged" if self.acknowledged_at is not None else "open"


async def list_escalations(
    conn: Conn, *, reason: str | None = None, provider_account: str | None = None,
    acknowledged: bool | None = None, open_only: bool = True, limit: int = DEFAULT_PAGE,
    cursor: str | None = None,
) -> tuple[list[EscalationItem], str | None]:
    """One page of episodes, open ones first, oldest raised first; and the next page's cursor
    (``None`` on the last page). ``acknowledged`` filters unresolved and resolved alike."""
    after: list[Any] = [None, None, None]
    if cursor is not None:
        after = _decode_cursor(cursor, (bool, datetime, int))
    rows = await READS.escalations_page.fetch(
        conn, reason=reason, account=provider_account, acknowledged=acknowledged, open_only=open_only,
        after_resolved=after[0], after_raised_at=after[1], after_escalation_id=after[2],
        limit=_page_limit(limit) + 1)
    items = [EscalationItem(**dict(r)) for r in rows[:limit]]
    if len(rows) <= limit:
        return items, None
    last = items[-1]
    return items, _encode_cursor([last.resolved_at is not None, last.raised_at.isoformat(),
                                  last.escalation_id])


@dataclass(frozen=True)
class EscalationDetail:
    escalation: EscalationItem
    detail: dict[str, Any]
    actions: tuple[OperatorAction, ...]  # newest first


async def escalation_detail(conn: Conn, escalation_id: int) -> EscalationDetail | None:
    """The episode, its detail (identifiers only) and every operator action on it; None if unknown."""
    row = await READS.escalation.fetchrow(conn, escalation_id=escalation_id)
    if row is None:
        return None
    values = dict(row)
    detail = identifiers_only(values.pop("detail"))
    acted = await list_actions(conn, escalation_id=escalation_id, limit=ACTIONS_SHOWN)
    return EscalationDetail(EscalationItem(**values), detail, tuple(acted))


# -- one attempt ------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttemptSummary:
    """The attempt row without its request body's values (see :func:`request_field_names`)."""

    attempt_id: UUID
    order_id: str
    attempt_number: int
    provider_account: str
    amount_minor: int
    currency: str
    idempotency_key: str
    client_reference: str
    state: str
    provider_status: str | None
    provider_payment_id: str | None
    outcome_reason: str | None
    version: int
    created_at: datetime
    first_sent_at: datetime | None
    escalation_deadline: datetime | None
    recovery_owner: str | None
    lease_expires_at: datetime | None
    next_check_at: datetime
    request_fields: tuple[str, ...]


@dataclass(frozen=True)
class OrderSummary:
    order_id: str
    status: str
    amount_minor: int
    currency: str
    provider_account: str | None
    created_at: datetime
    cancel_requested_at: datetime | None


@dataclass(frozen=True)
class HistoryEvent:
    event_id: int
    occurred_at: datetime
    kind: str
    actor: str
    summary: dict[str, Any]


@dataclass(frozen=True)
class NotificationSummary:
    """A stored provider notification by its identifiers; the provider's event itself is not shown."""

    event_id: int
    received_at: datetime
    provider_account: str
    notification_key: str | None
    type: str | None
    status: str | None
    provider_payment_id: str | None
    reference: str | None
    amount_minor: int | None
    currency: str | None
    unparseable: str | None


@dataclass(frozen=True)
class OutboxRow:
    message_id: int
    dedup_key: str
    kind: str
    created_at: datetime
    delivery_attempts: int
    next_attempt_at: datetime
    last_error: str | None
    dispatched_at: datetime | None
    dead_lettered_at: datetime | None

    @property
    def status(self) -> str:
        if self.dispatched_at is not None:
            return "dispatched"
        return "dead-lettered" if self.dead_lettered_at is not None else "pending"


@dataclass(frozen=True)
class OperationSummary:
    """A capture, cancel or refund of the payment, without its stored request, and its timeline."""

    operation_id: UUID
    kind: str
    amount_minor: int
    currency: str
    state: str
    provider_status: str | None
    outcome_reason: str | None
    provider_operation_id: str | None
    requested_by: str
    created_at: datetime
    first_sent_at: datetime | None
    timeline: tuple[HistoryEvent, ...]  # oldest first


@dataclass(frozen=True)
class AttemptDetail:
    attempt: AttemptSummary
    order: OrderSummary
    history: tuple[HistoryEvent, ...]  # oldest first
    notifications: tuple[NotificationSummary, ...]
    outbox: tuple[OutboxRow, ...]
    escalations: tuple[EscalationItem, ...]
    actions: tuple[OperatorAction, ...]  # newest first
    operations: tuple[OperationSummary, ...]  # oldest first
    headroom: Headroom  # what the payment has captured and can still refund and capture
    refund_approvals: tuple[RefundApproval, ...]  # newest first


# The fields of a notification's stored detail a person may see (event_detail in paycore.notifications).
NOTIFICATION_FIELDS = ("type", "status", "provider_payment_id", "reference", "amount_minor", "currency",
                       "unparseable")


def _notification(r: asyncpg.Record) -> NotificationSummary:
    d = r["detail"]
    return NotificationSummary(r["event_id"], r["occurred_at"], r["provider_account"], r["notification_key"],
                               *(d.get(f) for f in NOTIFICATION_FIELDS))


def _event_summary(kind: str, detail: Mapping[str, Any]) -> dict[str, Any]:
    if kind == "notification":
        return {f: detail[f] for f in NOTIFICATION_FIELDS if detail.get(f) is not None}
    return identifiers_only(detail)


async def attempt_detail(conn: Conn, attempt_id: UUID) -> AttemptDetail | None:
    """Everything about one attempt an operator needs, or None if there is no such attempt."""
    row = await READS.attempt.fetchrow(conn, attempt_id=attempt_id)
    if row is None:
        return None
    values = dict(row)
    values["request_fields"] = tuple(request_field_names(values.pop("request_body")))
    attempt = AttemptSummary(**values)
    order = await READS.order.fetchrow(conn, order_id=attempt.order_id)
    assert order is not None  # a foreign key
    history = await events.history(conn, attempt_id)
    noted = [e["event_id"] for e in history if e["kind"] == "notification"]
    noted += [int(e["detail"]["attached_notification"]) for e in history
              if e["kind"] == "transition" and "attached_notification" in e["detail"]]
    return AttemptDetail(
        attempt=attempt,
        order=OrderSummary(**dict(order)),
        history=tuple(HistoryEvent(e["event_id"], e["occurred_at"], e["kind"], e["actor"],
                                   _event_summary(e["kind"], e["detail"])) for e in history),
        notifications=tuple(_notification(r) for r in await READS.notifications.fetch(conn, event_ids=noted)),
        outbox=tuple(OutboxRow(**dict(r))
                     for r in await READS.outbox_of_attempt.fetch(conn, attempt_id=attempt_id)),
        escalations=tuple(EscalationItem(**dict(r))
                          for r in await READS.escalations_of_attempt.fetch(conn, attempt_id=attempt_id)),
        actions=tuple(await list_actions(conn, attempt_id=attempt_id, limit=ACTIONS_SHOWN)),
        operations=await operations_of_payment(conn, attempt_id),
        headroom=await operator_refunds.payment_headroom(conn, attempt_id),
        refund_approvals=tuple(await operator_refunds.approvals_of(conn, attempt_id)),
    )


async def operations_of_payment(conn: Conn, attempt_id: UUID) -> tuple[OperationSummary, ...]:
    """The payment's captures, cancels and refunds, oldest first, each with its events."""
    found = await operations.operations_of(conn, attempt_id)
    timelines: dict[UUID, list[HistoryEvent]] = {op.operation_id: [] for op in found}
    if found:
        for e in await READS.operation_events.fetch(conn, operation_ids=list(timelines)):
            timelines[e["operation_id"]].append(
                HistoryEvent(e["event_id"], e["occurred_at"], e["kind"], e["actor"],
                             _event_summary(e["kind"], e["detail"])))
    return tuple(OperationSummary(
        op.operation_id, op.kind.value, op.amount_minor, op.currency, op.state.value, op.provider_status,
        op.outcome_reason, op.provider_operation_id, op.requested_by, op.created_at, op.first_sent_at,
        tuple(timelines[op.operation_id])) for op in found)


async def pending_refunds(conn: Conn) -> list[RefundApproval]:
    """Refunds waiting for a second operator, oldest first (at most a page the size of MAX_PAGE)."""
    return await operator_refunds.pending_approvals(conn, limit=MAX_PAGE)


# -- attempts, listed -------------------------------------------------------------------------


@dataclass(frozen=True)
class AttemptItem:
    """One row of the attempts listing."""

    attempt_id: UUID
    order_id: str
    attempt_number: int
    provider_account: str
    amount_minor: int
    currency: str
    state: str
    provider_payment_id: str | None
    created_at: datetime
    next_check_at: datetime


async def list_attempts(
    conn: Conn, *, state: str | None = None, provider_account: str | None = None,
    created_before: datetime | None = None, search: str | None = None, limit: int = DEFAULT_PAGE,
    cursor: str | None = None,
) -> tuple[list[AttemptItem], str | None]:
    """One page of attempts, newest first, and the next page's cursor (``None`` on the last page).

    ``created_before``: only attempts at least that old; ``search``: an order id, client
    reference, provider payment id or attempt id, exactly.
    """
    if state is not None and state not in {s.value for s in AttemptState}:
        raise ValueError(f"state must be one of {', '.join(s.value for s in AttemptState)}")
    after: list[Any] = [None, None]
    if cursor is not None:
        after = _decode_cursor(cursor, (datetime, str))
        try:
            after[1] = UUID(after[1])
        except ValueError:
            raise InvalidCursor("the cursor is not one this listing made") from None
    rows = await READS.attempts_page.fetch(
        conn, state=state, account=provider_account, created_before=created_before, search=search,
        after_created_at=after[0], after_attempt_id=after[1], limit=_page_limit(limit) + 1)
    items = [AttemptItem(**dict(r)) for r in rows[:limit]]
    if len(rows) <= limit:
        return items, None
    last = items[-1]
    return items, _encode_cursor([last.created_at.isoformat(), str(last.attempt_id)])


# -- unmatched notifications and dead letters ------------------------------------------------


@dataclass(frozen=True)
class UnmatchedNotification:
    notification: NotificationSummary
    escalation_id: int | None  # its open unmatched (or unparseable) episode, if one is open


async def unmatched_notifications(
    conn: Conn, *, limit: int = DEFAULT_PAGE, cursor: str | None = None
) -> tuple[list[UnmatchedNotification], str | None]:
    """Stored notifications no attempt matched and no operator has attached, oldest first, each
    with its open escalation; and the next page's cursor."""
    after = _decode_cursor(cursor, (int,))[0] if cursor is not None else None
    rows = await READS.unmatched_notifications_page.fetch(conn, after_event_id=after,
                                                         limit=_page_limit(limit) + 1)
    page = [_notification(r) for r in rows[:limit]]
    keys = {n.event_id: escalations.unmatched_key(n.provider_account, n.notification_key,
                                                  n.provider_payment_id, n.reference) for n in page}
    episodes = await READS.open_notification_episodes.fetch(conn, keys=list(keys.values()),
                                                            event_ids=[str(n.event_id) for n in page])
    by_key = {e["escalation_key"]: e["escalation_id"] for e in episodes}
    by_event = {e["event_id"]: e["escalation_id"] for e in episodes if e["event_id"] is not None}
    items = [UnmatchedNotification(n, by_key.get(keys[n.event_id], by_event.get(str(n.event_id))))
             for n in page]
    more = _encode_cursor([page[-1].event_id]) if len(rows) > limit else None
    return items, more


@dataclass(frozen=True)
class DeadLetter:
    row: OutboxRow
    attempt_id: UUID | None
    escalation_id: int | None  # its open outbox dead-letter episode


async def dead_letters(
    conn: Conn, *, kind: str | None = None, limit: int = DEFAULT_PAGE, cursor: str | None = None
) -> tuple[list[DeadLetter], str | None]:
    """Dead-lettered outbox rows (waiting for requeue or skip), oldest first; and the next cursor."""
    after = _decode_cursor(cursor, (int,))[0] if cursor is not None else None
    rows = await READS.dead_letters_page.fetch(conn, kind=kind, after_message_id=after,
                                               limit=_page_limit(limit) + 1)
    keys = [escalations.dead_letter_key(r["message_id"]) for r in rows[:limit]]
    open_by_key = {e["escalation_key"]: e["escalation_id"]
                   for e in await READS.open_episodes_by_key.fetch(conn, keys=keys)}
    items = []
    for r, key in zip(rows[:limit], keys, strict=True):
        values = dict(r)
        attempt_id = values.pop("attempt_id")
        items.append(DeadLetter(OutboxRow(**values), attempt_id, open_by_key.get(key)))
    more = _encode_cursor([items[-1].row.message_id]) if len(rows) > limit else None
    return items, more
