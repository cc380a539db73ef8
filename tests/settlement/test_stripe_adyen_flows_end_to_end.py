"""Stripe's and Adyen's settlements reconciled end to end: every component real.

The sandbox runs as a real HTTP server with checkout and the webhook intake in front of it
(``tests/support/providers.py``), on a real PostgreSQL. Payments are made through checkout and
refunds through paycore's own sender (:class:`~paycore.operation_sends.OperationSender`), so each
attempt and operation carries the ids the sandbox issued (Stripe's ``pi_…``/``re_…`` and
``metadata[paycore_reference]``; Adyen's pspReference, the modification's pspReference and the
merchant reference). What paycore must *not* know -- a payment or refund made in the provider's
dashboard -- is made over the sandbox's Stripe or Adyen wire directly; the rest is planted with
the sandbox's settlement controls (``/_sandbox/settlements/lines|raw|totals|close``).

Then paycore's real readers read the sandbox's books over HTTP -- Stripe's balance transactions
through the official SDK (a UTC day a batch), the itemized payout CSV and Adyen's Settlement
details report (HEAD-probed batch numbers, basic auth) downloaded to a file and read with
``read_report_file`` -- and the engine records every line, exception, escalation and effect.
Time moves on the sandbox's clock (``/_sandbox/clock``) and the stack's fake clock together; the
engine is told its ``now``.
"""

from __future__ import annotations

import base64
import dataclasses
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

import asyncpg
import orjson
import pytest

from paycore.clock import FakeClock
from paycore.config import ProviderAccountConfig, Secret
from paycore.domain import OperationKind, OperationState
from paycore.operations import Operation, get_operation
from paycore.providers.settlement_sources import read_report_file, settlement_source
from paycore.settlement_lines import SettlementSourceError
from paycore.settlements import (
    AccountRun,
    exception_reason,
    reconcile_account,
    reconcile_batch,
    record_missing,
)
from tests.operations.support import sender
from tests.sandbox.settlement_support import fee, rows_of
from tests.sandbox.support import STORE_TEST_KEY
from tests.support.providers import ProviderStack, running_provider_stack
from tests.support.stack import eventually

from .row_counts import counts, more_exceptions

REMIND: Final = timedelta(minutes=15)
GRACE: Final = timedelta(days=3)  # PAYCORE_SETTLEMENT_GRACE_S's default
REPORT_USER: Final = "report@Company.Sandbox"  # the sandbox's report user (services/sandbox/README.md)
REPORT_PASSWORD: Final = "report-password-acct_store"
STRIPE_VERSION: Final = "2026-10-28.endive"



# --------------------------------------------------------------------------- the stacks


def with_report_user(env: dict[str, str]) -> None:
    """The Adyen account's report user, as a store sets it, downloading from the sandbox."""
    if env["PAYCORE_DEFAULT_PROVIDER"] == "adyen":
        env.update(PAYCORE_ADYEN_REPORT_USERNAME=REPORT_USER, PAYCORE_ADYEN_REPORT_PASSWORD=REPORT_PASSWORD,
                   PAYCORE_ADYEN_REPORTS_BASE_URL=env["PAYCORE_ADYEN_BASE_URL"])


@pytest.fixture
async def stripe_stack(pool: asyncpg.Pool, db_dsn: str) -> AsyncIterator[ProviderStack]:
    async for s in running_provider_stack("stripe", pool, db_dsn):
        yield s


@pytest.fixture
async def adyen_stack(pool: asyncpg.Pool, db_dsn: str) -> AsyncIterator[ProviderStack]:
    async for s in running_provider_stack("adyen", pool, db_dsn, configure=with_report_user):
        yield s


def account_of(stack: ProviderStack) -> ProviderAccountConfig:
    found = stack.settings.account(stack.wire.provider_account)
    assert found is not None
    return found


# --------------------------------------------------------------------------- time


async def to_next_noon(stack: ProviderStack) -> date:
    """Both clocks to noon UTC of the sandbox's next day, so nothing a test does crosses midnight."""
    now = (await stack.sandbox.http.get("/_sandbox/clock")).json()["now"]
    day = datetime.fromtimestamp(now, UTC).date() + timedelta(days=1)
    await stack.advance(datetime.combine(day, time(12), UTC).timestamp() - now)
    stack.clock.current = datetime.combine(day, time(12), UTC)  # the fake clock drifted by milliseconds
    return day


def at(day: date, days: int = 0, hours: int = 0) -> datetime:
    """Midnight UTC after ``day``, plus ``days`` and ``hours``: a moment the engine runs at."""
    return datetime.combine(day + timedelta(days=1 + days), time(hours), UTC)


# --------------------------------------------------------------------------- paycore's own flows


async def paid(stack: ProviderStack, amount: int, currency: str = "EUR") -> asyncpg.Record:
    """An order paid through checkout: its Succeeded attempt's row."""
    order = await stack.shop.create_order(amount_minor=amount, currency=currency)
    r = await stack.shop.pay_with(order, stack.wire.method("visa"))
    assert r.status_code == 200 and r.json()["state"] == "Succeeded", r.text
    row = await stack.pool.fetchrow("SELECT * FROM payment_attempts WHERE attempt_id = $1",
                                    uuid.UUID(r.json()["attempt_id"]))
    assert row is not None and row["provider_payment_id"], row
    return row


async def refunded(stack: ProviderStack, payment: asyncpg.Record, amount: int) -> asyncpg.Record:
    """A refund sent by paycore, once it Succeeded (Stripe answers so; Adyen's REFUND notification
    says so)."""
    async with sender(stack) as s:
        op = await s.request(payment["attempt_id"], OperationKind.REFUND, amount, requested_by="test")
    assert isinstance(op, Operation), op

    async def succeeded() -> Operation | None:
        current = await get_operation(stack.pool, op.operation_id)
        return current if current.state is OperationState.SUCCEEDED else None

    await eventually(succeeded, what="the refund to succeed", within_s=15)
    row = await stack.pool.fetchrow("SELECT * FROM payment_operations WHERE operation_id = $1",
                                    op.operation_id)
    assert row is not None and row["provider_operation_id"], row
    return row


async def unknown_here(stack: ProviderStack) -> tuple[asyncpg.Record, str]:
    """A payment the provider took but paycore never heard of: its answer lost, the attempt Unknown,
    paycore holding no provider id for it (only its reference). Its row and the provider's id."""
    attempt, _ = await stack.unknown_via_checkout("lose_response")
    row = await stack.pool.fetchrow("SELECT * FROM payment_attempts WHERE attempt_id = $1",
                                    attempt.attempt_id)
    assert row is not None and row["state"] == "Unknown" and row["provider_payment_id"] is None, row
    [taken] = await stack.payments_for(attempt)
    return row, str(taken["id"])


# --------------------------------------------------------------------------- the provider's side


async def settlement_control(stack: ProviderStack, what: str, body: Mapping[str, Any]) -> Any:
    r = await stack.sandbox.http.post(f"/_sandbox/settlements/{what}",
                                      json={"dialect": stack.wire.name, **body})
    assert r.status_code == 200, r.text
    return r.json()


async def plant(stack: ProviderStack, day: date, *lines: Mapping[str, Any]) -> None:
    await settlement_control(stack, "lines", {"account": "acct_store", "date": day.isoformat(),
                                              "lines": list(lines)})


async def close(stack: ProviderStack, day: date) -> None:
    closed = await settlement_control(stack, "close", {"date": day.isoformat(), "account": "acct_store"})
    assert [b["dialect"] for b in closed["data"]] == [stack.wire.name], closed


async def stripe_dashboard_payment(stack: ProviderStack, amount: int) -> dict[str, Any]:
    """A PaymentIntent made over Stripe's wire, not by paycore (the Dashboard's, another system's)."""
    r = await stack.sandbox.http.post("/v1/payment_intents", headers={
        "Authorization": f"Bearer {STORE_TEST_KEY}", "Stripe-Version": STRIPE_VERSION}, data={
        "amount": str(amount), "currency": "eur", "payment_method": "pm_card_visa", "confirm": "true",
        "payment_method_types[]": "card", "metadata[paycore_reference]": f"DASH-{uuid.uuid4().hex[:8]}"})
    assert r.status_code == 200 and r.json()["status"] == "succeeded", r.text
    intent: dict[str, Any] = r.json()
    return intent


async def stripe_dashboard_refund(stack: ProviderStack, intent_id: str, amount: int) -> str:
    r = await stack.sandbox.http.post("/v1/refunds", headers={
        "Authorization": f"Bearer {STORE_TEST_KEY}", "Stripe-Version": STRIPE_VERSION}, data={
        "payment_intent": intent_id, "amount": str(amount), "metadata[paycore_reference]": "DASH-RF"})
    assert r.status_code == 200 and r.json()["status"] == "succeeded", r.text
    refund_id: str = r.json()["id"]
    return refund_id


async def adyen_dashboard_payment(stack: ProviderStack, amount: int) -> str:
    """A payment made over Adyen's wire, not by paycore: its pspReference."""
    r = await stack.sandbox.http.post("/v71/payments", headers={"X-API-Key": STORE_TEST_KEY},
                                      content=orjson.dumps({
        "amount": {"value": amount, "currency": "EUR"}, "reference": f"DASH-{uuid.uuid4().hex[:8]}",
        "merchantAccount": "acct_store", "returnUrl": "https://shop.example/return",
        "paymentMethod": {"type": "scheme", "encryptedCardNumber": "tok_visa"}}))
    assert r.status_code == 200 and r.json()["resultCode"] == "Authorised", r.text
    psp: str = r.json()["pspReference"]
    return psp


async def adyen_dashboard_refund(stack: ProviderStack, psp: str, amount: int) -> str:
    r = await stack.sandbox.http.post(
        f"/v71/payments/{psp}/refunds", headers={"X-API-Key": STORE_TEST_KEY},
        content=orjson.dumps({"merchantAccount": "acct_store", "reference": "DASH-RF",
                              "amount": {"value": amount, "currency": "EUR"}}))
    assert r.status_code == 201, r.text
    modification: str = r.json()["pspReference"]
    return modification


async def sandbox_refund_id(stack: ProviderStack, refund: asyncpg.Record) -> str:
    """The sandbox's own id of a refund paycore sent (Adyen's wire shows another: the modification's
    pspReference), by which its settlement lines are suppressed."""
    r = await stack.sandbox.http.get("/_sandbox/refunds", params={"reference": refund["client_reference"]})
    [movement] = r.json()["data"]
    found: str = movement["id"]
    return found


async def fail_refund_at_provider(stack: ProviderStack, refund: asyncpg.Record) -> None:
    """The provider's refund comes back after it succeeded (the customer's card could not take it)."""
    movement = await sandbox_refund_id(stack, refund)
    failed = await stack.sandbox.http.post(f"/_sandbox/refunds/{movement}/fail", json={})
    assert failed.status_code == 200, failed.text


# --------------------------------------------------------------------------- one scenario, planted


@dataclass(frozen=True)
class Expected:
    """One planted line's exception: the provider's ids the line names, and what it found here."""

    payment_id: str | None = None
    operation_id: str | None = None
    attempt: asyncpg.Record | None = None
    operation: asyncpg.Record | None = None


def ours(attempt: asyncpg.Record) -> Expected:
    return Expected(payment_id=attempt["provider_payment_id"], attempt=attempt)


@dataclass
class Scenario:
    """What a scenario made and planted, and the exception each planted line must be."""

    day: date
    matched: asyncpg.Record  # paid and partly refunded by paycore, settled as it is
    refund: asyncpg.Record
    missing: asyncpg.Record  # paid here, its line suppressed at the provider
    missing_refund: asyncpg.Record  # refunded here (its payment settled), its line suppressed
    expected: dict[str, Expected] = field(default_factory=dict)  # by exception kind
    matched_lines: int = 0
    by_reference: asyncpg.Record | None = None  # its line names only the merchant reference


async def stripe_scenario(stack: ProviderStack) -> Scenario:
    day = await to_next_noon(stack)
    lost, lost_at_provider = await unknown_here(stack)  # paid at Stripe, Unknown here
    matched = await paid(stack, 5000)
    refund = await refunded(stack, matched, 1000)
    returned = await paid(stack, 3000)
    returned_refund = await refunded(stack, returned, 500)
    await fail_refund_at_provider(stack, returned_refund)  # Stripe's refund_failure
    wrong = await paid(stack, 4000)
    in_dollars = await paid(stack, 2000, "USD")
    twice = await paid(stack, 4200)
    missing = await paid(stack, 2500)
    missing_refund = await refunded(stack, await paid(stack, 3500), 800)
    foreign = await stripe_dashboard_payment(stack, 999)
    foreign_refund = await stripe_dashboard_refund(stack, matched["provider_payment_id"], 700)
    await plant(stack, day,
                {"suppress": wrong["provider_payment_id"]},
                {"type": "charge", "payment": wrong["provider_payment_id"], "currency": "EUR", "gross": 4001,
                 "fee": fee(4001)},
                *charged_in_dollars_settled_in_euros(in_dollars),
                {"duplicate": twice["provider_payment_id"]},
                {"suppress": missing["provider_payment_id"]},
                {"suppress": await sandbox_refund_id(stack, missing_refund)},
                {"stripe_type": "payment_failure_refund", "payment": matched["provider_payment_id"],
                 "currency": "EUR", "gross": -50})
    return Scenario(day, matched, refund, missing, missing_refund, {
        "not-succeeded-here": Expected(lost_at_provider, attempt=lost),  # found by its reference
        "refund-reversed": Expected(returned["provider_payment_id"], returned_refund["provider_operation_id"],
                                    returned, returned_refund),
        "amount-mismatch": ours(wrong), "currency-mismatch": ours(in_dollars), "duplicate-line": ours(twice),
        "charge-reversed": ours(matched),
        "unknown-payment": Expected(foreign["id"]),
        "unknown-refund": Expected(matched["provider_payment_id"], foreign_refund, attempt=matched),
    }, matched_lines=6)
    # matched's charge and refund, returned's charge and refund, twice's first, missing_refund's charge


async def adyen_scenario(stack: ProviderStack) -> Scenario:
    day = await to_next_noon(stack)
    # Before the intake subscribes, so that paycore hears nothing of these.
    lost, lost_at_provider = await unknown_here(stack)
    foreign = await adyen_dashboard_payment(stack, 999)
    foreign_refund = await adyen_dashboard_refund(stack, foreign, 300)
    await stack.subscribe()  # Adyen's REFUND notification is what ends paycore's refunds
    matched = await paid(stack, 5000)
    refund = await refunded(stack, matched, 1000)
    returned = await paid(stack, 3000)
    returned_refund = await refunded(stack, returned, 500)
    await fail_refund_at_provider(stack, returned_refund)  # RefundedReversed
    wrong = await paid(stack, 4000)
    in_dollars = await paid(stack, 2000, "USD")
    by_reference = await paid(stack, 2000)
    twice = await paid(stack, 4200)
    missing = await paid(stack, 2500)
    missing_refund = await refunded(stack, await paid(stack, 3500), 800)
    await eventually(stack.deliveries_settled, what="every notification delivered")
    await plant(stack, day,
                {"suppress": wrong["provider_payment_id"]},
                {"type": "charge", "payment": wrong["provider_payment_id"], "currency": "EUR", "gross": 4001,
                 "fee": fee(4001)},
                # a Settled row naming only the merchant reference (no Psp Reference): found by it
                {"suppress": by_reference["provider_payment_id"]},
                {"type": "charge", "reference": by_reference["client_reference"], "currency": "EUR",
                 "gross": 2000, "fee": fee(2000)},
                *charged_in_dollars_settled_in_euros(in_dollars),
                {"duplicate": twice["provider_payment_id"]},
                {"suppress": missing["provider_payment_id"]},
                {"suppress": await sandbox_refund_id(stack, missing_refund)},
                {"adyen_type": "Chargeback", "payment": matched["provider_payment_id"], "currency": "EUR",
                 "gross": -5000})
    return Scenario(day, matched, refund, missing, missing_refund, {
        "not-succeeded-here": Expected(lost_at_provider, attempt=lost),  # found by its merchant reference
        "refund-reversed": Expected(returned["provider_payment_id"], returned_refund["provider_operation_id"],
                                    returned, returned_refund),
        "amount-mismatch": ours(wrong), "currency-mismatch": ours(in_dollars), "duplicate-line": ours(twice),
        # the sandbox writes a planted Chargeback's Modification Reference as the payment's pspReference
        "chargeback": Expected(matched["provider_payment_id"], matched["provider_payment_id"], matched),
        "unknown-payment": Expected(foreign),
        "unknown-refund": Expected(foreign, foreign_refund),
    }, matched_lines=7, by_reference=by_reference)
    # matched: matched's charge and refund, returned's charge and refund, by_reference's, twice's first,
    # missing_refund's charge


def charged_in_dollars_settled_in_euros(payment: asyncpg.Record) -> list[dict[str, Any]]:
    """The provider's line for a payment paycore charged in dollars, paid out as as many euros."""
    assert payment["currency"] == "USD", payment
    return [{"suppress": payment["provider_payment_id"]},
            {"type": "charge", "payment": payment["provider_payment_id"], "currency": "EUR",
             "gross": payment["amount_minor"], "fee": fee(payment["amount_minor"])}]


def malformed_stripe_rows() -> bytes:
    """Two rows of the payout CSV the reader cannot take: a byte that is not UTF-8, an unknown category."""
    latin = "txn_latin,2026-12-03 12:00:00,,,eur,1.00,0.00,1.00,charge,ch_x,caf\xe9,,,,,,,,,\n"
    unknown = "txn_topup,2026-12-03 12:00:00,,,eur,5.00,0.00,5.00,topup,tu_1,,,,,,,,,,\n"
    return latin.encode("latin-1") + unknown.encode()


def malformed_adyen_rows() -> bytes:
    """Two rows of the Settlement details report: a byte that is not UTF-8, a Type paycore never books."""
    latin = ("Sandbox,acct_store,PSPLATIN,Caf\xe9,visa,2026-12-03 12:00:00,UTC,Settled,PSPLATIN,EUR,,1.00,1,"
             "EUR,,1.00,,,,,visa,,,,\n")
    paid_out = ("Sandbox,acct_store,PSPPAIDOUT,,visa,2026-12-03 12:00:00,UTC,PaidOut,PSPPAIDOUT,EUR,5.00,,1,"
                "EUR,5.00,,,,,,visa,,,,\n")
    return latin.encode("latin-1") + paid_out.encode()


async def plant_malformed(stack: ProviderStack, day: date) -> None:
    raw = malformed_stripe_rows() if stack.wire.name == "stripe" else malformed_adyen_rows()
    await settlement_control(stack, "raw", {"account": "acct_store", "date": day.isoformat(),
                                            "csv_suffix_b64": base64.b64encode(raw).decode()})


# --------------------------------------------------------------------------- reading what was recorded


async def exceptions(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    return list(await pool.fetch("SELECT * FROM settlement_exceptions ORDER BY exception_id"))


async def malformed_lines(pool: asyncpg.Pool) -> dict[int, str]:
    """The rows that could not be read: line number -> why."""
    return {e["line_no"]: e["detail"]["reason"] for e in await exceptions(pool)
            if e["kind"] == "malformed-line"}


async def settlement_escalations(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    return list(await pool.fetch("SELECT * FROM payment_escalations"
                                 " WHERE reason LIKE 'settlement-exception:%' ORDER BY escalation_id"))


async def check_line_exceptions(stack: ProviderStack, scenario: Scenario) -> None:
    """Each planted line is its one exception, naming the provider's ids, with what paycore has, and
    its escalation carrying the same evidence."""
    pool = stack.pool
    found = {e["kind"]: e for e in await exceptions(pool) if e["line_no"] is not None
             and e["kind"] != "malformed-line"}
    assert sorted(found) == sorted(scenario.expected)
    for kind, want in scenario.expected.items():
        exc = found[kind]
        detail = exc["detail"]
        assert (detail.get("provider_payment_id"), detail.get("provider_operation_id")) == (
            want.payment_id, want.operation_id), kind
        assert exc["attempt_id"] == (want.attempt["attempt_id"] if want.attempt else None), kind
        assert exc["operation_id"] == (want.operation["operation_id"] if want.operation else None), kind
        line = await pool.fetchrow("SELECT * FROM settlement_lines WHERE batch_id = $1 AND line_no = $2",
                                   exc["batch_id"], exc["line_no"])
        assert (line["outcome"], line["exception_kind"], line["attempt_id"]) == (
            "exception", kind, exc["attempt_id"])
        escalation = await pool.fetchrow("SELECT * FROM payment_escalations WHERE escalation_id = $1",
                                         exc["escalation_id"])
        assert escalation["reason"] == exception_reason(kind) == f"settlement-exception:{kind}"
        assert escalation["resolved_at"] is None
        evidence = escalation["detail"]
        assert {k: evidence[k] for k in ("line_no", "provider_account", "provider_payment_id")} == {
            "line_no": exc["line_no"], "provider_account": stack.wire.provider_account,
            "provider_payment_id": want.payment_id}
    # What paycore has, beside the line.
    mismatch = found["amount-mismatch"]["detail"]
    assert (mismatch["gross_minor"], mismatch["ours"]["attempt_amount_minor"]) == (4001, 4000)
    lost = found["not-succeeded-here"]["detail"]
    assert lost["ours"]["attempt_state"] == "Unknown"
    lost_attempt = scenario.expected["not-succeeded-here"].attempt
    assert lost_attempt is not None and lost["reference"] == lost_attempt["client_reference"]
    assert found["refund-reversed"]["detail"]["ours"]["operation_kind"] == "refund"
    currency = found["currency-mismatch"]["detail"]
    assert (currency["gross_currency"], currency["gross_minor"], currency["ours"]["attempt_currency"],
            currency["ours"]["attempt_amount_minor"]) == ("EUR", 2000, "USD", 2000)


async def check_matched(stack: ProviderStack, scenario: Scenario) -> None:
    """The charge and refund paycore made are matched to their attempt and operation, by the ids and
    references paycore stored."""
    charge = await stack.pool.fetchrow(
        "SELECT * FROM settlement_lines WHERE attempt_id = $1 AND kind = 'charge' AND outcome = 'matched'",
        scenario.matched["attempt_id"])
    assert charge is not None
    assert (charge["provider_payment_id"], charge["reference"], charge["gross_minor"], charge["fee_minor"],
            charge["net_minor"]) == (scenario.matched["provider_payment_id"],
                                     scenario.matched["client_reference"], 5000, fee(5000), 5000 - fee(5000))
    refund = await stack.pool.fetchrow(
        "SELECT * FROM settlement_lines WHERE operation_id = $1 AND kind = 'refund'",
        scenario.refund["operation_id"])
    assert refund is not None
    ours_refund = scenario.refund
    assert (refund["outcome"], refund["provider_operation_id"], refund["reference"], refund["gross_minor"]) \
        == ("matched", ours_refund["provider_operation_id"], ours_refund["client_reference"], -1000)
    # The exchange rate as the provider gave it: Adyen's report states one for every payment's row
    # (the sandbox's is 1, settled in the currency charged); Stripe's balance transactions say null
    # and its itemized report has no such column.
    rate = Decimal(1) if stack.wire.name == "adyen" else None
    assert (charge["exchange_rate"], refund["exchange_rate"]) == (rate, rate)


async def check_missing(stack: ProviderStack, scenario: Scenario) -> None:
    """The payment and the refund whose lines were suppressed are missing, each once, escalated with
    what paycore has of them; nothing else is."""
    found = [e for e in await exceptions(stack.pool) if e["kind"].startswith("missing-")]
    assert sorted(e["kind"] for e in found) == ["missing-payment", "missing-refund"], found
    missing = next(e for e in found if e["kind"] == "missing-payment")
    assert (missing["attempt_id"], missing["operation_id"], missing["batch_id"], missing["line_no"]) == (
        scenario.missing["attempt_id"], None, None, None)
    assert missing["detail"]["provider_payment_id"] == scenario.missing["provider_payment_id"]
    refund = next(e for e in found if e["kind"] == "missing-refund")
    ours_refund = scenario.missing_refund
    assert (refund["attempt_id"], refund["operation_id"], refund["batch_id"], refund["line_no"]) == (
        ours_refund["attempt_id"], ours_refund["operation_id"], None, None)
    assert {k: refund["detail"][k] for k in ("operation_kind", "provider_operation_id", "reference",
                                            "amount_minor", "currency")} == {
        "operation_kind": "refund", "provider_operation_id": ours_refund["provider_operation_id"],
        "reference": ours_refund["client_reference"], "amount_minor": 800, "currency": "EUR"}
    for exc in (missing, refund):
        escalation = await stack.pool.fetchrow(
            "SELECT reason, detail, resolved_at FROM payment_escalations WHERE escalation_id = $1",
            exc["escalation_id"])
        assert (escalation["reason"], escalation["detail"], escalation["resolved_at"]) == (
            exception_reason(exc["kind"]), exc["detail"], None)


async def check_effect(pool: asyncpg.Pool, batch_id: int) -> dict[str, Any]:
    [effect] = await pool.fetch("SELECT payload FROM outbox_messages WHERE kind = 'settlement-reconciled'")
    payload: dict[str, Any] = dict(effect["payload"])
    batch = await pool.fetchrow("SELECT * FROM settlement_batches WHERE batch_id = $1", batch_id)
    assert payload["exception_count"] == batch["exception_count"]
    assert payload["matched_count"] == batch["matched_count"]
    return payload


def only_batch(run: AccountRun) -> int:
    [outcome] = run.outcomes
    assert outcome.result == "recorded" and outcome.batch_id is not None, run
    return outcome.batch_id


async def run_account(stack: ProviderStack, day: date, now: datetime) -> AccountRun:
    """``reconcile_account`` as the daily run calls it, the account's source from its settings."""
    source = settlement_source(account_of(stack), clock=FakeClock(current=now))
    return await reconcile_account(stack.pool, source, stack.wire.provider_account, day, day, now=now,
                                   grace=GRACE, reminder_interval=REMIND)


# --------------------------------------------------------------------------- Stripe


async def test_stripe_a_day_of_balance_transactions_through_the_sdk_finds_every_exception_once(
        stripe_stack: ProviderStack) -> None:
    stack = stripe_stack
    scenario = await stripe_scenario(stack)
    # A balance transaction type paycore does not know: the one row the API can get wrong.
    await plant(stack, scenario.day,
                {"stripe_type": "climate_order_purchase", "currency": "EUR", "gross": -100})
    pool = stack.pool

    # The day over, the grace period not.
    first = await run_account(stack, scenario.day, at(scenario.day, hours=1))
    batch_id = only_batch(first)
    [outcome] = first.outcomes
    assert (outcome.provider_batch_id, first.new_missing, first.unreadable) == (
        f"day:{scenario.day.isoformat()}", 0, ())
    assert (outcome.matched_count, outcome.bad_line_count) == (scenario.matched_lines, 1)
    await check_line_exceptions(stack, scenario)
    await check_matched(stack, scenario)
    [bad] = [e for e in await exceptions(pool) if e["kind"] == "malformed-line"]
    assert "climate_order_purchase" in bad["detail"]["reason"] and bad["line_no"] >= 1
    assert bad["detail"]["raw"]["type"] == "climate_order_purchase"
    batch = await pool.fetchrow("SELECT * FROM settlement_batches WHERE batch_id = $1", batch_id)
    assert (batch["state"], batch["provider_status"], batch["source"], batch["exception_count"]) == (
        "reconciled", "closed", "api", len(scenario.expected) + 1)
    payload = await check_effect(pool, batch_id)
    assert payload["exception_count"] == outcome.exception_count == len(scenario.expected) + 1
    assert len(await settlement_escalations(pool)) == len(scenario.expected) + 1

    # The same day again, after the grace period: nothing of the batch is read again; only the
    # payment and the refund no line named are now missing, once each.
    before = await counts(pool)
    later = await run_account(stack, scenario.day, at(scenario.day, days=GRACE.days, hours=1))
    assert [(o.result, o.batch_id) for o in later.outcomes] == [("unchanged", batch_id)]
    assert later.new_missing == 2
    await check_missing(stack, scenario)
    after = await counts(pool)
    assert after == more_exceptions(before, 2)
    again = await run_account(stack, scenario.day, at(scenario.day, days=GRACE.days, hours=2))
    assert ([o.result for o in again.outcomes], again.new_missing) == (["unchanged"], 0)
    assert await counts(pool) == after


async def download(stack: ProviderStack, path: str, tmp_path: Path, *, auth: tuple[str, str] | None = None,
                   **params: str) -> Path:
    r = await stack.sandbox.http.get(path, params=params, auth=auth)
    assert r.status_code == 200, r.text
    saved = tmp_path / path.rsplit("/", 1)[-1]
    saved.write_bytes(r.content)
    return saved


async def test_stripe_the_itemized_payout_report_as_a_file_finds_every_exception_with_line_numbers(
        stripe_stack: ProviderStack, tmp_path: Path) -> None:
    stack = stripe_stack
    scenario = await stripe_scenario(stack)
    await plant_malformed(stack, scenario.day)
    await close(stack, scenario.day)
    path = await download(stack, "/_sandbox/stripe/payout_reconciliation.csv", tmp_path, account="acct_store",
                          date=scenario.day.isoformat())
    data_rows = len(rows_of(path.read_bytes().decode("utf-8", "replace"))) - 2  # the two planted last
    pool = stack.pool

    batch, lines = await read_report_file("stripe", path, stack.wire.provider_account)
    assert batch.provider_batch_id.startswith("po_") and (batch.source, batch.status) == ("file", "closed")
    now = at(scenario.day, hours=1)
    outcome = await reconcile_batch(pool, batch, lines, now=now, reminder_interval=REMIND)
    assert (outcome.result, outcome.line_count, outcome.matched_count, outcome.bad_line_count) == (
        "recorded", data_rows, scenario.matched_lines, 2)
    await check_line_exceptions(stack, scenario)
    await check_matched(stack, scenario)
    malformed = await malformed_lines(pool)
    assert sorted(malformed) == [data_rows + 1, data_rows + 2]
    assert "UTF-8" in malformed[data_rows + 1] and "topup" in malformed[data_rows + 2]
    assert outcome.batch_id is not None
    await check_effect(pool, outcome.batch_id)
    assert len(await settlement_escalations(pool)) == len(scenario.expected) + 2

    # The grace period over: the payment and the refund whose lines were suppressed are missing.
    assert await record_missing(pool, stack.wire.provider_account, now=now, grace=GRACE,
                                reminder_interval=REMIND) == 0
    late = at(scenario.day, days=GRACE.days, hours=1)
    assert await record_missing(pool, stack.wire.provider_account, now=late, grace=GRACE,
                                reminder_interval=REMIND) == 2
    await check_missing(stack, scenario)

    # The same file again: the closed payout is not read again.
    before = await counts(pool)
    batch, lines = await read_report_file("stripe", path, stack.wire.provider_account)
    again = await reconcile_batch(pool, batch, lines, now=late, reminder_interval=REMIND)
    assert (again.result, again.batch_id) == ("unchanged", outcome.batch_id)
    assert await counts(pool) == before


# --------------------------------------------------------------------------- Adyen


async def test_adyen_report_batches_probed_and_downloaded_find_every_exception_then_resume_after_the_last(
        adyen_stack: ProviderStack) -> None:
    stack = adyen_stack
    scenario = await adyen_scenario(stack)
    await plant_malformed(stack, scenario.day)
    await close(stack, scenario.day)
    pool = stack.pool

    first = await run_account(stack, scenario.day, at(scenario.day, hours=1))
    batch_id = only_batch(first)
    [outcome] = first.outcomes
    assert (outcome.provider_batch_id, first.new_missing, first.unreadable) == ("1", 0, ())
    assert (outcome.matched_count, outcome.bad_line_count) == (scenario.matched_lines, 2)
    await check_line_exceptions(stack, scenario)
    await check_matched(stack, scenario)
    assert scenario.by_reference is not None
    by_reference = await pool.fetchrow("SELECT * FROM settlement_lines WHERE attempt_id = $1",
                                       scenario.by_reference["attempt_id"])
    assert (by_reference["outcome"], by_reference["provider_payment_id"], by_reference["reference"]) == (
        "matched", None, scenario.by_reference["client_reference"])  # no Psp Reference: found by reference
    rows = outcome.line_count  # the data rows before the planted ones, the MerchantPayout included
    payout = await pool.fetchrow("SELECT * FROM settlement_lines WHERE kind = 'payout'")
    assert (payout["line_no"], payout["outcome"], payout["record_type"]) == (rows, "booked", "MerchantPayout")
    assert payout["exchange_rate"] is None  # its Exchange Rate is empty: stored as none, not 1
    malformed = await malformed_lines(pool)
    assert sorted(malformed) == [rows + 1, rows + 2]
    assert "UTF-8" in malformed[rows + 1] and "PaidOut" in malformed[rows + 2]
    batch = await pool.fetchrow("SELECT * FROM settlement_batches WHERE batch_id = $1", batch_id)
    assert (batch["state"], batch["batch_date"], batch["net_minor"]) == ("reconciled", scenario.day, 0)
    await check_effect(pool, batch_id)
    assert len(await settlement_escalations(pool)) == len(scenario.expected) + 2

    # Again after the grace period: the probe starts after batch 1 (the last recorded), finds no
    # batch 2, reads nothing again; the suppressed payment and refund are now missing, once each.
    before = await counts(pool)
    later = await run_account(stack, scenario.day, at(scenario.day, days=GRACE.days, hours=1))
    assert (later.outcomes, later.unreadable, later.new_missing) == ((), (), 2)
    await check_missing(stack, scenario)
    assert await counts(pool) == more_exceptions(before, 2)

    # The next day's batch is number 2: only it is read.
    next_day = scenario.day + timedelta(days=1)
    await stack.advance(86_400)
    another = await paid(stack, 1500)
    await close(stack, next_day)
    third = await run_account(stack, next_day, at(next_day, days=GRACE.days, hours=2))
    [new] = third.outcomes
    assert (new.provider_batch_id, new.result, new.matched_count, new.exception_count, third.new_missing) == (
        "2", "recorded", 1, 0, 0)
    line = await pool.fetchrow("SELECT * FROM settlement_lines WHERE attempt_id = $1", another["attempt_id"])
    assert (line["outcome"], line["provider_payment_id"]) == ("matched", another["provider_payment_id"])
    fourth = await run_account(stack, next_day, at(next_day, days=GRACE.days, hours=3))
    assert (fourth.outcomes, fourth.new_missing) == ((), 0)


async def test_adyen_a_downloaded_report_file_finds_the_same_exceptions(
        adyen_stack: ProviderStack, tmp_path: Path) -> None:
    stack = adyen_stack
    scenario = await adyen_scenario(stack)
    await plant_malformed(stack, scenario.day)
    await close(stack, scenario.day)
    report = "/reports/download/MerchantAccount/acct_store/settlement_detail_report_batch_1.csv"
    path = await download(stack, report, tmp_path, auth=(REPORT_USER, REPORT_PASSWORD))
    pool = stack.pool
    batch, lines = await read_report_file("adyen", path, stack.wire.provider_account)
    assert (batch.provider_batch_id, batch.source, batch.batch_date, batch.currency) == (
        "1", "file", scenario.day, "EUR")
    now = at(scenario.day, days=GRACE.days, hours=1)
    outcome = await reconcile_batch(pool, batch, lines, now=now, reminder_interval=REMIND)
    assert (outcome.result, outcome.matched_count, outcome.bad_line_count) == (
        "recorded", scenario.matched_lines, 2)
    await check_line_exceptions(stack, scenario)
    await check_matched(stack, scenario)
    assert await record_missing(pool, stack.wire.provider_account, now=now, grace=GRACE,
                                reminder_interval=REMIND) == 2
    await check_missing(stack, scenario)
    assert outcome.batch_id is not None
    await check_effect(pool, outcome.batch_id)
    assert len(await settlement_escalations(pool)) == len(scenario.expected) + 4  # two malformed, two missing
    before = await counts(pool)
    batch, lines = await read_report_file("adyen", path, stack.wire.provider_account)
    again = await reconcile_batch(pool, batch, lines, now=now, reminder_interval=REMIND)
    assert again.result == "unchanged" and await counts(pool) == before


async def test_adyen_a_payout_that_does_not_net_to_zero_is_one_unbalanced_batch_and_none_of_its_lines(
        adyen_stack: ProviderStack) -> None:
    stack = adyen_stack
    day = await to_next_noon(stack)
    await stack.subscribe()
    payment = await paid(stack, 5000)
    await settlement_control(stack, "totals", {"account": "acct_store", "date": day.isoformat(), "net": 1000})
    await close(stack, day)
    pool = stack.pool

    run = await run_account(stack, day, at(day, days=GRACE.days, hours=1))
    [outcome] = run.outcomes
    assert (outcome.provider_batch_id, outcome.result, outcome.line_count) == ("1", "unbalanced", 2)
    assert await pool.fetchval("SELECT count(*) FROM settlement_lines") == 0
    [exc] = await exceptions(pool)
    assert (exc["kind"], exc["line_no"]) == ("unbalanced-batch", None)
    net = 5000 - fee(5000)
    assert exc["detail"]["differences"] == {"net_after_payout": {"reported": 0, "counted": net - 1000}}
    [escalation] = await settlement_escalations(pool)
    assert escalation["reason"] == "settlement-exception:unbalanced-batch"
    assert escalation["detail"]["provider_batch_id"] == "1"
    batch = await pool.fetchrow("SELECT * FROM settlement_batches")
    assert (batch["state"], batch["matched_count"]) == ("unbalanced", 0)
    assert (await check_effect(pool, batch["batch_id"]))["state"] == "unbalanced"
    # Its payment is not called missing: an unbalanced batch covers no days.
    assert run.new_missing == 0
    assert await pool.fetchval("SELECT count(*) FROM settlement_exceptions WHERE attempt_id = $1",
                               payment["attempt_id"]) == 0


async def test_adyen_a_refused_report_password_and_a_missing_report_user_name_the_settings(
        adyen_stack: ProviderStack) -> None:
    stack = adyen_stack
    day = await to_next_noon(stack)
    await paid(stack, 5000)
    await close(stack, day)
    account = account_of(stack)
    assert (account.report_username, account.reports_base_url) == (REPORT_USER, stack.sandbox.url)
    shown = (await stack.sandbox.http.get("/_sandbox/accounts")).json()["data"]
    [store] = [a["adyen"] for a in shown if (a["account"], a["environment"]) == ("acct_store", "test")]
    assert (store["report_username"], store["report_password"]) == (REPORT_USER, REPORT_PASSWORD)

    wrong = dataclasses.replace(account, report_password=Secret("not-the-password"))
    with pytest.raises(SettlementSourceError) as refused:
        await reconcile_account(stack.pool, settlement_source(wrong), wrong.provider_account, day, day,
                                now=at(day), grace=GRACE, reminder_interval=REMIND)
    message = str(refused.value)
    assert "HTTP 401" in message and REPORT_USER in message
    assert "PAYCORE_ADYEN_REPORT_PASSWORD" in message and "not-the-password" not in message
    assert await stack.pool.fetchval("SELECT count(*) FROM settlement_batches") == 0

    without = dataclasses.replace(account, report_username=None, report_password=None)
    with pytest.raises(SettlementSourceError, match="PAYCORE_ADYEN_REPORT_USERNAME"):
        settlement_source(without)
