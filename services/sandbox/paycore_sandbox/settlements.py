"""The settlement book: what each provider says it paid the merchant, per account and day.

paycore reconciles every provider's settlement report against its own books, so the sandbox
must publish one that is *derived from what really happened* in it, and lets a test plant
every discrepancy a reconciliation must find. Each wire renders the same book in its own
dialect (Cardco's batches and CSV lines, Stripe's balance transactions and payout CSV, Adyen's
Settlement details report); this module knows none of them.

A batch is one (dialect, account, environment, UTC date by the sandbox clock). The book listens
to the core's events (:class:`paycore_sandbox.webhooks.WebhookEmitter` hands every one to
:meth:`SettlementBook.on_event`), so a line is recorded once, at the moment its money moved:

- an automatically captured payment that succeeded → ``charge`` (gross = amount);
- a succeeded capture of a held payment → ``charge`` with the capture's id and reference;
- a succeeded refund → ``refund`` (gross = −amount); the control's refund without a refund
  object (``POST /_sandbox/payments/{id}/refund``) too, with an empty ``refund``;
- a succeeded refund that later fails (``POST /_sandbox/refunds/{id}/fail``) →
  ``refund_reversal`` (gross = +amount) on the day it failed.

Charges pay ``fee = round(gross * 0.014) + 25``; refunds and reversals pay 0; ``net = gross -
fee``. A line whose day's batch is already closed goes to the next day's open batch (a closed
batch never changes), keeping its own ``created``.

Tests plant discrepancies through :meth:`SettlementBook.add_lines` (hand-made lines, and
``suppress``/``duplicate`` of derived ones), :meth:`SettlementBook.set_totals` (a header that
does not add up) and :meth:`SettlementBook.append_raw` (bytes the report readers must survive).
:meth:`SettlementBook.close` freezes a batch: its lines are snapshotted and never change again.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from paycore_sandbox.movements import Capture, Refund

if TYPE_CHECKING:
    from paycore_sandbox.ledger import Ledger
    from paycore_sandbox.movements import MovementBook
    from paycore_sandbox.webhooks import Event

LineType = Literal["charge", "refund", "refund_reversal", "fee", "adjustment"]
LINE_TYPES: tuple[LineType, ...] = ("charge", "refund", "refund_reversal", "fee", "adjustment")
FEE_RATE = 0.014
FEE_FIXED = 25


def charge_fee(gross: int) -> int:
    """What the provider keeps of a charge (minor units); refunds and reversals pay none."""
    return round(gross * FEE_RATE) + FEE_FIXED


def day_of(unix: int) -> dt.date:
    return dt.datetime.fromtimestamp(unix, dt.UTC).date()


@dataclass(frozen=True)
class Line:
    """One settlement line, money signed from the merchant's side (minor units).

    ``derived``: recorded from the sandbox's own state (``suppress``/``duplicate`` act on
    these only); ``keys``: the payment, capture and refund ids it is about, by which a test
    suppresses or duplicates it. ``dialect_type``: a hand-made line's record type in one
    dialect's own words (``{"adyen": "Chargeback"}``), where the neutral type has no such word.
    """

    line_id: str
    type: LineType
    payment: str
    refund: str
    capture: str
    reference: str
    created: int
    currency: str
    gross: int
    fee: int
    net: int
    derived: bool = True
    keys: frozenset[str] = frozenset()
    dialect_type: tuple[tuple[str, str], ...] = ()

    def type_in(self, dialect: str) -> str | None:
        """The record type a hand-made line asked for in ``dialect``, if any."""
        return dict(self.dialect_type).get(dialect)


@dataclass(frozen=True)
class BatchKey:
    dialect: str
    account: str
    environment: str
    date: dt.date

    @property
    def batch_id(self) -> str:
        """``stl_<yyyymmdd>_<account>`` (``_live`` appended for the live environment)."""
        suffix = "" if self.environment == "test" else f"_{self.environment}"
        return f"stl_{self.date:%Y%m%d}_{self.account}{suffix}"


@dataclass(frozen=True)
class Totals:
    gross: int
    fees: int
    net: int


@dataclass
class Batch:
    key: BatchKey
    _lines: list[Line] = field(default_factory=list)
    suppressed: set[str] = field(default_factory=set)
    duplicates: dict[str, int] = field(default_factory=dict)
    override: dict[str, int] = field(default_factory=dict)
    raw_suffix: bytes = b""
    closed_at: int | None = None
    number: int | None = None  # the dialect's batch number per account, given at close
    _frozen: tuple[Line, ...] | None = None
    _manual: int = 0

    @property
    def closed(self) -> bool:
        return self.closed_at is not None

    def lines(self) -> tuple[Line, ...]:
        """The batch's lines in their stable order: as recorded, each duplicate right after
        its original, suppressed ones left out; frozen once closed."""
        if self._frozen is not None:
            return self._frozen
        out: list[Line] = []
        for line in self._lines:
            if line.derived and line.keys & self.suppressed:
                continue
            out.append(line)
            if line.derived:
                copies = sum(self.duplicates.get(k, 0) for k in line.keys)
                out.extend(replace(line, line_id=f"{line.line_id}_dup{n}")
                           for n in range(1, copies + 1))
        return tuple(out)

    @property
    def visible(self) -> bool:
        """Whether the wires show it: a day with no line (and nothing planted) has no batch."""
        return bool(self.lines()) or bool(self.raw_suffix)

    def line_sums(self) -> Totals:
        lines = self.lines()
        return Totals(sum(x.gross for x in lines), sum(x.fee for x in lines),
                      sum(x.net for x in lines))

    def totals(self) -> Totals:
        """The header's totals: the lines' sums, unless a test overrode them."""
        sums = self.line_sums()
        return Totals(self.override.get("gross", sums.gross), self.override.get("fees", sums.fees),
                      self.override.get("net", sums.net))

    def currency(self) -> str:
        """The header's currency: that of its first line (the sandbox settles one currency
        per account in practice; a planted foreign line does not change the header)."""
        lines = self.lines()
        return lines[0].currency if lines else ""

    def add(self, line: Line) -> None:
        self._lines.append(line)

    def next_manual_id(self) -> str:
        self._manual += 1
        return f"ln_{self.key.batch_id.removeprefix('stl_')}_{self.key.dialect}_m{self._manual}"

    def knows(self, object_id: str) -> bool:
        return any(object_id in line.keys for line in self._lines)

    def close(self, now: int, number: int | None) -> None:
        self._frozen = self.lines()
        self.closed_at = now
        self.number = number


class SettlementBook:
    """Every batch of every dialect and account; see the module docstring."""

    def __init__(self, ledger: Ledger, movements: MovementBook) -> None:
        self._ledger = ledger
        self._movements = movements
        self._batches: dict[BatchKey, Batch] = {}
        self._by_id: dict[tuple[str, str], Batch] = {}  # (dialect, batch id)
        self._recorded: set[str] = set()  # line ids already recorded (an event may repeat)
        self._numbers: dict[tuple[str, str, str], int] = {}

    # -- recording ---------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        """Record the line an event's money movement makes, if any (see the module doc)."""
        if event.object_id is not None:
            self._movement_event(event.object_id, event.created)
            return
        if event.caused_by is not None:
            return  # a capture's or refund's payment event: the movement's own is the line
        payment = self._ledger.get(event.payment_id)
        if payment is None:
            return
        if event.amount is not None:  # the control's refund: no refund object
            self._record(payment.dialect, payment.account, payment.environment, Line(
                f"ln_{event.id}", "refund", payment.id, "", "", payment.reference,
                event.created, payment.currency, -event.amount, 0, -event.amount,
                keys=frozenset({payment.id})))
        elif payment.status == "succeeded" and payment.capture == "automatic":
            fee = charge_fee(payment.amount)
            self._record(payment.dialect, payment.account, payment.environment, Line(
                f"ln_{payment.id}", "charge", payment.id, "", "", payment.reference,
                event.created, payment.currency, payment.amount, fee, payment.amount - fee,
                keys=frozenset({payment.id})))

    def _movement_event(self, movement_id: str, created: int) -> None:
        movement = self._movements.get(movement_id)
        if movement is None:
            return
        payment_id = movement.payment_id
        if isinstance(movement, Capture) and movement.status == "succeeded":
            fee = charge_fee(movement.amount)
            line = Line(f"ln_{movement.id}", "charge", payment_id, "", movement.id,
                        movement.reference, created, movement.currency, movement.amount, fee,
                        movement.amount - fee, keys=frozenset({payment_id, movement.id}))
        elif isinstance(movement, Refund) and movement.status == "succeeded":
            line = Line(f"ln_{movement.id}", "refund", payment_id, movement.id, "",
                        movement.reference, created, movement.currency, -movement.amount, 0,
                        -movement.amount, keys=frozenset({movement.id}))
        elif isinstance(movement, Refund) and movement.status == "failed" \
                and f"ln_{movement.id}" in self._recorded:
            line = Line(f"ln_{movement.id}_reversal", "refund_reversal", payment_id, movement.id,
                        "", movement.reference, created, movement.currency, movement.amount, 0,
                        movement.amount, keys=frozenset({movement.id}))
        else:
            return
        self._record(movement.dialect, movement.account, movement.environment, line)

    def _record(self, dialect: str, account: str, environment: str, line: Line) -> None:
        if line.line_id in self._recorded:
            return
        self._recorded.add(line.line_id)
        self.open_batch(BatchKey(dialect, account, environment, day_of(line.created)),
                        roll=True).add(line)

    # -- batches -----------------------------------------------------------------------

    def open_batch(self, key: BatchKey, *, roll: bool = False) -> Batch:
        """The batch of ``key``, created if new; ``roll``: the first open one on or after
        its day (a closed batch takes nothing more)."""
        batch = self._batch(key)
        while roll and batch.closed:
            key = replace(key, date=key.date + dt.timedelta(days=1))
            batch = self._batch(key)
        return batch

    def _batch(self, key: BatchKey) -> Batch:
        batch = self._batches.get(key)
        if batch is None:
            batch = self._batches[key] = Batch(key)
            self._by_id[(key.dialect, key.batch_id)] = batch
        return batch

    def get(self, key: BatchKey) -> Batch | None:
        return self._batches.get(key)

    def by_id(self, dialect: str, batch_id: str) -> Batch | None:
        return self._by_id.get((dialect, batch_id))

    def batches(self, *, dialect: str | None = None, account: str | None = None,
                environment: str | None = None) -> Iterator[Batch]:
        """The matching batches, by date then creation."""
        found = [b for b in self._batches.values()
                 if dialect in (None, b.key.dialect) and account in (None, b.key.account)
                 and environment in (None, b.key.environment)]
        return iter(sorted(found, key=lambda b: b.key.date))

    def by_number(self, dialect: str, account: str, environment: str, number: int) -> Batch | None:
        for batch in self.batches(dialect=dialect, account=account, environment=environment):
            if batch.number == number:
                return batch
        return None

    def close(self, key: BatchKey, now: int) -> Batch:
        """Freeze ``key``'s batch (a no-op when it is closed already). Only a batch with lines
        takes a number: an empty day has no report."""
        batch = self._batch(key)
        if batch.closed:
            return batch
        number: int | None = None
        if batch.lines() or batch.raw_suffix:
            counter = (key.dialect, key.account, key.environment)
            number = self._numbers[counter] = self._numbers.get(counter, 0) + 1
        batch.close(now, number)
        return batch

    def known_object(self, object_id: str, dialect: str, account: str, environment: str) -> bool:
        """Whether ``object_id`` is a payment, capture or refund of that account and dialect."""
        found = self._ledger.get(object_id) or self._movements.get(object_id)
        return found is not None and found.account == account \
            and found.environment == environment and found.dialect == dialect
