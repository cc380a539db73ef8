"""Refunds: POST /v1/refunds and its rules, pending and failed refunds, the refund controls,
idempotency per endpoint, lookups, faults and webhooks (the contract's "after the payment")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from harness.servers import serve_asgi
from paycore_sandbox.app import create_app
from paycore_sandbox.settings import SandboxAccount, SandboxSettings
from tests.sandbox.support import (
    MOVEMENT_FIELDS,
    OTHER_TEST_KEY,
    STORE_LIVE_KEY,
    STORE_TEST_KEY,
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


async def _refund(client: httpx.AsyncClient, payment_id: str, amount: int | None = None,
                  reference: str | None = None, **kwargs: Any) -> httpx.Response:
    body: dict[str, Any] = {"payment": payment_id, "reference": reference or new_reference()}
    if amount is not None:
        body["amount"] = amount
    return await post(client, "/v1/refunds", body, **kwargs)


async def _refunded(client: httpx.AsyncClient, payment_id: str, amount: int | None = None,
                    ) -> dict[str, Any]:
    response = await _refund(client, payment_id, amount)
    assert response.status_code == 201, response.text
    refund: dict[str, Any] = response.json()
    return refund



async def _refunds(client: httpx.AsyncClient, **params: str) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = (await get_json(client, "/v1/refunds", **params))["data"]
    return data


async def _one(client: httpx.AsyncClient, refund_id: str) -> dict[str, Any]:
    refund: dict[str, Any] = await get_json(client, f"/v1/refunds/{refund_id}")
    return refund




# -- POST /v1/refunds ---------------------------------------------------------------


async def test_full_refund_by_default(client: httpx.AsyncClient) -> None:
    payment = await paid(client)
    reference = new_reference()
    response = await post(client, "/v1/refunds", {
        "payment": payment["id"], "reference": reference, "reason": "requested_by_customer"})
    assert response.status_code == 201
    refund = response.json()
    assert set(refund) == MOVEMENT_FIELDS
    assert refund["id"].startswith("re_")
    assert {k: refund[k] for k in MOVEMENT_FIELDS - {"id", "created"}} == {
        "object": "refund", "payment": payment["id"], "account": "acct_store",
        "livemode": False, "amount": 4999, "currency": "EUR", "reference": reference,
        "status": "succeeded", "failure_reason": None}
    after = await payment_of(client, payment["id"])
    assert (after["status"], after["amount_refunded"]) == ("succeeded", 4999)
    seen = await events(client, payment["id"])
    assert types_of(seen, refund["id"]) == [("refund.succeeded", 1)]
    assert types_of(seen, payment["id"]) == [("payment.succeeded", 1), ("payment.refunded", 2)]
    assert [e["data"]["object"] for e in seen if e["type"] == "refund.succeeded"] == [refund]
    [row] = (await client.get("/_sandbox/refunds", params={"payment": payment["id"]})).json()[
        "data"]
    assert row["reason"] == "requested_by_customer"


async def test_partial_refunds_up_to_the_captured_amount(client: httpx.AsyncClient) -> None:
    payment = await paid(client)
    await _refunded(client, payment["id"], 1000)
    await _refunded(client, payment["id"], 3000)
    refused(await _refund(client, payment["id"], 1000), "amount_exceeds_refundable")
    last = await _refunded(client, payment["id"])  # all that is left
    assert last["amount"] == 999
    refused(await _refund(client, payment["id"]), "amount_exceeds_refundable")
    refused(await _refund(client, payment["id"], 1), "amount_exceeds_refundable")
    assert (await payment_of(client, payment["id"]))["amount_refunded"] == 4999
    assert [r["amount"] for r in await _refunds(client, payment=payment["id"])] == [
        1000, 3000, 999]


async def test_refund_of_a_captured_hold_is_bounded_by_the_capture(
        client: httpx.AsyncClient) -> None:
    payment = await paid(client, capture="manual")
    refused(await _refund(client, payment["id"]), "payment_not_refundable")
    captured = await post(client, f"/v1/payments/{payment['id']}/captures",
                          {"amount": 3000, "reference": new_reference()})
    assert captured.status_code == 201
    refused(await _refund(client, payment["id"], 3001), "amount_exceeds_refundable")
    assert (await _refunded(client, payment["id"]))["amount"] == 3000


@pytest.mark.parametrize("token", ["tok_decline", "tok_3ds"])
async def test_only_a_succeeded_payment_is_refundable(client: httpx.AsyncClient,
                                                      token: str) -> None:
    payment = await paid(client, payment_method=token)
    refused(await _refund(client, payment["id"], 100), "payment_not_refundable")
    assert await _refunds(client, payment=payment["id"]) == []


async def test_canceled_payment_is_not_refundable(client: httpx.AsyncClient) -> None:
    payment = await paid(client, capture="manual")
    await post(client, f"/v1/payments/{payment['id']}/cancel", {"reference": new_reference()})
    refused(await _refund(client, payment["id"]), "payment_not_refundable")


async def test_refund_of_an_unknown_or_foreign_payment_is_404(
        client: httpx.AsyncClient) -> None:
    payment = await paid(client)
    for payment_id, account, api_key in (("pay_nope", "acct_store", STORE_TEST_KEY),
                                         (payment["id"], "acct_other", OTHER_TEST_KEY),
                                         (payment["id"], "acct_store", STORE_LIVE_KEY)):
        response = await _refund(client, payment_id, account=account, api_key=api_key)
        assert response.status_code == 404
        error = error_of(response)
        assert (error["code"], error["param"]) == ("resource_missing", "payment")
    assert (await payment_of(client, payment["id"]))["amount_refunded"] == 0


@pytest.mark.parametrize(("change", "param"), [
    ({"payment": None}, "payment"),
    ({"payment": 5}, "payment"),
    ({"amount": 0}, "amount"),
    ({"amount": -5}, "amount"),
    ({"amount": "100"}, "amount"),
    ({"amount": True}, "amount"),
    ({"reference": None}, "reference"),
    ({"reference": "x" * 65}, "reference"),
    ({"reason": "x" * 201}, "reason"),
    ({"reason": 7}, "reason"),
    ({"currency": "EUR"}, "currency"),
])
async def test_invalid_refund_is_not_stored(client: httpx.AsyncClient, change: dict[str, Any],
                                            param: str) -> None:
    payment = await paid(client)
    good = {"payment": payment["id"], "amount": 100, "reference": "x" * 64,
            "reason": "y" * 200}
    bad = {k: v for k, v in {**good, **change}.items() if v is not None}
    key = new_key()
    rejected = await post(client, "/v1/refunds", bad, key=key)
    assert rejected.status_code == 400
    error = error_of(rejected)
    assert (error["code"], error["param"]) == ("parameter_invalid", param)
    fixed = await post(client, "/v1/refunds", good, key=key)
    assert fixed.status_code == 201
    assert "Idempotent-Replayed" not in fixed.headers


async def test_concurrent_refunds_never_exceed_the_refundable_amount(
        client: httpx.AsyncClient) -> None:
    payment = await paid(client, amount=5000)
    # Every answer is held back until all have executed: the requests overlap.
    await add_faults(client, {"fault": "delay", "match": {"operation": "refund"},
                              "delay_ms": 300})
    answers = await asyncio.gather(*(_refund(client, payment["id"], 3000) for _ in range(4)))
    assert sorted(a.status_code for a in answers) == [201, 400, 400, 400]
    for answer in answers:
        if answer.status_code == 400:
            refused(answer, "amount_exceeds_refundable")
    assert [r["amount"] for r in await _refunds(client, payment=payment["id"])] == [3000]
    assert (await payment_of(client, payment["id"]))["amount_refunded"] == 3000


# -- pending, failed and canceled refunds ---------------------------------------------


async def test_pending_refund_counts_as_refunded(client: httpx.AsyncClient) -> None:
    payment = await paid(client, amount=5000)
    pending = await _refunded(client, payment["id"], 1093)
    assert pending["status"] == "pending"
    during = await payment_of(client, payment["id"])
    assert during["amount_refunded"] == 0  # succeeded refunds only
    refused(await _refund(client, payment["id"], 3908), "amount_exceeds_refundable")
    assert (await _refunded(client, payment["id"]))["amount"] == 3907
    refused(await _refund(client, payment["id"], 1), "amount_exceeds_refundable")
    # A canceled refund's amount is refundable again.
    canceled = await client.post(f"/_sandbox/refunds/{pending['id']}/settle",
                                 json={"result": "canceled"})
    assert (canceled.status_code, canceled.json()["status"]) == (200, "canceled")
    assert (await _refunded(client, payment["id"]))["amount"] == 1093
    assert types_of(await events(client, payment["id"]), pending["id"]) == [
        ("refund.pending", 1), ("refund.canceled", 2)]


async def test_pending_refund_succeeds_later(client: httpx.AsyncClient) -> None:
    payment = await paid(client)
    refund = await _refunded(client, payment["id"], 2091)
    assert refund["status"] == "pending"

    async def succeeded() -> bool:
        return bool((await _one(client, refund["id"]))["status"] == "succeeded")

    await eventually(succeeded, what="the pending refund to succeed")
    assert (await payment_of(client, payment["id"]))["amount_refunded"] == 2091
    seen = await events(client, payment["id"])
    assert types_of(seen, refund["id"]) == [("refund.pending", 1), ("refund.succeeded", 2)]
    assert types_of(seen, payment["id"]) == [("payment.succeeded", 1), ("payment.refunded", 2)]
    refunded = [e for e in seen if e["type"] == "payment.refunded"]
    assert refunded[0]["data"]["object"]["amount_refunded"] == 2091


async def test_pending_refund_fails_later(client: httpx.AsyncClient) -> None:
    payment = await paid(client)
    refund = await _refunded(client, payment["id"], 2092)
    await advance(client, 1)
    failed = await _one(client, refund["id"])
    assert (failed["status"], failed["failure_reason"]) == ("failed", "declined")
    assert (await payment_of(client, payment["id"]))["amount_refunded"] == 0
    assert types_of(await events(client, payment["id"]), refund["id"]) == [
        ("refund.pending", 1), ("refund.failed", 2)]
    assert (await _refunded(client, payment["id"]))["amount"] == 4999  # refundable again


async def test_settle_control(client: httpx.AsyncClient) -> None:
    payment = await paid(client)
    first = await _refunded(client, payment["id"], 1093)
    second = await _refunded(client, payment["id"], 1093)
    await advance(client, 3600)
    assert (await _one(client, first["id"]))["status"] == "pending"  # only the control ends it
    done = await client.post(f"/_sandbox/refunds/{first['id']}/settle",
                             json={"result": "succeeded"})
    assert (done.status_code, done.json()["status"]) == (200, "succeeded")
    assert (await payment_of(client, payment["id"]))["amount_refunded"] == 1093
    failed = await client.post(f"/_sandbox/refunds/{second['id']}/settle",
                               json={"result": "failed", "failure_reason": "lost_or_stolen_card"})
    assert (failed.json()["status"], failed.json()["failure_reason"]) == (
        "failed", "lost_or_stolen_card")
    again = await client.post(f"/_sandbox/refunds/{second['id']}/settle",
                              json={"result": "succeeded"})
    assert (again.status_code, error_of(again)["code"]) == (409, "refund_unexpected_state")
    bad = await client.post(f"/_sandbox/refunds/{second['id']}/settle", json={"result": "x"})
    assert error_of(bad)["param"] == "result"
    missing = await client.post("/_sandbox/refunds/re_nope/settle", json={"result": "failed"})
    assert missing.status_code == 404


async def test_fail_control_returns_a_succeeded_refund(client: httpx.AsyncClient) -> None:
    payment = await paid(client)
    refund = await _refunded(client, payment["id"], 4000)
    refused(await _refund(client, payment["id"], 1000), "amount_exceeds_refundable")
    failed = await client.post(f"/_sandbox/refunds/{refund['id']}/fail",
                               json={"failure_reason": "expired_or_canceled_card"})
    assert failed.status_code == 200
    assert {**failed.json(), "status": "succeeded", "failure_reason": None} == refund
    assert (failed.json()["status"], failed.json()["failure_reason"]) == (
        "failed", "expired_or_canceled_card")
    assert await _one(client, refund["id"]) == failed.json()
    assert (await payment_of(client, payment["id"]))["amount_refunded"] == 0
    seen = await events(client, payment["id"])
    assert types_of(seen, refund["id"]) == [("refund.succeeded", 1), ("refund.failed", 2)]
    # Its amount is refundable again.
    assert (await _refunded(client, payment["id"]))["amount"] == 4999
    twice = await client.post(f"/_sandbox/refunds/{refund['id']}/fail")
    assert (twice.status_code, error_of(twice)["code"]) == (409, "refund_unexpected_state")
    pending = await _refunded(client, (await paid(client))["id"], 1093)
    not_yet = await client.post(f"/_sandbox/refunds/{pending['id']}/fail")
    assert not_yet.status_code == 409
    assert (await client.post("/_sandbox/refunds/re_nope/fail")).status_code == 404


async def test_fail_control_default_reason(client: httpx.AsyncClient) -> None:
    payment = await paid(client)
    refund = await _refunded(client, payment["id"])
    failed = await client.post(f"/_sandbox/refunds/{refund['id']}/fail")
    assert failed.json()["failure_reason"] == "expired_or_canceled_card"
    bad = await client.post(f"/_sandbox/refunds/{refund['id']}/fail",
                            json={"failure_reason": 3})
    assert error_of(bad)["param"] == "failure_reason"


async def test_control_refund_respects_pending_refunds(client: httpx.AsyncClient) -> None:
    payment = await paid(client, amount=5000)
    await _refunded(client, payment["id"], 1093)
    too_much = await client.post(f"/_sandbox/payments/{payment['id']}/refund",
                                 json={"amount": 4000})
    assert too_much.status_code == 400
    rest = await client.post(f"/_sandbox/payments/{payment['id']}/refund")
    assert rest.json()["amount_refunded"] == 3907
    refused(await _refund(client, payment["id"], 1), "amount_exceeds_refundable")


# -- idempotency ------------------------------------------------------------------------


async def test_refund_replay_and_key_reuse(client: httpx.AsyncClient) -> None:
    payment = await paid(client)
    key, reference = new_key(), new_reference()
    first = await _refund(client, payment["id"], 1000, reference, key=key)
    again = await _refund(client, payment["id"], 1000, reference, key=key)
    assert first.status_code == again.status_code == 201
    assert "Idempotent-Replayed" not in first.headers
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.content == first.content
    reused = await _refund(client, payment["id"], 1001, reference, key=key)
    assert (reused.status_code, error_of(reused)["type"], error_of(reused)["code"]) == (
        422, "idempotency_error", "key_reused")
    assert len(await _refunds(client, payment=payment["id"])) == 1
    missing = await client.post("/v1/refunds", json={"payment": payment["id"],
                                                     "reference": "x"}, headers=auth())
    assert (missing.status_code, error_of(missing)["code"]) == (400, "missing_idempotency_key")


async def test_the_same_key_at_payments_and_refunds_is_two_requests(
        client: httpx.AsyncClient) -> None:
    key, body = new_key(), payment_body()
    payment = await create(client, body, key=key)
    assert payment.status_code == 201
    refund = await _refund(client, payment.json()["id"], key=key)
    assert refund.status_code == 201
    assert "Idempotent-Replayed" not in refund.headers
    assert refund.json()["object"] == "refund"
    replayed = await create(client, body, key=key)
    assert replayed.headers["Idempotent-Replayed"] == "true"
    assert replayed.content == payment.content


async def test_refused_refund_is_not_stored(client: httpx.AsyncClient) -> None:
    payment = await paid(client)
    pending = await _refunded(client, payment["id"], 4093)
    key, reference = new_key(), new_reference()
    refused(await _refund(client, payment["id"], 1000, reference, key=key),
             "amount_exceeds_refundable")
    await client.post(f"/_sandbox/refunds/{pending['id']}/settle", json={"result": "failed"})
    retried = await _refund(client, payment["id"], 1000, reference, key=key)
    assert retried.status_code == 201
    assert "Idempotent-Replayed" not in retried.headers


async def test_refund_500_is_stored_and_replayed(client: httpx.AsyncClient) -> None:
    payment = await paid(client)
    key, reference = new_key(), new_reference()
    await add_faults(client, {"fault": "error_500_after", "match": {"reference": reference},
                              "times": 1})
    first = await _refund(client, payment["id"], 1000, reference, key=key)
    assert (first.status_code, error_of(first)["code"]) == (500, "internal")
    [refund] = await _refunds(client, reference=reference)  # it was executed
    assert refund["status"] == "succeeded"
    again = await _refund(client, payment["id"], 1000, reference, key=key)
    assert again.status_code == 500
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.content == first.content
    assert len(await _refunds(client, payment=payment["id"])) == 1


@pytest.mark.parametrize(("fault", "status", "code"), [
    ("not_processed_503", 503, "not_processed"), ("rate_limit", 429, "rate_limited")])
async def test_refund_rejected_on_arrival_is_not_stored(
        client: httpx.AsyncClient, fault: str, status: int, code: str) -> None:
    payment = await paid(client)
    key, reference = new_key(), new_reference()
    await add_faults(client, {"fault": fault, "match": {"reference": reference}, "times": 1})
    rejected = await _refund(client, payment["id"], 1000, reference, key=key)
    assert (rejected.status_code, error_of(rejected)["code"]) == (status, code)
    assert await _refunds(client, payment=payment["id"]) == []
    retried = await _refund(client, payment["id"], 1000, reference, key=key)
    assert retried.status_code == 201
    assert "Idempotent-Replayed" not in retried.headers


async def test_concurrent_same_key_refund_gets_409(client: httpx.AsyncClient) -> None:
    payment = await paid(client)
    key, reference = new_key(), new_reference()
    # The refund's operation only: the lookups below share its reference.
    await add_faults(client, {"fault": "delay", "match": {"reference": reference,
                                                          "operation": "refund"},
                              "times": 1, "delay_ms": 1500})
    first = asyncio.create_task(_refund(client, payment["id"], 1000, reference, key=key))

    async def executed() -> list[dict[str, Any]]:
        return await _refunds(client, reference=reference)

    await eventually(executed, what="the refund to execute")
    second = await _refund(client, payment["id"], 1000, reference, key=key)
    assert (second.status_code, error_of(second)["code"]) == (409, "request_in_progress")
    assert int(second.headers["Retry-After"]) >= 1
    done = await first
    assert done.status_code == 201
    third = await _refund(client, payment["id"], 1000, reference, key=key)
    assert third.headers["Idempotent-Replayed"] == "true"
    assert third.content == done.content


async def test_lost_response_refund_is_replayed(client: httpx.AsyncClient,
                                                impatient: httpx.AsyncClient) -> None:
    payment = await paid(client)
    key, reference = new_key(), new_reference()
    await add_faults(client, {"fault": "lose_response", "match": {"reference": reference},
                              "times": 1})
    with pytest.raises(httpx.ReadTimeout):
        await _refund(impatient, payment["id"], 1000, reference, key=key)
    [refund] = await _refunds(client, reference=reference)
    replay = await _refund(client, payment["id"], 1000, reference, key=key)
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json() == refund


async def test_refund_keys_per_account_and_retention(client: httpx.AsyncClient) -> None:
    store, other = await paid(client), (await create(
        client, payment_body(), account="acct_other", api_key=OTHER_TEST_KEY)).json()
    key, reference = new_key(), new_reference()
    body = {"amount": 100, "reference": reference}
    mine = await post(client, "/v1/refunds", {"payment": store["id"], **body}, key=key)
    theirs = await post(client, "/v1/refunds", {"payment": other["id"], **body}, key=key,
                        account="acct_other", api_key=OTHER_TEST_KEY)
    assert mine.status_code == theirs.status_code == 201
    assert "Idempotent-Replayed" not in theirs.headers
    await advance(client, 86400 - 60)
    inside = await post(client, "/v1/refunds", {"payment": store["id"], **body}, key=key)
    assert inside.headers["Idempotent-Replayed"] == "true"
    await advance(client, 60)
    after = await post(client, "/v1/refunds", {"payment": store["id"], **body}, key=key)
    assert after.status_code == 201
    assert "Idempotent-Replayed" not in after.headers
    assert after.json()["id"] != mine.json()["id"]


# -- lookups ------------------------------------------------------------------------------


async def test_refund_by_id(client: httpx.AsyncClient) -> None:
    payment = await paid(client)
    refund = await _refunded(client, payment["id"], 100)
    assert await _one(client, refund["id"]) == refund
    for headers in (auth(), auth("acct_other", OTHER_TEST_KEY),
                    auth("acct_store", STORE_LIVE_KEY)):
        path = "/v1/refunds/re_nope" if headers == auth() else f"/v1/refunds/{refund['id']}"
        missing = await client.get(path, headers=headers)
        assert (missing.status_code, error_of(missing)["code"]) == (404, "resource_missing")


async def test_refunds_by_payment_and_by_reference(client: httpx.AsyncClient) -> None:
    reference = new_reference()
    first, second = await paid(client), await paid(client)
    one = (await _refund(client, first["id"], 100, reference)).json()
    two = (await _refund(client, first["id"], 200)).json()
    three = (await _refund(client, second["id"], 300, reference)).json()
    assert await _refunds(client, payment=first["id"]) == [one, two]
    assert await _refunds(client, reference=reference) == [one, three]
    assert await _refunds(client, payment=second["id"], reference=reference) == [three]
    assert await _refunds(client, reference="ORD-none") == []
    assert await _refunds(client, payment="pay_none") == []
    foreign = await client.get("/v1/refunds", params={"payment": first["id"]},
                               headers=auth("acct_other", OTHER_TEST_KEY))
    assert foreign.json() == {"data": []}
    neither = await client.get("/v1/refunds", headers=auth())
    assert (neither.status_code, error_of(neither)["code"]) == (400, "parameter_invalid")


async def test_lookup_faults_match_the_refund_reference(client: httpx.AsyncClient) -> None:
    payment = await paid(client)
    refund = await _refunded(client, payment["id"], 100)
    await add_faults(client, {"fault": "not_processed_503",
                              "match": {"reference": refund["reference"],
                                        "operation": "lookup"}, "times": 2},
                     {"fault": "lookup_stale", "match": {"reference": refund["reference"]},
                      "times": 1},
                     {"fault": "search_stale", "match": {"reference": refund["reference"]},
                      "times": 1})
    by_id = await client.get(f"/v1/refunds/{refund['id']}", headers=auth())
    by_reference = await client.get("/v1/refunds", params={"reference": refund["reference"]},
                                     headers=auth())
    assert by_id.status_code == by_reference.status_code == 503
    assert (await client.get(f"/v1/refunds/{refund['id']}", headers=auth())).status_code == 404
    assert await _refunds(client, reference=refund["reference"]) == []
    assert await _one(client, refund["id"]) == refund
    assert await _refunds(client, payment=payment["id"]) == [refund]


@pytest.fixture
async def slow_lookups() -> AsyncIterator[httpx.AsyncClient]:
    """acct_store/test may look up 2 times, then 1 per 100 s."""
    accounts = [SandboxAccount(a.account, a.environment, a.api_key, a.webhook_secret,
                               lookup_rate_per_s=0.01 if a.api_key == STORE_TEST_KEY else 50,
                               lookup_burst=2 if a.api_key == STORE_TEST_KEY else 50)
                for a in SandboxSettings.default().accounts]
    app = create_app(SandboxSettings(accounts=accounts))
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as c:
        yield c


@pytest.mark.parametrize("path", ["/v1/refunds/re_x", "/v1/refunds?payment=pay_x",
                                  "/v1/captures?reference=R"])
async def test_lookups_are_rate_limited_per_account(slow_lookups: httpx.AsyncClient,
                                                    path: str) -> None:
    client = slow_lookups
    for _ in range(2):
        assert (await client.get("/v1/payments/pay_x", headers=auth())).status_code == 404
    limited = await client.get(path, headers=auth())
    assert (limited.status_code, error_of(limited)["code"]) == (429, "rate_limited")
    assert int(limited.headers["Retry-After"]) >= 1
    other = await client.get(path, headers=auth("acct_other", OTHER_TEST_KEY))
    assert other.status_code in (200, 404)
    # POSTs are not lookups.
    payment = await paid(client)
    assert (await _refund(client, payment["id"], 100)).status_code == 201


# -- webhooks ------------------------------------------------------------------------------


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    async with running() as e:
        assert (await e.add_endpoint(e.hook_url)).status_code == 200
        yield e


async def test_refund_webhooks_are_signed_and_delivered(env: Env) -> None:
    client = env.client
    payment = await paid(client)
    refund = await _refunded(client, payment["id"], 1091)  # pending, then succeeded
    got = await env.received(refund["id"], 2)
    assert sorted((r.json["sequence"], r.json["type"]) for r in got) == [
        (1, "refund.pending"), (2, "refund.succeeded")]
    assert all(r.account == "acct_store:test" for r in got)
    recorded = [e for e in await events(client, payment["id"])
                if e["data"]["object"]["id"] == refund["id"]]
    assert {r.body for r in got} == {orjson.dumps(e) for e in recorded}
    assert all(r.headers["webhook-id"] == r.json["id"] for r in got)
    [refunded] = await env.received(payment["id"], 1, "payment.refunded")
    assert (refunded.json["sequence"], refunded.json["data"]["object"]["amount_refunded"]) == (
        2, 1091)
    failed = await client.post(f"/_sandbox/refunds/{refund['id']}/fail")
    assert failed.status_code == 200
    [returned] = await env.received(refund["id"], 1, "refund.failed")
    assert (returned.json["sequence"], returned.json["data"]["object"]["failure_reason"]) == (
        3, "expired_or_canceled_card")
    assert returned.account == "acct_store:test"


async def test_webhook_faults_match_the_refund_reference(env: Env) -> None:
    client = env.client
    payment = await paid(client)
    reference = new_reference()
    await add_faults(client, {"fault": "webhook_duplicate", "match": {"reference": reference},
                              "times": 2})
    refund = (await _refund(client, payment["id"], 100, reference)).json()
    got = await env.received(refund["id"], 3)
    assert len({r.headers["webhook-id"] for r in got}) == 1
    await env.quiescent()
    assert len(env.receiver.of(refund["id"])) == 3
    assert len(env.receiver.of(payment["id"], "payment.refunded")) == 1
