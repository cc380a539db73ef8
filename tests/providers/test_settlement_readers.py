"""The three providers' settlement reports read into neutral lines: real files in tmp_path."""

from __future__ import annotations

import tracemalloc
from collections.abc import AsyncIterator, Callable
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from paycore.account_settings import ProviderAccountConfig
from paycore.clock import FakeClock
from paycore.providers.adyen import settlements as adyen
from paycore.providers.adyen.provider import API_VERSION as ADYEN_API_VERSION
from paycore.providers.cardco import settlements as cardco
from paycore.providers.settlement_sources import read_report_file, settlement_source
from paycore.providers.stripe import settlements as stripe
from paycore.providers.stripe.provider import API_VERSION as STRIPE_API_VERSION
from paycore.settings_spec import Secret
from paycore.settlement_lines import BadLine, LineKind, SettlementLine, SettlementSourceError

Line = SettlementLine | BadLine


async def collect(lines: AsyncIterator[Line]) -> list[Line]:
    return [line async for line in lines]


def csv_file(tmp_path: Path, header: list[str], rows: list[list[str]], name: str = "report.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(",".join(r) for r in [header, *rows]) + "\n", encoding="utf-8")
    return path


def good(lines: list[Line]) -> list[SettlementLine]:
    assert all(isinstance(line, SettlementLine) for line in lines), [
        line for line in lines if isinstance(line, BadLine)]
    return [line for line in lines if isinstance(line, SettlementLine)]


def bad(lines: list[Line]) -> dict[int, str]:
    return {line.line_no: line.reason for line in lines if isinstance(line, BadLine)}


# ---------------------------------------------------------------------------
# Cardco

CARDCO_HEADER = list(cardco.COLUMNS)
CARDCO_ROWS = [
    ["ln_1", "charge", "pay_1", "", "", "order-1", "2026-12-03T10:15:00Z", "EUR", "10000", "200", "9800"],
    ["ln_2", "refund", "pay_1", "re_1", "", "refund-1", "2026-12-03T11:00:00Z", "EUR", "-2500", "0", "-2500"],
    ["ln_3", "refund_reversal", "pay_1", "re_1", "", "refund-1", "2026-12-03T12:00:00Z", "EUR", "2500", "0",
     "2500"],
    ["ln_4", "charge", "pay_2", "", "cap_7", "capture-7", "2026-12-03T13:00:00+01:00", "EUR", "500", "15",
     "485"],
    ["ln_5", "fee", "", "", "", "", "2026-12-03T23:59:59Z", "EUR", "0", "99", "-99"],
    ["ln_6", "adjustment", "", "", "", "", "2026-12-03T23:59:59Z", "EUR", "-10", "0", "-10"],
]


async def test_cardco_report_reads_every_kind_with_signs_and_fees(tmp_path: Path) -> None:
    path = csv_file(tmp_path, CARDCO_HEADER, CARDCO_ROWS)
    batch, lines = await cardco.read_report_file(path, "cardco:acct_store:test")
    read = good(await collect(lines))
    assert [line.kind for line in read] == [LineKind.CHARGE, LineKind.REFUND, LineKind.REFUND_REVERSAL,
                                            LineKind.CHARGE, LineKind.FEE, LineKind.ADJUSTMENT]
    charge, refund, _, capture, fee, _ = read
    assert (charge.line_no, charge.provider_line_id, charge.provider_payment_id, charge.reference) == (
        1, "ln_1", "pay_1", "order-1")
    assert (charge.gross_minor, charge.fee_minor, charge.net_minor, charge.gross_currency) == (
        10000, 200, 9800, "EUR")
    assert charge.occurred_at == datetime(2026, 12, 3, 10, 15, tzinfo=UTC)
    assert (refund.provider_operation_id, refund.gross_minor, refund.net_minor) == ("re_1", -2500, -2500)
    assert capture.provider_operation_id == "cap_7"
    assert capture.occurred_at == datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    assert (fee.provider_payment_id, fee.net_minor) == (None, -99)
    assert (batch.status, batch.source, batch.currency, batch.batch_date) == ("closed", "file", "EUR",
                                                                            date(2026, 12, 3))
    assert batch.provider_batch_id.startswith("file:") and len(batch.provider_batch_id) == 21


async def test_cardco_columns_reordered_and_an_extra_column_are_read_by_name(tmp_path: Path) -> None:
    order = [*list(reversed(CARDCO_HEADER)), "later_column"]
    rows = [[dict(zip(CARDCO_HEADER, row, strict=True))[c] if c in CARDCO_HEADER else "x" for c in order]
            for row in CARDCO_ROWS]
    path = csv_file(tmp_path, order, rows)
    _, lines = await cardco.read_report_file(path, "cardco:acct_store:test", batch_id="stl_1",
                                             batch_date=date(2026, 12, 4))
    read = good(await collect(lines))
    assert [(line.provider_line_id, line.net_minor) for line in read] == [
        ("ln_1", 9800), ("ln_2", -2500), ("ln_3", 2500), ("ln_4", 485), ("ln_5", -99), ("ln_6", -10)]


async def test_cardco_a_missing_column_is_one_bad_line_and_nothing_else(tmp_path: Path) -> None:
    header = [c for c in CARDCO_HEADER if c != "fee"]
    path = csv_file(tmp_path, header, [row[:9] + row[10:] for row in CARDCO_ROWS])
    _, lines = await cardco.read_report_file(path, "cardco:acct_store:test")
    [only] = await collect(lines)
    assert isinstance(only, BadLine) and only.line_no == 0 and "fee" in only.reason


async def test_cardco_each_malformed_row_is_a_bad_line_with_its_number_and_the_next_rows_are_read(
        tmp_path: Path) -> None:
    ok = CARDCO_ROWS[0]
    rows = [ok, [*ok[:8], "12.5", "0", "12.5"], [*ok[:8], "100", "1", "98"], [*ok[:1], "bonus", *ok[2:]],
            ok[:-1], [*ok[:8], "1_000", "0", "1_000"], ok]
    path = tmp_path / "lines.csv"
    body = "\n".join(",".join(r) for r in [CARDCO_HEADER, *rows]).encode()
    lines_bytes = body.split(b"\n")
    lines_bytes.insert(6, b"ln_9,charge,pay_9,,,caf\xe9,2026-12-03T10:15:00Z,EUR,1,0,1")  # row 6: Latin-1
    path.write_bytes(b"\r\n".join(lines_bytes) + b"\r\n")
    _, lines = await cardco.read_report_file(path, "cardco:acct_store:test")
    read = await collect(lines)
    reasons = bad(read)
    assert sorted(reasons) == [2, 3, 4, 5, 6, 7]
    assert "not an integer" in reasons[2] and "not gross" in reasons[3] and "unknown line type" in reasons[4]
    assert "fields" in reasons[5] and "not UTF-8" in reasons[6] and "not an integer" in reasons[7]
    assert [line.line_no for line in read if isinstance(line, SettlementLine)] == [1, 8]
    assert len(read) == 8


async def test_cardco_a_row_in_another_currency_than_the_batch_is_bad(tmp_path: Path) -> None:
    other = [*CARDCO_ROWS[0][:7], "USD", *CARDCO_ROWS[0][8:]]
    path = csv_file(tmp_path, CARDCO_HEADER, [CARDCO_ROWS[0], other])
    _, lines = await cardco.read_report_file(path, "cardco:acct_store:test")
    assert list(bad(await collect(lines))) == [2]


# ---------------------------------------------------------------------------
# Stripe: the itemized payout reconciliation report

STRIPE_HEADER = ["balance_transaction_id", "created_utc", "currency", "gross", "fee", "net",
                 "reporting_category",
                 "source_id", "automatic_payout_id", "payment_intent_id", "charge_id", "refund_id",
                 "payment_metadata[paycore_reference]", "refund_metadata[paycore_reference]"]


def stripe_row(txn: str, category: str, currency: str, gross: str, fee: str, net: str, *, pi: str = "",
               refund: str = "", payout: str = "po_1", ref: str = "", refund_ref: str = "") -> list[str]:
    return [txn, "2026-12-03 10:15:00", currency, gross, fee, net, category, "src", payout, pi,
            "ch_1" if pi else "", refund, ref, refund_ref]


STRIPE_ROWS = [
    stripe_row("txn_1", "charge", "eur", "100.00", "1.70", "98.30", pi="pi_1", ref="order-1"),
    stripe_row("txn_2", "charge", "jpy", "5000", "180", "4820", pi="pi_2", ref="order-2"),
    stripe_row("txn_3", "charge", "kwd", "1.500", "0.045", "1.455", pi="pi_3"),
    stripe_row("txn_4", "refund", "eur", "-25.00", "0.00", "-25.00", pi="pi_1", refund="re_1", ref="order-1",
               refund_ref="refund-1"),
    stripe_row("txn_5", "refund_failure", "eur", "25.00", "0.00", "25.00", pi="pi_1", refund="re_1"),
    stripe_row("txn_6", "dispute", "eur", "-100.00", "15.00", "-115.00", pi="pi_1"),
    stripe_row("txn_7", "dispute_reversal", "eur", "100.00", "0", "100.00", pi="pi_1"),
    stripe_row("txn_8", "partial_capture_reversal", "eur", "-5.00", "0.00", "-5.00", pi="pi_4"),
    stripe_row("txn_9", "fee", "eur", "-2.00", "0.00", "-2.00"),
    stripe_row("txn_10", "other_adjustment", "eur", "1.00", "0.00", "1.00"),
    stripe_row("txn_11", "payment_failure_refund", "eur", "-10.00", "0.00", "-10.00", pi="pi_5"),
    stripe_row("txn_12", "payout", "eur", "-98.30", "0.00", "-98.30"),
]


async def test_stripe_report_reads_every_category_in_minor_units(tmp_path: Path) -> None:
    path = csv_file(tmp_path, STRIPE_HEADER, STRIPE_ROWS)
    batch, lines = await stripe.read_report_file(path, "stripe:default:test")
    read = good(await collect(lines))
    assert [line.kind for line in read] == [
        LineKind.CHARGE, LineKind.CHARGE, LineKind.CHARGE, LineKind.REFUND, LineKind.REFUND_REVERSAL,
        LineKind.CHARGEBACK, LineKind.CHARGEBACK_REVERSAL, LineKind.CAPTURE_REVERSAL, LineKind.FEE,
        LineKind.ADJUSTMENT, LineKind.CHARGE_REVERSAL, LineKind.PAYOUT]
    eur, jpy, kwd, refund = read[:4]
    assert (eur.gross_minor, eur.fee_minor, eur.net_minor, eur.gross_currency) == (10000, 170, 9830, "EUR")
    assert (jpy.gross_minor, jpy.fee_minor, jpy.net_minor, jpy.net_currency) == (5000, 180, 4820, "JPY")
    assert (kwd.gross_minor, kwd.fee_minor, kwd.net_minor) == (1500, 45, 1455)
    assert (eur.provider_line_id, eur.provider_payment_id, eur.reference) == ("txn_1", "pi_1", "order-1")
    assert (refund.provider_operation_id, refund.reference, refund.net_minor) == ("re_1", "refund-1", -2500)
    assert read[5].net_minor == -11500 and read[-1].net_minor == -9830
    assert eur.occurred_at == datetime(2026, 12, 3, 10, 15, tzinfo=UTC)
    assert (batch.provider_batch_id, batch.batch_date, batch.status, batch.source, batch.currency) == (
        "po_1", date(2026, 12, 3), "closed", "file", "EUR")


async def test_stripe_columns_reordered_and_an_extra_column_are_read_by_name(tmp_path: Path) -> None:
    order = ["description", *reversed(STRIPE_HEADER)]
    rows = [["text", *reversed(row)] for row in STRIPE_ROWS]
    path = csv_file(tmp_path, order, rows)
    _, lines = await read_report_file("stripe", path, "stripe:default:test")
    assert [line.net_minor for line in good(await collect(lines))][:3] == [9830, 4820, 1455]


async def test_stripe_a_missing_column_is_one_bad_line_and_nothing_else(tmp_path: Path) -> None:
    header = [c for c in STRIPE_HEADER if c != "net"]
    path = csv_file(tmp_path, header, [row[:5] + row[6:] for row in STRIPE_ROWS])
    _, lines = await stripe.read_report_file(path, "stripe:default:test")
    [only] = await collect(lines)
    assert isinstance(only, BadLine) and only.line_no == 0 and "net" in only.reason


async def test_stripe_malformed_rows_and_another_payouts_row_are_bad_lines(tmp_path: Path) -> None:
    rows = [STRIPE_ROWS[0], stripe_row("txn_b", "charge", "eur", "1.234", "0", "1.234"),
            stripe_row("txn_c", "charge", "eur", "10.00", "1.00", "8.00"),
            stripe_row("txn_d", "topup", "eur", "1.00", "0", "1.00"),
            stripe_row("txn_e", "charge", "eur", "1.00", "0", "1.00", payout="po_2"),
            stripe_row("txn_f", "charge", "eur", "abc", "0", "1.00"), STRIPE_ROWS[0][:-2], STRIPE_ROWS[1]]
    path = csv_file(tmp_path, STRIPE_HEADER, rows)
    batch, lines = await stripe.read_report_file(path, "stripe:default:test")
    read = await collect(lines)
    reasons = bad(read)
    assert sorted(reasons) == [2, 3, 4, 5, 6, 7]
    assert "more decimals" in reasons[2] and "not gross" in reasons[3] and "topup" in reasons[4]
    assert "po_2" in reasons[5] and "not a number" in reasons[6] and "fields" in reasons[7]
    assert batch.provider_batch_id == "po_1"


async def test_stripe_a_report_without_a_payout_is_named_by_its_digest(tmp_path: Path) -> None:
    rows = [stripe_row("txn_1", "charge", "eur", "1.00", "0", "1.00", payout="")]
    path = csv_file(tmp_path, STRIPE_HEADER, rows)
    batch, _ = await stripe.read_report_file(path, "stripe:default:test", batch_date=date(2026, 12, 9))
    assert batch.provider_batch_id.startswith("file:") and batch.batch_date == date(2026, 12, 9)


def test_a_stripe_balance_transaction_reads_its_expanded_source() -> None:
    charge = {"id": "txn_1", "type": "charge", "amount": 1000, "fee": 59, "net": 941, "currency": "eur",
              "created": 1796292000, "exchange_rate": 1.0862,
              "source": {"object": "charge", "id": "ch_1", "payment_intent": "pi_1",
                         "metadata": {"paycore_reference": "order-1"}}}
    line = stripe.read_transaction(1, charge)
    assert (line.kind, line.provider_payment_id, line.reference, line.exchange_rate) == (
        LineKind.CHARGE, "pi_1", "order-1", Decimal("1.0862"))
    assert (line.gross_currency, line.gross_minor, line.fee_minor, line.net_minor) == ("EUR", 1000, 59, 941)
    refund = {**charge, "type": "refund", "amount": -500, "fee": 0, "net": -500, "exchange_rate": None,
              "source": {"object": "refund", "id": "re_1", "payment_intent": "pi_1",
                         "metadata": {"paycore_reference": "refund-1"}}}
    line = stripe.read_transaction(2, refund)
    assert (line.kind, line.provider_operation_id, line.provider_payment_id, line.reference) == (
        LineKind.REFUND, "re_1", "pi_1", "refund-1")
    assert stripe.read_transaction(3, {**charge, "type": "stripe_fee", "source": None}).kind is LineKind.FEE
    with pytest.raises(ValueError, match="unknown balance transaction type"):
        stripe.read_transaction(4, {**charge, "type": "climate_order_purchase"})
    with pytest.raises(ValueError, match="not gross"):
        stripe.read_transaction(5, {**charge, "net": 1000})


async def test_stripe_days_are_batches_closed_once_the_day_has_ended() -> None:
    account = ProviderAccountConfig(provider="stripe", account="default", environment="test",
                                    base_url="http://127.0.0.1:9", api_key=Secret("sk_test_x"),
                                    webhook_secret=None, api_version=STRIPE_API_VERSION)
    clock = FakeClock(datetime(2026, 12, 4, 0, 0, tzinfo=UTC))
    source = settlement_source(account, clock=clock)
    batches = await source.batches(account.provider_account, date(2026, 12, 2), date(2026, 12, 4))
    assert [(b.provider_batch_id, b.status) for b in batches] == [
        ("day:2026-12-02", "closed"), ("day:2026-12-03", "closed"), ("day:2026-12-04", "open")]


# ---------------------------------------------------------------------------
# Adyen: the Settlement details report

ADYEN_HEADER = list(adyen.COLUMNS)


def adyen_row(kind: str, *, psp: str = "", ref: str = "", mod: str = "", gc: str = "EUR", gd: str = "",
              gcr: str = "", rate: str = "", nc: str = "EUR", nd: str = "", ncr: str = "",
              fees: tuple[str, str, str, str] = ("", "", "", ""), mod_ref: str = "", merchant: str = "ShopEU",
              tz: str = "CET", batch: str = "42") -> list[str]:
    gross_currency = gc if gd or gcr else ""
    return ["Company", merchant, psp, ref, "visa", "2026-12-03 10:15:00", tz, kind, mod, gross_currency,
            gd, gcr, rate, nc, nd, ncr, *fees, "visaclassic", mod_ref, batch]


ADYEN_ROWS = [
    adyen_row("Settled", psp="PSP1", ref="order-1", mod="PSP1", gcr="100.00", ncr="98.00",
              fees=("1.00", "0.50", "0.30", "0.20")),
    adyen_row("Settled", psp="PSP2", ref="order-2", mod="CAP2", gc="JPY", gcr="5000", rate="0.0061",
              ncr="29.50", fees=("0.50", "", "", "")),
    adyen_row("Refunded", psp="PSP1", ref="order-1", mod="REF1", gd="25.00", nd="25.10",
              fees=("0.10", "", "", ""), mod_ref="refund-1"),
    adyen_row("RefundedReversed", psp="PSP1", ref="order-1", mod="REF1", gcr="25.00", ncr="25.00",
              mod_ref="refund-1"),
    adyen_row("Chargeback", psp="PSP1", ref="order-1", mod="CB1", gd="100.00", nd="107.50",
              fees=("7.50", "", "", "")),
    adyen_row("ChargebackReversed", psp="PSP1", ref="order-1", mod="CB1", gcr="100.00", ncr="100.00"),
    adyen_row("Settled", psp="PSP3", ref="order-3", mod="PSP3", gc="KWD", gcr="1.500", nc="KWD",
              ncr="1.455", fees=("0.045", "", "", ""), tz="UTC"),
    adyen_row("Fee", nd="1.00"),
    adyen_row("DepositCorrection", ncr="5.00"),
    adyen_row("MerchantPayout", nd="200.00", tz="Europe/Amsterdam"),
]


async def test_adyen_report_reads_every_type_fees_and_currencies(tmp_path: Path) -> None:
    path = csv_file(tmp_path, ADYEN_HEADER, ADYEN_ROWS)
    batch, lines = await adyen.read_report_file(path, "adyen:ShopEU:test")
    read = good(await collect(lines))
    assert [line.kind for line in read] == [
        LineKind.CHARGE, LineKind.CHARGE, LineKind.REFUND, LineKind.REFUND_REVERSAL, LineKind.CHARGEBACK,
        LineKind.CHARGEBACK_REVERSAL, LineKind.CHARGE, LineKind.FEE, LineKind.ADJUSTMENT, LineKind.PAYOUT]
    settled, jpy, refund, reversal, chargeback, _, kwd, fee, correction, payout = read
    assert (settled.gross_minor, settled.fee_minor, settled.net_minor, settled.provider_payment_id,
            settled.provider_operation_id, settled.reference) == (10000, 200, 9800, "PSP1", None, "order-1")
    assert settled.occurred_at == datetime(2026, 12, 3, 9, 15, tzinfo=UTC)  # CET in winter
    assert (jpy.gross_currency, jpy.gross_minor, jpy.net_currency, jpy.fee_minor, jpy.net_minor) == (
        "JPY", 5000, "EUR", 50, 2950)
    assert (jpy.provider_operation_id, jpy.exchange_rate) == ("CAP2", Decimal("0.0061"))
    assert (refund.gross_minor, refund.fee_minor, refund.net_minor) == (-2500, 10, -2510)
    assert (refund.provider_operation_id, refund.reference) == ("REF1", "refund-1")
    assert (reversal.net_minor, chargeback.net_minor, chargeback.provider_operation_id) == (
        2500, -10750, "CB1")
    assert (kwd.gross_minor, kwd.fee_minor, kwd.net_minor, kwd.gross_currency) == (1500, 45, 1455, "KWD")
    assert (fee.gross_currency, fee.gross_minor, fee.net_minor, fee.provider_payment_id) == (
        "EUR", -100, -100, None)
    assert (correction.net_minor, payout.net_minor) == (500, -20000)
    assert (batch.provider_batch_id, batch.currency, batch.status, batch.source) == (
        "42", "EUR", "closed", "file")


async def test_adyen_columns_reordered_and_an_extra_column_are_read_by_name(tmp_path: Path) -> None:
    order = [*reversed(ADYEN_HEADER), "Acquirer"]
    path = csv_file(tmp_path, order, [[*reversed(row), "acq"] for row in ADYEN_ROWS])
    _, lines = await read_report_file("adyen", path, "adyen:ShopEU:test")
    assert [line.net_minor for line in good(await collect(lines))][:3] == [9800, 2950, -2510]


async def test_adyen_a_missing_column_is_one_bad_line_and_nothing_else(tmp_path: Path) -> None:
    drop = ADYEN_HEADER.index("Net Credit (NC)")
    header = ADYEN_HEADER[:drop] + ADYEN_HEADER[drop + 1:]
    path = csv_file(tmp_path, header, [row[:drop] + row[drop + 1:] for row in ADYEN_ROWS])
    _, lines = await adyen.read_report_file(path, "adyen:ShopEU:test")
    [only] = await collect(lines)
    assert isinstance(only, BadLine) and only.line_no == 0 and "Net Credit (NC)" in only.reason


async def test_adyen_malformed_rows_and_another_merchant_accounts_row_are_bad_lines(tmp_path: Path) -> None:
    ok = ADYEN_ROWS[0]
    rows = [ok, adyen_row("Settled", psp="P", gcr="10.00", ncr="9.00"),
            adyen_row("Settled", psp="P", gcr="1O.00", ncr="10.00"),
            adyen_row("PaidOut", psp="P", gd="10.00", nd="10.00"),
            adyen_row("Settled", psp="P", gcr="10.00", ncr="10.00", merchant="ShopUS"),
            adyen_row("Settled", psp="P", gcr="10.00", ncr="10.00", tz="Mars/Olympus"),
            ok[:5], adyen_row("Settled", psp="P", gcr="10.00", ncr="10.00", batch="43"), ok]
    path = csv_file(tmp_path, ADYEN_HEADER, rows)
    _, lines = await adyen.read_report_file(path, "adyen:ShopEU:test")
    read = await collect(lines)
    reasons = bad(read)
    assert sorted(reasons) == [2, 3, 4, 5, 6, 7, 8]
    assert "not gross" in reasons[2] and "not a number" in reasons[3] and "PaidOut" in reasons[4]
    assert "ShopUS" in reasons[5] and "TimeZone" in reasons[6] and "fields" in reasons[7]
    assert "batch 43" in reasons[8]
    assert [line.line_no for line in read if isinstance(line, SettlementLine)] == [1, 9]


def test_an_adyen_account_without_a_report_user_names_the_settings_to_set() -> None:
    account = ProviderAccountConfig(provider="adyen", account="ShopEU", environment="test",
                                    base_url="https://checkout-test.adyen.com", api_key=Secret("k"),
                                    webhook_secret=None, api_version=ADYEN_API_VERSION)
    with pytest.raises(SettlementSourceError, match="PAYCORE_ADYEN_REPORT_USERNAME"):
        settlement_source(account)


# ---------------------------------------------------------------------------
# Any provider: a large report is streamed


def _cardco_row(i: int) -> str:
    return f"ln_{i},charge,pay_{i},,,order-{i},2026-12-03T10:15:00Z,EUR,{i},1,{i - 1}"


LARGE: dict[str, tuple[str, Callable[[int], str], str]] = {
    "cardco": (",".join(CARDCO_HEADER), _cardco_row, "cardco:acct_store:test"),
    "stripe": (",".join(STRIPE_HEADER),
               lambda i: ",".join(stripe_row(f"txn_{i}", "charge", "eur", f"{i}.00", "0.10", f"{i - 1}.90",
                                             pi=f"pi_{i}")),
               "stripe:default:test"),
    "adyen": (",".join(ADYEN_HEADER),
              lambda i: ",".join(adyen_row("Settled", psp=f"PSP{i}", ref=f"order-{i}", gcr=f"{i}.00",
                                           ncr=f"{i - 1}.90", fees=("0.10", "", "", ""))),
              "adyen:ShopEU:test"),
}


# Cardco's 200,000 rows; the slower readers 50,000 (tracemalloc triples the time): memory is flat either way.
ROWS = {"cardco": 200_000, "stripe": 50_000, "adyen": 50_000}


@pytest.mark.parametrize("provider", sorted(LARGE))
async def test_a_large_report_is_read_in_constant_memory(tmp_path: Path, provider: str) -> None:
    header, row, account = LARGE[provider]
    rows = ROWS[provider]
    path = tmp_path / "large.csv"
    with path.open("w", encoding="utf-8") as out:
        out.write(header + "\n")
        for i in range(1, rows + 1):
            out.write(row(i) + "\n")
    tracemalloc.start()
    try:
        batch, lines = await read_report_file(provider, path, account)
        count = net = 0
        async for line in lines:
            assert isinstance(line, SettlementLine), line
            count += 1
            net += line.net_minor
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == rows and batch.status == "closed"
    assert peak < 4 * 1024 * 1024, peak
