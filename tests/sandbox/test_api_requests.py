"""Authentication, version, Idempotency-Key parsing, validation and token outcomes."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.sandbox.support import (
    OTHER_TEST_KEY,
    STORE_LIVE_KEY,
    STORE_TEST_KEY,
    VERSION,
    create,
    error_of,
    ledger,
    new_key,
    payment_body,
)


async def test_unknown_or_missing_api_key_is_401(client: httpx.AsyncClient) -> None:
    for headers in (
        {"Cardco-Account": "acct_store", "Cardco-Version": VERSION},
        {"Authorization": "Bearer sk_test_nope", "Cardco-Account": "acct_store",
         "Cardco-Version": VERSION},
        {"Authorization": STORE_TEST_KEY, "Cardco-Account": "acct_store",
         "Cardco-Version": VERSION},
    ):
        response = await client.post("/v1/payments", json=payment_body(),
                                     headers={**headers, "Idempotency-Key": new_key()})
        assert response.status_code == 401
        assert error_of(response)["type"] == "authentication_error"
        lookup = await client.get("/v1/payments/pay_x", headers=headers)
        assert lookup.status_code == 401
    assert await ledger(client) == []


async def test_key_of_another_account_is_403(client: httpx.AsyncClient) -> None:
    response = await create(client, payment_body(), account="acct_other",
                            api_key=STORE_TEST_KEY)
    assert response.status_code == 403
    assert error_of(response)["type"] == "permission_error"
    missing = await client.get("/v1/payments?reference=x", headers={
        "Authorization": f"Bearer {OTHER_TEST_KEY}", "Cardco-Version": VERSION})
    assert missing.status_code == 403
    assert await ledger(client) == []


@pytest.mark.parametrize("version", [None, "2025-01-01", ""])
async def test_missing_or_unknown_version_is_400(client: httpx.AsyncClient,
                                                 version: str | None) -> None:
    headers = {"Authorization": f"Bearer {STORE_TEST_KEY}", "Cardco-Account": "acct_store",
               "Idempotency-Key": new_key()}
    if version is not None:
        headers["Cardco-Version"] = version
    response = await client.post("/v1/payments", json=payment_body(), headers=headers)
    assert response.status_code == 400
    assert error_of(response)["code"] == "version_invalid"
    assert await ledger(client) == []


async def test_missing_idempotency_key_is_400(client: httpx.AsyncClient) -> None:
    headers = {"Authorization": f"Bearer {STORE_TEST_KEY}", "Cardco-Account": "acct_store",
               "Cardco-Version": VERSION}
    response = await client.post("/v1/payments", json=payment_body(), headers=headers)
    assert response.status_code == 400
    error = error_of(response)
    assert (error["type"], error["code"]) == ("invalid_request", "missing_idempotency_key")
    assert await ledger(client) == []


@pytest.mark.parametrize("header", ['"' + "k" * 256 + '"', "k" * 256, '"unterminated',
                                    '"bad\\escape"', "has space", '""'])
async def test_malformed_idempotency_key_is_rejected(client: httpx.AsyncClient,
                                                     header: str) -> None:
    response = await create(client, payment_body(), raw_key_header=header)
    assert response.status_code == 400
    assert error_of(response)["param"] == "Idempotency-Key"
    assert await ledger(client) == []


async def test_quoted_and_bare_keys_are_the_same_key(client: httpx.AsyncClient) -> None:
    body = payment_body()
    first = await create(client, body, raw_key_header='"abc-123"')
    second = await create(client, body, raw_key_header="abc-123")
    assert first.status_code == second.status_code == 201
    assert second.headers["Idempotent-Replayed"] == "true"
    assert second.json() == first.json()
    escaped = await create(client, payment_body(), raw_key_header='"a\\"b\\\\c"')
    assert escaped.status_code == 201
    assert (await ledger(client))[-1]["idempotency_key"] == 'a"b\\c'
    longest = await create(client, payment_body(), raw_key_header="k" * 255)
    assert longest.status_code == 201


@pytest.mark.parametrize(("patch", "param"), [
    ({"amount": True}, "amount"),
    ({"amount": 49.99}, "amount"),
    ({"amount": 0}, "amount"),
    ({"amount": -5}, "amount"),
    ({"amount": "4999"}, "amount"),
    ({"currency": "eur"}, "currency"),
    ({"currency": "EURO"}, "currency"),
    ({"payment_method": 7}, "payment_method"),
    ({"reference": ""}, "reference"),
    ({"reference": "R" * 65}, "reference"),
    ({"reference": None}, "reference"),
    ({"description": 5}, "description"),
    ({"return_url": ["x"]}, "return_url"),
    ({"customer": "cus_1"}, "customer"),
    ({"payment_method": "tok_expired"}, "payment_method"),
    ({"payment_method": "tok_whatever"}, "payment_method"),
    ({"payment_method": "pm_card_123"}, "payment_method"),
])
async def test_invalid_body_is_400_and_key_not_stored(client: httpx.AsyncClient,
                                                      patch: dict[str, Any],
                                                      param: str) -> None:
    key = new_key()
    body = {**payment_body(), **patch}
    response = await create(client, body, key=key)
    assert response.status_code == 400
    error = error_of(response)
    assert (error["type"], error["code"], error["param"]) == \
        ("invalid_request", "parameter_invalid", param)
    assert await ledger(client) == []
    # The key was not stored: the same key with a valid body executes now.
    fixed = await create(client, payment_body(), key=key)
    assert fixed.status_code == 201
    assert "Idempotent-Replayed" not in fixed.headers
    assert len(await ledger(client)) == 1


async def test_non_json_body_is_400(client: httpx.AsyncClient) -> None:
    headers = {"Authorization": f"Bearer {STORE_TEST_KEY}", "Cardco-Account": "acct_store",
               "Cardco-Version": VERSION, "Idempotency-Key": new_key(),
               "Content-Type": "application/json"}
    for content in (b"{not json", b"[1, 2]", b""):
        response = await client.post("/v1/payments", content=content, headers=headers)
        assert response.status_code == 400
        assert error_of(response)["code"] == "parameter_invalid"
    assert await ledger(client) == []


@pytest.mark.parametrize(("token", "status", "state", "decline_code"), [
    ("tok_visa", 201, "succeeded", None),
    ("tok_decline", 402, "declined", "card_declined"),
    ("tok_insufficient_funds", 402, "declined", "insufficient_funds"),
    ("tok_3ds", 201, "requires_action", None),
    ("tok_async", 201, "processing", None),
])
async def test_token_outcomes(client: httpx.AsyncClient, token: str, status: int,
                              state: str, decline_code: str | None) -> None:
    body = payment_body(payment_method=token)
    response = await create(client, body)
    assert response.status_code == status
    payment = response.json()
    assert set(payment) == {"id", "object", "account", "livemode", "amount", "currency",
                            "reference", "status", "decline_code", "capture",
                            "amount_capturable", "amount_captured", "amount_refunded",
                            "capture_before", "next_action", "created"}
    assert payment["id"].startswith("pay_")
    assert payment["object"] == "payment"
    assert (payment["account"], payment["livemode"]) == ("acct_store", False)
    assert (payment["amount"], payment["currency"]) == (4999, "EUR")
    assert payment["reference"] == body["reference"]
    assert (payment["status"], payment["decline_code"]) == (state, decline_code)
    assert payment["amount_refunded"] == 0
    assert (payment["capture"], payment["amount_capturable"], payment["capture_before"]) == \
        ("automatic", 0, None)
    assert payment["amount_captured"] == (4999 if state == "succeeded" else 0)
    if token == "tok_3ds":
        action = payment["next_action"]
        assert action["type"] == "redirect_to_url"
        assert action["url"].startswith("https://")
        assert action["expires_at"] == payment["created"] + 900
    else:
        assert payment["next_action"] is None
    [entry] = await ledger(client)
    assert entry["id"] == payment["id"]


async def test_live_key_makes_live_payments(client: httpx.AsyncClient) -> None:
    response = await create(client, payment_body(), api_key=STORE_LIVE_KEY)
    assert response.status_code == 201
    assert response.json()["livemode"] is True
    [entry] = await ledger(client)
    assert (entry["environment"], entry["provider_account"]) == \
        ("live", "cardco:acct_store:live")


async def test_unknown_route_is_json_404(client: httpx.AsyncClient) -> None:
    response = await client.get("/v2/nothing")
    assert response.status_code == 404
    assert error_of(response)["code"] == "resource_missing"
