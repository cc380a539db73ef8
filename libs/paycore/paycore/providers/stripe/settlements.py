"""Stripe's settlements, read into paycore's neutral batches and lines (``docs/providers/stripe.md``,
"Settlements").

Stripe has no batch of its own that every account has (automatic payouts may be off), so from the
API a batch is one UTC day of the balance: ``GET /v1/balance_transactions`` for that day, through
the SDK as :mod:`.client` uses it (:class:`StripeSettlements`). A file is Stripe's itemized payout
reconciliation report (``payout_reconciliation.itemized.5``), one payout:
:func:`parse_report` reads it a row at a time, :func:`read_report_file` reads it from disk.

A day of a balance may hold several currencies, so a day's batch states none (``XXX``) and no
totals: each line is checked on its own (``net = gross - fee``).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Final

import httpx
import stripe

from paycore.clock import Clock
from paycore.providers.http import no_retry_client
from paycore.providers.package import ProviderAccountConfig
from paycore.providers.settlement_csv import (
    NO_CURRENCY,
    check_net,
    file_chunks,
    file_date,
    known_currency,
    optional,
    report_lines,
    scan_file,
    utc_timestamp,
)
from paycore.providers.settlement_http import REPORT_TIMEOUT_S
from paycore.providers.stripe.client import PaycoreHTTPXClient
from paycore.providers.stripe.wire import REFERENCE_KEY
from paycore.settlement_lines import (
    BadLine,
    LineKind,
    SettlementBatch,
    SettlementLine,
    SettlementSourceError,
    major_to_minor,
    raw_row,
)

__all__ = ["CATEGORIES", "REPORT_COLUMNS", "TYPES", "StripeSettlements", "day_batch", "parse_report",
           "read_report_file", "read_transaction"]

# A balance transaction's ``type`` (https://docs.stripe.com/api/balance_transactions/object#balance_transaction_object-type).
TYPES: Final[Mapping[str, LineKind]] = {
    "charge": LineKind.CHARGE, "payment": LineKind.CHARGE,
    "refund": LineKind.REFUND, "payment_refund": LineKind.REFUND,
    "payment_failure_refund": LineKind.CHARGE_REVERSAL, "refund_failure": LineKind.REFUND_REVERSAL,
    "adjustment": LineKind.ADJUSTMENT, "partial_capture_reversal": LineKind.CAPTURE_REVERSAL,
    "stripe_fee": LineKind.FEE, "stripe_fx_fee": LineKind.FEE, "tax_fee": LineKind.FEE,
    "application_fee": LineKind.FEE, "application_fee_refund": LineKind.FEE,
    "payout": LineKind.PAYOUT, "payout_cancel": LineKind.PAYOUT, "payout_failure": LineKind.PAYOUT,
}
# The itemized report's ``reporting_category`` (https://docs.stripe.com/reports/reporting-categories).
CATEGORIES: Final[Mapping[str, LineKind]] = {
    "charge": LineKind.CHARGE, "refund": LineKind.REFUND, "refund_failure": LineKind.REFUND_REVERSAL,
    "dispute": LineKind.CHARGEBACK, "dispute_reversal": LineKind.CHARGEBACK_REVERSAL,
    "partial_capture_reversal": LineKind.CAPTURE_REVERSAL, "fee": LineKind.FEE,
    "other_adjustment": LineKind.ADJUSTMENT, "adjustment": LineKind.ADJUSTMENT, "payout": LineKind.PAYOUT,
    "payment_failure_refund": LineKind.CHARGE_REVERSAL, "charge_failure": LineKind.CHARGE_REVERSAL,
}
REPORT_COLUMNS: Final = ("balance_transaction_id", "created_utc", "currency", "gross", "fee", "net",
                         "reporting_category", "automatic_payout_id", "payment_intent_id", "charge_id",
                         "refund_id")
# Columns a report has only when chosen in the Dashboard: read when present.
PAYMENT_REFERENCE: Final = f"payment_metadata[{REFERENCE_KEY}]"
REFUND_REFERENCE: Final = f"refund_metadata[{REFERENCE_KEY}]"
DAY_PREFIX: Final = "day:"
# The sources worth retrieving when a transaction comes back unexpanded, by id prefix.
_RETRIEVABLE: Final = {"ch_": "charges", "py_": "charges", "re_": "refunds", "pyr_": "refunds"}
_NEEDS_SOURCE: Final = frozenset({LineKind.CHARGE, LineKind.REFUND, LineKind.CHARGE_REVERSAL,
                                  LineKind.REFUND_REVERSAL, LineKind.CAPTURE_REVERSAL})


# ---------------------------------------------------------------------------
# A balance transaction


def _reference(obj: Mapping[str, Any]) -> str | None:
    metadata = obj.get("metadata")
    value = metadata.get(REFERENCE_KEY) if isinstance(metadata, Mapping) else None
    return value if isinstance(value, str) and value else None


def _int(txn: Mapping[str, Any], key: str) -> int:
    value = txn.get(key)
    if type(value) is not int:
        raise ValueError(f"{key} is not an integer amount")
    return value


def read_transaction(line_no: int, txn: Mapping[str, Any]) -> SettlementLine:
    """One balance transaction (a plain mapping: the SDK's object ``to_dict()``), its ``source``
    expanded or an id; ``ValueError`` says why it cannot be read."""
    record_type = str(txn.get("type"))
    kind = TYPES.get(record_type)
    if kind is None:
        raise ValueError(f"unknown balance transaction type {record_type[:40]!r}")
    currency = known_currency(str(txn.get("currency")), "currency")
    gross, fee, net = _int(txn, "amount"), _int(txn, "fee"), _int(txn, "net")
    check_net(gross, fee, net)
    created = txn.get("created")
    if type(created) is not int:
        raise ValueError("created is not a timestamp")
    rate = txn.get("exchange_rate")
    try:
        exchange_rate = None if rate is None else Decimal(str(rate))
    except InvalidOperation:
        raise ValueError("exchange_rate is not a number") from None
    payment_id = operation_id = reference = None
    source = txn.get("source")
    if isinstance(source, Mapping):
        reference = _reference(source)
        if source.get("object") == "refund":
            operation_id = optional(str(source.get("id") or ""))
        intent = source.get("payment_intent")
        payment_id = intent if isinstance(intent, str) else None
    txn_id = txn.get("id")
    return SettlementLine(
        line_no=line_no, kind=kind, record_type=record_type, gross_currency=currency, gross_minor=gross,
        net_currency=currency, fee_minor=fee, net_minor=net,
        provider_line_id=txn_id if isinstance(txn_id, str) else None, provider_payment_id=payment_id,
        provider_operation_id=operation_id, reference=reference,
        occurred_at=datetime.fromtimestamp(created, UTC), exchange_rate=exchange_rate)


# ---------------------------------------------------------------------------
# The API: one UTC day of the balance is a batch


def day_batch(provider_account: str, day: date, now: datetime) -> SettlementBatch:
    """The batch of one UTC day: closed once the day has ended by ``now``."""
    ended = now >= datetime.combine(day + timedelta(days=1), time(), UTC)
    return SettlementBatch(provider_account=provider_account,
                           provider_batch_id=f"{DAY_PREFIX}{day.isoformat()}", batch_date=day,
                           status="closed" if ended else "open", currency=NO_CURRENCY)


def _problem(what: str, exc: Exception) -> SettlementSourceError:
    if isinstance(exc, TimeoutError):
        return SettlementSourceError(f"{what}: no answer in time")
    if isinstance(exc, stripe.APIConnectionError):
        return SettlementSourceError(f"{what}: no answer ({type(exc.__cause__ or exc).__name__})")
    if isinstance(exc, stripe.StripeError) and exc.http_status is not None:
        refused = ", the API key was refused" if exc.http_status in (401, 403) else ""
        return SettlementSourceError(f"{what}: HTTP {exc.http_status}{refused}")
    return SettlementSourceError(f"{what}: the answer is unreadable ({type(exc).__name__})")


class StripeSettlements:
    """Stripe's :class:`~paycore.settlement_lines.SettlementSource` for one configured account.

    :param account: The Stripe account (key, ``PAYCORE_STRIPE_API_BASE``, version).
    :param clock: Whose ``now()`` says whether a day has ended (its batch closed).
    :param transport: Replaces HTTP in tests.
    """

    def __init__(self, account: ProviderAccountConfig, clock: Clock, *,
                 transport: httpx.AsyncBaseTransport | None = None,
                 timeout_s: float = REPORT_TIMEOUT_S) -> None:
        if account.provider != "stripe":
            raise ValueError(f"{account.provider_account} is not a Stripe account")
        self._account = account
        self._clock = clock
        self._transport = transport
        self._timeout_s = timeout_s

    async def batches(self, provider_account: str, date_from: date, date_to: date, *,
                      after_batch_id: str | None = None) -> list[SettlementBatch]:
        """One batch per day in the range, without a request: an empty day has no lines."""
        if provider_account != self._account.provider_account:
            raise ValueError(f"this source reads {self._account.provider_account}, not {provider_account}")
        now = self._clock.now()
        days = (date_to - date_from).days + 1
        return [day_batch(provider_account, date_from + timedelta(days=n), now) for n in range(max(days, 0))]

    def _client(self, pool: httpx.AsyncClient) -> stripe.StripeClient:
        acct = self._account
        return stripe.StripeClient(acct.api_key.reveal(), http_client=PaycoreHTTPXClient(pool),
                                   base_addresses={"api": acct.base_url.rstrip("/")},
                                   max_network_retries=0, stripe_version=acct.api_version)

    async def lines(self, batch: SettlementBatch) -> AsyncIterator[SettlementLine | BadLine]:
        """The day's balance transactions (``expand[]=data.source``, 100 a page, every page), newest first
        as Stripe lists them. An unexpanded source is retrieved; a failed retrieve is that line's
        :class:`BadLine`, a failed page is :class:`SettlementSourceError`."""
        if not batch.provider_batch_id.startswith(DAY_PREFIX):
            raise ValueError(f"{batch.provider_batch_id} is not a Stripe day batch")
        day = date.fromisoformat(batch.provider_batch_id.removeprefix(DAY_PREFIX))
        start = int(datetime.combine(day, time(), UTC).timestamp())
        params: dict[str, Any] = {"created": {"gte": start, "lt": start + 86_400}, "limit": 100,
                                  "expand": ["data.source"]}
        what = f"Stripe balance transactions of {day.isoformat()}"
        async with no_retry_client(self._transport, verify=ssl.create_default_context(
                cafile=stripe.ca_bundle_path)) as pool:
            client = self._client(pool)
            try:
                async with asyncio.timeout(self._timeout_s):
                    page = await client.v1.balance_transactions.list_async(params)  # type: ignore[arg-type]
            except (stripe.StripeError, TimeoutError, UnicodeDecodeError) as exc:
                raise _problem(what, exc) from exc
            transactions = page.auto_paging_iter()
            line_no = 0
            while True:
                try:
                    async with asyncio.timeout(self._timeout_s):
                        txn = (await anext(transactions)).to_dict()
                except StopAsyncIteration:
                    return
                except (stripe.StripeError, TimeoutError, UnicodeDecodeError) as exc:
                    raise _problem(what, exc) from exc
                line_no += 1
                yield await self._line(client, line_no, txn)

    async def _line(self, client: stripe.StripeClient, line_no: int,
                    txn: dict[str, Any]) -> SettlementLine | BadLine:
        source = txn.get("source")
        if isinstance(source, str) and TYPES.get(str(txn.get("type"))) in _NEEDS_SOURCE:
            service = next((s for p, s in _RETRIEVABLE.items() if source.startswith(p)), None)
            if service is not None:
                try:
                    async with asyncio.timeout(self._timeout_s):
                        found = await getattr(client.v1, service).retrieve_async(source)
                except (stripe.StripeError, TimeoutError, UnicodeDecodeError) as exc:
                    reason = str(_problem(f"retrieving its source {source[:60]}", exc))
                    return BadLine(line_no, reason, _raw_transaction(txn))
                txn = {**txn, "source": found.to_dict()}
        try:
            return read_transaction(line_no, txn)
        except ValueError as exc:
            return BadLine(line_no, str(exc), _raw_transaction(txn))


def _raw_transaction(txn: Mapping[str, Any]) -> dict[str, str]:
    keys = ("id", "type", "amount", "fee", "net", "currency", "created")
    return raw_row({k: str(txn.get(k)) for k in keys})


# ---------------------------------------------------------------------------
# The itemized payout reconciliation report


def read_report_row(line_no: int, row: Mapping[str, str], *, payout_id: str | None = None) -> SettlementLine:
    """One row of the itemized report (amounts in major units); ``ValueError`` says why it cannot
    be read. ``payout_id``: the batch's payout, a row of another is refused."""
    category = row["reporting_category"]
    kind = CATEGORIES.get(category)
    if kind is None:
        raise ValueError(f"unknown reporting_category {category[:40]!r}")
    row_payout = row["automatic_payout_id"]
    if payout_id is not None and row_payout and row_payout != payout_id:
        raise ValueError(f"a row of payout {row_payout[:60]}, not of this batch's {payout_id[:60]}")
    currency = known_currency(row["currency"], "currency")
    gross, fee, net = (_major(row[c], currency, c) for c in ("gross", "fee", "net"))
    check_net(gross, fee, net)
    refund_reference = optional(row.get(REFUND_REFERENCE, ""))
    payment_reference = optional(row.get(PAYMENT_REFERENCE, ""))
    refund_id = optional(row["refund_id"])
    return SettlementLine(
        line_no=line_no, kind=kind, record_type=category, gross_currency=currency, gross_minor=gross,
        net_currency=currency, fee_minor=fee, net_minor=net,
        provider_line_id=optional(row["balance_transaction_id"]),
        provider_payment_id=optional(row["payment_intent_id"]), provider_operation_id=refund_id,
        reference=(refund_reference if refund_id else None) or payment_reference,
        occurred_at=utc_timestamp(row["created_utc"], "created_utc"))


def _major(text: str, currency: str, column: str) -> int:
    try:
        return major_to_minor(text, currency)
    except ValueError as exc:
        raise ValueError(f"{column}: {exc}") from None


def parse_report(chunks: AsyncIterator[bytes], *, payout_id: str | None = None
                 ) -> AsyncIterator[SettlementLine | BadLine]:
    """The itemized report's rows, streamed from ``chunks``."""
    return report_lines(chunks, REPORT_COLUMNS, lambda n, row: read_report_row(n, row, payout_id=payout_id))


async def read_report_file(path: Path, provider_account: str, *, batch_id: str | None = None,
                           batch_date: date | None = None
                           ) -> tuple[SettlementBatch, AsyncIterator[SettlementLine | BadLine]]:
    """An itemized payout reconciliation report saved from Stripe, as one closed batch (source ``file``).

    The batch is the payout the rows name (``automatic_payout_id``, the first named; a row of
    another payout is a bad line), or ``file:`` and the first 16 hex digits of the file's SHA-256
    when none is named; ``batch_id`` overrides it. Its date is ``batch_date`` or the first readable
    row's ``created_utc``; its currency the first readable row's. The report states no totals.
    """
    first: dict[str, str] = {}

    def observe(row: Mapping[str, str]) -> bool:
        if "date" not in first:
            try:
                first["currency"] = known_currency(row["currency"], "currency")
                first["date"] = utc_timestamp(row["created_utc"], "created_utc").date().isoformat()
            except ValueError:
                first.pop("currency", None)
        if row["automatic_payout_id"] and "payout" not in first:
            first["payout"] = row["automatic_payout_id"]
        return "date" in first and "payout" in first

    digest = await scan_file(path, REPORT_COLUMNS, observe)
    payout_id = first.get("payout")
    batch = SettlementBatch(
        provider_account=provider_account, provider_batch_id=batch_id or payout_id or f"file:{digest[:16]}",
        batch_date=batch_date or file_date(path, first.get("date")), status="closed",
        currency=first.get("currency", NO_CURRENCY), source="file")
    return batch, parse_report(file_chunks(path), payout_id=payout_id)
