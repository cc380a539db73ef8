"""3-D Secure, async completion, refunds and the webhook events they emit."""

from __future__ import annotations

from typing import Any

import httpx
from starlette.applications import Starlette

from tests.sandbox.support import (
    advance,
    auth,
    create,
    error_of,
    events,
    eventually,
    payment_body,
)


async def _lookup(client: httpx.AsyncClient, payment_id: str) -> dict[str, Any]:
    response = await client.get(f"/v1/payments/{payment_id}", headers=auth())
    assert response.status_code == 200
    payment: dict[str, Any] = response.json()
    return payment


async def test_3ds_action_succeeds(client: httpx.AsyncClient) -> None:
    payment = (await create(client, payment_body(payment_method="tok_3ds"))).json()
    done = await client.post(f"/_sandbox/payments/{payment['id']}/action",
                             json={"result": "succeeded"})
    assert done.status_code == 200
    assert (done.json()["status"], done.json()["next_action"]) == ("succeeded", None)
    assert (await _lookup(client, payment["id"]))["status"] == "succeeded"
    seen = await events(client, payment["id"])
    assert [(e["type"], e["sequence"]) for e in seen] == [
        ("payment.requires_action", 1), ("payment.succeeded", 2)]
    again = await client.post(f"/_sandbox/payments/{payment['id']}/action",
                              json={"result": "failed"})
    assert again.status_code == 409


async def test_3ds_action_fails(client: httpx.AsyncClient) -> None:
    payment = (await create(client, payment_body(payment_method="tok_3ds"))).json()
    done = await client.post(f"/_sandbox/payments/{payment['id']}/action",
                             json={"result": "failed"})
    assert done.json()["status"] == "failed"
    bad = await client.post(f"/_sandbox/payments/{payment['id']}/action",
                            json={"result": "maybe"})
    assert error_of(bad)["param"] == "result"


async def test_3ds_expires_to_canceled(client: httpx.AsyncClient) -> None:
    payment = (await create(client, payment_body(payment_method="tok_3ds"))).json()
    await advance(client, 899)
    assert (await _lookup(client, payment["id"]))["status"] == "requires_action"
    await advance(client, 1)
    expired = await _lookup(client, payment["id"])
    assert (expired["status"], expired["next_action"]) == ("canceled", None)
    late = await client.post(f"/_sandbox/payments/{payment['id']}/action",
                             json={"result": "succeeded"})
    assert late.status_code == 409
    assert [e["type"] for e in await events(client, payment["id"])] == [
        "payment.requires_action", "payment.canceled"]


async def test_async_completes_after_delay(client: httpx.AsyncClient) -> None:
    payment = (await create(client, payment_body(payment_method="tok_async"))).json()
    assert payment["status"] == "processing"

    async def succeeded() -> bool:
        return bool((await _lookup(client, payment["id"]))["status"] == "succeeded")

    await eventually(succeeded, what="tok_async to succeed")
    seen = await events(client, payment["id"])
    assert [(e["type"], e["sequence"]) for e in seen] == [
        ("payment.processing", 1), ("payment.succeeded", 2)]


async def test_async_timer_emits_without_reads(client: httpx.AsyncClient,
                                               sandbox_app: Starlette) -> None:
    payment = (await create(client, payment_body(payment_method="tok_async"))).json()
    emitter = sandbox_app.state.sandbox.state.events

    async def emitted() -> bool:  # in-process peek: no HTTP read triggers a sweep
        return any(e.type == "payment.succeeded" for e in emitter.events(payment["id"]))

    await eventually(emitted, what="the timer to emit payment.succeeded")


async def test_async_completes_when_clock_advances(client: httpx.AsyncClient) -> None:
    payment = (await create(client, payment_body(payment_method="tok_async"))).json()
    await advance(client, 1)
    assert (await _lookup(client, payment["id"]))["status"] == "succeeded"


async def test_refund_emits_payment_refunded(client: httpx.AsyncClient) -> None:
    payment = (await create(client, payment_body(amount=1000))).json()
    partial = await client.post(f"/_sandbox/payments/{payment['id']}/refund",
                                json={"amount": 400})
    assert partial.json()["amount_refunded"] == 400
    rest = await client.post(f"/_sandbox/payments/{payment['id']}/refund")
    assert rest.status_code == 200
    assert (rest.json()["amount_refunded"], rest.json()["status"]) == (1000, "succeeded")
    too_much = await client.post(f"/_sandbox/payments/{payment['id']}/refund",
                                 json={"amount": 1})
    assert too_much.status_code == 400
    seen = await events(client, payment["id"])
    assert [(e["type"], e["sequence"]) for e in seen] == [
        ("payment.succeeded", 1), ("payment.refunded", 2), ("payment.refunded", 3)]
    last = seen[-1]
    assert last["id"].startswith("evt_")
    assert (last["account"], last["livemode"]) == ("acct_store", False)
    assert isinstance(last["created"], int)
    assert last["data"]["object"]["amount_refunded"] == 1000
    declined = (await create(client, payment_body(payment_method="tok_decline"))).json()
    refused = await client.post(f"/_sandbox/payments/{declined['id']}/refund")
    assert refused.status_code == 409
    unknown = await client.post("/_sandbox/payments/pay_nope/refund")
    assert unknown.status_code == 404


async def test_event_ids_are_unique_and_stable(client: httpx.AsyncClient) -> None:
    payment = (await create(client, payment_body(payment_method="tok_3ds"))).json()
    await client.post(f"/_sandbox/payments/{payment['id']}/action", json={"result": "succeeded"})
    first = await events(client, payment["id"])
    second = await events(client, payment["id"])
    assert first == second
    assert len({e["id"] for e in first}) == 2
    assert first[0]["data"]["object"]["status"] == "requires_action"
