"""What a provider's settlement report says, in paycore's words: batches and their lines.

Each provider publishes what it paid the merchant in its own dialect (Cardco's batches and CSV
lines, Stripe's balance transactions or its itemized payout-reconciliation CSV, Adyen's
Settlement details report). Its package's ``settlements.py`` reads that dialect into the values
here, one line at a time (a batch may hold a million lines: nothing keeps them all), and
:mod:`paycore.settlements` reconciles them against the books. A row the reader cannot take (a
malformed CSV row, an unknown record type, a missing column, a byte that is not UTF-8) is a
:class:`BadLine` with its line number, never an exception and never skipped.

Money is in minor units, signed from the merchant's side: a charge is positive, a refund
negative, a refund reversal positive; ``net = gross - fee``.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from typing import Literal, Protocol

from paycore.currencies import exponent
from paycore.errors import PaycoreError

__all__ = [
    "BadLine", "BatchStatus", "LineKind", "SettlementBatch", "SettlementLine", "SettlementSource",
    "SettlementSourceError", "major_to_minor",
]


class LineKind(enum.StrEnum):
    """What a line is about, whatever the provider calls it (its own word stays in ``record_type``)."""

    CHARGE = "charge"  # money captured from a customer: matched to a payment (or its capture)
    REFUND = "refund"  # money given back: matched to a refund
    REFUND_REVERSAL = "refund_reversal"  # a paid refund came back to the store
    CHARGEBACK = "chargeback"  # the customer's bank took the money back
    CHARGEBACK_REVERSAL = "chargeback_reversal"  # ... and returned it
    CHARGE_REVERSAL = "charge_reversal"  # a settled charge failed afterwards (Stripe payment_failure_refund)
    CAPTURE_REVERSAL = "capture_reversal"  # the uncaptured rest of a hold released (bookkeeping)
    FEE = "fee"  # the provider's fee, not about one payment
    ADJUSTMENT = "adjustment"  # a correction the provider made
    PAYOUT = "payout"  # the money leaving the balance for the merchant's bank


# The kinds that are about one payment or operation of ours and are matched to it.
MATCHED_KINDS: frozenset[LineKind] = frozenset({
    LineKind.CHARGE, LineKind.REFUND, LineKind.REFUND_REVERSAL, LineKind.CHARGEBACK,
    LineKind.CHARGEBACK_REVERSAL, LineKind.CHARGE_REVERSAL, LineKind.CAPTURE_REVERSAL})

BatchStatus = Literal["open", "closed"]  # open: lines may still be added; closed: never changes


@dataclass(frozen=True)
class SettlementBatch:
    """One batch as the provider announces it, before its lines are read.

    ``provider_batch_id`` is unique per account (Cardco's ``stl_…``, a Stripe payout or day,
    Adyen's batch number). The reported totals are what the lines must add up to; ``None`` where
    the source states none (then only ``net = gross - fee`` per line is checked).
    """

    provider_account: str
    provider_batch_id: str
    batch_date: date
    status: BatchStatus
    currency: str
    reported_gross_minor: int | None = None
    reported_fees_minor: int | None = None
    reported_net_minor: int | None = None
    reported_lines: int | None = None
    source: Literal["api", "file"] = "api"


@dataclass(frozen=True)
class SettlementLine:
    """One movement of money in a batch.

    :param line_no: Its row in the source, counted from 1 after any header (a CSV's data rows;
        the n-th balance transaction): what a person is told when it is an exception.
    :param provider_line_id: The provider's own id of the line where it has one (Cardco's
        ``line_id``, Stripe's ``txn_…``); Adyen's report has none.
    :param provider_payment_id: The payment it is about (Cardco ``pay_…``, Stripe's PaymentIntent
        ``pi_…``, Adyen's Psp Reference); None for fees and adjustments.
    :param provider_operation_id: The refund's or capture's id where the line is about one
        (Cardco ``re_…``/``cap_…``, Stripe ``re_…``, Adyen's Modification Reference).
    :param reference: The merchant's reference of the payment, refund or capture, where given.
    :param gross_currency: What ``gross_minor`` is in: the payment's currency where the source
        says it (Adyen's Gross Currency), else the settlement's.
    :param net_currency: What ``fee_minor`` and ``net_minor`` are in (the settlement's).
    :param exchange_rate: gross to net currency, where the source gives one.
    :param record_type: The provider's own word for the line (``Settled``, ``payment_failure_refund``).
    """

    line_no: int
    kind: LineKind
    record_type: str
    gross_currency: str
    gross_minor: int
    net_currency: str
    fee_minor: int
    net_minor: int
    provider_line_id: str | None = None
    provider_payment_id: str | None = None
    provider_operation_id: str | None = None
    reference: str | None = None
    occurred_at: datetime | None = None
    exchange_rate: Decimal | None = None


@dataclass(frozen=True)
class BadLine:
    """A row that could not be read: recorded and escalated with its line number, never skipped.

    ``raw`` is the row as far as it was readable, each value cut short (a report carries no card
    data, but a malformed row may be anything: it is shown to a person, not parsed).
    """

    line_no: int
    reason: str
    raw: Mapping[str, str] = field(default_factory=dict)


class SettlementSourceError(PaycoreError):
    """The provider's settlement API could not be read (unreachable, refused, not found).

    Not about one line: the run reports it and the batch is tried again on the next run.
    """


class SettlementSource(Protocol):
    """What reconciliation needs from a provider: its batches in a date range, and their lines."""

    async def batches(self, provider_account: str, date_from: date, date_to: date, *,
                      after_batch_id: str | None = None) -> list[SettlementBatch]:
        """The account's batches dated ``date_from`` to ``date_to`` (UTC dates, inclusive).

        ``after_batch_id`` is the last batch already recorded, for a provider that publishes no
        list of batches and numbers them instead (Adyen: the next ones are probed from it); a
        provider with a list (Cardco) or with batches known in advance (Stripe's days) ignores it.
        """
        ...

    def lines(self, batch: SettlementBatch) -> AsyncIterator[SettlementLine | BadLine]:
        """The batch's lines in the provider's order, streamed."""
        ...


BIGINT_MAX = 2**63 - 1  # what a column of minor units holds


def major_to_minor(text: str, currency: str) -> int:
    """``"12.34"`` EUR -> ``1234``: a report's decimal amount in major units, exactly.

    Raises ``ValueError`` for text that is not a number, or that has more decimals than the
    currency's minor unit (``"1.234"`` EUR): a reader turns that into a :class:`BadLine`.
    """
    places = exponent(currency)
    if places is None:
        raise ValueError(f"{currency[:8]!r} is not a currency paycore knows")
    if len(text) > 40:
        raise ValueError(f"not an amount: {text[:40]!r}…")
    try:
        amount = Decimal(text.strip())
    except InvalidOperation:
        raise ValueError(f"not a number: {text[:40]!r}") from None
    if not amount.is_finite():
        raise ValueError(f"not a number: {text[:40]!r}")
    scaled = amount.scaleb(places)
    if scaled != scaled.to_integral_value():
        raise ValueError(f"{text.strip()[:40]} has more decimals than {currency} allows")
    if abs(scaled) > BIGINT_MAX:
        raise ValueError(f"{text.strip()[:40]} is out of range")
    return int(scaled)


RAW_VALUE_LIMIT = 200  # characters of one raw value kept with a bad line


def raw_row(row: Mapping[str, str | None]) -> dict[str, str]:
    """A row's values cut to :data:`RAW_VALUE_LIMIT`, for a :class:`BadLine`."""
    return {str(k)[:RAW_VALUE_LIMIT]: (v or "")[:RAW_VALUE_LIMIT] for k, v in row.items()}
