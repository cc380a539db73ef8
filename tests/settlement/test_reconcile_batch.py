"""Reconciling one batch against the books (paycore.settlements), on a real PostgreSQL.

The lines here are the provider-neutral values each provider's reader yields; the readers
themselves are tested on report files in tests/providers/test_settlement_readers.py, and against
the sandbox's reports end to end in tests/settlement/test_cardco_end_to_end.py,
tests/settlement/test_stripe_adyen_flows_end_to_end.py, tests/settlement/test_stripe_adyen_end_to_end.py
and (Stripe's, against localstripe) tests/settlement/test_stripe_localstripe_settlement.py.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import replace
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import asyncpg
import pytest

from paycore import settlements
from paycore.clock import FakeClock
from paycore.config import ProviderAccountConfig
from paycore.settlement_lines import BadLine, LineKind, SettlementBatch, SettlementLine
from paycore.settlements import BatchOutcome, reconcile_batch, record_missing
from tests.matrix.helpers import attempt_values, insert_row, new_order, operation_values, seed_account

REMIND = timedelta(minutes=15)
GRACE = timedelta(days=3)


def line(n: int, kind: LineKind, gross: int, *, fee: int = 0, payment: str | None = None,
         operation: str | None = None, reference: str | None = None, currency: str = "EUR") -> SettlementLine:
    return SettlementLine(
        line_no=n, kind=kind, record_type=kind.value, gross_currency=currency, gross_minor=gross,
        net_currency=currency, fee_minor=fee, net_minor=gross - fee, provider_line_id=f"ln_{n}",
        provider_payment_id=payment, provider_operation_id=operation, reference=reference)


async def stream(lines: Iterable[SettlementLine | BadLine]) -> AsyncIterator[SettlementLine | BadLine]:
    for item in lines:
        yield item


def batch_of(account: ProviderAccountConfig, lines: list[SettlementLine | BadLine], *, status: str = "closed",
             batch_id: str = "stl_20261203", totals: bool = True, **changes: Any) -> SettlementBatch:
    good = [x for x in lines if isinstance(x, SettlementLine)]
    batch = SettlementBatch(
        provider_account=account.provider_account, provider_batch_id=batch_id, batch_date=date(2026, 12, 3),
        status=status,  # type: ignore[arg-type]
        currency="EUR",
        reported_gross_minor=sum(x.gross_minor for x in good) if totals else None,
        reported_fees_minor=sum(x.fee_minor for x in good) if totals else None,
        reported_net_minor=sum(x.net_minor for x in good) if totals else None,
        reported_lines=len(lines) if totals else None)
    return replace(batch, **changes)


async def run(pool: asyncpg.Pool, clock: FakeClock, batch: SettlementBatch,
              lines: list[SettlementLine | BadLine]) -> BatchOutcome:
    return await reconcile_batch(pool, batch, stream(lines), now=clock.now(), reminder_interval=REMIND)


Lines = list[SettlementLine | BadLine]


async def paid(pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig, amount: int = 5000, *,
               state: str = "Succeeded", capture: str = "automatic") -> asyncpg.Record:
    order = await new_order(pool, clock, amount=amount)
    if capture == "manual":
        await pool.execute("UPDATE orders SET capture = 'manual' WHERE order_id = $1", order.order_id)
    return await insert_row(pool, "payment_attempts", attempt_values(
        order, account, clock.now(), state=state, provider_payment_id="pay_" + uuid.uuid4().hex[:10],
        provider_status="succeeded" if state == "Succeeded" else None))


async def refund(pool: asyncpg.Pool, clock: FakeClock, payment: asyncpg.Record, amount: int = 1000, *,
                 state: str = "Succeeded", kind: str = "refund") -> asyncpg.Record:
    return await insert_row(pool, "payment_operations", operation_values(
        payment, clock.now(), kind=kind, state=state, amount_minor=amount,
        provider_operation_id=("re_" if kind == "refund" else "cap_") + uuid.uuid4().hex[:10]))


async def exceptions(pool: asyncpg.Pool) -> dict[int | None, str]:
    rows = await pool.fetch("SELECT line_no, kind FROM settlement_exceptions ORDER BY exception_id")
    return {r["line_no"]: r["kind"] for r in rows}


@pytest.fixture
async def account(pool: asyncpg.Pool, clock: FakeClock) -> ProviderAccountConfig:
    return await seed_account(pool, clock)


async def test_every_line_is_matched_or_an_exception_with_its_evidence(
        pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig) -> None:
    ok = await paid(pool, clock, account)
    by_reference = await paid(pool, clock, account, 2000)
    unknown_here = await paid(pool, clock, account, 3000, state="Unknown")
    wrong_amount = await paid(pool, clock, account, 4000)
    wrong_currency = await paid(pool, clock, account, 4100)
    twice = await paid(pool, clock, account, 4200)
    refunded = await refund(pool, clock, ok, 1000)
    returned = await refund(pool, clock, by_reference, 500, state="Returned")
    lines: Lines = [
        line(1, LineKind.CHARGE, 5000, fee=95, payment=ok["provider_payment_id"]),
        line(2, LineKind.CHARGE, 2000, fee=53, reference=by_reference["client_reference"]),
        line(3, LineKind.CHARGE, 3000, fee=67, payment=unknown_here["provider_payment_id"]),
        line(4, LineKind.CHARGE, 4001, fee=81, payment=wrong_amount["provider_payment_id"]),
        line(5, LineKind.CHARGE, 4100, fee=82, payment=wrong_currency["provider_payment_id"], currency="USD"),
        line(6, LineKind.CHARGE, 4200, fee=84, payment=twice["provider_payment_id"]),
        line(7, LineKind.CHARGE, 4200, fee=84, payment=twice["provider_payment_id"]),
        line(8, LineKind.CHARGE, 999, fee=39, payment="pay_not_ours"),
        line(9, LineKind.REFUND, -1000, payment=ok["provider_payment_id"],
             operation=refunded["provider_operation_id"]),
        line(10, LineKind.REFUND, -700, payment=ok["provider_payment_id"], operation="re_not_ours"),
        line(11, LineKind.REFUND, -500, operation=returned["provider_operation_id"]),
        line(12, LineKind.REFUND_REVERSAL, 500, operation=returned["provider_operation_id"]),
        line(13, LineKind.CHARGEBACK, -5000, payment=ok["provider_payment_id"]),
        line(14, LineKind.FEE, 0, fee=120),
        BadLine(15, "gross is not an integer: 'x1'", {"gross": "x1"}),
    ]
    outcome = await run(pool, clock, batch_of(account, lines, totals=False), lines)
    assert (outcome.result, outcome.line_count, outcome.bad_line_count) == ("recorded", 14, 1)
    assert outcome.matched_count == 5  # lines 1, 2, 6 (its repeat, 7, is not), 9, 11
    assert await exceptions(pool) == {
        3: "not-succeeded-here", 4: "amount-mismatch", 5: "currency-mismatch", 7: "duplicate-line",
        8: "unknown-payment", 10: "unknown-refund", 12: "refund-reversed", 13: "chargeback",
        15: "malformed-line"}
    booked = await pool.fetchval("SELECT outcome FROM settlement_lines WHERE line_no = 14")
    assert booked == "booked"
    matched = await pool.fetchrow("SELECT attempt_id, operation_id FROM settlement_lines WHERE line_no = 9")
    assert (matched["attempt_id"], matched["operation_id"]) == (ok["attempt_id"], refunded["operation_id"])
    # one escalation per exception, with the evidence; the reason says the kind
    episodes = await pool.fetch("SELECT reason, detail FROM payment_escalations ORDER BY escalation_id")
    assert len(episodes) == 9
    amount = next(e for e in episodes if e["reason"] == "settlement-exception:amount-mismatch")
    assert amount["detail"]["gross_minor"] == 4001
    assert amount["detail"]["ours"]["attempt_amount_minor"] == 4000
    assert amount["detail"]["provider_account"] == account.provider_account
    bad = next(e for e in episodes if e["reason"] == "settlement-exception:malformed-line")
    assert bad["detail"]["line_no"] == 15 and "x1" in bad["detail"]["reason"]
    batch = await pool.fetchrow("SELECT * FROM settlement_batches")
    assert (batch["state"], batch["matched_count"], batch["exception_count"]) == ("reconciled", 5, 9)
    effect = await pool.fetchrow(
        "SELECT kind, payload FROM outbox_messages WHERE kind = 'settlement-reconciled'")
    assert effect is not None and effect["payload"]["exception_count"] == 9


async def test_the_same_closed_batch_twice_records_nothing_new(
        pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig) -> None:
    lines: Lines = [line(1, LineKind.CHARGE, 999, fee=39, payment="pay_not_ours")]
    first = await run(pool, clock, batch_of(account, lines), lines)
    counts = await table_counts(pool)
    clock.advance(3600)
    again = await run(pool, clock, batch_of(account, lines), lines)
    assert (first.result, again.result, again.batch_id) == ("recorded", "unchanged", first.batch_id)
    assert (again.line_count, again.matched_count, again.exception_count, again.bad_line_count,
            again.new_exceptions) == (0, 0, 0, 0, 0)  # what the command prints: nothing read
    assert await table_counts(pool) == counts


async def table_counts(pool: asyncpg.Pool) -> dict[str, int]:
    tables = ("settlement_batches", "settlement_lines", "settlement_exceptions", "payment_escalations",
              "outbox_messages")
    return {t: await pool.fetchval(f"SELECT count(*) FROM {t}") for t in tables}


async def test_an_open_batch_read_again_takes_its_new_lines_and_keeps_its_exceptions_once(
        pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig) -> None:
    ok = await paid(pool, clock, account)
    first: Lines = [line(1, LineKind.CHARGE, 999, fee=39, payment="pay_not_ours")]
    await run(pool, clock, batch_of(account, first, status="open"), first)
    same = await run(pool, clock, batch_of(account, first, status="open"), first)
    assert same.result == "unchanged"
    more = [*first, line(2, LineKind.CHARGE, 5000, fee=95, payment=ok["provider_payment_id"])]
    clock.advance(86_400)  # the next day's run finds the same exception again
    closed = await run(pool, clock, batch_of(account, more), more)
    assert (closed.result, closed.line_count, closed.matched_count) == ("recorded", 2, 1)
    assert closed.new_exceptions == 0
    assert await pool.fetchval("SELECT count(*) FROM settlement_lines") == 2
    assert await pool.fetchval("SELECT count(*) FROM payment_escalations") == 1
    effects = "SELECT count(*) FROM outbox_messages WHERE kind = 'settlement-reconciled'"
    assert await pool.fetchval(effects) == 2


async def test_a_batch_that_does_not_add_up_is_one_exception_and_none_of_its_lines(
        pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig) -> None:
    ok = await paid(pool, clock, account)
    lines: Lines = [line(1, LineKind.CHARGE, 5000, fee=95, payment=ok["provider_payment_id"]),
                    line(2, LineKind.CHARGE, 999, fee=39, payment="pay_not_ours")]
    batch = batch_of(account, lines, reported_net_minor=10)
    outcome = await run(pool, clock, batch, lines)
    assert outcome.result == "unbalanced"
    assert await pool.fetchval("SELECT count(*) FROM settlement_lines") == 0
    assert await exceptions(pool) == {None: "unbalanced-batch"}
    detail = await pool.fetchval("SELECT detail FROM payment_escalations")
    assert detail["differences"]["net_minor"] == {"reported": 10, "counted": 5000 - 95 + 999 - 39}
    assert await pool.fetchval("SELECT state FROM settlement_batches") == "unbalanced"


async def test_a_batch_paid_out_in_it_must_net_to_zero(
        pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig) -> None:
    lines: Lines = [line(1, LineKind.CHARGE, 999, fee=39, payment="pay_not_ours"),
                    line(2, LineKind.PAYOUT, -959)]
    outcome = await run(pool, clock, batch_of(account, lines, totals=False), lines)
    assert outcome.result == "unbalanced"
    detail = await pool.fetchval("SELECT detail FROM settlement_exceptions WHERE kind = 'unbalanced-batch'")
    assert detail["differences"] == {"net_after_payout": {"reported": 0, "counted": 999 - 39 - 959}}


async def test_a_payment_paid_out_in_an_earlier_batch_too_is_a_duplicate(
        pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig) -> None:
    ok = await paid(pool, clock, account)
    lines: Lines = [line(1, LineKind.CHARGE, 5000, fee=95, payment=ok["provider_payment_id"])]
    await run(pool, clock, batch_of(account, lines), lines)
    await run(pool, clock, batch_of(account, lines, batch_id="stl_20261204"), lines)
    assert await exceptions(pool) == {1: "duplicate-line"}


async def test_a_captured_hold_is_matched_by_its_capture(
        pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig) -> None:
    hold = await paid(pool, clock, account, 5000, capture="manual")
    capture = await refund(pool, clock, hold, 3000, kind="capture")
    lines: Lines = [
        line(1, LineKind.CHARGE, 3000, fee=67, payment=hold["provider_payment_id"],
             operation=capture["provider_operation_id"])]
    outcome = await run(pool, clock, batch_of(account, lines), lines)
    assert outcome.matched_count == 1
    row = await pool.fetchrow("SELECT attempt_id, operation_id FROM settlement_lines")
    assert (row["attempt_id"], row["operation_id"]) == (hold["attempt_id"], capture["operation_id"])


async def test_payments_and_refunds_no_closed_batch_names_are_missing_after_the_grace_period(
        pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig) -> None:
    clock.current = clock.now().replace(year=2026, month=12, day=3, hour=9)
    settled = await paid(pool, clock, account)
    missing = await paid(pool, clock, account, 2500)
    missing_refund = await refund(pool, clock, settled, 1000)
    lines: Lines = [
        line(1, LineKind.CHARGE, 5000, fee=95, payment=settled["provider_payment_id"])]
    await run(pool, clock, batch_of(account, lines), lines)
    assert await record_missing(pool, account.provider_account, now=clock.now(), grace=GRACE,
                                reminder_interval=REMIND) == 0  # inside the grace period
    clock.advance(GRACE.total_seconds() + 60)
    assert await record_missing(pool, account.provider_account, now=clock.now(), grace=GRACE,
                                reminder_interval=REMIND) == 2
    rows = await pool.fetch("SELECT kind, attempt_id, operation_id FROM settlement_exceptions ORDER BY kind")
    assert [(r["kind"], r["attempt_id"], r["operation_id"]) for r in rows] == [
        ("missing-payment", missing["attempt_id"], None),
        ("missing-refund", settled["attempt_id"], missing_refund["operation_id"])]
    assert await record_missing(pool, account.provider_account, now=clock.now(), grace=GRACE,
                                reminder_interval=REMIND) == 0  # found once
    assert await pool.fetchval("SELECT count(*) FROM payment_escalations") == 2


async def test_a_line_naming_another_accounts_payment_or_refund_matches_nothing_of_it(
        pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig) -> None:
    other = await seed_account(pool, clock, environment="live")  # cardco:acct_store:live
    theirs = await paid(pool, clock, other)
    their_refund = await refund(pool, clock, theirs, 1000)
    lines: Lines = [
        line(1, LineKind.CHARGE, 5000, fee=95, payment=theirs["provider_payment_id"], reference="nobody"),
        line(2, LineKind.REFUND, -1000, operation=their_refund["provider_operation_id"], reference="nobody")]
    outcome = await run(pool, clock, batch_of(account, lines), lines)
    assert outcome.matched_count == 0
    assert await exceptions(pool) == {1: "unknown-payment", 2: "unknown-refund"}


async def test_a_refund_paid_out_for_another_amount_is_an_exception(
        pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig) -> None:
    ok = await paid(pool, clock, account)
    refunded = await refund(pool, clock, ok, 1000)
    lines: Lines = [line(1, LineKind.REFUND, -999, operation=refunded["provider_operation_id"])]
    await run(pool, clock, batch_of(account, lines), lines)
    assert await exceptions(pool) == {1: "amount-mismatch"}


async def test_a_line_settled_in_another_currency_counts_by_what_it_settled_for(
        pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig) -> None:
    # 50.00 USD charged, settled as 45.00 EUR less a 1.00 EUR fee: the batch's gross is in EUR.
    converted = replace(line(1, LineKind.CHARGE, 5000, payment="pay_not_ours", currency="USD"),
                        net_currency="EUR", fee_minor=100, net_minor=4400)
    lines: Lines = [converted, line(2, LineKind.CHARGE, 999, fee=39, payment="pay_not_ours_either")]
    batch = batch_of(account, lines, reported_gross_minor=4500 + 999)
    outcome = await run(pool, clock, batch, lines)
    assert outcome.result == "recorded"
    assert await pool.fetchval("SELECT gross_minor FROM settlement_batches") == 4500 + 999


async def test_each_lines_exchange_rate_is_stored_as_the_provider_gave_it_and_none_as_null(
        pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig) -> None:
    # The accounting view keeps the rate exactly (numeric, never a float): 50.00 USD charged, settled
    # as 45.06 EUR less a 1.00 EUR fee at 0.90123456; a line in the currency charged states none.
    ok = await paid(pool, clock, account)
    converted = replace(line(1, LineKind.CHARGE, 5000, payment="pay_not_ours", currency="USD"),
                        net_currency="EUR", fee_minor=100, net_minor=4406,
                        exchange_rate=Decimal("0.90123456"))
    same = replace(line(2, LineKind.CHARGE, 5000, fee=95, payment=ok["provider_payment_id"]),
                   exchange_rate=Decimal("1"))
    lines: Lines = [converted, same, line(3, LineKind.FEE, 0, fee=120)]
    outcome = await run(pool, clock, batch_of(account, lines, totals=False), lines)
    assert (outcome.result, outcome.matched_count) == ("recorded", 1)
    rows = await pool.fetch("SELECT line_no, gross_currency, net_currency, net_minor, exchange_rate"
                            " FROM settlement_lines ORDER BY line_no")
    assert [tuple(r) for r in rows] == [(1, "USD", "EUR", 4406, Decimal("0.90123456")),
                                        (2, "EUR", "EUR", 4905, Decimal("1")), (3, "EUR", "EUR", -120, None)]
    assert str(rows[0]["exchange_rate"]) == "0.90123456"  # not rounded on the way through COPY


async def test_an_unreadable_row_the_provider_counted_leaves_the_line_count_whole(
        pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig) -> None:
    lines: Lines = [line(1, LineKind.CHARGE, 999, fee=39, payment="pay_not_ours"),
                    BadLine(2, "unknown line type 'bonus'", {"type": "bonus", "gross": "0"})]
    outcome = await run(pool, clock, batch_of(account, lines), lines)  # reported_lines = 2
    assert (outcome.result, outcome.line_count, outcome.bad_line_count) == ("recorded", 1, 1)
    assert await exceptions(pool) == {1: "unknown-payment", 2: "malformed-line"}
    assert await pool.fetchval("SELECT count(*) FROM settlement_exceptions WHERE escalation_id IS NULL") == 0


async def test_a_batch_paid_out_in_it_that_nets_to_zero_is_recorded(
        pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig) -> None:
    lines: Lines = [line(1, LineKind.CHARGE, 999, fee=39, payment="pay_not_ours"),
                    line(2, LineKind.PAYOUT, -960)]
    outcome = await run(pool, clock, batch_of(account, lines, totals=False), lines)
    assert (outcome.result, outcome.matched_count) == ("recorded", 0)
    assert await pool.fetchval("SELECT outcome FROM settlement_lines WHERE line_no = 2") == "booked"


async def test_a_long_batch_reports_its_progress(
        pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settlements, "PROGRESS_EVERY", 2)
    lines: Lines = [line(n, LineKind.FEE, 0, fee=1) for n in range(1, 6)]
    seen: list[int] = []
    await reconcile_batch(pool, batch_of(account, lines), stream(lines), now=clock.now(),
                          reminder_interval=REMIND, progress=lambda _, read: seen.append(read))
    assert seen == [2, 4]


async def test_a_closed_batch_is_not_read_again_and_its_stream_is_closed(
        pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig) -> None:
    lines: Lines = [line(1, LineKind.FEE, 0, fee=1)]
    await run(pool, clock, batch_of(account, lines), lines)
    read: list[int] = []
    closed: list[bool] = []

    async def watched() -> AsyncIterator[SettlementLine | BadLine]:
        try:
            for item in lines:
                read.append(item.line_no)
                yield item
        finally:
            closed.append(True)

    stream_of_lines = watched()
    await anext(stream_of_lines, None)  # the reader has opened its response
    read.clear()
    again = await reconcile_batch(pool, batch_of(account, lines), stream_of_lines, now=clock.now(),
                                  reminder_interval=REMIND)
    assert (again.result, read, closed) == ("unchanged", [], [True])


async def test_nothing_is_missing_before_any_batch_nor_after_the_last_batchs_day(
        pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig) -> None:
    clock.current = clock.now().replace(year=2026, month=12, day=3, hour=9)
    await paid(pool, clock, account)
    assert await record_missing(pool, account.provider_account, now=clock.now() + GRACE * 2, grace=GRACE,
                                reminder_interval=REMIND) == 0  # no batch yet: nothing is covered
    lines: Lines = [line(1, LineKind.FEE, 0, fee=1)]
    await run(pool, clock, batch_of(account, lines, batch_date=date(2026, 12, 2)), lines)
    # The payment of 3 December is after the end of the only batch's day (2 December).
    assert await record_missing(pool, account.provider_account, now=clock.now() + GRACE * 2, grace=GRACE,
                                reminder_interval=REMIND) == 0


async def test_an_unbalanced_batch_matches_nothing(
        pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig) -> None:
    ok = await paid(pool, clock, account)
    lines: Lines = [line(1, LineKind.CHARGE, 5000, fee=95, payment=ok["provider_payment_id"])]
    outcome = await run(pool, clock, batch_of(account, lines, reported_fees_minor=1), lines)
    assert (outcome.result, outcome.matched_count, outcome.line_count) == ("unbalanced", 0, 1)
