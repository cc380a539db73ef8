"""Cardco's settlements: the book derived from payments, captures and refunds, its controls
(close, planted lines, suppress, duplicate, totals, raw bytes, reset) and the /v1 wire."""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

import httpx

from tests.sandbox.settlement_support import close, control, fee, next_noon, rows_of
from tests.sandbox.support import (
    OTHER_TEST_KEY,
    add_faults,
    advance,
    auth,
    error_of,
    paid,
    post,
)

CSV_COLUMNS = ["line_id", "type", "payment", "refund", "capture", "reference", "created",
               "currency", "gross", "fee", "net"]


async def _settlements(client: httpx.AsyncClient, start: dt.date, end: dt.date,
                       headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    response = await client.get("/v1/settlements", headers=headers or auth(),
                                params={"from": start.isoformat(), "to": end.isoformat()})
    assert response.status_code == 200, response.text
    data: list[dict[str, Any]] = response.json()["data"]
    return data


async def _batch(client: httpx.AsyncClient, day: dt.date) -> dict[str, Any]:
    [batch] = await _settlements(client, day, day)
    return batch


async def _lines(client: httpx.AsyncClient, batch_id: str) -> list[dict[str, str]]:
    response = await client.get(f"/v1/settlements/{batch_id}/lines", headers=auth())
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    assert response.text.splitlines()[0].split(",") == CSV_COLUMNS
    return rows_of(response.text)


async def _refund(client: httpx.AsyncClient, payment_id: str, amount: int) -> dict[str, Any]:
    response = await post(client, "/v1/refunds", {"payment": payment_id, "amount": amount,
                                                  "reference": f"RF-{payment_id[-6:]}-{amount}"})
    assert response.status_code == 201, response.text
    refund: dict[str, Any] = response.json()
    return refund


async def test_a_days_money_movements_with_signs_fees_and_sums(
        client: httpx.AsyncClient) -> None:
    day = await next_noon(client)
    sale = await paid(client, amount=4999)
    held = await paid(client, amount=3000, capture="manual")
    capture = (await post(client, f"/v1/payments/{held['id']}/captures",
                          {"amount": 2500, "reference": "CAP-1"})).json()
    refund = await _refund(client, sale["id"], 1000)
    returned = await _refund(client, sale["id"], 500)
    failed = await client.post(f"/_sandbox/refunds/{returned['id']}/fail", json={})
    assert failed.status_code == 200, failed.text
    await paid(client, payment_method="tok_decline")  # declined: no line

    batch = await _batch(client, day)
    assert batch["id"] == f"stl_{day:%Y%m%d}_acct_store"
    assert (batch["object"], batch["account"], batch["livemode"], batch["date"],
            batch["currency"], batch["status"]) == ("settlement", "acct_store", False,
                                                     day.isoformat(), "EUR", "open")
    rows = await _lines(client, batch["id"])
    assert [(r["type"], r["payment"], r["capture"], r["refund"], r["reference"], int(r["gross"]),
             int(r["fee"]), int(r["net"])) for r in rows] == [
        ("charge", sale["id"], "", "", sale["reference"], 4999, fee(4999), 4999 - fee(4999)),
        ("charge", held["id"], capture["id"], "", "CAP-1", 2500, fee(2500), 2500 - fee(2500)),
        ("refund", sale["id"], "", refund["id"], refund["reference"], -1000, 0, -1000),
        ("refund", sale["id"], "", returned["id"], returned["reference"], -500, 0, -500),
        ("refund_reversal", sale["id"], "", returned["id"], returned["reference"], 500, 0, 500),
    ]
    assert all(r["currency"] == "EUR" and r["created"].startswith(f"{day.isoformat()}T12:")
               and r["created"].endswith("Z") for r in rows)
    assert len({r["line_id"] for r in rows}) == len(rows) == batch["lines"]
    assert batch["gross"] == sum(int(r["gross"]) for r in rows)
    assert batch["fees"] == sum(int(r["fee"]) for r in rows)
    assert batch["net"] == sum(int(r["net"]) for r in rows) == batch["gross"] - batch["fees"]
    assert await _lines(client, batch["id"]) == rows  # stable between reads


async def test_close_freezes_and_later_money_goes_to_the_next_batch(
        client: httpx.AsyncClient) -> None:
    day = await next_noon(client)
    first = await paid(client, amount=1000)
    [closed] = await close(client, day, account="acct_store", dialect="cardco")
    assert (closed["status"], closed["lines"]) == ("paid", 1)
    before = await _lines(client, closed["id"])
    late = await paid(client, amount=2000)  # same day, but the day's batch is closed
    await _refund(client, first["id"], 300)
    assert await _lines(client, closed["id"]) == before
    assert (await _batch(client, day))["status"] == "paid"
    following = await _batch(client, day + dt.timedelta(days=1))
    rows = await _lines(client, following["id"])
    assert [(r["type"], r["payment"]) for r in rows] == [("charge", late["id"]),
                                                          ("refund", first["id"])]
    assert rows[0]["created"].startswith(day.isoformat())  # its own time, the next batch
    refused = await control(client, "lines", {"account": "acct_store", "date": day.isoformat(),
                                               "lines": [{"suppress": first["id"]}]}, 409)
    assert refused["error"]["code"] == "settlement_closed"


async def test_planted_lines_suppress_duplicate_totals_and_raw(
        client: httpx.AsyncClient) -> None:
    day = await next_noon(client)
    kept = await paid(client, amount=1000)
    missing = await paid(client, amount=2000)
    target = {"account": "acct_store", "date": day.isoformat()}
    await control(client, "lines", {**target, "lines": [
        {"suppress": missing["id"]},
        {"duplicate": kept["id"]},
        {"type": "charge", "payment": "pay_unknown", "reference": "X-1", "currency": "USD",
         "gross": 777, "fee": 7},
        {"type": "fee", "currency": "EUR", "gross": 0, "fee": 150},
    ]})
    batch = await _batch(client, day)
    rows = await _lines(client, batch["id"])
    assert [(r["type"], r["payment"], int(r["gross"]), int(r["fee"]), int(r["net"]))
            for r in rows] == [
        ("charge", kept["id"], 1000, fee(1000), 1000 - fee(1000)),
        ("charge", kept["id"], 1000, fee(1000), 1000 - fee(1000)),
        ("charge", "pay_unknown", 777, 7, 770),
        ("fee", "", 0, 150, -150),
    ]
    assert rows[1]["line_id"] == rows[0]["line_id"] + "_dup1"
    assert rows[2]["currency"] == "USD"
    assert batch["net"] == sum(int(r["net"]) for r in rows)

    await control(client, "totals", {**target, "gross": 1, "net": 2})
    batch = await _batch(client, day)
    assert (batch["gross"], batch["fees"], batch["net"]) == (1, sum(int(r["fee"]) for r in rows), 2)

    await control(client, "raw", {**target, "csv_suffix": "ln_bad,mystery,,,,,,EUR,1,0,1\n"})
    await control(client, "raw", {**target, "csv_suffix_b64": base64.b64encode(b"\xff\xfe,\n").decode()})
    response = await client.get(f"/v1/settlements/{batch['id']}/lines", headers=auth())
    assert response.content.endswith(b"ln_bad,mystery,,,,,,EUR,1,0,1\n\xff\xfe,\n")

    for bad in ({"type": "gift", "currency": "EUR", "gross": 1}, {"type": "charge", "gross": "1"},
                {"suppress": "pay_nope"}, {"duplicate": kept["id"], "type": "charge"}):
        error = (await control(client, "lines", {**target, "lines": [bad]}, 422))["error"]
        assert error["param"].startswith("lines[0]")
    assert (await control(client, "lines", {**target, "date": "03/12/2026", "lines": []},
                          422))["error"]["param"] == "date"


async def test_range_filter_and_only_days_with_lines(client: httpx.AsyncClient) -> None:
    day = await next_noon(client)
    await paid(client, amount=1000)
    await advance(client, 2 * 86400)
    await paid(client, amount=2000)
    later = day + dt.timedelta(days=2)
    assert [b["date"] for b in await _settlements(client, day, later)] == [
        day.isoformat(), later.isoformat()]
    assert [b["date"] for b in await _settlements(client, later, later)] == [later.isoformat()]
    assert await _settlements(client, day + dt.timedelta(days=1),
                              day + dt.timedelta(days=1)) == []
    other = {"Authorization": f"Bearer {OTHER_TEST_KEY}", "Cardco-Account": "acct_other",
             "Cardco-Version": auth()["Cardco-Version"]}
    assert await _settlements(client, day, later, headers=other) == []


async def test_bad_ranges_unknown_batches_and_auth(client: httpx.AsyncClient) -> None:
    day = await next_noon(client)
    await paid(client, amount=1000)
    batch_id = f"stl_{day:%Y%m%d}_acct_store"
    for params, param in (({"to": "2026-12-01"}, "from"), ({"from": "2026-12-01"}, "to"),
                          ({"from": "2026-12-1", "to": "2026-12-07"}, "from"),
                          ({"from": "2026-12-08", "to": "2026-12-07"}, "from")):
        response = await client.get("/v1/settlements", params=params, headers=auth())
        assert response.status_code == 400
        assert (error_of(response)["code"], error_of(response)["param"]) == (
            "parameter_invalid", param)
    missing = await client.get("/v1/settlements/stl_20000101_acct_store/lines", headers=auth())
    assert missing.status_code == 404 and error_of(missing)["code"] == "resource_missing"
    other = {"Authorization": f"Bearer {OTHER_TEST_KEY}", "Cardco-Account": "acct_other",
             "Cardco-Version": auth()["Cardco-Version"]}
    assert (await client.get(f"/v1/settlements/{batch_id}/lines", headers=other)).status_code == 404
    no_key = await client.get(f"/v1/settlements/{batch_id}/lines",
                              headers={**auth(), "Authorization": "Bearer sk_test_nope"})
    assert no_key.status_code == 401
    wrong_account = await client.get("/v1/settlements", params={"from": "2026-12-01",
                                                                "to": "2026-12-07"},
                                     headers={**auth(), "Cardco-Account": "acct_other"})
    assert wrong_account.status_code == 403


async def test_faults_match_a_settlement_request_by_its_path(client: httpx.AsyncClient) -> None:
    day = await next_noon(client)
    await paid(client, amount=1000)
    batch_id = f"stl_{day:%Y%m%d}_acct_store"
    path = f"/v1/settlements/{batch_id}/lines"
    await add_faults(client, {"fault": "rate_limit", "match": {"reference": path}, "times": 1},
                     {"fault": "malformed_body", "match": {"reference": path}, "times": 1})
    limited = await client.get(path, headers=auth())
    assert limited.status_code == 429 and limited.headers["retry-after"] == "1"
    mangled = await client.get(path, headers=auth())
    assert mangled.status_code == 200
    whole = await client.get(path, headers=auth())
    assert whole.text.startswith(mangled.text) and len(mangled.text) < len(whole.text)
    assert len(await _settlements(client, day, day)) == 1  # the list's path: untouched


async def test_reset_forgets_the_book(client: httpx.AsyncClient) -> None:
    day = await next_noon(client)
    await paid(client, amount=1000)
    await close(client, day)
    assert (await client.post("/_sandbox/reset")).status_code == 200
    assert (await client.get("/_sandbox/settlements")).json() == {"data": []}
    assert await _settlements(client, day, day) == []


async def test_a_payment_that_succeeds_later_settles_on_that_day(
        client: httpx.AsyncClient) -> None:
    day = await next_noon(client)
    pending = await paid(client, payment_method="tok_async", amount=1200)
    assert pending["status"] == "processing"
    await advance(client, 86400)  # it succeeds on the next day, at the next read
    [batch] = await _settlements(client, day, day + dt.timedelta(days=1))
    assert batch["date"] == (day + dt.timedelta(days=1)).isoformat()
    [row] = await _lines(client, batch["id"])
    assert (row["payment"], row["gross"]) == (pending["id"], "1200")
