"""Stripe's and Adyen's settlements end to end: payments made over the sandbox's wire, the same
payments recorded here (real PostgreSQL), and paycore's own readers -- Stripe's balance
transactions through the official SDK, Adyen's Settlement details report probed with ``HEAD`` and
downloaded with the report user's basic auth, each provider's report file -- reconciled against
the books by :func:`paycore.settlements.reconcile_account` / :func:`reconcile_batch`.

No mocks: the sandbox is a real HTTP server, its clock is moved with ``/_sandbox/clock`` and
paycore's :class:`FakeClock` is set to the same instant.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from harness.servers import serve_asgi
from paycore import accounts, orders
from paycore.account_settings import ADYEN_API_VERSION, STRIPE_API_VERSION
from paycore.clock import FakeClock
from paycore.config import ProviderAccountConfig, Secret
from paycore.providers.settlement_sources import settlement_source
from paycore.settlements import reconcile_account
from paycore_sandbox.app import create_app
from paycore_sandbox.settings import SandboxSettings
from tests.matrix.helpers import attempt_values, insert_row, operation_values
from tests.sandbox.settlement_support import control, fee, next_noon
from tests.sandbox.support import STORE_TEST_KEY, new_reference
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
    return await registered(pool, clock, ProviderAccountConfig(
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
               provider_payment_id: str, reference: str) -> asyncpg.Record:
    """The payment as recorded here: a Succeeded attempt carrying the provider's id and our reference."""
    order = await orders.create_order(pool, customer_id="cus_1", amount_minor=amount, currency="EUR",
                                      now=clock.now())
    return await insert_row(pool, "payment_attempts", attempt_values(
        order, account, clock.now(), state="Succeeded", provider_payment_id=provider_payment_id,
        provider_status="succeeded", client_reference=reference))


async def our_refund(pool: asyncpg.Pool, clock: FakeClock, payment: asyncpg.Record, amount: int,
                     provider_operation_id: str, reference: str, state: str = "Succeeded") -> asyncpg.Record:
    return await insert_row(pool, "payment_operations", operation_values(
        payment, clock.now(), kind="refund", state=state, amount_minor=amount,
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

    sale, sale_ref = await intent(client, 4999)
    sale_row = await ours(pool, clock, account, 4999, sale, sale_ref)
    refund, refund_ref = await stripe_refund(client, sale, 1000)
    refund_row = await our_refund(pool, clock, sale_row, 1000, refund, refund_ref)

    differs, differs_ref = await intent(client, 3000)
    await ours(pool, clock, account, 3100, differs, differs_ref)  # recorded here for 31.00
    twice, twice_ref = await intent(client, 2000)
    await ours(pool, clock, account, 2000, twice, twice_ref)
    returned_sale, returned_sale_ref = await intent(client, 2500)
    returned_row = await ours(pool, clock, account, 2500, returned_sale, returned_sale_ref)
    returned, returned_ref = await stripe_refund(client, returned_sale, 500)
    await our_refund(pool, clock, returned_row, 500, returned, returned_ref)
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
    # lines: 4 charges + the duplicate, 2 refunds, the refund's failure, the planted charge and reversal
    assert (outcome.line_count, outcome.bad_line_count) == (10, 0)
    assert outcome.matched_count == 5  # sale, twice (once), returned_sale, both refunds
    assert run.new_missing == 1
    found = await exception_rows(pool)
    by_kind = sorted((r["kind"], r["provider_payment_id"], r["provider_operation_id"]) for r in found)
    assert by_kind == sorted([
        ("amount-mismatch", differs, None),
        ("duplicate-line", twice, None),
        ("refund-reversed", returned_sale, returned),
        ("unknown-payment", None, None),
        ("charge-reversed", sale, None),
        ("missing-payment", None, None),  # no line: the exception names the attempt
    ])
    missing = next(r for r in found if r["kind"] == "missing-payment")
    assert missing["attempt_id"] == unpaid_row["attempt_id"]
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
        "reconciled", "closed", 5, 5)
    [effect] = await pool.fetch("SELECT payload FROM outbox_messages WHERE kind = 'settlement-reconciled'")
    assert effect["payload"]["exception_count"] == 5 and effect["payload"]["matched_count"] == 5

    # The same day again: a closed batch is not read again, nothing new is found.
    before = await table_counts(pool)
    again = await reconcile_account(pool, settlement_source(account, clock=clock), account.provider_account,
                                    day, day, now=clock.now(), grace=GRACE, reminder_interval=REMIND)
    assert [o.result for o in again.outcomes] == ["unchanged"] and again.new_missing == 0
    assert await table_counts(pool) == before
