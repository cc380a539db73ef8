"""Idempotency: replays, in-flight 409, key reuse, what is and is not stored, retention."""

from __future__ import annotations

import asyncio
import json

import httpx

from tests.sandbox.support import (
    OTHER_TEST_KEY,
    STORE_LIVE_KEY,
    add_faults,
    advance,
    auth,
    create,
    error_of,
    eventually,
    ledger,
    new_key,
    payment_body,
)


async def test_replay_is_identical_and_marked(client: httpx.AsyncClient) -> None:
    key, body = new_key(), payment_body()
    first = await create(client, body, key=key)
    second = await create(client, body, key=key)
    assert first.status_code == second.status_code == 201
    assert "Idempotent-Replayed" not in first.headers
    assert second.headers["Idempotent-Replayed"] == "true"
    assert second.content == first.content
    assert len(await ledger(client)) == 1


async def test_declines_are_stored_and_replayed(client: httpx.AsyncClient) -> None:
    key, body = new_key(), payment_body(payment_method="tok_decline")
    first = await create(client, body, key=key)
    second = await create(client, body, key=key)
    assert first.status_code == second.status_code == 402
    assert second.headers["Idempotent-Replayed"] == "true"
    assert second.content == first.content


async def test_fingerprint_ignores_key_order_and_whitespace(client: httpx.AsyncClient) -> None:
    key, body = new_key(), payment_body()
    first = await create(client, body, key=key)
    reordered = json.dumps(dict(reversed(body.items())), indent=2).encode()
    response = await client.post("/v1/payments", content=reordered, headers={
        **auth(), "Idempotency-Key": key, "Content-Type": "application/json"})
    assert response.status_code == 201
    assert response.headers["Idempotent-Replayed"] == "true"
    assert response.content == first.content


async def test_concurrent_same_key_gets_409(client: httpx.AsyncClient) -> None:
    key, body = new_key(), payment_body()
    await add_faults(client, {"fault": "delay", "match": {"reference": body["reference"]},
                              "times": 1, "delay_ms": 1500})
    first = asyncio.create_task(create(client, body, key=key))
    # The payment exists once the first request executed; its key is held
    # in progress until the delayed answer goes out.
    [entry] = await _wait_for_payments(client, 1)
    assert entry["idempotency_key"] == key
    second = await create(client, body, key=key)
    assert second.status_code == 409
    error = error_of(second)
    assert (error["type"], error["code"]) == ("idempotency_error", "request_in_progress")
    assert int(second.headers["Retry-After"]) >= 1
    done = await first
    assert done.status_code == 201
    third = await create(client, body, key=key)
    assert third.status_code == 201
    assert third.headers["Idempotent-Replayed"] == "true"
    assert third.content == done.content
    assert len(await ledger(client)) == 1


async def _wait_for_payments(client: httpx.AsyncClient, count: int) -> list[dict[str, object]]:
    async def probe() -> list[dict[str, object]]:
        rows = await ledger(client)
        return rows if len(rows) >= count else []

    return await eventually(probe, what=f"{count} payment(s) in the ledger")


async def test_same_key_different_body_is_422(client: httpx.AsyncClient) -> None:
    key, body = new_key(), payment_body()
    assert (await create(client, body, key=key)).status_code == 201
    reused = await create(client, {**body, "amount": 5000}, key=key)
    assert reused.status_code == 422
    error = error_of(reused)
    assert (error["type"], error["code"]) == ("idempotency_error", "key_reused")
    assert len(await ledger(client)) == 1


async def test_500_after_processing_is_stored_and_replayed(client: httpx.AsyncClient) -> None:
    key, body = new_key(), payment_body()
    await add_faults(client, {"fault": "error_500_after", "match": {"any": True}, "times": 1})
    first = await create(client, body, key=key)
    assert first.status_code == 500
    error = error_of(first)
    assert (error["type"], error["code"]) == ("api_error", "internal")
    [entry] = await ledger(client)  # the payment was processed
    assert entry["status"] == "succeeded"
    again = await create(client, body, key=key)
    assert again.status_code == 500
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.content == first.content
    assert len(await ledger(client)) == 1


async def test_503_and_429_are_not_stored(client: httpx.AsyncClient) -> None:
    for fault, status, code in (("not_processed_503", 503, "not_processed"),
                                ("rate_limit", 429, "rate_limited")):
        key, body = new_key(), payment_body()
        await add_faults(client, {"fault": fault, "match": {"reference": body["reference"]},
                                  "times": 1})
        rejected = await create(client, body, key=key)
        assert rejected.status_code == status
        assert error_of(rejected)["code"] == code
        if status == 429:
            assert int(rejected.headers["Retry-After"]) >= 1
        assert await ledger(client, reference=body["reference"]) == []
        retried = await create(client, body, key=key)
        assert retried.status_code == 201
        assert "Idempotent-Replayed" not in retried.headers


async def test_keys_are_scoped_per_account_and_environment(client: httpx.AsyncClient) -> None:
    key, body = new_key(), payment_body()
    ids = set()
    for account, api_key in (("acct_store", "sk_test_acct_store_local"),
                             ("acct_store", STORE_LIVE_KEY), ("acct_other", OTHER_TEST_KEY)):
        response = await create(client, body, key=key, account=account, api_key=api_key)
        assert response.status_code == 201
        assert "Idempotent-Replayed" not in response.headers
        ids.add(response.json()["id"])
    assert len(ids) == 3


async def test_key_retention_window(client: httpx.AsyncClient) -> None:
    key, body = new_key(), payment_body()
    first = await create(client, body, key=key)
    await advance(client, 86400 - 60)
    inside = await create(client, body, key=key)
    assert inside.headers["Idempotent-Replayed"] == "true"
    assert inside.json()["id"] == first.json()["id"]
    await advance(client, 60)
    after = await create(client, body, key=key)
    assert after.status_code == 201
    assert "Idempotent-Replayed" not in after.headers
    assert after.json()["id"] != first.json()["id"]
    rows = await ledger(client, idempotency_key=key)
    assert [r["id"] for r in rows] == [first.json()["id"], after.json()["id"]]
