"""The settlement book in Stripe's words (balance transactions, charges, the payout CSV) and in
Adyen's (the Settlement details report, basic auth, HEAD, numbering, zero sum)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import httpx
import orjson
import stripe

from tests.sandbox.settlement_support import close, control, fee, next_noon, rows_of
from tests.sandbox.support import STORE_TEST_KEY, advance, new_reference
from tests.sandbox.test_adyen_dialect import adyen_body, pay
from tests.sandbox.test_stripe_dialect import create_intent, intent_form, stripe_headers


async def _intent(client: httpx.AsyncClient, amount: int, **extra: str) -> dict[str, Any]:
    response = await create_intent(client, intent_form(amount=str(amount), **extra))
    assert response.status_code == 200, response.text
    intent: dict[str, Any] = response.json()
    return intent


async def _stripe_refund(client: httpx.AsyncClient, intent_id: str, amount: int) -> dict[str, Any]:
    response = await client.post("/v1/refunds", headers=stripe_headers(key=new_reference()), data={
        "payment_intent": intent_id, "amount": str(amount),
        "metadata[paycore_reference]": f"RF-{amount}"})
    assert response.status_code == 200, response.text
    refund: dict[str, Any] = response.json()
    return refund


async def _txns(client: httpx.AsyncClient, **params: str) -> dict[str, Any]:
    response = await client.get("/v1/balance_transactions", params=params,
                                headers=stripe_headers())
    assert response.status_code == 200, response.text
    listed: dict[str, Any] = response.json()
    return listed


# -- Stripe -----------------------------------------------------------------------------------

async def test_balance_transactions_of_charges_refunds_and_a_failed_refund(
        client: httpx.AsyncClient) -> None:
    day = await next_noon(client)
    sale = await _intent(client, 4999)
    refund = await _stripe_refund(client, sale["id"], 1000)
    await advance(client, 60)
    failed = await client.post(f"/_sandbox/refunds/{refund['id']}/fail", json={})
    assert failed.status_code == 200
    listed = await _txns(client)
    assert (listed["object"], listed["url"], listed["has_more"]) == (
        "list", "/v1/balance_transactions", False)
    newest, middle, oldest = listed["data"]
    assert (oldest["type"], oldest["reporting_category"], oldest["amount"], oldest["fee"],
            oldest["net"], oldest["currency"], oldest["source"]) == (
        "charge", "charge", 4999, fee(4999), 4999 - fee(4999), "eur", sale["latest_charge"])
    assert oldest["fee_details"] == [{"amount": fee(4999), "application": None, "currency": "eur",
                                      "description": "Stripe processing fees",
                                      "type": "stripe_fee"}]
    assert (middle["type"], middle["amount"], middle["fee"], middle["source"]) == (
        "refund", -1000, 0, refund["id"])
    assert (newest["type"], newest["reporting_category"], newest["amount"], newest["source"]) \
        == ("refund_failure", "refund_failure", 1000, refund["id"])
    assert all(t["id"].startswith("txn_") and t["status"] == "available"
               and t["object"] == "balance_transaction" and t["exchange_rate"] is None
               and t["available_on"] > t["created"] for t in listed["data"])
    midnight = dt.datetime.combine(day, dt.time(), dt.UTC).timestamp()
    assert [t["id"] for t in (await _txns(client, **{"created[gte]": str(int(midnight)),
                                                    "created[lt]": str(newest["created"])}))
            ["data"]] == [middle["id"], oldest["id"]]
    assert [t["id"] for t in (await _txns(client, type="refund"))["data"]] == [middle["id"]]
    charge = await client.get(f"/v1/charges/{sale['latest_charge']}", headers=stripe_headers())
    assert (charge.json()["payment_intent"], charge.json()["amount"]) == (sale["id"], 4999)


async def test_pagination_expand_and_the_official_sdk(client: httpx.AsyncClient) -> None:
    await next_noon(client)
    intents = []
    for amount in (1001, 1002, 1003):
        intents.append(await _intent(client, amount))
        await advance(client, 1)
    refund = await _stripe_refund(client, intents[0]["id"], 100)
    first = await _txns(client, limit="2")
    assert first["has_more"] and [t["amount"] for t in first["data"]] == [-100, 1003]
    second = await _txns(client, limit="2", starting_after=first["data"][-1]["id"])
    assert not second["has_more"] and [t["amount"] for t in second["data"]] == [1002, 1001]
    expanded = await _txns(client, **{"expand[]": "data.source"})
    by_type = {t["source"]["object"]: t["source"] for t in expanded["data"]}
    assert (by_type["refund"]["id"], by_type["refund"]["payment_intent"],
            by_type["refund"]["metadata"]) == (refund["id"], intents[0]["id"],
                                               {"paycore_reference": "RF-100"})
    assert by_type["charge"]["metadata"]["paycore_reference"]
    missing = await client.get("/v1/balance_transactions", params={"starting_after": "txn_x"},
                               headers=stripe_headers())
    assert missing.status_code == 400
    unknown = await client.get("/v1/balance_transactions", params={"colour": "red"},
                               headers=stripe_headers())
    assert unknown.status_code == 400

    sdk = stripe.StripeClient(STORE_TEST_KEY, base_addresses={"api": str(client.base_url)},
                              http_client=stripe.HTTPXClient(), max_network_retries=0)
    page = await sdk.v1.balance_transactions.list_async(params={
        "limit": 3, "expand": ["data.source"], "created": {"gte": 0}})
    assert page.has_more and len(page.data) == 3
    assert page.data[0].source.object == "refund"  # type: ignore[union-attr]


async def test_hand_made_lines_and_the_payout_csv(client: httpx.AsyncClient) -> None:
    day = await next_noon(client)
    sale = await _intent(client, 1234)
    refund = await _stripe_refund(client, sale["id"], 234)
    await control(client, "lines", {"account": "acct_store", "date": day.isoformat(),
                                    "dialect": "stripe", "lines": [
        {"type": "adjustment", "stripe_type": "payment_failure_refund", "payment": sale["id"],
         "currency": "EUR", "gross": -50}]})
    kinds = [(t["type"], t["reporting_category"]) for t in (await _txns(client))["data"]]
    assert ("payment_failure_refund", "charge_failure") in kinds
    missing = await client.get("/_sandbox/stripe/payout_reconciliation.csv",
                               params={"account": "acct_store", "date": day.isoformat()})
    assert missing.status_code == 404  # not closed yet
    await close(client, day, dialect="stripe")
    response = await client.get("/_sandbox/stripe/payout_reconciliation.csv",
                                params={"account": "acct_store", "date": day.isoformat()})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
    rows = rows_of(response.text)
    assert list(rows[0])[:3] == ["balance_transaction_id", "created_utc", "created"]
    charge, refunded, adjustment = rows
    assert (charge["gross"], charge["fee"], charge["net"], charge["currency"],
            charge["reporting_category"], charge["payment_intent_id"], charge["charge_id"],
            charge["payment_metadata[paycore_reference]"]) == (
        "12.34", str(Decimal(fee(1234)) / 100), str(Decimal(1234 - fee(1234)) / 100), "eur",
        "charge", sale["id"], sale["latest_charge"], sale["metadata"]["paycore_reference"])
    assert (refunded["gross"], refunded["refund_id"], refunded["source_id"],
            refunded["refund_metadata[paycore_reference]"]) == ("-2.34", refund["id"],
                                                                 refund["id"], "RF-234")
    assert adjustment["reporting_category"] == "charge_failure"
    assert len({r["automatic_payout_id"] for r in rows}) == 1
    assert rows[0]["automatic_payout_id"].startswith("po_")
    txns = (await _txns(client, payout=rows[0]["automatic_payout_id"]))["data"]
    assert {t["id"] for t in txns} == {r["balance_transaction_id"] for r in rows}


# -- Adyen ------------------------------------------------------------------------------------

REPORT = "/reports/download/MerchantAccount/acct_store/settlement_detail_report_batch_{}.csv"
REPORT_AUTH = ("report@Company.Sandbox", "report-password-acct_store")


async def _adyen_paid(client: httpx.AsyncClient, amount: int, **extra: Any) -> str:
    response = await pay(client, adyen_body(amount=amount, **extra))
    assert response.status_code == 200, response.text
    psp: str = response.json()["pspReference"]
    return psp


async def _modify(client: httpx.AsyncClient, psp: str, what: str, amount: int,
                  reference: str) -> str:
    response = await client.post(
        f"/v71/payments/{psp}/{what}", content=orjson.dumps({
            "merchantAccount": "acct_store", "reference": reference,
            "amount": {"value": amount, "currency": "EUR"}}),
        headers={"X-API-Key": STORE_TEST_KEY, "Content-Type": "application/json"})
    assert response.status_code == 201, response.text
    modification: str = response.json()["pspReference"]
    return modification


def _money(value: str) -> Decimal:
    return Decimal(value) if value else Decimal(0)


async def test_the_settlement_details_report(client: httpx.AsyncClient) -> None:
    accounts = (await client.get("/_sandbox/accounts")).json()["data"]
    creds = next(a for a in accounts if (a["account"], a["environment"]) ==
                 ("acct_store", "test"))["adyen"]
    assert (creds["report_username"], creds["report_password"]) == REPORT_AUTH
    day = await next_noon(client)
    sale = await _adyen_paid(client, 4999, reference="ORD-1")
    hold = await _adyen_paid(client, 3000, reference="ORD-2",
                             additionalData={"manualCapture": "true"})
    capture = await _modify(client, hold, "captures", 2500, "CAP-1")
    refund = await _modify(client, sale, "refunds", 1000, "RF-1")
    assert (await client.get(REPORT.format(1), auth=REPORT_AUTH)).status_code == 404
    await close(client, day, dialect="adyen")

    assert (await client.get(REPORT.format(1))).status_code == 401
    assert (await client.get(REPORT.format(1), auth=("report@Company.Sandbox", "x"))
            ).status_code == 401
    response = await client.get(REPORT.format(1), auth=REPORT_AUTH)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    closed = dt.datetime.strptime(response.headers["last-modified"], "%a, %d %b %Y %H:%M:%S GMT")
    assert closed.date() == day
    rows = rows_of(response.text)
    assert [(r["Type"], r["Psp Reference"], r["Merchant Reference"], r["Modification Reference"],
             r["Modification Merchant Reference"]) for r in rows] == [
        ("Settled", sale, "ORD-1", sale, ""),
        ("Settled", hold, "ORD-2", capture, "CAP-1"),
        ("Refunded", sale, "ORD-1", refund, "RF-1"),
        ("MerchantPayout", "", "", "", ""),
    ]
    settled = rows[0]
    assert (settled["Gross Credit (GC)"], settled["Net Credit (NC)"], settled["Commission (NC)"],
            settled["Gross Debit (GC)"], settled["Creation Date"][:10], settled["TimeZone"],
            settled["Batch Number"], settled["Gross Currency"]) == (
        "49.99", str(Decimal(4999 - fee(4999)) / 100), str(Decimal(fee(4999)) / 100), "",
        day.isoformat(), "UTC", "1", "EUR")
    assert (rows[2]["Gross Debit (GC)"], rows[2]["Net Debit (NC)"]) == ("10.00", "10.00")
    assert sum(_money(r["Net Credit (NC)"]) - _money(r["Net Debit (NC)"]) for r in rows) == 0
    assert rows[-1]["Gross Debit (GC)"] == rows[-1]["Gross Credit (GC)"] == ""

    head = await client.head(REPORT.format(1), auth=REPORT_AUTH)
    assert head.status_code == 200 and head.content == b""
    assert head.headers["last-modified"] == response.headers["last-modified"]


async def test_adyen_batches_are_numbered_in_closing_order_with_planted_rows(
        client: httpx.AsyncClient) -> None:
    day = await next_noon(client)
    await _adyen_paid(client, 1000)
    target = {"account": "acct_store", "date": day.isoformat(), "dialect": "adyen"}
    await control(client, "lines", {**target, "lines": [
        {"adyen_type": "Chargeback", "currency": "EUR", "gross": -1000, "reference": "CB-1"},
        {"type": "fee", "currency": "EUR", "gross": 0, "fee": 120}]})
    await control(client, "raw", {**target, "csv_suffix": "Sandbox,acct_store,BROKEN\n"})
    await close(client, day)  # every account and dialect: only Adyen's batch with lines counts
    await advance(client, 86400)
    await _adyen_paid(client, 2000)
    await close(client, day + dt.timedelta(days=1))
    first = await client.get(REPORT.format(1), auth=REPORT_AUTH)
    second = await client.get(REPORT.format(2), auth=REPORT_AUTH)
    assert first.status_code == second.status_code == 200
    assert first.text.endswith("Sandbox,acct_store,BROKEN\n")
    rows = rows_of(first.text)[:-1]  # the planted row last
    assert [r["Type"] for r in rows] == ["Settled", "Chargeback", "Fee", "MerchantPayout"]
    assert (rows[2]["Net Debit (NC)"], rows[2]["Gross Debit (GC)"]) == ("1.20", "")
    assert sum(_money(r["Net Credit (NC)"]) - _money(r["Net Debit (NC)"]) for r in rows) == 0
    assert [r["Batch Number"] for r in rows_of(second.text)] == ["2", "2"]
    assert (await client.get(REPORT.format(3), auth=REPORT_AUTH)).status_code == 404
    other = REPORT.replace("acct_store", "acct_other").format(1)
    assert (await client.get(other, auth=("report@Company.Sandbox",
                                          "report-password-acct_other"))).status_code == 404
