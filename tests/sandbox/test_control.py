"""Control plane: ledger, request capture, events, clock, reset."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.sandbox.support import (
    OTHER_TEST_KEY,
    STORE_TEST_KEY,
    VERSION,
    add_faults,
    advance,
    auth,
    captured,
    create,
    error_of,
    eventually,
    ledger,
    new_key,
    payment_body,
)


async def test_ledger_lists_every_payment(client: httpx.AsyncClient) -> None:
    key = new_key()
    body = payment_body(payment_method="tok_decline")
    declined = (await create(client, body, key=key)).json()
    other = (await create(client, payment_body(), account="acct_other",
                          api_key=OTHER_TEST_KEY)).json()
    rows = await ledger(client)
    assert [r["id"] for r in rows] == [declined["id"], other["id"]]
    first = rows[0]
    assert {k: first[k] for k in ("account", "environment", "livemode", "idempotency_key",
                                  "reference", "status", "amount", "currency", "created",
                                  "payment_method", "decline_code")} == {
        "account": "acct_store", "environment": "test", "livemode": False,
        "idempotency_key": key, "reference": body["reference"], "status": "declined",
        "amount": 4999, "currency": "EUR", "created": declined["created"],
        "payment_method": "tok_decline", "decline_code": "card_declined"}
    assert [r["id"] for r in await ledger(client, account="acct_other")] == [other["id"]]


async def test_requests_are_captured_verbatim(client: httpx.AsyncClient) -> None:
    # Odd spacing, key order and non-ASCII: the capture must be byte-identical.
    raw = ('{ "reference": "ORD-é-1",  "amount":4999,\n"currency":"EUR",'
           '"payment_method":"tok_visa"}')
    headers = {**auth(), "Idempotency-Key": '"k-1"', "Content-Type": "application/json",
               "X-Trace": "abc"}
    created = await client.post("/v1/payments", content=raw.encode(), headers=headers)
    assert created.status_code == 201
    await client.get("/v1/payments", params={"reference": "ORD-é-1"}, headers=auth())
    await client.get("/v1/payments/pay_x",
                     headers=auth("acct_store", "sk_live_acct_store_local"))
    await client.get("/_sandbox/payments")  # control requests are not captured
    first, second, third = await captured(client)
    assert (first["method"], first["path"], first["query"]) == ("POST", "/v1/payments", "")
    assert first["body"] == raw
    assert first["headers"]["authorization"] == "sk_test"
    assert first["headers"]["idempotency-key"] == '"k-1"'
    assert first["headers"]["x-trace"] == "abc"
    assert first["headers"]["cardco-version"] == VERSION
    assert (first["status"], first["fault"], first["replayed"]) == (201, None, False)
    assert (second["method"], second["path"]) == ("GET", "/v1/payments")
    assert second["query"] == "reference=ORD-%C3%A9-1"
    assert second["body"] == ""
    assert third["headers"]["authorization"] == "sk_live"
    assert third["status"] == 404
    assert [e["seq"] for e in (first, second, third)] == [1, 2, 3]
    assert first["time"] <= second["time"] <= third["time"]
    assert STORE_TEST_KEY not in str(await client.get("/_sandbox/requests"))


async def test_unauthenticated_requests_are_captured_and_redacted(
        client: httpx.AsyncClient) -> None:
    await client.get("/v1/payments/pay_x", headers={"Authorization": "Bearer hunter2"})
    [entry] = await captured(client)
    assert entry["headers"]["authorization"] == "REDACTED"
    assert entry["status"] == 401


async def test_clock_endpoint(client: httpx.AsyncClient) -> None:
    before = (await client.get("/_sandbox/clock")).json()
    await advance(client, 3600)
    after = (await client.get("/_sandbox/clock")).json()
    assert after["offset_s"] == 3600
    assert after["now"] - before["now"] >= 3600
    payment = (await create(client, payment_body())).json()
    assert payment["created"] >= int(before["now"]) + 3600
    bad = await client.post("/_sandbox/clock", json={"advance_seconds": -1})
    assert error_of(bad)["param"] == "advance_seconds"


async def test_reset_forgets_everything(client: httpx.AsyncClient) -> None:
    key, body = new_key(), payment_body(payment_method="tok_3ds")
    await create(client, body, key=key)
    await add_faults(client, {"fault": "delay", "match": {"reference": "nope"}})
    await advance(client, 60)
    reset = await client.post("/_sandbox/reset")
    assert reset.status_code == 200
    assert await ledger(client) == []
    assert await captured(client) == []
    assert (await client.get("/_sandbox/events")).json() == {"data": []}
    assert (await client.get("/_sandbox/faults")).json() == {"rules": []}
    assert (await client.get("/_sandbox/clock")).json()["offset_s"] == 0
    again = await create(client, body, key=key)  # the key was forgotten too
    assert again.status_code == 201
    assert "Idempotent-Replayed" not in again.headers


async def test_reset_releases_held_requests(client: httpx.AsyncClient) -> None:
    await add_faults(client, {"fault": "drop_request", "match": {"any": True}})
    held = asyncio.create_task(create(client, payment_body()))

    async def arrived() -> list[dict[str, Any]]:
        return await captured(client)

    await eventually(arrived, what="the held request to arrive")
    assert not held.done()
    await client.post("/_sandbox/reset")
    # The client never gets a usable answer: the connection is dropped.
    with pytest.raises(httpx.TransportError):
        await asyncio.wait_for(held, 5)
    assert await ledger(client) == []
    assert (await create(client, payment_body())).status_code == 201
