"""What operators see of settlement reconciliation: batches, one batch, its exceptions, the chart.

Read-only, like :mod:`paycore_console.inspection` (whose cursors and JSON shapes it shares); its
SQL is ``queries/settlements.sql``. The reconciliation engine (``paycore.settlements``) writes
the tables; each exception is one escalation episode, resolved with the console's escalation
actions, so an exception's state here is its episode's.

An exception's detail is the evidence the engine recorded (ids, amounts, a malformed row's
values cut short); it is shown as :func:`~paycore_console.inspection.identifiers_only` shows
any escalation detail. A settlement report carries no card data.
"""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg

from paycore import queries
from paycore_console.inspection import (
    Conn,
    InvalidCursor,
    _decode_cursor,
    _encode_cursor,
    _page_limit,
    identifiers_only,
)

SETTLED = queries.load("settlements", directory=Path(__file__).with_name("queries"))

DEFAULT_DAYS = 30  # the listing's and the chart's default window, ending today
CHART_WINDOWS = (30, 90)
MAX_RANGE_DAYS = 366  # a listing's date range at most (a year of batches)
UNBATCHED_KINDS = ("missing-payment", "missing-refund")


@dataclass(frozen=True)
class BatchItem:
    """One row of the batches listing."""

    batch_id: int
    provider_account: str
    provider_batch_id: str
    batch_date: date
    provider_status: str  # open | closed
    state: str  # reconciled | unbalanced
    currency: str
    line_count: int
    matched_count: int
    exception_count: int
    bad_line_count: int
    gross_minor: int
    fees_minor: int
    net_minor: int
    reconciled_at: datetime


@dataclass(frozen=True)
class Total:
    """One of a batch's totals: what the provider reported (None: its report states none) and what
    the lines add up to; ``differs`` when both are known and are not equal."""

    name: str  # gross | fees | net | lines
    reported: int | None
    computed: int
    money: bool

    @property
    def differs(self) -> bool:
        return self.reported is not None and self.reported != self.computed


@dataclass(frozen=True)
class LineKind:
    """A batch's lines of one kind (and currencies), counted and summed."""

    kind: str
    gross_currency: str
    net_currency: str
    lines: int
    gross_minor: int
    fee_minor: int
    net_minor: int


@dataclass(frozen=True)
class BatchDetail:
    batch_id: int
    provider_account: str
    provider_batch_id: str
    source: str
    batch_date: date
    provider_status: str
    state: str
    currency: str
    matched_count: int
    exception_count: int
    bad_line_count: int
    first_reconciled_at: datetime
    reconciled_at: datetime
    totals: tuple[Total, ...]
    line_kinds: tuple[LineKind, ...]


@dataclass(frozen=True)
class ExceptionItem:
    """One settlement exception and the state of its escalation episode."""

    exception_id: int
    provider_account: str
    kind: str
    batch_id: int | None
    line_no: int | None
    attempt_id: UUID | None  # the payment it is about, where known
    operation_id: UUID | None  # the refund or capture it is about, where known
    payment_of_operation: UUID | None  # that operation's payment (its page shows the operation)
    detail: dict[str, Any]  # the evidence, identifiers only
    found_at: datetime
    escalation_id: int | None
    escalation_status: str | None  # open | acknowledged | resolved; None: no episode


@dataclass(frozen=True)
class Day:
    """One day of the chart: the fees of the batches dated that day (per currency) and the
    exceptions found that day (UTC)."""

    day: date
    fees_minor: dict[str, int]
    exceptions: int


def _episode_status(row: asyncpg.Record) -> str | None:
    if row["escalation_id"] is None:
        return None
    if row["resolved_at"] is not None:
        return "resolved"
    return "acknowledged" if row["acknowledged_at"] is not None else "open"


def _exception(row: asyncpg.Record) -> ExceptionItem:
    return ExceptionItem(
        row["exception_id"], row["provider_account"], row["kind"], row["batch_id"], row["line_no"],
        row["attempt_id"], row["operation_id"], row["operation_attempt_id"], identifiers_only(row["detail"]),
        row["found_at"], row["escalation_id"], _episode_status(row))


def default_range(now: datetime, days: int = DEFAULT_DAYS) -> tuple[date, date]:
    """The last ``days`` days, today (UTC) included."""
    today = now.astimezone(UTC).date()
    return today - timedelta(days=days - 1), today


def check_range(date_from: date, date_to: date) -> None:
    if date_from > date_to:
        raise ValueError("from must not be after to")
    if (date_to - date_from).days >= MAX_RANGE_DAYS:
        raise ValueError(f"the date range must be at most {MAX_RANGE_DAYS} days")


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


async def list_batches(
    conn: Conn, *, provider_account: str | None, date_from: date, date_to: date, limit: int,
    cursor: str | None = None,
) -> tuple[list[BatchItem], str | None]:
    """One page of batches dated ``date_from`` to ``date_to`` (inclusive), newest first; and the
    next page's cursor (None on the last page)."""
    check_range(date_from, date_to)
    after: list[Any] = [None, None]
    if cursor is not None:
        after = _decode_cursor(cursor, (str, int))
        try:
            after[0] = date.fromisoformat(after[0])
        except ValueError:
            raise InvalidCursor("the cursor is not one this listing made") from None
    rows = await SETTLED.batches_page.fetch(
        conn, account=provider_account, date_from=date_from, date_to=date_to, after_date=after[0],
        after_batch_id=after[1], limit=_page_limit(limit) + 1)
    items = [BatchItem(**dict(r)) for r in rows[:limit]]
    if len(rows) <= limit:
        return items, None
    last = items[-1]
    return items, _encode_cursor([last.batch_date.isoformat(), last.batch_id])


async def batch_detail(conn: Conn, batch_id: int) -> BatchDetail | None:
    """The batch's header, its reported and computed totals, and its lines by kind; None if unknown."""
    b = await SETTLED.batch.fetchrow(conn, batch_id=batch_id)
    if b is None:
        return None
    totals = (Total("gross", b["reported_gross_minor"], b["gross_minor"], True),
              Total("fees", b["reported_fees_minor"], b["fees_minor"], True),
              Total("net", b["reported_net_minor"], b["net_minor"], True),
              Total("lines", b["reported_lines"], b["line_count"], False))
    kinds = tuple(LineKind(**dict(r)) for r in await SETTLED.line_kinds.fetch(conn, batch_id=batch_id))
    return BatchDetail(
        b["batch_id"], b["provider_account"], b["provider_batch_id"], b["source"], b["batch_date"],
        b["provider_status"], b["state"], b["currency"], b["matched_count"], b["exception_count"],
        b["bad_line_count"], b["first_reconciled_at"], b["reconciled_at"], totals, kinds)


async def batch_exceptions(
    conn: Conn, batch_id: int, *, limit: int, cursor: str | None = None,
) -> tuple[list[ExceptionItem], str | None]:
    """One page of the batch's exceptions by line number; and the next page's cursor."""
    after: list[Any] = [None, None]
    if cursor is not None:
        after = _decode_cursor(cursor, (int, int))
    rows = await SETTLED.batch_exceptions_page.fetch(conn, batch_id=batch_id, after_line=after[0],
                                                  after_id=after[1], limit=_page_limit(limit) + 1)
    items = [_exception(r) for r in rows[:limit]]
    if len(rows) <= limit:
        return items, None
    last = items[-1]
    return items, _encode_cursor([last.line_no or 0, last.exception_id])


async def unbatched_exceptions(
    conn: Conn, *, provider_account: str | None, date_from: date, date_to: date, limit: int,
    cursor: str | None = None,
) -> tuple[list[ExceptionItem], str | None]:
    """Missing payments and refunds (in no batch) found ``date_from`` to ``date_to``, newest first."""
    check_range(date_from, date_to)
    after: list[Any] = [None, None]
    if cursor is not None:
        after = _decode_cursor(cursor, (datetime, int))
    rows = await SETTLED.unbatched_exceptions_page.fetch(
        conn, account=provider_account, found_from=_midnight(date_from),
        found_until=_midnight(date_to + timedelta(days=1)), after_found_at=after[0], after_id=after[1],
        limit=_page_limit(limit) + 1)
    items = [_exception(r) for r in rows[:limit]]
    if len(rows) <= limit:
        return items, None
    last = items[-1]
    return items, _encode_cursor([last.found_at.isoformat(), last.exception_id])


async def daily(conn: Conn, *, provider_account: str | None, now: datetime, days: int) -> list[Day]:
    """The chart's days, oldest first: the last ``days`` days, today (UTC) included."""
    first, today = default_range(now, days)
    fees: dict[date, dict[str, int]] = {}
    for r in await SETTLED.fees_per_day.fetch(conn, account=provider_account, date_from=first, date_to=today):
        fees.setdefault(r["day"], {})[r["currency"]] = int(r["fees_minor"])
    found = {r["day"]: r["n"] for r in await SETTLED.exceptions_per_day.fetch(
        conn, account=provider_account, found_from=_midnight(first),
        found_until=_midnight(today + timedelta(days=1)))}
    return [Day(d, fees.get(d, {}), found.get(d, 0))
            for d in (first + timedelta(days=i) for i in range(days))]


# The columns of a batch's CSV export, as batch_lines_export reads them.
EXPORT_COLUMNS = ("line_no", "provider_line_id", "kind", "record_type", "provider_payment_id",
                  "provider_operation_id", "reference", "occurred_at", "gross_currency", "gross_minor",
                  "net_currency", "fee_minor", "net_minor", "exchange_rate", "outcome", "exception_kind",
                  "order_id", "attempt_id", "operation_id")
EXPORT_ROWS_PER_FETCH = 5_000
# A cell a spreadsheet would run as a formula (OWASP's CSV injection): its text is prefixed with '.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return str(value)


async def export_lines(pool: asyncpg.Pool, batch_id: int) -> AsyncIterator[str]:
    """A batch's lines as CSV text, header first, a chunk of rows at a time (constant memory)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(EXPORT_COLUMNS)
    yield out.getvalue()
    q = SETTLED.batch_lines_export
    async with pool.acquire() as conn, conn.transaction():
        cursor = await conn.cursor(q.sql, *q.args(batch_id=batch_id))
        while rows := await cursor.fetch(EXPORT_ROWS_PER_FETCH):
            out.seek(0)
            out.truncate()
            writer.writerows([_cell(row[c]) for c in EXPORT_COLUMNS] for row in rows)
            yield out.getvalue()
