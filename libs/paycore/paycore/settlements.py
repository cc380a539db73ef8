"""Settlement reconciliation: what a provider paid, line by line, against what is recorded here.

One batch is reconciled in one transaction (docs/settlement.md):

1. a closed batch already recorded is not read again (the same batch twice records nothing);
2. its lines stream from the provider's reader into a temporary table with COPY, tallied on
   the way (count, sums, a digest of their content; a row the reader could not take is a
   :class:`~paycore.settlement_lines.BadLine`, kept with its line number);
3. an open batch whose digest is the one recorded is left as it is;
4. the lines are checked against the batch's totals: a batch that does not add up is recorded
   as ``unbalanced`` with none of its lines, and is itself one exception;
5. otherwise each line is matched and written in one statement (``settlement_lines.sql``,
   ``record``) -- by the provider's id of the payment, refund or capture, else the merchant
   reference -- and compared with the books;
6. every exception found for the first time (``settlement_exceptions``, keyed) opens one
   escalation, with the evidence attached;
7. the batch's counts are written and its ``settlement-reconciled`` effect queued.

After an account's batches, :func:`record_missing` looks the other way: payments and refunds
that succeeded here, inside the days the closed batches cover less a grace period, that no
line names.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Literal

import asyncpg
import orjson

from paycore import queries, settlement_effects
from paycore.domain import EscalationReason, reason_text
from paycore.escalations import raise_escalation
from paycore.settlement_lines import (
    BadLine,
    LineKind,
    SettlementBatch,
    SettlementLine,
    SettlementSource,
    SettlementSourceError,
)

__all__ = ["AccountRun", "BatchOutcome", "Progress", "exception_reason", "reconcile_account",
           "reconcile_batch", "record_missing"]

log = logging.getLogger(__name__)

BATCHES = queries.load("settlement_batches")
LINES = queries.load("settlement_lines")
EXCEPTIONS = queries.load("settlement_exceptions")

# The order of settlement_incoming's columns, as COPY sends them.
INCOMING_COLUMNS = (
    "line_no", "kind", "record_type", "provider_line_id", "provider_payment_id", "provider_operation_id",
    "reference", "occurred_at", "gross_currency", "gross_minor", "net_currency", "fee_minor", "net_minor",
    "exchange_rate")
PROGRESS_EVERY = 100_000  # lines between two progress reports of a long batch

Progress = Callable[[SettlementBatch, int], None]  # (batch, lines read so far)


def exception_reason(kind: str) -> str:
    """The escalation reason of a settlement exception: ``settlement-exception:<kind>``."""
    return reason_text(EscalationReason.SETTLEMENT_EXCEPTION, kind)


@dataclass(frozen=True)
class BatchOutcome:
    """What reconciling one batch did.

    ``result``: ``recorded`` (its lines written and matched), ``unbalanced`` (recorded as an
    exception, no line written), ``unchanged`` (closed already, or read again with the same
    content: nothing written).
    """

    provider_account: str
    provider_batch_id: str
    result: Literal["recorded", "unbalanced", "unchanged"]
    batch_id: int | None = None
    line_count: int = 0
    matched_count: int = 0
    exception_count: int = 0
    bad_line_count: int = 0
    new_exceptions: int = 0


@dataclass
class _Tally:
    """What the lines add up to, counted while they stream past."""

    currency: str
    line_count: int = 0
    gross_minor: int = 0
    fees_minor: int = 0
    net_minor: int = 0
    payout_lines: int = 0
    bad_lines: list[BadLine] = field(default_factory=list)
    digest: Any = field(default_factory=hashlib.sha256)

    def add(self, line: SettlementLine) -> None:
        self.line_count += 1
        self.net_minor += line.net_minor
        self.fees_minor += line.fee_minor
        # in the batch's currency: a line in another currency counts by what it settled for
        same = line.gross_currency == line.net_currency
        self.gross_minor += line.gross_minor if same else line.net_minor + line.fee_minor
        if line.kind is LineKind.PAYOUT:
            self.payout_lines += 1
        self.digest.update(orjson.dumps(_row(line), default=str))

    def add_bad(self, line: BadLine) -> None:
        self.bad_lines.append(line)
        self.digest.update(orjson.dumps([line.line_no, line.reason, dict(line.raw)]))

    def imbalance(self, batch: SettlementBatch) -> dict[str, Any] | None:
        """How the lines fail to add up to what the batch reports, or None when they do."""
        differences: dict[str, Any] = {}
        for name, reported, counted in (
                ("gross_minor", batch.reported_gross_minor, self.gross_minor),
                ("fees_minor", batch.reported_fees_minor, self.fees_minor),
                ("net_minor", batch.reported_net_minor, self.net_minor),
                ("lines", batch.reported_lines, self.line_count + len(self.bad_lines))):
            if reported is not None and reported != counted:
                differences[name] = {"reported": reported, "counted": counted}
        # A batch that pays itself out (Adyen's MerchantPayout, a Stripe payout) nets to zero.
        if self.payout_lines and self.net_minor != 0 and batch.reported_net_minor is None:
            differences["net_after_payout"] = {"reported": 0, "counted": self.net_minor}
        # An unreadable row counts in no sum: where totals are reported, its batch does not add up.
        return differences or None


def _row(line: SettlementLine) -> tuple[Any, ...]:
    return (line.line_no, line.kind.value, line.record_type, line.provider_line_id, line.provider_payment_id,
            line.provider_operation_id, line.reference, line.occurred_at, line.gross_currency,
            line.gross_minor, line.net_currency, line.fee_minor, line.net_minor, line.exchange_rate)


async def _records(lines: AsyncIterator[SettlementLine | BadLine], tally: _Tally, batch: SettlementBatch,
                   progress: Progress | None) -> AsyncIterator[tuple[Any, ...]]:
    read = 0
    async for line in lines:
        read += 1
        if isinstance(line, BadLine):
            tally.add_bad(line)
        else:
            tally.add(line)
            yield _row(line)
        if read % PROGRESS_EVERY == 0:
            log.info("settlement batch %s of %s: %d lines read", batch.provider_batch_id,
                     batch.provider_account, read)
            if progress is not None:
                progress(batch, read)


async def reconcile_batch(
    pool: asyncpg.Pool,
    batch: SettlementBatch,
    lines: AsyncIterator[SettlementLine | BadLine],
    *,
    now: datetime,
    reminder_interval: timedelta,
    progress: Progress | None = None,
) -> BatchOutcome:
    """Reconcile one batch whose lines ``lines`` streams (see the module's steps)."""
    unchanged = BatchOutcome(batch.provider_account, batch.provider_batch_id, "unchanged")
    async with pool.acquire() as conn:
        # 1. A closed batch is never read again.
        known = await BATCHES.find.fetchrow(
            conn, provider_account=batch.provider_account, provider_batch_id=batch.provider_batch_id)
        if known is not None and known["provider_status"] == "closed":
            await _drain_nothing(lines)
            return BatchOutcome(batch.provider_account, batch.provider_batch_id, "unchanged",
                                batch_id=known["batch_id"])
        async with conn.transaction():
            # 2. Stream the lines in.
            await LINES.create_incoming.execute(conn)
            tally = _Tally(batch.currency)
            await conn.copy_records_to_table(
                "settlement_incoming", records=_records(lines, tally, batch, progress),
                columns=INCOMING_COLUMNS)
            content_sha256 = tally.digest.hexdigest()
            # 3. An open batch read again with nothing new.
            if known is not None and known["content_sha256"] == content_sha256 and batch.status == "open":
                return BatchOutcome(batch.provider_account, batch.provider_batch_id, "unchanged",
                                    batch_id=known["batch_id"])
            # 4. Does it add up?
            imbalance = tally.imbalance(batch)
            batch_id = await BATCHES.record.fetchval(
                conn, provider_account=batch.provider_account, provider_batch_id=batch.provider_batch_id,
                source=batch.source, batch_date=batch.batch_date, provider_status=batch.status,
                currency=batch.currency, reported_gross_minor=batch.reported_gross_minor,
                reported_fees_minor=batch.reported_fees_minor, reported_net_minor=batch.reported_net_minor,
                reported_lines=batch.reported_lines, state="unbalanced" if imbalance else "reconciled",
                line_count=tally.line_count, gross_minor=tally.gross_minor, fees_minor=tally.fees_minor,
                net_minor=tally.net_minor, bad_line_count=len(tally.bad_lines), content_sha256=content_sha256,
                now=now)
            if batch_id is None:  # closed by a concurrent run since step 1
                return unchanged
            await LINES.forget.execute(conn, batch_id=batch_id)
            new: list[asyncpg.Record] = []
            matched = 0
            if imbalance is None:
                # 5. Match and write every line.
                await LINES.analyze_incoming.execute(conn)
                await LINES.judge.execute(conn, batch_id=batch_id, provider_account=batch.provider_account)
                counts = await LINES.record.fetchrow(conn, batch_id=batch_id)
                assert counts is not None
                matched = counts["matched_count"]
                new += await EXCEPTIONS.record_line_exceptions.fetch(
                    conn, batch_id=batch_id, provider_account=batch.provider_account,
                    provider_batch_id=batch.provider_batch_id, now=now)
                if known is not None:  # read again: what was found earlier follows its line
                    await EXCEPTIONS.renumber_line_exceptions.execute(conn, batch_id=batch_id)
            else:
                new += await _batch_exception(
                    conn, batch, batch_id, "unbalanced-batch", now, line_no=None,
                    key_suffix=f"unbalanced:{content_sha256[:16]}",
                    detail={"differences": imbalance, "line_count": tally.line_count})
            for bad in tally.bad_lines:
                new += await _batch_exception(
                    conn, batch, batch_id, "malformed-line", now, line_no=bad.line_no,
                    key_suffix=f"bad-line:{bad.line_no}:{_short_digest(bad)}",
                    detail={"reason": bad.reason, "raw": dict(bad.raw)})
            # 6. One escalation per exception found for the first time.
            await _escalate(conn, new, now=now, reminder_interval=reminder_interval)
            # 7. The counts, and the effect for the accounting systems.
            row = await BATCHES.record_counts.fetchrow(conn, batch_id=batch_id, matched_count=matched)
            assert row is not None
            await settlement_effects.enqueue_reconciled(conn, batch=row, now=now)
    log.info("settlement batch %s of %s %s: %d lines, %d matched, %d exceptions (%d new), %d unreadable",
             batch.provider_batch_id, batch.provider_account, row["state"], tally.line_count, matched,
             row["exception_count"], len(new), len(tally.bad_lines))
    return BatchOutcome(
        batch.provider_account, batch.provider_batch_id, "unbalanced" if imbalance else "recorded",
        batch_id=batch_id, line_count=tally.line_count, matched_count=matched,
        exception_count=row["exception_count"], bad_line_count=len(tally.bad_lines), new_exceptions=len(new))


async def _drain_nothing(lines: AsyncIterator[SettlementLine | BadLine]) -> None:
    """A closed batch's lines are not read: close the reader's stream (its HTTP response)."""
    aclose = getattr(lines, "aclose", None)
    if aclose is not None:
        await aclose()


def _short_digest(bad: BadLine) -> str:
    return hashlib.sha256(orjson.dumps([bad.reason, dict(bad.raw)])).hexdigest()[:12]


async def _batch_exception(conn: asyncpg.Connection, batch: SettlementBatch, batch_id: int, kind: str,
                           now: datetime, *, line_no: int | None, key_suffix: str,
                           detail: dict[str, Any]) -> list[asyncpg.Record]:
    row = await EXCEPTIONS.record_batch_exception.fetchrow(
        conn, exception_key=f"settlement:{batch.provider_account}:{batch.provider_batch_id}:{key_suffix}",
        provider_account=batch.provider_account, kind=kind, batch_id=batch_id, line_no=line_no,
        detail={"provider_account": batch.provider_account, "provider_batch_id": batch.provider_batch_id,
                "batch_id": batch_id, **({"line_no": line_no} if line_no is not None else {}), **detail},
        now=now)
    return [] if row is None else [row]


async def _escalate(conn: asyncpg.Connection, exceptions: Sequence[asyncpg.Record], *, now: datetime,
                    reminder_interval: timedelta) -> None:
    # The episode names no attempt (the payment's id is in its detail): an attempt's episodes
    # close when the attempt settles, and a settlement exception is not answered by that.
    for exception in exceptions:
        escalation_id = await raise_escalation(
            conn, key=exception["exception_key"], reason=EscalationReason.SETTLEMENT_EXCEPTION,
            qualifier=exception["kind"], now=now,
            reminder_interval=reminder_interval, detail=dict(exception["detail"]))
        if escalation_id is not None:
            await EXCEPTIONS.attach_escalation.execute(
                conn, exception_id=exception["exception_id"], escalation_id=escalation_id)


async def record_missing(pool: asyncpg.Pool, provider_account: str, *, now: datetime, grace: timedelta,
                         reminder_interval: timedelta) -> int:
    """Exceptions for the account's payments and refunds no batch names (the module's last
    paragraph); returns how many are new. The window: from the first day a reconciled closed
    batch covers to the end of the last one's day, and never the last ``grace``."""
    async with pool.acquire() as conn, conn.transaction():
        coverage = await BATCHES.coverage.fetchrow(conn, provider_account=provider_account)
        if coverage is None or coverage["first_date"] is None:
            return 0
        covered_from = datetime.combine(coverage["first_date"], time(), UTC)
        last_day_ends = datetime.combine(coverage["last_date"] + timedelta(days=1), time(), UTC)
        covered_until = min(now - grace, last_day_ends)
        if covered_until <= covered_from:
            return 0
        window = {"provider_account": provider_account, "covered_from": covered_from,
                  "covered_until": covered_until, "now": now}
        new = [*await EXCEPTIONS.record_missing_payments.fetch(conn, **window),
               *await EXCEPTIONS.record_missing_operations.fetch(conn, **window)]
        await _escalate(conn, new, now=now, reminder_interval=reminder_interval)
    if new:
        log.warning("settlement: %d payments or refunds of %s missing from the provider's batches",
                    len(new), provider_account)
    return len(new)


@dataclass(frozen=True)
class AccountRun:
    """One account's run: each batch's outcome, the batches that could not be read, what went missing."""

    provider_account: str
    outcomes: tuple[BatchOutcome, ...]
    unreadable: tuple[tuple[str, str], ...]  # (batch, why): tried again on the next run
    new_missing: int

    def as_json(self) -> dict[str, Any]:
        """What the run found, as stored with the daily run and printed by the command."""
        return {
            "provider_account": self.provider_account,
            "batches": [{"provider_batch_id": o.provider_batch_id, "result": o.result, "batch_id": o.batch_id,
                         "lines": o.line_count, "matched": o.matched_count, "exceptions": o.exception_count,
                         "new_exceptions": o.new_exceptions, "bad_lines": o.bad_line_count}
                        for o in self.outcomes],
            "unreadable": [{"provider_batch_id": b, "error": e} for b, e in self.unreadable],
            "new_missing": self.new_missing,
        }


async def reconcile_account(
    pool: asyncpg.Pool,
    source: SettlementSource,
    provider_account: str,
    date_from: date,
    date_to: date,
    *,
    now: datetime,
    grace: timedelta,
    reminder_interval: timedelta,
    progress: Progress | None = None,
) -> AccountRun:
    """Every batch of the account dated ``date_from`` to ``date_to``, then the missing check.

    A batch the provider will not give is skipped and reported (``unreadable``), never half
    read: the next run reads it again. The list of batches itself failing raises
    :class:`~paycore.settlement_lines.SettlementSourceError` to the caller.
    """
    after = await BATCHES.last_provider_batch_id.fetchval(pool, provider_account=provider_account)
    batches = await source.batches(provider_account, date_from, date_to, after_batch_id=after)
    outcomes: list[BatchOutcome] = []
    unreadable: list[tuple[str, str]] = []
    for batch in batches:
        try:
            outcomes.append(await reconcile_batch(pool, batch, source.lines(batch), now=now,
                                                  reminder_interval=reminder_interval, progress=progress))
        except SettlementSourceError as e:
            log.warning("settlement batch %s of %s could not be read: %s", batch.provider_batch_id,
                        provider_account, e)
            unreadable.append((batch.provider_batch_id, str(e)))
    missing = await record_missing(pool, provider_account, now=now, grace=grace,
                                   reminder_interval=reminder_interval)
    return AccountRun(provider_account, tuple(outcomes), tuple(unreadable), missing)
