"""Cardco's settlements, read into paycore's neutral batches and lines (``docs/providers/cardco.md``,
"Settlements").

Cardco lists its daily batches (``GET /v1/settlements``) with their totals, and serves each
batch's lines as CSV (``GET /v1/settlements/{id}/lines``): :class:`CardcoSettlements` is that
:class:`~paycore.settlement_lines.SettlementSource`; :func:`parse_lines` reads the CSV (the API's
body or a file) one row at a time; :func:`read_report_file` reads a lines CSV saved to disk.

A batch the list says belongs to another account or mode is refused outright: reconciling another
account's money against this account's books could only produce wrong matches.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from datetime import date
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import httpx

from paycore.providers.cardco.wire import auth_headers
from paycore.providers.package import ProviderAccountConfig
from paycore.providers.settlement_csv import (
    NO_CURRENCY,
    check_net,
    file_chunks,
    file_date,
    known_currency,
    minor_int,
    optional,
    report_lines,
    scan_file,
    utc_timestamp,
)
from paycore.providers.settlement_http import REPORT_TIMEOUT_S, get_json, report_client, stream_body
from paycore.settlement_lines import (
    BadLine,
    BatchStatus,
    LineKind,
    SettlementBatch,
    SettlementLine,
    SettlementSourceError,
)

__all__ = ["COLUMNS", "KINDS", "CardcoSettlements", "parse_lines", "read_report_file"]

COLUMNS: Final = ("line_id", "type", "payment", "refund", "capture", "reference", "created", "currency",
                  "gross", "fee", "net")
KINDS: Final[Mapping[str, LineKind]] = {
    "charge": LineKind.CHARGE, "refund": LineKind.REFUND, "refund_reversal": LineKind.REFUND_REVERSAL,
    "fee": LineKind.FEE, "adjustment": LineKind.ADJUSTMENT}
STATUSES: Final[Mapping[str, BatchStatus]] = {"open": "open", "paid": "closed"}
_REFUSED: Final = "the account's API key was refused (PAYCORE_CARDCO_API_KEY)"


# ---------------------------------------------------------------------------
# The lines CSV


def read_row(line_no: int, row: Mapping[str, str], *, currency: str | None = None) -> SettlementLine:
    """One row of a lines CSV; ``ValueError`` says why a row cannot be read.

    :param currency: The batch's currency, when known: a row in another is refused.
    """
    kind = KINDS.get(row["type"])
    if kind is None:
        raise ValueError(f"unknown line type {row['type'][:40]!r}")
    row_currency = known_currency(row["currency"], "currency")
    if currency is not None and row_currency != currency:
        raise ValueError(f"currency {row_currency} is not the batch's {currency}")
    gross, fee, net = (minor_int(row[c], c) for c in ("gross", "fee", "net"))
    check_net(gross, fee, net)
    return SettlementLine(
        line_no=line_no, kind=kind, record_type=row["type"], gross_currency=row_currency, gross_minor=gross,
        net_currency=row_currency, fee_minor=fee, net_minor=net, provider_line_id=optional(row["line_id"]),
        provider_payment_id=optional(row["payment"]),
        provider_operation_id=optional(row["refund"]) or optional(row["capture"]),
        reference=optional(row["reference"]), occurred_at=utc_timestamp(row["created"], "created"))


def parse_lines(chunks: AsyncIterator[bytes], *, currency: str | None = None
                ) -> AsyncIterator[SettlementLine | BadLine]:
    """A lines CSV's rows, streamed from ``chunks`` (see :mod:`paycore.providers.settlement_csv`)."""
    return report_lines(chunks, COLUMNS, lambda n, row: read_row(n, row, currency=currency))


# ---------------------------------------------------------------------------
# The API


def _batch(item: Any, acct: ProviderAccountConfig) -> SettlementBatch:
    """One batch of the list, or :class:`SettlementSourceError` for one that is not Cardco's
    documented batch or not this account's."""
    if not isinstance(item, dict) or item.get("object") != "settlement":
        raise SettlementSourceError("Cardco's batch list holds something that is not a settlement")
    batch_id = item.get("id")
    if not isinstance(batch_id, str) or not batch_id:
        raise SettlementSourceError("a Cardco settlement without an id")
    if item.get("account") != acct.account or item.get("livemode") is not (acct.environment == "live"):
        raise SettlementSourceError(
            f"Cardco settlement {batch_id[:60]} belongs to account {str(item.get('account'))[:60]} "
            f"(livemode {item.get('livemode')!r}), not {acct.provider_account}: refused")
    numbers = {k: item.get(k) for k in ("gross", "fees", "net", "lines")}
    status = STATUSES.get(item.get("status"))  # type: ignore[arg-type]
    try:
        batch_date = date.fromisoformat(str(item.get("date")))
        currency = known_currency(str(item.get("currency")), "currency")
    except ValueError as exc:
        raise SettlementSourceError(f"Cardco settlement {batch_id[:60]}: {exc}") from None
    if status is None or any(type(v) is not int for v in numbers.values()) or numbers["lines"] < 0:  # type: ignore[operator]
        raise SettlementSourceError(f"Cardco settlement {batch_id[:60]}: unreadable status or totals")
    return SettlementBatch(
        provider_account=acct.provider_account, provider_batch_id=batch_id, batch_date=batch_date,
        status=status, currency=currency, reported_gross_minor=numbers["gross"],
        reported_fees_minor=numbers["fees"], reported_net_minor=numbers["net"],
        reported_lines=numbers["lines"], source="api")


class CardcoSettlements:
    """Cardco's :class:`~paycore.settlement_lines.SettlementSource` for one configured account.

    :param account: The Cardco account (its base URL, key, version).
    :param transport: Replaces HTTP in tests.
    """

    def __init__(self, account: ProviderAccountConfig, *, transport: httpx.AsyncBaseTransport | None = None,
                 timeout_s: float = REPORT_TIMEOUT_S) -> None:
        if account.provider != "cardco":
            raise ValueError(f"{account.provider_account} is not a Cardco account")
        self._account = account
        self._transport = transport
        self._timeout_s = timeout_s

    def _request(self, path: str, params: Mapping[str, str] | None = None) -> httpx.Request:
        acct = self._account
        return httpx.Request("GET", acct.base_url.rstrip("/") + path, params=params,
                             headers=auth_headers(acct, acct.api_version))

    async def batches(self, provider_account: str, date_from: date, date_to: date, *,
                      after_batch_id: str | None = None) -> list[SettlementBatch]:
        """``GET /v1/settlements?from=&to=``: the account's batches dated in the range (``after_batch_id``
        is not needed: Cardco lists them)."""
        if provider_account != self._account.provider_account:
            raise ValueError(f"this source reads {self._account.provider_account}, not {provider_account}")
        request = self._request("/v1/settlements", {"from": date_from.isoformat(), "to": date_to.isoformat()})
        async with report_client(self._transport, timeout_s=self._timeout_s) as client:
            body = await get_json(client, request, what="Cardco's settlement list", refused=_REFUSED)
        if not isinstance(body, dict) or not isinstance(body.get("data"), list):
            raise SettlementSourceError("Cardco's settlement list is not {\"data\": [...]}")
        return [_batch(item, self._account) for item in body["data"]]

    async def lines(self, batch: SettlementBatch) -> AsyncIterator[SettlementLine | BadLine]:
        """``GET /v1/settlements/{id}/lines``, streamed; rows in another currency than the batch's are bad.

        A 200 whose body ended early is an answer cut short, not the batch: fewer rows than the
        list says the batch has, or a last row that is unreadable and unterminated (read in part).
        That raises :class:`SettlementSourceError` after the rows read, so none of the batch is
        recorded and the next run reads it again.
        """
        path = f"/v1/settlements/{quote(batch.provider_batch_id, safe='')}/lines"
        what = f"Cardco settlement {batch.provider_batch_id[:60]}'s lines"
        rows, last_bad, tail = 0, False, b""

        async def watched(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
            nonlocal tail
            async for chunk in chunks:
                tail = chunk[-1:] or tail
                yield chunk

        async with report_client(self._transport, timeout_s=self._timeout_s) as client:
            body = stream_body(client, self._request(path), what=what, refused=_REFUSED)
            async for line in parse_lines(watched(body), currency=batch.currency):
                rows, last_bad = max(rows, line.line_no), isinstance(line, BadLine)
                yield line
        if batch.reported_lines is not None and rows < batch.reported_lines:
            raise SettlementSourceError(
                f"{what}: the answer was cut short ({rows} of the batch's {batch.reported_lines} rows)")
        if last_bad and tail != b"\n":
            raise SettlementSourceError(f"{what}: the answer was cut short (row {rows} read in part)")


# ---------------------------------------------------------------------------
# A file


async def read_report_file(path: Path, provider_account: str, *, batch_id: str | None = None,
                           batch_date: date | None = None
                           ) -> tuple[SettlementBatch, AsyncIterator[SettlementLine | BadLine]]:
    """A lines CSV saved from Cardco, as one closed batch (source ``file``).

    The CSV names no batch: ``batch_id`` is the given one or ``file:`` and the first 16 hex digits
    of the file's SHA-256 (the same file read twice is the same batch); the date is the given one
    or that of the first readable row; the currency is the first readable row's (a row in another
    is a bad line). A file states no totals. A file without one readable row is still a batch (its
    bad lines must be seen): dated by the file's modification time, in no currency (``XXX``).
    """
    first: dict[str, str] = {}

    def observe(row: Mapping[str, str]) -> bool:
        try:
            first["currency"] = known_currency(row["currency"], "currency")
            first["date"] = utc_timestamp(row["created"], "created").date().isoformat()
        except ValueError:
            return False
        return True

    digest = await scan_file(path, COLUMNS, observe)
    batch = SettlementBatch(
        provider_account=provider_account, provider_batch_id=batch_id or f"file:{digest[:16]}",
        batch_date=batch_date or file_date(path, first.get("date")), status="closed",
        currency=first.get("currency", NO_CURRENCY), source="file")
    currency = first.get("currency")
    return batch, parse_lines(file_chunks(path), currency=currency)

