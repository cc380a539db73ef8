"""Stripe's and Adyen's settlements end to end: payments made over the sandbox's wire, the same
payments recorded here (real PostgreSQL), and paycore's own readers -- Stripe's balance
transactions through the official SDK, Adyen's Settlement details report probed with ``HEAD`` and
downloaded with the report user's basic auth, each provider's report file -- reconciled against
the books by :func:`paycore.settlements.reconcile_account` / :func:`reconcile_batch`.

No mocks: the sandbox is a real HTTP server, its clock is moved with ``/_sandbox/clock`` and
paycore's :class:`FakeClock` is set to the same instant.
"""

from __future__ import annotations

import base64
import datetime as dt
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import orjson
import pytest

from harness.servers import serve_asgi
from paycore import accounts, orders
from paycore.clock import FakeClock
from paycore.config import ProviderAccountConfig, Secret, load_settings
from paycore.providers.adyen.provider import API_VERSION as ADYEN_API_VERSION
from paycore.providers.adyen.provider import AdyenAccountConfig
from paycore.providers.settlement_sources import read_report_file, settlement_source
from paycore.providers.stripe.provider import API_VERSION as STRIPE_API_VERSION
from paycore.settlement_lines import SettlementSourceError
from paycore.settlements import AccountRun, reconcile_account, reconcile_batch
from paycore_sandbox.app import create_app
from paycore_sandbox.settings import SandboxSettings
from tests.matrix.helpers import attempt_values, insert_row, operation_values
from tests.sandbox.settlement_support import close, control, fee, next_noon
from tests.sandbox.support import STORE_TEST_KEY, advance, new_reference
from tests.sandbox.test_adyen_dialect import adyen_body, pay
from tests.sandbox.test_stripe_dialect import create_intent, intent_form, stripe_headers

REMIND = dt.timedelta(minutes=15)
GRACE = dt.timedelta(days=3)
REPORT_USER = "report@Company.Sandbox"


@pytest.fixture
async def sandbox_url() -> AsyncIterator[str]:
    async with serve_asgi(create_app(SandboxSettings.default())) as url:
        yield url


@pytest.fixture
async def client(sandbox_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=sandbox_url, timeout=10) as c:
        yield c


async def sandbox_credentials(client: httpx.AsyncClient) -> dict[str, Any]:
    listed = (await client.get("/_sandbox/accounts")).json()["data"]
    row: dict[str, Any] = next(a for a in listed
                               if (a["account"], a["environment"]) == ("acct_store", "test"))
    return row


async def registered(pool: asyncpg.Pool, clock: FakeClock,
                     config: ProviderAccountConfig) -> ProviderAccountConfig:
    async with pool.acquire() as conn, conn.transaction():
        await accounts.apply_provider_account(conn, config, clock.now())
    return config


async def stripe_account(pool: asyncpg.Pool, clock: FakeClock, client: httpx.AsyncClient,
                         sandbox_url: str) -> ProviderAccountConfig:
    creds = await sandbox_credentials(client)
    return await registered(pool, clock, ProviderAccountConfig(
        provider="stripe", account="acct_store", environment="test", base_url=sandbox_url,
        api_key=Secret(creds["stripe"]["api_key"]), webhook_secret=None, api_version=STRIPE_API_VERSION))


async def adyen_account(pool: asyncpg.Pool, clock: FakeClock, client: httpx.AsyncClient,
                        sandbox_url: str) -> ProviderAccountConfig:
    creds = (await sandbox_credentials(client))["adyen"]
    assert creds["report_username"] == REPORT_USER
    return await registered(pool, clock, AdyenAccountConfig(
        provider="adyen", account="acct_store", environment="test", base_url=sandbox_url,
        api_key=Secret(STORE_TEST_KEY), webhook_secret=None, api_version=ADYEN_API_VERSION,
        return_url="https://shop.example/return", report_username=creds["report_username"],
        report_password=Secret(creds["report_password"]), reports_base_url=sandbox_url))


async def same_noon(client: httpx.AsyncClient, clock: FakeClock) -> dt.date:
    """Noon of the sandbox's next day, on both clocks."""
    day = await next_noon(client)
    clock.current = dt.datetime.combine(day, dt.time(12), dt.UTC)
    return day


async def ours(pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig, amount: int,
               provider_payment_id: str, reference: str, *, held: bool = False) -> asyncpg.Record:
    """The payment as recorded here: a Succeeded attempt carrying the provider's id and our reference
    (``held``: of an order whose payment is captured later)."""
    order = await orders.create_order(pool, customer_id="cus_1", amount_minor=amount, currency="EUR",
                                      now=clock.now())
    if held:
        await pool.execute("UPDATE orders SET capture = 'manual' WHERE order_id = $1", order.order_id)
    return await insert_row(pool, "payment_attempts", attempt_values(
        order, account, clock.now(), state="Succeeded", provider_payment_id=provider_payment_id,
        provider_status="succeeded", client_reference=reference))


async def our_operation(pool: asyncpg.Pool, clock: FakeClock, payment: asyncpg.Record, amount: int,
                        provider_operation_id: str, reference: str, *,
                        kind: str = "refund") -> asyncpg.Record:
    """A Succeeded refund or capture as recorded here."""
    return await insert_row(pool, "payment_operations", operation_values(
        payment, clock.now(), kind=kind, state="Succeeded", amount_minor=amount,
        provider_operation_id=provider_operation_id, client_reference=reference))


async def exception_rows(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await pool.fetch("""
        SELECT e.kind, e.line_no, e.attempt_id, e.escalation_id, e.detail, l.provider_payment_id,
               l.provider_operation_id, l.record_type
        FROM settlement_exceptions e
        LEFT JOIN settlement_lines l ON l.batch_id = e.batch_id AND l.line_no = e.line_no
        ORDER BY e.exception_id""")
    return rows


async def escalation_reasons(pool: asyncpg.Pool) -> list[str]:
    return [r["reason"] for r in await pool.fetch(
        "SELECT reason FROM payment_escalations ORDER BY escalation_id")]


async def table_counts(pool: asyncpg.Pool) -> tuple[int, ...]:
    row = await pool.fetchrow("""
        SELECT (SELECT count(*) FROM settlement_batches), (SELECT count(*) FROM settlement_lines),
               (SELECT count(*) FROM settlement_exceptions), (SELECT count(*) FROM payment_escalations),
               (SELECT count(*) FROM outbox_messages WHERE kind = 'settlement-reconciled')""")
    assert row is not None
    return tuple(row)


# -- Stripe -----------------------------------------------------------------------------------

async def intent(client: httpx.AsyncClient, amount: int) -> tuple[str, str]:
    """A succeeded PaymentIntent over the Stripe wire: its id and the paycore reference it carries."""
    reference = new_reference()
    response = await create_intent(client, intent_form(reference, amount=str(amount)))
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "succeeded"
    return response.json()["id"], reference


async def stripe_refund(client: httpx.AsyncClient, intent_id: str, amount: int) -> tuple[str, str]:
    reference = f"RF-{uuid.uuid4().hex[:10]}"
    response = await client.post("/v1/refunds", headers=stripe_headers(key=new_reference()), data={
        "payment_intent": intent_id, "amount": str(amount), "metadata[paycore_reference]": reference})
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "succeeded"
    return response.json()["id"], reference


async def test_a_stripe_day_of_balance_transactions_against_the_books(
        pool: asyncpg.Pool, clock: FakeClock, client: httpx.AsyncClient, sandbox_url: str) -> None:
    account = await stripe_account(pool, clock, client, sandbox_url)
    day = await same_noon(client, clock)
    target = {"account": "acct_store", "date": day.isoformat(), "dialect": "stripe"}
    stranger, _ = await intent(client, 1000)  # paid at Stripe, never recorded here

    # A revoked key: the day cannot be read; it is reported and nothing is half-recorded.
    revoked = replace(account, api_key=Secret("sk_test_revoked"))
    refused = await reconcile_account(pool, settlement_source(revoked, clock=clock), account.provider_account,
                                      day, day, now=clock.now() + dt.timedelta(days=4), grace=GRACE,
                                      reminder_interval=REMIND)
    assert refused.outcomes == () and refused.new_missing == 0
    [(batch_id, why)] = refused.unreadable
    assert batch_id == f"day:{day.isoformat()}" and "HTTP 401, the API key was refused" in why
    assert "sk_test_revoked" not in why
    assert await table_counts(pool) == (0, 0, 0, 0, 0)

    sale, sale_ref = await intent(client, 4999)
    sale_row = await ours(pool, clock, account, 4999, sale, sale_ref)
    refund, refund_ref = await stripe_refund(client, sale, 1000)
    refund_row = await our_operation(pool, clock, sale_row, 1000, refund, refund_ref)

    differs, differs_ref = await intent(client, 3000)
    await ours(pool, clock, account, 3100, differs, differs_ref)  # recorded here for 31.00
    twice, twice_ref = await intent(client, 2000)
    await ours(pool, clock, account, 2000, twice, twice_ref)
    returned_sale, returned_sale_ref = await intent(client, 2500)
    returned_row = await ours(pool, clock, account, 2500, returned_sale, returned_sale_ref)
    returned, returned_ref = await stripe_refund(client, returned_sale, 500)
    await our_operation(pool, clock, returned_row, 500, returned, returned_ref)
    failed = await client.post(f"/_sandbox/refunds/{returned}/fail", json={})
    assert failed.status_code == 200, failed.text
    unpaid, unpaid_ref = await intent(client, 1500)
    unpaid_row = await ours(pool, clock, account, 1500, unpaid, unpaid_ref)

    await control(client, "lines", {**target, "lines": [
        {"duplicate": twice},
        {"suppress": unpaid},
        {"type": "charge", "currency": "EUR", "gross": 777},  # a charge that names no payment of ours
        {"type": "adjustment", "stripe_type": "payment_failure_refund", "payment": sale, "currency": "EUR",
         "gross": -4999},
    ]})

    # The day is over and the grace has passed: the day's batch is closed, the missing are missing.
    clock.current += dt.timedelta(days=4)
    source = settlement_source(account, clock=clock)
    run = await reconcile_account(pool, source, account.provider_account, day, day, now=clock.now(),
                                  grace=GRACE, reminder_interval=REMIND)

    [outcome] = run.outcomes
    assert (outcome.provider_batch_id, outcome.result, run.unreadable) == (
        f"day:{day.isoformat()}", "recorded", ())
    # lines: 5 charges + the duplicate, 2 refunds, the refund's failure, the planted charge and reversal
    # (the suppressed payment has none)
    assert (outcome.line_count, outcome.bad_line_count) == (11, 0)
    assert outcome.matched_count == 5  # sale, twice (once), returned_sale, both refunds
    assert run.new_missing == 1
    found = await exception_rows(pool)
    by_kind = sorted(((r["kind"], r["provider_payment_id"], r["provider_operation_id"]) for r in found),
                     key=repr)
    assert by_kind == sorted([
        ("amount-mismatch", differs, None),
        ("duplicate-line", twice, None),
        ("refund-reversed", returned_sale, returned),
        ("unknown-payment", None, None),
        ("unknown-payment", stranger, None),
        ("charge-reversed", sale, None),
        ("missing-payment", None, None),  # no line: the exception names the attempt
    ], key=repr)
    missing = next(r for r in found if r["kind"] == "missing-payment")
    assert missing["attempt_id"] == unpaid_row["attempt_id"]
    assert (missing["detail"]["provider_payment_id"], missing["detail"]["reference"]) == (unpaid, unpaid_ref)
    evidence = await pool.fetchval(
        "SELECT detail FROM payment_escalations WHERE reason = 'settlement-exception:amount-mismatch'")
    assert (evidence["provider_payment_id"], evidence["gross_minor"], evidence["reference"],
            evidence["ours"]["attempt_amount_minor"]) == (differs, 3000, differs_ref, 3100)
    assert all(r["escalation_id"] is not None for r in found)
    assert sorted(await escalation_reasons(pool)) == sorted(
        f"settlement-exception:{r['kind']}" for r in found)

    matched = await pool.fetch(
        "SELECT provider_payment_id, provider_operation_id, attempt_id, operation_id FROM settlement_lines"
        " WHERE outcome = 'matched' ORDER BY line_no DESC")
    assert (sale, None, sale_row["attempt_id"], None) in [tuple(m) for m in matched]
    assert (sale, refund, sale_row["attempt_id"], refund_row["operation_id"]) in [tuple(m) for m in matched]
    charge = await pool.fetchrow(
        "SELECT gross_minor, fee_minor, net_minor, gross_currency, record_type FROM settlement_lines"
        " WHERE provider_payment_id = $1 AND kind = 'charge'", sale)
    assert tuple(charge) == (4999, fee(4999), 4999 - fee(4999), "EUR", "charge")

    batch = await pool.fetchrow("SELECT * FROM settlement_batches")
    assert (batch["state"], batch["provider_status"], batch["matched_count"], batch["exception_count"]) == (
        "reconciled", "closed", 5, 6)
    [effect] = await pool.fetch("SELECT payload FROM outbox_messages WHERE kind = 'settlement-reconciled'")
    assert effect["payload"]["exception_count"] == 6 and effect["payload"]["matched_count"] == 5

    # The same day again: a closed batch is not read again, nothing new is found.
    before = await table_counts(pool)
    again = await reconcile_account(pool, settlement_source(account, clock=clock), account.provider_account,
                                    day, day, now=clock.now(), grace=GRACE, reminder_interval=REMIND)
    assert [o.result for o in again.outcomes] == ["unchanged"] and again.new_missing == 0
    assert await table_counts(pool) == before


async def test_the_stripe_itemized_payout_report_downloaded_and_read_from_a_file(
        pool: asyncpg.Pool, clock: FakeClock, client: httpx.AsyncClient, sandbox_url: str,
        tmp_path: Path) -> None:
    account = await stripe_account(pool, clock, client, sandbox_url)
    day = await same_noon(client, clock)
    sale, sale_ref = await intent(client, 4999)
    sale_row = await ours(pool, clock, account, 4999, sale, sale_ref)
    refund, refund_ref = await stripe_refund(client, sale, 999)
    refund_row = await our_operation(pool, clock, sale_row, 999, refund, refund_ref)
    # a hold for 30.00 of which 25.00 is captured: its charge is what was captured
    hold_ref = new_reference()
    held = await create_intent(client, intent_form(hold_ref, amount="3000", capture_method="manual"))
    assert held.json()["status"] == "requires_capture", held.text
    hold = held.json()["id"]
    captured = await client.post(f"/v1/payment_intents/{hold}/capture", data={"amount_to_capture": "2500"},
                                 headers=stripe_headers(key=new_reference()))
    assert captured.json()["status"] == "succeeded", captured.text
    hold_row = await ours(pool, clock, account, 3000, hold, hold_ref, held=True)
    await our_operation(pool, clock, hold_row, 2500, captured.json()["latest_charge"],
                        f"CAP-{uuid.uuid4().hex[:8]}", kind="capture")

    not_yet = await client.get("/_sandbox/stripe/payout_reconciliation.csv",
                               params={"account": "acct_store", "date": day.isoformat()})
    assert not_yet.status_code == 404  # the day is still open
    await close(client, day, dialect="stripe")
    report = await client.get("/_sandbox/stripe/payout_reconciliation.csv",
                              params={"account": "acct_store", "date": day.isoformat()})
    assert report.status_code == 200, report.text
    path = tmp_path / "itemized_payout_reconciliation.csv"
    path.write_bytes(report.content)

    batch, lines = await read_report_file("stripe", path, account.provider_account)
    assert batch.provider_batch_id.startswith("po_")
    assert (batch.source, batch.status, batch.batch_date, batch.currency) == ("file", "closed", day, "EUR")
    outcome = await reconcile_batch(pool, batch, lines, now=clock.now(), reminder_interval=REMIND)
    assert (outcome.result, outcome.line_count, outcome.matched_count, outcome.exception_count,
            outcome.bad_line_count) == ("recorded", 3, 3, 0, 0)
    matched = {(r["kind"], r["attempt_id"], r["operation_id"], r["gross_minor"]) for r in await pool.fetch(
        "SELECT kind, attempt_id, operation_id, gross_minor FROM settlement_lines WHERE outcome = 'matched'")}
    assert matched == {("charge", sale_row["attempt_id"], None, 4999),
                       ("refund", sale_row["attempt_id"], refund_row["operation_id"], -999),
                       ("charge", hold_row["attempt_id"], None, 2500)}
    assert await pool.fetchval("SELECT count(*) FROM settlement_exceptions") == 0
    assert await escalation_reasons(pool) == []


# -- Adyen ------------------------------------------------------------------------------------

REPORT = "/reports/download/MerchantAccount/acct_store/settlement_detail_report_batch_{}.csv"


async def adyen_paid(client: httpx.AsyncClient, amount: int, **extra: Any) -> tuple[str, str]:
    """An authorised Adyen payment over the wire: its pspReference and merchant reference."""
    reference = new_reference()
    response = await pay(client, adyen_body(amount=amount, reference=reference, **extra))
    assert response.status_code == 200, response.text
    assert response.json()["resultCode"] == "Authorised", response.text
    return response.json()["pspReference"], reference


async def adyen_modify(client: httpx.AsyncClient, psp: str, what: str, amount: int) -> tuple[str, str]:
    """A refund or capture of ``psp``: its own pspReference and reference."""
    reference = f"{what[:3].upper()}-{uuid.uuid4().hex[:10]}"
    response = await client.post(
        f"/v71/payments/{psp}/{what}", content=orjson.dumps({
            "merchantAccount": "acct_store", "reference": reference,
            "amount": {"value": amount, "currency": "EUR"}}),
        headers={"X-API-Key": STORE_TEST_KEY, "Content-Type": "application/json"})
    assert response.status_code == 201, response.text
    return response.json()["pspReference"], reference


async def reconcile_adyen(pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig,
                          day: dt.date) -> AccountRun:
    return await reconcile_account(pool, settlement_source(account, clock=clock), account.provider_account,
                                   day, day, now=clock.now(), grace=GRACE, reminder_interval=REMIND)


async def test_adyen_numbered_batches_found_by_head_probing_and_read_once(
        pool: asyncpg.Pool, clock: FakeClock, client: httpx.AsyncClient, sandbox_url: str) -> None:
    account = await adyen_account(pool, clock, client, sandbox_url)
    day = await same_noon(client, clock)
    sale, sale_ref = await adyen_paid(client, 4999)
    sale_row = await ours(pool, clock, account, 4999, sale, sale_ref)
    refund, refund_ref = await adyen_modify(client, sale, "refunds", 1000)
    refund_row = await our_operation(pool, clock, sale_row, 1000, refund, refund_ref)
    stranger, _ = await adyen_paid(client, 1234)  # paid out, never recorded here
    await control(client, "lines", {"account": "acct_store", "date": day.isoformat(), "dialect": "adyen",
                                    "lines": [{"adyen_type": "Chargeback", "payment": sale, "currency": "EUR",
                                               "gross": -4999, "reference": "CB-1"}]})
    await close(client, day, dialect="adyen")

    clock.current += dt.timedelta(days=4)
    first = await reconcile_adyen(pool, clock, account, day)
    [outcome] = first.outcomes
    assert (outcome.provider_batch_id, outcome.result, first.unreadable, first.new_missing) == (
        "1", "recorded", (), 0)
    # Settled x2, Refunded, Chargeback, MerchantPayout
    assert (outcome.line_count, outcome.matched_count, outcome.exception_count) == (5, 2, 2)
    batch = await pool.fetchrow("SELECT * FROM settlement_batches")
    assert (batch["batch_date"], batch["source"], batch["net_minor"]) == (day, "api", 0)
    matched = {(r["attempt_id"], r["operation_id"]) for r in await pool.fetch(
        "SELECT attempt_id, operation_id FROM settlement_lines WHERE outcome = 'matched'")}
    assert matched == {(sale_row["attempt_id"], None), (sale_row["attempt_id"], refund_row["operation_id"])}
    found = await exception_rows(pool)
    assert sorted((r["kind"], r["provider_payment_id"], r["record_type"]) for r in found) == [
        ("chargeback", sale, "Chargeback"), ("unknown-payment", stranger, "Settled")]
    assert await pool.fetchval("SELECT outcome FROM settlement_lines WHERE kind = 'payout'") == "booked"

    # The next batch's payout row reports a net its lines do not add up to.
    await advance(client, 86_400)
    next_day = day + dt.timedelta(days=1)
    clock.current = dt.datetime.combine(next_day, dt.time(12), dt.UTC)
    await adyen_paid(client, 2000)
    await control(client, "totals", {"account": "acct_store", "date": next_day.isoformat(),
                                     "dialect": "adyen", "net": 1})
    await close(client, next_day, dialect="adyen")
    second = await reconcile_adyen(pool, clock, account, day)
    [unbalanced] = second.outcomes  # batch 1 is not probed again: reading resumes after it
    # its two lines (Settled, MerchantPayout) were read and counted, none recorded
    assert (unbalanced.provider_batch_id, unbalanced.result, unbalanced.line_count) == ("2", "unbalanced", 2)
    assert await pool.fetchval(
        "SELECT count(*) FROM settlement_lines WHERE batch_id = $1", unbalanced.batch_id) == 0
    [exception] = [r for r in await exception_rows(pool) if r["kind"] == "unbalanced-batch"]
    assert exception["line_no"] is None and exception["escalation_id"] is not None
    assert "net_after_payout" in exception["detail"]["differences"]
    assert sorted(await escalation_reasons(pool)) == [
        "settlement-exception:chargeback", "settlement-exception:unbalanced-batch",
        "settlement-exception:unknown-payment"]
    effects = await pool.fetch("SELECT payload FROM outbox_messages WHERE kind = 'settlement-reconciled'")
    assert sorted(e["payload"]["state"] for e in effects) == ["reconciled", "unbalanced"]

    # Again: nothing after batch 2, nothing new.
    before = await table_counts(pool)
    third = await reconcile_adyen(pool, clock, account, day)
    assert (third.outcomes, third.unreadable, third.new_missing) == ((), (), 0)
    assert await table_counts(pool) == before

    # A wrong report password: the run stops, naming what to set.
    wrong = replace(account, report_password=Secret("not-the-password"))
    with pytest.raises(SettlementSourceError) as refused:
        await reconcile_adyen(pool, clock, wrong, day)
    message = str(refused.value)
    assert "HTTP 401" in message and REPORT_USER in message
    assert "PAYCORE_ADYEN_REPORT_PASSWORD" in message and "report_password_env" in message
    assert "not-the-password" not in message
    assert await table_counts(pool) == before


async def test_an_adyen_report_file_with_a_row_that_is_not_utf8(
        pool: asyncpg.Pool, clock: FakeClock, client: httpx.AsyncClient, sandbox_url: str,
        tmp_path: Path) -> None:
    account = await adyen_account(pool, clock, client, sandbox_url)
    day = await same_noon(client, clock)
    target = {"account": "acct_store", "date": day.isoformat(), "dialect": "adyen"}
    sale, sale_ref = await adyen_paid(client, 4999)
    sale_row = await ours(pool, clock, account, 4999, sale, sale_ref)
    hold, hold_ref = await adyen_paid(client, 3000, additionalData={"manualCapture": "true"})
    capture, capture_ref = await adyen_modify(client, hold, "captures", 2500)
    hold_row = await ours(pool, clock, account, 3000, hold, hold_ref, held=True)
    capture_row = await our_operation(pool, clock, hold_row, 2500, capture, capture_ref, kind="capture")
    refund, refund_ref = await adyen_modify(client, sale, "refunds", 1000)
    refund_row = await our_operation(pool, clock, sale_row, 1000, refund, refund_ref)
    broken = b"Sandbox,acct_store,caf\xe9\n"
    await control(client, "raw", {**target, "csv_suffix_b64": base64.b64encode(broken).decode()})
    await close(client, day, dialect="adyen")

    report = await client.get(REPORT.format(1), auth=(REPORT_USER, "report-password-acct_store"))
    assert report.status_code == 200, report.text
    assert report.content.endswith(broken)
    path = tmp_path / "settlement_detail_report_batch_1.csv"
    path.write_bytes(report.content)
    broken_line = report.content.count(b"\n") - 1  # data rows are numbered from 1, after the header

    batch, lines = await read_report_file("adyen", path, account.provider_account)
    assert (batch.provider_batch_id, batch.source, batch.batch_date, batch.currency) == (
        "1", "file", day, "EUR")
    outcome = await reconcile_batch(pool, batch, lines, now=clock.now(), reminder_interval=REMIND)
    # Settled x2, Refunded, MerchantPayout read; the broken row is the only exception
    assert (outcome.result, outcome.line_count, outcome.matched_count, outcome.bad_line_count,
            outcome.exception_count) == ("recorded", 4, 3, 1, 1)
    matched = {(r["attempt_id"], r["operation_id"]) for r in await pool.fetch(
        "SELECT attempt_id, operation_id FROM settlement_lines WHERE outcome = 'matched'")}
    assert matched == {(sale_row["attempt_id"], None), (hold_row["attempt_id"], capture_row["operation_id"]),
                       (sale_row["attempt_id"], refund_row["operation_id"])}
    [bad] = await exception_rows(pool)
    assert (bad["kind"], bad["line_no"], bad["detail"]["line_no"]) == (
        "malformed-line", broken_line, broken_line)
    assert "UTF-8" in bad["detail"]["reason"] and bad["escalation_id"] is not None
    assert await escalation_reasons(pool) == ["settlement-exception:malformed-line"]


# -- Settings ---------------------------------------------------------------------------------
# How the report user's settings load and are refused is in test_adyen_report_settings.py; here, that
# a report user loaded from the accounts file reads the sandbox's reports.


def accounts_file(tmp_path: Path, entries: list[dict[str, Any]]) -> dict[str, str]:
    path = tmp_path / "accounts.json"
    path.write_bytes(orjson.dumps(entries))
    return {"PAYCORE_ACCOUNTS_FILE": str(path)}


ADYEN_ENTRY = {"provider": "adyen", "account": "acct_store", "environment": "test", "api_key_env": "SHOP_KEY",
               "return_url": "https://shop.example/return"}


async def test_an_adyen_report_user_from_the_accounts_file_reads_the_sandbox(
        tmp_path: Path, client: httpx.AsyncClient, sandbox_url: str) -> None:
    env = {"PAYCORE_DEFAULT_PROVIDER": "adyen", "SHOP_KEY": STORE_TEST_KEY,
           "SHOP_REPORTS": "report-password-acct_store", **accounts_file(tmp_path, [
               {**ADYEN_ENTRY, "report_username": REPORT_USER, "report_password_env": "SHOP_REPORTS",
                "reports_base_url": sandbox_url}])}
    [account] = load_settings(env).accounts
    assert (account.provider_account, account.report_username, account.reports_base_url) == (
        "adyen:acct_store:test", REPORT_USER, sandbox_url)
    # the loaded account reads the sandbox's reports: a closed batch is found by HEAD
    day = await next_noon(client)
    await adyen_paid(client, 1500)
    await close(client, day, dialect="adyen")
    [batch] = await settlement_source(account).batches(account.provider_account, day, day)
    assert (batch.provider_batch_id, batch.batch_date, batch.status) == ("1", day, "closed")


async def test_a_stripe_day_read_while_open_then_again_once_it_has_ended(
        pool: asyncpg.Pool, clock: FakeClock, client: httpx.AsyncClient, sandbox_url: str) -> None:
    account = await stripe_account(pool, clock, client, sandbox_url)
    day = await same_noon(client, clock)

    async def run() -> AccountRun:
        source = settlement_source(account, clock=clock)
        return await reconcile_account(pool, source, account.provider_account, day, day, now=clock.now(),
                                       grace=GRACE, reminder_interval=REMIND)

    sale, sale_ref = await intent(client, 4999)
    sale_row = await ours(pool, clock, account, 4999, sale, sale_ref)
    stranger, _ = await intent(client, 1234)  # never recorded here
    unpaid, unpaid_ref = await intent(client, 1500)
    await ours(pool, clock, account, 1500, unpaid, unpaid_ref)
    await control(client, "lines", {"account": "acct_store", "date": day.isoformat(), "dialect": "stripe",
                                    "lines": [{"suppress": unpaid}]})

    # Noon: the day's batch is open; what is read is recorded, nothing is missing yet.
    first = await run()
    assert [(o.result, o.line_count, o.matched_count, o.new_exceptions) for o in first.outcomes] == [
        ("recorded", 2, 1, 1)]
    assert first.new_missing == 0
    assert await pool.fetchval("SELECT provider_status FROM settlement_batches") == "open"

    # Unchanged while open: nothing written.
    before = await table_counts(pool)
    assert [o.result for o in (await run()).outcomes] == ["unchanged"]
    assert await table_counts(pool) == before

    # A refund later that day: the open batch is read whole again and replaced; the unknown
    # charge (keyed by its balance transaction, now on another line) is not raised again.
    refund, refund_ref = await stripe_refund(client, sale, 1000)
    refund_row = await our_operation(pool, clock, sale_row, 1000, refund, refund_ref)
    clock.current += dt.timedelta(hours=1)
    second = await run()
    assert [(o.result, o.line_count, o.matched_count, o.new_exceptions) for o in second.outcomes] == [
        ("recorded", 3, 2, 0)]
    assert await pool.fetchval("SELECT count(*) FROM settlement_lines") == 3
    assert await pool.fetchval(
        "SELECT operation_id FROM settlement_lines WHERE kind = 'refund'") == refund_row["operation_id"]

    # After the day and the grace: read once more, closed; the suppressed payment is missing.
    clock.current = dt.datetime.combine(day + dt.timedelta(days=4), dt.time(12), dt.UTC)
    third = await run()
    assert [(o.result, o.matched_count) for o in third.outcomes] == [("recorded", 2)]
    assert third.new_missing == 1
    batch = await pool.fetchrow("SELECT provider_status, line_count, exception_count FROM settlement_batches")
    assert tuple(batch) == ("closed", 3, 1)
    # The exception found on the first read still names its line, though the line moved down.
    found = await exception_rows(pool)
    assert sorted((r["kind"], r["provider_payment_id"], r["record_type"]) for r in found) == [
        ("missing-payment", None, None), ("unknown-payment", stranger, "charge")]
    unknown = next(r for r in found if r["kind"] == "unknown-payment")
    assert unknown["line_no"] == unknown["detail"]["line_no"] == 2  # the refund came in above it
    assert sorted(await escalation_reasons(pool)) == [
        "settlement-exception:missing-payment", "settlement-exception:unknown-payment"]
    # One record per open content read, and one for the closing read even with the same lines:
    # accounting's last record of the batch says it is closed.
    effects = await pool.fetch(
        "SELECT payload FROM outbox_messages WHERE kind = 'settlement-reconciled' ORDER BY message_id")
    assert [(e["payload"]["provider_status"], e["payload"]["line_count"]) for e in effects] == [
        ("open", 2), ("open", 3), ("closed", 3)]

    # Closed: never read again.
    before = await table_counts(pool)
    assert [o.result for o in (await run()).outcomes] == ["unchanged"]
    assert await table_counts(pool) == before
