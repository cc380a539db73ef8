"""Adyen's settlements, read into paycore's neutral batches and lines (``docs/providers/adyen.md``,
"Settlements").

Adyen writes a Settlement details report per merchant account and batch
(``settlement_detail_report_batch_<n>.csv``), downloaded from the Customer Area by a report user
with HTTP basic auth. :func:`parse_report` reads one a row at a time (the API's body or a file);
:class:`AdyenSettlements` is the :class:`~paycore.settlement_lines.SettlementSource`;
:func:`read_report_file` reads a report saved to disk.

Adyen publishes no list of batches: they are numbered per merchant account, so the source probes
the numbers after the last one recorded (``HEAD``, until a 404). Which batch holds a given day
is not known before it is read (a batch spans the days between two payouts, in the account's time
zone), so the date range does not filter Adyen's batches: every batch after the last recorded is
new, whatever its dates.

``Type`` (Adyen's journal type, https://docs.adyen.com/reporting/settlement-detail-report) maps to
a kind below. ``PaidOut`` (money sent to a shopper's card) is not something paycore does, so it is
an unknown type: a bad line a person looks at, not a line booked as a fee.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Final
from urllib.parse import quote
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import httpx

from paycore.providers.adyen.provider import AdyenAccountConfig
from paycore.providers.http import header_token
from paycore.providers.package import ProviderAccountConfig
from paycore.providers.settlement_csv import (
    NO_CURRENCY,
    file_chunks,
    file_date,
    known_currency,
    optional,
    report_lines,
    scan_file,
)
from paycore.providers.settlement_http import REPORT_TIMEOUT_S, report_client, status_problem, stream_body
from paycore.settlement_lines import (
    BadLine,
    LineKind,
    SettlementBatch,
    SettlementLine,
    SettlementSourceError,
    major_to_minor,
)

__all__ = ["COLUMNS", "KINDS", "MAX_PROBES", "AdyenSettlements", "parse_report", "read_report_file",
           "read_row"]

COLUMNS: Final = (
    "Company Account", "Merchant Account", "Psp Reference", "Merchant Reference", "Payment Method",
    "Creation Date", "TimeZone", "Type", "Modification Reference", "Gross Currency", "Gross Debit (GC)",
    "Gross Credit (GC)", "Exchange Rate", "Net Currency", "Net Debit (NC)", "Net Credit (NC)",
    "Commission (NC)", "Markup (NC)", "Scheme Fees (NC)", "Interchange (NC)", "Payment Method Variant",
    "Modification Merchant Reference", "Batch Number")
KINDS: Final[Mapping[str, LineKind]] = {
    "Settled": LineKind.CHARGE, "SettledBulk": LineKind.CHARGE,
    "Refunded": LineKind.REFUND, "RefundedBulk": LineKind.REFUND,
    "RefundedReversed": LineKind.REFUND_REVERSAL,
    "Chargeback": LineKind.CHARGEBACK, "ChargebackReversed": LineKind.CHARGEBACK_REVERSAL,
    "Fee": LineKind.FEE, "MiscCosts": LineKind.FEE, "PaymentCost": LineKind.FEE,
    "MerchantPayout": LineKind.PAYOUT,
    "DepositCorrection": LineKind.ADJUSTMENT, "Balancetransfer": LineKind.ADJUSTMENT,
    "InvoiceDeduction": LineKind.ADJUSTMENT, "ManualCorrected": LineKind.ADJUSTMENT,
    "ReserveAdjustment": LineKind.ADJUSTMENT,
}
# Types whose Modification Reference is the operation's (the refund's, the chargeback's).
_OPERATION_TYPES: Final = frozenset({"Refunded", "RefundedBulk", "RefundedReversed", "Chargeback"})
_REFUND_TYPES: Final = frozenset({"Refunded", "RefundedBulk", "RefundedReversed"})
_FEE_COLUMNS: Final = ("Commission (NC)", "Markup (NC)", "Scheme Fees (NC)", "Interchange (NC)")
MAX_PROBES: Final = 31  # batch numbers probed per call: a month of daily batches


# ---------------------------------------------------------------------------
# The report


def _amount(row: Mapping[str, str], column: str, currency: str) -> int:
    """An amount column in minor units; empty is 0."""
    text = row[column].strip()
    if not text:
        return 0
    try:
        return major_to_minor(text, currency)
    except ValueError as exc:
        raise ValueError(f"{column}: {exc}") from None


def _created(row: Mapping[str, str]) -> datetime:
    text, zone = row["Creation Date"].strip(), row["TimeZone"].strip()
    try:
        local = datetime.strptime(text, "%Y-%m-%d %H:%M:%S")
    except ValueError:
        raise ValueError(f"Creation Date is not 'YYYY-MM-DD HH:MM:SS': {text[:40]!r}") from None
    try:
        tz = ZoneInfo(zone or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"TimeZone is not a time zone: {zone[:40]!r}") from None
    return local.replace(tzinfo=tz).astimezone(UTC)


def read_row(line_no: int, row: Mapping[str, str], *, merchant_account: str,
             batch_number: str | None = None) -> SettlementLine:
    """One row of a Settlement details report; ``ValueError`` says why it cannot be read.

    :param merchant_account: The configured account's: a row of another is refused (never reconciled).
    :param batch_number: The batch's: a row naming another is refused.
    """
    if row["Merchant Account"] != merchant_account:
        raise ValueError(f"a row of merchant account {row['Merchant Account'][:60]!r},"
                         f" not {merchant_account}")
    if batch_number is not None and row["Batch Number"] and row["Batch Number"] != batch_number:
        raise ValueError(f"a row of batch {row['Batch Number'][:20]}, not of batch {batch_number}")
    record_type = row["Type"]
    kind = KINDS.get(record_type)
    if kind is None:
        raise ValueError(f"unknown Type {record_type[:40]!r}")
    net_currency = known_currency(row["Net Currency"], "Net Currency")
    net = _amount(row, "Net Credit (NC)", net_currency) - _amount(row, "Net Debit (NC)", net_currency)
    fee = sum(_amount(row, column, net_currency) for column in _FEE_COLUMNS)
    if not row["Gross Debit (GC)"].strip() and not row["Gross Credit (GC)"].strip():
        # Fees, payouts, corrections: only a net amount.
        gross_currency, gross = net_currency, net + fee
    else:
        gross_currency = known_currency(row["Gross Currency"], "Gross Currency")
        gross = (_amount(row, "Gross Credit (GC)", gross_currency)
                 - _amount(row, "Gross Debit (GC)", gross_currency))
        if gross_currency == net_currency and net != gross - fee:
            raise ValueError(f"net {net} is not gross {gross} - fees {fee}")
    rate_text = row["Exchange Rate"].strip()
    try:
        rate = Decimal(rate_text) if rate_text else None
    except InvalidOperation:
        raise ValueError(f"Exchange Rate is not a number: {rate_text[:40]!r}") from None
    psp, modification = optional(row["Psp Reference"]), optional(row["Modification Reference"])
    operation = modification if record_type in _OPERATION_TYPES or (
        kind is LineKind.CHARGE and modification != psp) else None
    reference = optional(row["Merchant Reference"])
    if record_type in _REFUND_TYPES:
        reference = optional(row["Modification Merchant Reference"]) or reference
    return SettlementLine(
        line_no=line_no, kind=kind, record_type=record_type, gross_currency=gross_currency, gross_minor=gross,
        net_currency=net_currency, fee_minor=fee, net_minor=net, provider_payment_id=psp,
        provider_operation_id=operation, reference=reference, occurred_at=_created(row),
        exchange_rate=rate if rate is None or rate.is_finite() else None)


def parse_report(chunks: AsyncIterator[bytes], *, merchant_account: str, batch_number: str | None = None
                 ) -> AsyncIterator[SettlementLine | BadLine]:
    """A Settlement details report's rows, streamed from ``chunks``."""
    return report_lines(chunks, COLUMNS, lambda n, row: read_row(
        n, row, merchant_account=merchant_account, batch_number=batch_number))


# ---------------------------------------------------------------------------
# The Customer Area's report download


class AdyenSettlements:
    """Adyen's :class:`~paycore.settlement_lines.SettlementSource` for one configured merchant account.

    :param account: The Adyen account, with its report user (``report_username``, ``report_password``)
        and ``reports_base_url``.
    :param transport: Replaces HTTP in tests.
    :raises SettlementSourceError: The account has no report user (its settlements are read from files).
    """

    def __init__(self, account: ProviderAccountConfig, *, transport: httpx.AsyncBaseTransport | None = None,
                 timeout_s: float = REPORT_TIMEOUT_S) -> None:
        if account.provider != "adyen":
            raise ValueError(f"{account.provider_account} is not an Adyen account")
        account = AdyenAccountConfig.of(account)
        if account.report_username is None or account.report_password is None:
            raise SettlementSourceError(
                f"{account.provider_account} has no report user: set PAYCORE_ADYEN_REPORT_USERNAME and "
                "PAYCORE_ADYEN_REPORT_PASSWORD (or report_username and report_password_env in the accounts "
                "file) to read its settlements from Adyen, or give a report file")
        self._account = account
        self._transport = transport
        self._timeout_s = timeout_s

    def _request(self, method: str, batch_number: int | str) -> httpx.Request:
        acct = self._account
        base = (acct.reports_base_url or "").rstrip("/")
        url = (f"{base}/reports/download/MerchantAccount/{quote(acct.account, safe='')}/"
               f"settlement_detail_report_batch_{batch_number}.csv")
        assert acct.report_username is not None and acct.report_password is not None  # __init__
        user_password = f"{header_token(acct.report_username)}:{acct.report_password.reveal()}"
        authorization = "Basic " + base64.b64encode(user_password.encode("utf-8")).decode("ascii")
        return httpx.Request(method, url, headers={"Authorization": authorization})

    def _refused(self) -> str:
        return (f"the report user's credentials were refused ({self._account.report_username}): check "
                "PAYCORE_ADYEN_REPORT_USERNAME and PAYCORE_ADYEN_REPORT_PASSWORD (or report_username and "
                "report_password_env in the accounts file)")

    async def batches(self, provider_account: str, date_from: date, date_to: date, *,
                      after_batch_id: str | None = None) -> list[SettlementBatch]:
        """The batches numbered after ``after_batch_id`` (from 1 without one) that Adyen has written:
        ``HEAD`` on each number until a 404, at most :data:`MAX_PROBES` a call; each found batch is
        closed (Adyen writes a report once its batch is paid out), dated by its ``Last-Modified``
        (UTC). The dates are not used (see the module's docstring)."""
        if provider_account != self._account.provider_account:
            raise ValueError(f"this source reads {self._account.provider_account}, not {provider_account}")
        after = int(after_batch_id) if after_batch_id is not None else 0
        found: list[SettlementBatch] = []
        async with report_client(self._transport, timeout_s=self._timeout_s) as client:
            for number in range(after + 1, after + 1 + MAX_PROBES):
                what = f"Adyen settlement report batch {number}"
                try:
                    response = await client.send(self._request("HEAD", number))
                except httpx.HTTPError as exc:
                    raise SettlementSourceError(f"{what}: no answer ({type(exc).__name__})") from exc
                if response.status_code == 404:
                    break
                if response.status_code != 200:
                    raise SettlementSourceError(status_problem(what, response, refused=self._refused()))
                found.append(SettlementBatch(
                    provider_account=provider_account, provider_batch_id=str(number),
                    batch_date=_modified_date(response), status="closed",
                    currency=NO_CURRENCY, source="api"))
        return found

    async def lines(self, batch: SettlementBatch) -> AsyncIterator[SettlementLine | BadLine]:
        """The batch's report, streamed; rows of another merchant account or batch are bad lines."""
        what = f"Adyen settlement report batch {batch.provider_batch_id[:20]}"
        if not batch.provider_batch_id.isdigit():
            raise ValueError(f"{batch.provider_batch_id} is not an Adyen batch number")
        async with report_client(self._transport, timeout_s=self._timeout_s) as client:
            body = stream_body(client, self._request("GET", batch.provider_batch_id), what=what,
                               refused=self._refused())
            async for line in parse_report(body, merchant_account=self._account.account,
                                           batch_number=batch.provider_batch_id):
                yield line


def _modified_date(response: httpx.Response) -> date:
    """The UTC date of ``Last-Modified``; a report without a readable one is dated today (UTC): it was
    found now, and Adyen writes a batch's report when the batch closes."""
    text = response.headers.get("Last-Modified")
    try:
        moment = parsedate_to_datetime(text) if text else None
    except (TypeError, ValueError):
        moment = None
    if moment is None:
        return datetime.now(UTC).date()
    return (moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)).date()


# ---------------------------------------------------------------------------
# A file


async def read_report_file(path: Path, provider_account: str, *, batch_id: str | None = None,
                           batch_date: date | None = None, merchant_account: str | None = None
                           ) -> tuple[SettlementBatch, AsyncIterator[SettlementLine | BadLine]]:
    """A Settlement details report saved from Adyen, as one closed batch (source ``file``).

    The batch is ``batch_id``, else the first readable row's ``Batch Number`` (a row naming
    another is a bad line), else ``file:`` and the first 16 hex digits of the file's SHA-256. Its
    date is ``batch_date`` or the first readable row's Creation Date (UTC); its currency the first
    readable row's Net Currency. Rows of another merchant account than ``merchant_account`` (by
    default the one in ``provider_account``, ``adyen:<merchant account>:<mode>``) are bad lines.
    The report states no totals.
    """
    if merchant_account is None:
        merchant_account = provider_account.split(":")[1]
    first: dict[str, str] = {}

    def observe(row: Mapping[str, str]) -> bool:
        if row["Merchant Account"] != merchant_account:
            return False
        try:
            first["currency"] = known_currency(row["Net Currency"], "Net Currency")
            first["date"] = _created(row).date().isoformat()
        except ValueError:
            first.clear()
            return False
        if row["Batch Number"]:
            first["batch"] = row["Batch Number"]
        return True

    digest = await scan_file(path, COLUMNS, observe)
    number = batch_id or first.get("batch")
    batch = SettlementBatch(
        provider_account=provider_account, provider_batch_id=number or f"file:{digest[:16]}",
        batch_date=batch_date or file_date(path, first.get("date")), status="closed",
        currency=first.get("currency", NO_CURRENCY), source="file")
    return batch, parse_report(file_chunks(path), merchant_account=merchant_account, batch_number=number)
