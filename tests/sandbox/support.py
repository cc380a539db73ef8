"""Helpers for talking to the sandbox over HTTP in tests."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx

VERSION = "2026-11-01"
STORE_TEST_KEY = "sk_test_acct_store_local"
STORE_LIVE_KEY = "sk_live_acct_store_local"
OTHER_TEST_KEY = "sk_test_acct_other_local"

T = TypeVar("T")


def auth(account: str = "acct_store", api_key: str = STORE_TEST_KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "Cardco-Account": account,
            "Cardco-Version": VERSION}


def new_key() -> str:
    return str(uuid.uuid4())


def new_reference() -> str:
    return "ORD-" + uuid.uuid4().hex[:10]


def payment_body(reference: str | None = None, payment_method: str = "tok_visa",
                 amount: int = 4999, currency: str = "EUR",
                 capture: str | None = None) -> dict[str, Any]:
    body = {"amount": amount, "currency": currency, "payment_method": payment_method,
            "reference": reference or new_reference(), "description": "order",
            "return_url": "https://shop.example/return"}
    return body if capture is None else {**body, "capture": capture}


async def create(client: httpx.AsyncClient, body: Any, *, key: str | None = None,
                 account: str = "acct_store", api_key: str = STORE_TEST_KEY,
                 raw_key_header: str | None = None) -> httpx.Response:
    headers = auth(account, api_key)
    headers["Idempotency-Key"] = raw_key_header or f'"{key or new_key()}"'
    return await client.post("/v1/payments", json=body, headers=headers)


async def post(client: httpx.AsyncClient, path: str, body: Any, *, key: str | None = None,
               account: str = "acct_store", api_key: str = STORE_TEST_KEY) -> httpx.Response:
    """A ``POST /v1/…`` with an Idempotency-Key (a fresh one unless ``key``)."""
    headers = {**auth(account, api_key), "Idempotency-Key": f'"{key or new_key()}"'}
    return await client.post(path, json=body, headers=headers)


async def paid(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    """A new payment (``payment_body(**body)``), which must be created."""
    response = await create(client, payment_body(**body))
    assert response.status_code in (201, 402), response.text
    payment: dict[str, Any] = response.json()
    return payment


async def get_json(client: httpx.AsyncClient, path: str, **params: str) -> Any:
    """A ``GET /v1/…`` answered 200: its body."""
    response = await client.get(path, params=params, headers=auth())
    assert response.status_code == 200, response.text
    return response.json()


async def ledger(client: httpx.AsyncClient, **filters: str) -> list[dict[str, Any]]:
    response = await client.get("/_sandbox/payments", params=filters)
    assert response.status_code == 200
    data: list[dict[str, Any]] = response.json()["data"]
    return data


async def captured(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = (await client.get("/_sandbox/requests")).json()["data"]
    return data


async def events(client: httpx.AsyncClient, payment_id: str) -> list[dict[str, Any]]:
    response = await client.get("/_sandbox/events", params={"payment": payment_id})
    data: list[dict[str, Any]] = response.json()["data"]
    return data


async def add_faults(client: httpx.AsyncClient, *rules: dict[str, Any]) -> None:
    response = await client.post("/_sandbox/faults", json={"rules": list(rules)})
    assert response.status_code == 200, response.text


async def advance(client: httpx.AsyncClient, seconds: float) -> None:
    response = await client.post("/_sandbox/clock", json={"advance_seconds": seconds})
    assert response.status_code == 200, response.text


async def eventually(probe: Callable[[], Awaitable[T | None]], *, within_s: float = 5.0,
                     what: str = "condition") -> T:
    """Poll ``probe`` until it returns something truthy, or fail at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        value = await probe()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {within_s}s waiting for {what}")
        await asyncio.sleep(0.01)


def error_of(response: httpx.Response) -> dict[str, Any]:
    body: dict[str, Any] = response.json()
    assert set(body) == {"error"}, body
    error: dict[str, Any] = body["error"]
    assert {"type", "code", "message"} <= set(error), error
    return error


# -- after the payment: what the refund and capture tests share --------------------------------

# A refund's and a capture's fields are the same (the contract's two objects).
MOVEMENT_FIELDS = {"id", "object", "payment", "account", "livemode", "amount", "currency",
                   "reference", "status", "failure_reason", "created"}


async def payment_of(client: httpx.AsyncClient, payment_id: str) -> dict[str, Any]:
    payment: dict[str, Any] = await get_json(client, f"/v1/payments/{payment_id}")
    return payment


def refused(response: httpx.Response, code: str) -> None:
    """A 400 ``invalid_request`` with this code: nothing done."""
    assert response.status_code == 400, response.text
    error = error_of(response)
    assert (error["type"], error["code"]) == ("invalid_request", code)


def types_of(seen: list[dict[str, Any]], object_id: str) -> list[tuple[str, int]]:
    """The (type, sequence) of the events about one object, in delivery order."""
    return [(e["type"], e["sequence"]) for e in seen if e["data"]["object"]["id"] == object_id]
