"""Authorize now, capture later: manual payments, captures, cancels, hold lapse, and the
capture lookups, idempotency, faults and webhooks (the contract's "after the payment")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.sandbox.support import (
    MOVEMENT_FIELDS,
    OTHER_TEST_KEY,
    add_faults,
    advance,
    auth,
    create,
    error_of,
    events,
    eventually,
    get_json,
    new_key,
    new_reference,
    paid,
    payment_body,
    payment_of,
    post,
    refused,
    types_of,
)
from tests.sandbox.test_webhook_delivery import Env, running

WEEK = 7 * 86400


async def _held(client: httpx.AsyncClient, amount: int = 4999, **body: Any) -> dict[str, Any]:
    payment = await paid(client, amount=amount, capture="manual", **body)
    assert payment["status"] == "requires_capture", payment
    return payment


async def _capture(client: httpx.AsyncClient, payment_id: str, amount: int,
                   reference: str | None = None, **kwargs: Any) -> httpx.Response:
    body = {"amount": amount, "reference": reference or new_reference()}
    return await post(client, f"/v1/payments/{payment_id}/captures", body, **kwargs)


async def _cancel(client: httpx.AsyncClient, payment_id: str, **kwargs: Any) -> httpx.Response:
    return await post(client, f"/v1/payments/{payment_id}/cancel",
                      {"reference": new_reference()}, **kwargs)



async def _captures(client: httpx.AsyncClient, **params: str) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = (await get_json(client, "/v1/captures", **params))["data"]
    return data




# -- the payment object --------------------------------------------------------


async def test_manual_payment_holds_the_amount(client: httpx.AsyncClient) -> None:
    response = await create(client, payment_body(capture="manual"))
    assert response.status_code == 201
    payment = response.json()
    assert payment["status"] == "requires_capture"
    assert (payment["capture"], payment["amount_capturable"], payment["amount_captured"],
            payment["amount_refunded"]) == ("manual", 4999, 0, 0)
    assert payment["capture_before"] == payment["created"] + WEEK
    assert await payment_of(client, payment["id"]) == payment
    assert types_of(await events(client, payment["id"]), payment["id"]) == [
        ("payment.requires_capture", 1)]


async def test_automatic_is_the_default_and_explicit(client: httpx.AsyncClient) -> None:
    explicit = await paid(client, capture="automatic")
    implicit = await paid(client)
    for payment in (explicit, implicit):
        assert (payment["status"], payment["capture"], payment["amount_captured"],
                payment["amount_capturable"], payment["capture_before"]) == \
            ("succeeded", "automatic", 4999, 0, None)
    bad = await create(client, payment_body(capture="later"))
    assert error_of(bad)["param"] == "capture"


async def test_a_body_without_capture_keeps_its_fingerprint(client: httpx.AsyncClient) -> None:
    # The fingerprint is of the body as sent: an old body replays as before, and naming
    # the default explicitly is another body.
    key, body = new_key(), payment_body()
    first = await create(client, body, key=key)
    again = await create(client, body, key=key)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.content == first.content
    explicit = await create(client, {**body, "capture": "automatic"}, key=key)
    assert (explicit.status_code, error_of(explicit)["code"]) == (422, "key_reused")


@pytest.mark.parametrize(("token", "status"), [
    ("tok_decline", "declined"), ("tok_3ds", "requires_action"), ("tok_async", "processing")])
async def test_manual_payment_not_yet_approved_holds_nothing(
        client: httpx.AsyncClient, token: str, status: str) -> None:
    payment = await paid(client, payment_method=token, capture="manual")
    assert (payment["status"], payment["capture"], payment["amount_capturable"],
            payment["amount_captured"], payment["capture_before"]) == (status, "manual", 0, 0,
                                                                       None)


async def test_manual_async_and_3ds_payments_are_held_once_approved(
        client: httpx.AsyncClient) -> None:
    asynchronous = await paid(client, payment_method="tok_async", capture="manual")
    three_ds = await paid(client, payment_method="tok_3ds", capture="manual")
    done = await client.post(f"/_sandbox/payments/{three_ds['id']}/action",
                             json={"result": "succeeded"})
    assert (done.json()["status"], done.json()["amount_capturable"]) == ("requires_capture", 4999)
    await advance(client, 1)
    held = await payment_of(client, asynchronous["id"])
    assert (held["status"], held["amount_capturable"]) == ("requires_capture", 4999)
    assert held["capture_before"] >= held["created"] + WEEK
    assert types_of(await events(client, asynchronous["id"]), asynchronous["id"]) == [
        ("payment.processing", 1), ("payment.requires_capture", 2)]
    assert types_of(await events(client, three_ds["id"]), three_ds["id"]) == [
        ("payment.requires_action", 1), ("payment.requires_capture", 2)]


# -- POST /v1/payments/{id}/captures ---------------------------------------------


async def test_capture_charges_the_amount_and_releases_the_rest(
        client: httpx.AsyncClient) -> None:
    payment = await _held(client)
    reference = new_reference()
    response = await _capture(client, payment["id"], 3000, reference)
    assert response.status_code == 201
    capture = response.json()
    assert set(capture) == MOVEMENT_FIELDS
    assert capture["id"].startswith("cap_")
    assert {k: capture[k] for k in MOVEMENT_FIELDS - {"id", "created"}} == {
        "object": "capture", "payment": payment["id"], "account": "acct_store",
        "livemode": False, "amount": 3000, "currency": "EUR", "reference": reference,
        "status": "succeeded", "failure_reason": None}
    assert isinstance(capture["created"], int)
    after = await payment_of(client, payment["id"])
    assert (after["status"], after["amount_captured"], after["amount_capturable"],
            after["capture_before"]) == ("succeeded", 3000, 0, None)
    seen = await events(client, payment["id"])
    assert types_of(seen, capture["id"]) == [("capture.succeeded", 1)]
    assert types_of(seen, payment["id"]) == [("payment.requires_capture", 1),
                                           ("payment.succeeded", 2)]
    assert [e["data"]["object"] for e in seen if e["type"] == "capture.succeeded"] == [capture]


async def test_capture_of_the_whole_hold(client: httpx.AsyncClient) -> None:
    payment = await _held(client)
    assert (await _capture(client, payment["id"], 4999)).status_code == 201
    assert (await payment_of(client, payment["id"]))["amount_captured"] == 4999


async def test_capture_more_than_capturable_is_refused(client: httpx.AsyncClient) -> None:
    payment = await _held(client)
    refused(await _capture(client, payment["id"], 5000), "amount_too_large")
    assert await _captures(client, payment=payment["id"]) == []
    assert await payment_of(client, payment["id"]) == payment  # nothing done


async def test_one_capture_per_payment(client: httpx.AsyncClient) -> None:
    payment = await _held(client)
    assert (await _capture(client, payment["id"], 1000)).status_code == 201
    refused(await _capture(client, payment["id"], 1000), "payment_not_capturable")
    assert len(await _captures(client, payment=payment["id"])) == 1


async def test_only_a_hold_is_capturable(client: httpx.AsyncClient) -> None:
    automatic = await paid(client)
    declined = await paid(client, payment_method="tok_decline", capture="manual")
    canceled = await _held(client)
    assert (await _cancel(client, canceled["id"])).status_code == 200
    for payment in (automatic, declined, canceled):
        refused(await _capture(client, payment["id"], 100), "payment_not_capturable")


async def test_capture_of_an_unknown_or_foreign_payment_is_404(
        client: httpx.AsyncClient) -> None:
    payment = await _held(client)
    for payment_id, account in (("pay_nope", {}),
                                (payment["id"], {"account": "acct_other",
                                                 "api_key": OTHER_TEST_KEY})):
        response = await _capture(client, payment_id, 100, **account)
        assert response.status_code == 404
        assert error_of(response)["code"] == "resource_missing"
    assert (await payment_of(client, payment["id"]))["status"] == "requires_capture"


@pytest.mark.parametrize(("body", "param"), [
    ({"reference": "C-1"}, "amount"),
    ({"amount": 0, "reference": "C-1"}, "amount"),
    ({"amount": True, "reference": "C-1"}, "amount"),
    ({"amount": 100}, "reference"),
    ({"amount": 100, "reference": ""}, "reference"),
    ({"amount": 100, "reference": "x" * 65}, "reference"),
    ({"amount": 100, "reference": "C-1", "currency": "EUR"}, "currency"),
])
async def test_invalid_capture_is_not_stored(client: httpx.AsyncClient, body: dict[str, Any],
                                             param: str) -> None:
    payment = await _held(client)
    key = new_key()
    path = f"/v1/payments/{payment['id']}/captures"
    rejected = await post(client, path, body, key=key)
    assert rejected.status_code == 400
    error = error_of(rejected)
    assert (error["code"], error["param"]) == ("parameter_invalid", param)
    fixed = await post(client, path, {"amount": 100, "reference": "x" * 64}, key=key)
    assert fixed.status_code == 201
    assert "Idempotent-Replayed" not in fixed.headers


# -- POST /v1/payments/{id}/cancel -------------------------------------------------


async def test_cancel_releases_the_hold(client: httpx.AsyncClient) -> None:
    payment = await _held(client)
    response = await _cancel(client, payment["id"])
    assert response.status_code == 200
    canceled = response.json()
    assert (canceled["id"], canceled["status"], canceled["amount_capturable"],
            canceled["amount_captured"], canceled["capture_before"]) == (
        payment["id"], "canceled", 0, 0, None)
    assert await payment_of(client, payment["id"]) == canceled
    assert types_of(await events(client, payment["id"]), payment["id"]) == [
        ("payment.requires_capture", 1), ("payment.canceled", 2)]
    refused(await _cancel(client, payment["id"]), "payment_not_cancelable")


async def test_cancel_after_capture_is_refused(client: httpx.AsyncClient) -> None:
    payment = await _held(client)
    assert (await _capture(client, payment["id"], 2000)).status_code == 201
    refused(await _cancel(client, payment["id"]), "payment_not_cancelable")
    assert (await payment_of(client, payment["id"]))["status"] == "succeeded"


async def test_only_a_hold_is_cancelable(client: httpx.AsyncClient) -> None:
    for payment in (await paid(client), await paid(client, payment_method="tok_3ds",
                                                    capture="manual")):
        refused(await _cancel(client, payment["id"]), "payment_not_cancelable")
    assert (await _cancel(client, "pay_nope")).status_code == 404


@pytest.mark.parametrize("body", [{}, {"reference": "x" * 65}, {"reference": 5}, None])
async def test_cancel_needs_a_reference(client: httpx.AsyncClient, body: Any) -> None:
    payment = await _held(client)
    response = await post(client, f"/v1/payments/{payment['id']}/cancel", body)
    assert response.status_code == 400
    assert error_of(response)["code"] == "parameter_invalid"
    assert (await payment_of(client, payment["id"]))["status"] == "requires_capture"


# -- the hold lapses ----------------------------------------------------------------


async def test_hold_lapses_by_the_sandbox_clock(client: httpx.AsyncClient) -> None:
    payment = await _held(client)
    await advance(client, WEEK - 60)  # a margin: `created` is the creation time rounded down
    assert (await payment_of(client, payment["id"]))["status"] == "requires_capture"
    await advance(client, 60)
    lapsed = await payment_of(client, payment["id"])
    assert (lapsed["status"], lapsed["amount_capturable"], lapsed["capture_before"]) == (
        "canceled", 0, None)
    assert types_of(await events(client, payment["id"]), payment["id"]) == [
        ("payment.requires_capture", 1), ("payment.canceled", 2)]
    refused(await _capture(client, payment["id"], 100), "payment_not_capturable")
    refused(await _cancel(client, payment["id"]), "payment_not_cancelable")


# -- pending captures (the sandbox's amount rule) -------------------------------------


async def test_pending_capture_succeeds_later(client: httpx.AsyncClient) -> None:
    payment = await _held(client)
    response = await _capture(client, payment["id"], 2091)
    assert response.status_code == 201
    capture = response.json()
    assert capture["status"] == "pending"
    during = await payment_of(client, payment["id"])
    assert (during["status"], during["amount_capturable"]) == ("requires_capture", 0)
    # The hold is taken by the pending capture: no second capture, no cancel.
    refused(await _capture(client, payment["id"], 100), "payment_not_capturable")
    refused(await _cancel(client, payment["id"]), "payment_not_cancelable")

    async def settled() -> bool:
        [found] = await _captures(client, payment=payment["id"])
        return bool(found["status"] == "succeeded")

    await eventually(settled, what="the pending capture to succeed")
    after = await payment_of(client, payment["id"])
    assert (after["status"], after["amount_captured"]) == ("succeeded", 2091)
    seen = await events(client, payment["id"])
    assert types_of(seen, capture["id"]) == [("capture.pending", 1), ("capture.succeeded", 2)]
    assert types_of(seen, payment["id"])[-1] == ("payment.succeeded", 2)


async def test_failed_capture_leaves_the_hold(client: httpx.AsyncClient) -> None:
    payment = await _held(client)
    capture = (await _capture(client, payment["id"], 2092)).json()
    assert capture["status"] == "pending"
    await advance(client, 1)
    [failed] = await _captures(client, payment=payment["id"])
    assert (failed["status"], failed["failure_reason"]) == ("failed", "declined")
    held = await payment_of(client, payment["id"])
    assert held == payment  # the hold is as it was
    assert types_of(await events(client, payment["id"]), capture["id"]) == [
        ("capture.pending", 1), ("capture.failed", 2)]
    # A failed capture is not the payment's capture: it can still be captured.
    assert (await _capture(client, payment["id"], 2000)).json()["status"] == "succeeded"


async def test_capture_settled_by_the_control(client: httpx.AsyncClient) -> None:
    first, second = await _held(client), await _held(client)
    one = (await _capture(client, first["id"], 1093)).json()
    two = (await _capture(client, second["id"], 1093)).json()
    await advance(client, 3600)
    assert [c["status"] for c in await _captures(client, payment=first["id"])] == ["pending"]
    done = await client.post(f"/_sandbox/captures/{one['id']}/settle",
                             json={"result": "succeeded"})
    assert (done.status_code, done.json()["status"]) == (200, "succeeded")
    assert (await payment_of(client, first["id"]))["amount_captured"] == 1093
    failed = await client.post(f"/_sandbox/captures/{two['id']}/settle",
                               json={"result": "failed", "failure_reason": "issuer_unavailable"})
    assert (failed.json()["status"], failed.json()["failure_reason"]) == (
        "failed", "issuer_unavailable")
    assert (await payment_of(client, second["id"]))["amount_capturable"] == 4999
    again = await client.post(f"/_sandbox/captures/{one['id']}/settle",
                              json={"result": "failed"})
    assert (again.status_code, error_of(again)["code"]) == (409, "capture_unexpected_state")
    canceled = await client.post(f"/_sandbox/captures/{one['id']}/settle",
                                 json={"result": "canceled"})
    assert error_of(canceled)["param"] == "result"
    missing = await client.post("/_sandbox/captures/cap_nope/settle",
                                json={"result": "succeeded"})
    assert missing.status_code == 404


async def test_a_pending_capture_holds_off_the_lapse(client: httpx.AsyncClient) -> None:
    payment = await _held(client)
    capture = (await _capture(client, payment["id"], 1093)).json()
    await advance(client, WEEK + 60)
    assert (await payment_of(client, payment["id"]))["status"] == "requires_capture"
    await client.post(f"/_sandbox/captures/{capture['id']}/settle", json={"result": "failed"})
    # The hold is back, and long past capture_before: it lapses at once.
    assert (await payment_of(client, payment["id"]))["status"] == "canceled"


# -- idempotency ------------------------------------------------------------------


async def test_capture_replay_and_key_reuse(client: httpx.AsyncClient) -> None:
    payment = await _held(client)
    key, reference = new_key(), new_reference()
    first = await _capture(client, payment["id"], 1000, reference, key=key)
    again = await _capture(client, payment["id"], 1000, reference, key=key)
    assert first.status_code == again.status_code == 201
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.content == first.content
    reused = await _capture(client, payment["id"], 1001, reference, key=key)
    assert (reused.status_code, error_of(reused)["code"]) == (422, "key_reused")
    other = await _held(client)
    elsewhere = await _capture(client, other["id"], 1000, reference, key=key)
    assert (elsewhere.status_code, error_of(elsewhere)["code"]) == (422, "key_reused")
    assert (await payment_of(client, other["id"]))["status"] == "requires_capture"
    missing = await client.post(f"/v1/payments/{other['id']}/captures",
                                json={"amount": 1, "reference": "x"}, headers=auth())
    assert (missing.status_code, error_of(missing)["code"]) == (400, "missing_idempotency_key")


async def test_each_endpoint_has_its_own_keys(client: httpx.AsyncClient) -> None:
    key, body = new_key(), payment_body(capture="manual")
    payment = (await create(client, body, key=key)).json()
    captured = await _capture(client, payment["id"], 1000, key=key)
    assert captured.status_code == 201
    assert "Idempotent-Replayed" not in captured.headers
    other = await _held(client)
    canceled = await _cancel(client, other["id"], key=key)
    assert canceled.status_code == 200
    assert "Idempotent-Replayed" not in canceled.headers
    replayed = await create(client, body, key=key)
    assert replayed.headers["Idempotent-Replayed"] == "true"
    assert replayed.json()["id"] == payment["id"]


async def test_cancel_replays_its_answer(client: httpx.AsyncClient) -> None:
    payment = await _held(client)
    key, body = new_key(), {"reference": new_reference()}
    path = f"/v1/payments/{payment['id']}/cancel"
    first = await post(client, path, body, key=key)
    again = await post(client, path, body, key=key)
    assert first.status_code == again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.content == first.content


async def test_capture_500_is_stored_and_replayed(client: httpx.AsyncClient) -> None:
    payment = await _held(client)
    key, reference = new_key(), new_reference()
    await add_faults(client, {"fault": "error_500_after", "match": {"reference": reference},
                              "times": 1})
    first = await _capture(client, payment["id"], 1000, reference, key=key)
    assert (first.status_code, error_of(first)["code"]) == (500, "internal")
    [capture] = await _captures(client, payment=payment["id"])  # it was executed
    assert capture["reference"] == reference
    again = await _capture(client, payment["id"], 1000, reference, key=key)
    assert again.status_code == 500
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.content == first.content


@pytest.mark.parametrize(("fault", "status"), [("not_processed_503", 503),
                                               ("rate_limit", 429)])
async def test_capture_rejected_on_arrival_is_not_stored(
        client: httpx.AsyncClient, fault: str, status: int) -> None:
    payment = await _held(client)
    key, reference = new_key(), new_reference()
    await add_faults(client, {"fault": fault, "match": {"reference": reference}, "times": 1})
    rejected = await _capture(client, payment["id"], 1000, reference, key=key)
    assert rejected.status_code == status
    assert await _captures(client, payment=payment["id"]) == []
    retried = await _capture(client, payment["id"], 1000, reference, key=key)
    assert retried.status_code == 201
    assert "Idempotent-Replayed" not in retried.headers


async def test_concurrent_same_key_capture_gets_409(client: httpx.AsyncClient) -> None:
    payment = await _held(client)
    key, reference = new_key(), new_reference()
    await add_faults(client, {"fault": "delay", "match": {"reference": reference},
                              "times": 1, "delay_ms": 1500})
    first = asyncio.create_task(_capture(client, payment["id"], 1000, reference, key=key))

    async def executed() -> list[dict[str, Any]]:
        return await _captures(client, payment=payment["id"])

    await eventually(executed, what="the capture to execute")
    second = await _capture(client, payment["id"], 1000, reference, key=key)
    assert (second.status_code, error_of(second)["code"]) == (409, "request_in_progress")
    assert int(second.headers["Retry-After"]) >= 1
    assert (await first).status_code == 201


async def test_faults_match_the_cancel_reference(client: httpx.AsyncClient) -> None:
    payment = await _held(client)
    reference = new_reference()
    await add_faults(client, {"fault": "not_processed_503",
                              "match": {"reference": payment["reference"]}},
                     {"fault": "rate_limit", "match": {"operation": "capture"}})
    response = await post(client, f"/v1/payments/{payment['id']}/cancel",
                          {"reference": reference})
    assert response.status_code == 200  # neither the payment's reference nor a capture
    await add_faults(client, {"fault": "not_processed_503", "match": {"reference": reference,
                                                                      "operation": "cancel"}})
    again = await post(client, f"/v1/payments/{payment['id']}/cancel", {"reference": reference})
    assert again.status_code == 503


# -- GET /v1/captures ---------------------------------------------------------------


async def test_captures_by_payment_and_by_reference(client: httpx.AsyncClient) -> None:
    reference = new_reference()
    first, second, other = await _held(client), await _held(client), await _held(client)
    failed = (await _capture(client, first["id"], 1092, reference)).json()
    await advance(client, 1)
    ok = (await _capture(client, first["id"], 1000, reference)).json()
    elsewhere = (await _capture(client, second["id"], 1000, reference)).json()
    await _capture(client, other["id"], 1000)
    by_payment = await _captures(client, payment=first["id"])
    assert [c["id"] for c in by_payment] == [failed["id"], ok["id"]]
    assert by_payment[1] == ok and by_payment[0]["status"] == "failed"
    by_reference = await _captures(client, reference=reference)
    assert [c["id"] for c in by_reference] == [failed["id"], ok["id"], elsewhere["id"]]
    both = await _captures(client, payment=second["id"], reference=reference)
    assert [c["id"] for c in both] == [elsewhere["id"]]
    assert await _captures(client, reference="ORD-none") == []
    assert await _captures(client, payment="pay_none") == []
    foreign = await client.get("/v1/captures", params={"reference": reference},
                               headers=auth("acct_other", OTHER_TEST_KEY))
    assert foreign.json() == {"data": []}
    neither = await client.get("/v1/captures", headers=auth())
    assert (neither.status_code, error_of(neither)["code"]) == (400, "parameter_invalid")


# -- webhooks ---------------------------------------------------------------------------


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    async with running() as e:
        assert (await e.add_endpoint(e.hook_url)).status_code == 200
        yield e


async def test_capture_and_cancel_webhooks_are_signed_and_delivered(env: Env) -> None:
    client = env.client
    payment = await _held(client)
    reference = new_reference()
    # Webhook faults match the capture's own reference.
    await add_faults(client, {"fault": "webhook_drop_first", "match": {"reference": reference},
                              "times": 1})
    capture = (await _capture(client, payment["id"], 1091, reference)).json()  # pending first
    got = await env.received(capture["id"], 2)
    assert sorted((r.json["sequence"], r.json["type"]) for r in got) == [
        (1, "capture.pending"), (2, "capture.succeeded")]
    assert all(r.account == "acct_store:test" for r in got)
    assert all(r.headers["webhook-id"] == r.json["id"] for r in got)
    await env.quiescent()
    pending = next(r for r in got if r.json["type"] == "capture.pending")
    pending_log = await env.deliveries(event=pending.json["id"])
    assert [(d["attempt"], d["result"]) for d in pending_log] == [(1, "retry"),
                                                                  (2, "succeeded")]
    on_payment = await env.received(payment["id"], 2)
    assert sorted((r.json["sequence"], r.json["type"]) for r in on_payment) == [
        (1, "payment.requires_capture"), (2, "payment.succeeded")]
    succeeded = next(r for r in on_payment if r.json["type"] == "payment.succeeded")
    assert succeeded.json["data"]["object"]["amount_captured"] == 1091
    held = await _held(client)
    assert (await _cancel(client, held["id"])).status_code == 200
    [canceled] = await env.received(held["id"], 1, "payment.canceled")
    assert (canceled.json["sequence"], canceled.json["data"]["object"]["status"]) == (
        2, "canceled")
