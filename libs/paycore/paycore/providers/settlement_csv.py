"""A settlement report's CSV, streamed: physical rows, each decoded alone, read by header name.

Every provider's report is a CSV (Cardco's lines, Stripe's itemized payout reconciliation,
Adyen's Settlement details report) and each reader needs the same guarantees, written once here:

- **constant memory**: bytes arrive in chunks (an HTTP body, a file read 64 KiB at a time) and
  only the current row is held; a row longer than :data:`MAX_ROW_BYTES` is a bad line, not a
  buffer that grows;
- **one bad byte costs one row**: each physical row (up to ``\\n``) is decoded as UTF-8 on its
  own, so an undecodable byte makes that row a :class:`~paycore.settlement_lines.BadLine` and
  the next row is read normally. A quoted field holding a newline is therefore not one row: none
  of the three formats writes one, and such a row would come out as bad rows, never misread;
- **by name, never by position**: the header names the columns; later columns may appear and
  are ignored; a required column missing is one bad line for line 0 and nothing else is read
  (reading rows whose meaning is unknown could only misreport money);
- **every row accounted for**: a row with the wrong number of fields, a blank row between
  rows, a value the provider's reader refuses (``ValueError``) is a bad line with its number
  (data rows counted from 1) and reason, never an exception, never skipped.
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import re
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from datetime import UTC, date, datetime
from pathlib import Path
from typing import BinaryIO, Final

from paycore.currencies import exponent
from paycore.settlement_lines import BIGINT_MAX, BadLine, SettlementLine, raw_row

__all__ = [
    "MAX_ROW_BYTES", "NO_CURRENCY", "ReportRow", "RowReader", "check_net", "file_chunks", "file_date",
    "known_currency", "minor_int",
    "optional", "physical_rows", "read_rows", "report_lines", "scan_file", "utc_timestamp",
]

MAX_ROW_BYTES: Final = 64 * 1024  # far above any real row; a longer one is refused, not buffered
CHUNK_BYTES: Final = 64 * 1024
_TOO_LONG: Final = object()

ReportRow = tuple[int, dict[str, str]]  # a data row's number and its values by column name
# Reads one row of a provider's report; raises ValueError (with the reason) for a row it refuses.
RowReader = Callable[[int, Mapping[str, str]], SettlementLine | BadLine]


async def file_chunks(path: Path, chunk_bytes: int = CHUNK_BYTES) -> AsyncIterator[bytes]:
    """A file's bytes in chunks, each read in a worker thread (a report may be hundreds of MB:
    reading it must not stall the event loop)."""
    handle: BinaryIO = await asyncio.to_thread(path.open, "rb")
    try:
        while chunk := await asyncio.to_thread(handle.read, chunk_bytes):
            yield chunk
    finally:
        await asyncio.to_thread(handle.close)


async def physical_rows(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes | None]:
    """Each row's bytes without its ``\\r\\n`` / ``\\n``; ``None`` for a row over :data:`MAX_ROW_BYTES`."""
    pending = b""
    too_long = False
    async for chunk in chunks:
        pending += chunk
        start = 0
        while (end := pending.find(b"\n", start)) != -1:
            yield None if too_long else pending[start:end].removesuffix(b"\r")
            too_long = False
            start = end + 1
        pending = pending[start:]
        if len(pending) > MAX_ROW_BYTES:
            too_long, pending = True, b""
    if too_long:
        yield None
    elif pending:
        yield pending.removesuffix(b"\r")


def _fields(text: str) -> list[str]:
    return next(csv.reader([text], strict=True), [])


async def read_rows(chunks: AsyncIterator[bytes],
                    required: Collection[str]) -> AsyncIterator[ReportRow | BadLine]:
    """The data rows of a CSV report by column name, or a :class:`BadLine` for each row that cannot be
    split into the header's columns. A missing ``required`` column: one bad line 0, and nothing else."""
    rows = physical_rows(chunks)
    header: list[str] | None = None
    line_no = 0
    blank = 0  # blank rows seen and not yet reported: trailing ones are the file's end, not rows
    async for raw in rows:
        if header is None:
            header_or_bad = _header(raw, required)
            if isinstance(header_or_bad, BadLine):
                yield header_or_bad
                return
            header = header_or_bad
            continue
        if raw == b"":
            blank += 1
            continue
        for _ in range(blank):
            line_no += 1
            yield BadLine(line_no, "blank row")
        blank = 0
        line_no += 1
        yield _row(line_no, raw, header)
    if header is None:
        yield BadLine(0, "the report is empty: no header row")


def _header(raw: bytes | None, required: Collection[str]) -> list[str] | BadLine:
    if raw is None:
        return BadLine(0, f"the header row is longer than {MAX_ROW_BYTES} bytes")
    try:
        text = raw.decode("utf-8-sig")  # a spreadsheet's export may start with a BOM
        names = [name.strip() for name in _fields(text)]
    except UnicodeDecodeError as exc:
        return BadLine(0, f"the header row is not UTF-8 (byte {exc.start})")
    except csv.Error as exc:
        return BadLine(0, f"the header row is not CSV: {exc}")
    missing = [name for name in required if name not in names]
    if missing:
        return BadLine(0, "missing column(s): " + ", ".join(missing), {"header": text[:200]})
    if len(set(names)) != len(names):
        return BadLine(0, "a column is named twice", {"header": text[:200]})
    return names


def _row(line_no: int, raw: bytes | None, header: list[str]) -> ReportRow | BadLine:
    if raw is None:
        return BadLine(line_no, f"the row is longer than {MAX_ROW_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return BadLine(line_no, f"not UTF-8 (byte {exc.start} of the row)",
                       {"row": raw.decode("utf-8", "replace")[:200]})
    try:
        values = _fields(text)
    except csv.Error as exc:
        return BadLine(line_no, f"not a CSV row: {exc}", {"row": text[:200]})
    if len(values) != len(header):
        return BadLine(line_no, f"{len(values)} fields where the header has {len(header)}",
                       {"row": text[:200]})
    return line_no, dict(zip(header, values, strict=True))


async def report_lines(chunks: AsyncIterator[bytes], required: Collection[str],
                       read: RowReader) -> AsyncIterator[SettlementLine | BadLine]:
    """Each row read by ``read``; a ``ValueError`` it raises is that row's :class:`BadLine` (the reason
    is its message). Anything else it raises is a bug and surfaces."""
    async for item in read_rows(chunks, required):
        if isinstance(item, BadLine):
            yield item
            continue
        line_no, row = item
        try:
            yield read(line_no, row)
        except ValueError as exc:
            yield BadLine(line_no, str(exc) or type(exc).__name__, raw_row(row))


# ---------------------------------------------------------------------------
# Values every reader checks the same way

_INTEGER: Final = re.compile(r"-?[0-9]{1,19}")


def minor_int(text: str, column: str) -> int:
    """A signed integer in minor units, exactly as written (``int()`` would also take ``"1_0"``,
    ``" 10"`` or ``"+10"``, which no report writes)."""
    if not _INTEGER.fullmatch(text):
        raise ValueError(f"{column} is not an integer amount: {text[:40]!r}")
    value = int(text)
    if abs(value) > BIGINT_MAX:
        raise ValueError(f"{column} is out of range")
    return value


def known_currency(text: str, column: str) -> str:
    """An ISO 4217 code paycore knows, upper-cased (Stripe writes ``eur``)."""
    code = text.strip().upper()
    if exponent(code) is None:
        raise ValueError(f"{column} is not a currency paycore knows: {text[:8]!r}")
    return code


def check_net(gross: int, fee: int, net: int) -> None:
    """``net = gross - fee``, in one currency: a row that breaks it is misread or miswritten."""
    if net != gross - fee:
        raise ValueError(f"net {net} is not gross {gross} - fee {fee}")


def utc_timestamp(text: str, column: str) -> datetime:
    """An ISO-8601 time; one without an offset is UTC (what the reports say they write)."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{column} is not an ISO-8601 time: {text[:40]!r}") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def optional(text: str) -> str | None:
    """An empty value is an absent one."""
    return text or None


async def scan_file(path: Path, required: Collection[str],
                    observe: Callable[[Mapping[str, str]], bool]) -> str:
    """A first pass over a report file: each readable data row shown to ``observe`` until it
    answers ``True`` (it has seen what it needed: a batch id, a date); the file's SHA-256 (hex)."""
    digest = hashlib.sha256()

    async def hashed() -> AsyncIterator[bytes]:
        async for chunk in file_chunks(path):
            digest.update(chunk)
            yield chunk

    chunks = hashed()
    async for item in read_rows(chunks, required):
        if not isinstance(item, BadLine) and observe(item[1]):
            break
    async for _ in chunks:  # the rest, for the digest only
        pass
    return digest.hexdigest()


# ISO 4217's "no currency involved": a batch's currency where its source states none.
NO_CURRENCY: Final = "XXX"


def file_date(path: Path, first_row_date: str | None) -> date:
    """A file batch's date when none is given: its first readable row's (an ISO date), else the
    file's modification date (UTC): a file without one readable row is still a batch of bad lines."""
    if first_row_date is not None:
        return date.fromisoformat(first_row_date)
    return datetime.fromtimestamp(path.stat().st_mtime, UTC).date()
