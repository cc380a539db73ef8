"""The sandbox's Adyen dialect (Checkout API v71), over real HTTP.

Raw httpx against the sandbox on a free port; notifications go to a real
receiver (Starlette behind uvicorn) that answers from a programmable queue, and
every item's HMAC is checked with Adyen's own SDK routine.
"""

from __future__ import annotations

import asyncio
import base64
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest
from Adyen.util import is_valid_hmac_notification  # type: ignore[import-untyped]
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from harness.servers import serve_asgi
from paycore_sandbox.app import create_app
from paycore_sandbox.dialects import adyen_webhooks
from paycore_sandbox.settings import SandboxSettings
from tests.sandbox.support import (
    STORE_LIVE_KEY,
    STORE_TEST_KEY,
    add_faults,
    advance,
    auth,
    captured,
    create,
    eventually,
    ledger,
    new_key,
    new_reference,
    payment_body,
)

PATH = "/v71/payments"
ERROR_FIELDS = {"status", "errorCode", "message", "errorType", "pspReference"}
FAST = 0.0001  # webhook_time_scale: retries in well under a second


def adyen_body(token: str = "tok_visa", *, reference: str | None = None,
               account: str = "acct_store", amount: int = 4999,
               **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "amount": {"value": amount, "currency": "EUR"},
        "reference": reference or new_reference(),
        "merchantAccount": account,
        "paymentMethod": {"type": "scheme", "encryptedCardNumber": token,
                          "encryptedExpiryMonth": "test", "encryptedExpiryYear": "test",
                          "encryptedSecurityCode": "test"},
        "returnUrl": "https://shop.example/return",
    }
    body.update(extra)
    return body


async def pay(client: httpx.AsyncClient, body: Any, *, key: str | None = None,
              api_key: str = STORE_TEST_KEY, raw: bytes | None = None) -> httpx.Response:
    headers = {"X-API-Key": api_key, "Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    content = raw if raw is not None else orjson.dumps(body)
    return await client.post(PATH, content=content, headers=headers)


def adyen_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    body: dict[str, Any] = response.json()
    assert response.status_code == status, response.text
    assert set(body) == ERROR_FIELDS, body
    assert (body["status"], body["errorCode"]) == (status, code), body
    assert len(body["pspReference"]) == 16
    return body


# -- answers per token --------------------------------------------------------------

@pytest.mark.parametrize(("token", "result_code", "reason"), [
    ("tok_visa", "Authorised", None),
    ("tok_decline", "Refused", "Refused"),
    ("tok_insufficient_funds", "Refused", "Not enough balance"),
    ("tok_3ds", "RedirectShopper", None),
    ("tok_async", "Received", None),
])
async def test_each_token_answers_its_result_code(client: httpx.AsyncClient, token: str,
                                                  result_code: str,
                                                  reason: str | None) -> None:
    body = adyen_body(token)
    response = await pay(client, body, key=new_key())
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["resultCode"] == result_code
    assert answer.get("refusalReason") == reason
    assert answer["merchantReference"] == body["reference"]
    assert answer["amount"] == body["amount"]
    psp = answer["pspReference"]
    assert len(psp) == 16 and psp.isalnum() and response.headers["pspReference"] == psp
    if result_code == "RedirectShopper":
        assert answer["action"]["type"] == "redirect" and answer["action"]["method"] == "GET"
    else:
        assert "action" not in answer
    [row] = await ledger(client, reference=body["reference"])
    assert (row["id"], row["dialect"], row["provider_account"]) == \
        (psp, "adyen", "adyen:acct_store:test")


async def test_native_3ds_is_a_challenge_with_a_threeds2_action(
        client: httpx.AsyncClient) -> None:
    body = adyen_body("tok_3ds", authenticationData={
        "threeDSRequestData": {"nativeThreeDS": "preferred"}})
    answer = (await pay(client, body, key=new_key())).json()
    assert answer["resultCode"] == "ChallengeShopper"
    assert (answer["action"]["type"], answer["action"]["subtype"]) == ("threeDS2", "challenge")


async def test_async_payment_is_received_then_authorised(client: httpx.AsyncClient) -> None:
    body = adyen_body("tok_async")
    await pay(client, body, key=new_key())
    await advance(client, 5)
    [row] = await ledger(client, reference=body["reference"])
    assert row["status"] == "succeeded"


# -- rejections ----------------------------------------------------------------------

async def test_expired_card_is_a_422_and_stores_nothing(client: httpx.AsyncClient) -> None:
    key, reference = new_key(), new_reference()
    rejected = await pay(client, adyen_body("tok_expired", reference=reference), key=key)
    adyen_error(rejected, 422, "129")
    assert rejected.json()["errorType"] == "validation"
    assert await ledger(client, reference=reference) == []
    # Not executed, so the key is free: a corrected body under it executes.
    fixed = await pay(client, adyen_body("tok_visa", reference=reference), key=key)
    assert fixed.json()["resultCode"] == "Authorised"


@pytest.mark.parametrize(("mutate", "code", "names"), [
    (lambda b: b.pop("returnUrl"), "130", "returnUrl"),
    (lambda b: b.pop("reference"), "130", "reference"),
    (lambda b: b.pop("merchantAccount"), "130", "merchantAccount"),
    (lambda b: b.pop("amount"), "100", None),
    (lambda b: b["amount"].update(value=0), "137", None),
    (lambda b: b["paymentMethod"].update(encryptedCardNumber="4111111111111111"), "101", None),
])
async def test_validation_errors_are_422_in_adyens_shape(client: httpx.AsyncClient, mutate: Any,
                                                         code: str, names: str | None) -> None:
    body = adyen_body()
    mutate(body)
    response = await pay(client, body, key=new_key())
    error = adyen_error(response, 422, code)
    assert error["errorType"] == "validation"
    if names:
        assert names in error["message"]
    assert "4111" not in response.text  # whatever was sent is never echoed
    assert await ledger(client) == []


async def test_an_unparseable_body_is_a_422(client: httpx.AsyncClient) -> None:
    adyen_error(await pay(client, None, raw=b"{not json", key=new_key()), 422, "702")


async def test_unknown_or_missing_api_key_is_401(client: httpx.AsyncClient) -> None:
    error = adyen_error(await pay(client, adyen_body(), api_key="nope"), 401, "000")
    assert error["errorType"] == "security"
    missing = await client.post(PATH, json=adyen_body())
    assert adyen_error(missing, 401, "000")["errorType"] == "security"


async def test_another_accounts_merchant_account_is_403(client: httpx.AsyncClient) -> None:
    response = await pay(client, adyen_body(account="acct_other"), key=new_key())
    error = adyen_error(response, 403, "901")
    assert (error["errorType"], error["message"]) == ("security", "Invalid Merchant Account")
    assert await ledger(client) == []


async def test_a_key_longer_than_64_characters_is_a_422(client: httpx.AsyncClient) -> None:
    adyen_error(await pay(client, adyen_body(), key="k" * 65), 422, "000")
    assert await ledger(client) == []


async def test_there_is_no_lookup(client: httpx.AsyncClient) -> None:
    response = await client.get(PATH, headers={"X-API-Key": STORE_TEST_KEY})
    assert response.status_code == 405


# -- idempotency --------------------------------------------------------------------

async def test_same_key_and_body_replays_the_stored_answer(client: httpx.AsyncClient) -> None:
    key, body = new_key(), adyen_body()
    first = await pay(client, body, key=key)
    again = await pay(client, body, key=key)
    assert again.status_code == 200 and again.content == first.content
    assert again.headers["Idempotency-Key"] == key
    assert len(await ledger(client, reference=body["reference"])) == 1
    log = [e for e in await captured(client) if e["path"] == PATH]
    assert [e["replayed"] for e in log] == [False, True]
    assert all(e["headers"]["x-api-key"] == "sk_test" for e in log)  # never the key


async def test_key_reused_for_another_body_is_refused(client: httpx.AsyncClient) -> None:
    key, body = new_key(), adyen_body()
    await pay(client, body, key=key)
    other = await pay(client, adyen_body(amount=1), key=key)
    error = adyen_error(other, 422, "704")
    assert error["errorType"] == "validation"
    assert "transient-error" not in other.headers  # do not retry this one
    assert len(await ledger(client)) == 1


async def test_concurrent_same_key_is_a_transient_409(client: httpx.AsyncClient) -> None:
    key, body = new_key(), adyen_body()
    await add_faults(client, {"fault": "delay", "delay_ms": 400, "times": 1,
                              "match": {"reference": body["reference"]}})
    first = asyncio.create_task(pay(client, body, key=key))

    async def executing() -> bool:
        return len(await ledger(client, reference=body["reference"])) == 1

    await eventually(executing, what="the first request executing")
    busy = await pay(client, body, key=key)
    adyen_error(busy, 409, "704")
    assert busy.headers["Transient-Error"] == "true"
    done = await first
    assert done.json()["resultCode"] == "Authorised"
    replay = await pay(client, body, key=key)  # what a retry with the same key gets
    assert replay.content == done.content


async def test_transient_503_is_not_stored_under_the_key(client: httpx.AsyncClient) -> None:
    key, body = new_key(), adyen_body()
    await add_faults(client, {"fault": "not_processed_503", "times": 1,
                              "match": {"any": True, "dialect": "adyen"}})
    refused = await pay(client, body, key=key)
    error = adyen_error(refused, 503, "000")
    assert error["errorType"] == "internal" and refused.headers["Transient-Error"] == "true"
    assert await ledger(client) == []
    retried = await pay(client, body, key=key)
    assert retried.json()["resultCode"] == "Authorised"
    log = [e for e in await captured(client) if e["path"] == PATH]
    assert [(e["status"], e["replayed"]) for e in log] == [(503, False), (200, False)]


async def test_500_after_execution_keeps_the_real_answer(client: httpx.AsyncClient) -> None:
    key, body = new_key(), adyen_body()
    await add_faults(client, {"fault": "error_500_after", "times": 1,
                              "match": {"reference": body["reference"]}})
    failed = await pay(client, body, key=key)
    adyen_error(failed, 500, "000")
    assert "transient-error" not in failed.headers
    [row] = await ledger(client, reference=body["reference"])
    resent = await pay(client, body, key=key)
    assert resent.status_code == 200
    assert (resent.json()["resultCode"], resent.json()["pspReference"]) == \
        ("Authorised", row["id"])
    assert len(await ledger(client)) == 1


async def test_keys_are_kept_31_days(client: httpx.AsyncClient) -> None:
    key, body = new_key(), adyen_body()
    first = (await pay(client, body, key=key)).json()
    await advance(client, 30 * 86_400)
    assert (await pay(client, body, key=key)).json() == first
    await advance(client, 1 * 86_400)
    fresh = (await pay(client, body, key=key)).json()
    assert fresh["pspReference"] != first["pspReference"]


async def test_without_a_key_every_request_executes(client: httpx.AsyncClient) -> None:
    body = adyen_body()
    await pay(client, body)
    await pay(client, body)
    assert len(await ledger(client, reference=body["reference"])) == 2


# -- faults ---------------------------------------------------------------------------

async def test_rate_limit_fault_answers_429(client: httpx.AsyncClient) -> None:
    await add_faults(client, {"fault": "rate_limit", "times": 1, "match": {"any": True}})
    adyen_error(await pay(client, adyen_body(), key=new_key()), 429, "000")
    assert await ledger(client) == []


@pytest.mark.parametrize("fault", ["malformed_body", "empty_body"])
async def test_mangled_answers_are_200_and_the_payment_exists(client: httpx.AsyncClient,
                                                              fault: str) -> None:
    body = adyen_body()
    await add_faults(client, {"fault": fault, "times": 1, "match": {"any": True}})
    response = await pay(client, body, key=new_key())
    assert response.status_code == 200
    with pytest.raises(ValueError):
        orjson.loads(response.content)
    assert len(await ledger(client, reference=body["reference"])) == 1


async def test_lost_response_executes_and_dropped_request_does_not(
        client: httpx.AsyncClient, impatient: httpx.AsyncClient) -> None:
    lost, dropped = adyen_body(), adyen_body()
    await add_faults(client,
                     {"fault": "lose_response", "times": 1,
                      "match": {"reference": lost["reference"]}},
                     {"fault": "drop_request", "times": 1,
                      "match": {"reference": dropped["reference"]}})
    for body in (lost, dropped):
        with pytest.raises(httpx.TimeoutException):
            await pay(impatient, body, key=new_key())
    assert len(await ledger(client, reference=lost["reference"])) == 1
    assert await ledger(client, reference=dropped["reference"]) == []


async def test_a_fault_naming_a_dialect_spares_the_others(client: httpx.AsyncClient) -> None:
    await add_faults(client, {"fault": "rate_limit", "match": {"any": True,
                                                               "dialect": "cardco"}})
    assert (await pay(client, adyen_body(), key=new_key())).status_code == 200
    assert (await create(client, payment_body())).status_code == 429
    await client.delete("/_sandbox/faults")
    await add_faults(client, {"fault": "rate_limit", "match": {"any": True,
                                                               "dialect": "adyen"}})
    assert (await create(client, payment_body())).status_code == 201
    assert (await pay(client, adyen_body(), key=new_key())).status_code == 429


# -- notifications --------------------------------------------------------------------

@dataclass
class Receiver:
    """A notification endpoint answering ``[accepted]`` unless told otherwise."""

    answers: deque[tuple[int, bytes]] = field(default_factory=deque)
    received: list[tuple[dict[str, str], dict[str, Any]]] = field(default_factory=list)

    async def handle(self, request: Request) -> Response:
        self.received.append((dict(request.headers), orjson.loads(await request.body())))
        status, body = self.answers.popleft() if self.answers else (200, b"[accepted]")
        return Response(body, status_code=status)

    def items(self) -> list[dict[str, Any]]:
        return [item["NotificationRequestItem"] for _, body in self.received
                for item in body["notificationItems"]]


@dataclass
class Hooked:
    client: httpx.AsyncClient
    receiver: Receiver
    url: str
    credentials: dict[str, dict[str, str]]  # "<account>:<env>" → adyen credentials

    async def quiescent(self) -> None:
        async def idle() -> bool:
            pending: int = (await self.client.get("/_sandbox/webhooks/pending")).json()["pending"]
            return pending == 0

        await eventually(idle, what="webhook deliveries to finish")

    async def items_for(self, psp: str, count: int) -> list[dict[str, Any]]:
        async def arrived() -> list[dict[str, Any]] | None:
            found = [i for i in self.receiver.items()
                     if psp in (i["pspReference"], i.get("originalReference"))]
            return found if len(found) >= count else None

        return await eventually(arrived, what=f"{count} notification(s) for {psp}")


@pytest.fixture
async def hooked() -> AsyncIterator[Hooked]:
    receiver = Receiver()
    hook_app = Starlette(routes=[Route("/hook", receiver.handle, methods=["POST"])])
    settings = SandboxSettings(webhook_time_scale=FAST, async_delay_s=0.1)
    async with serve_asgi(hook_app) as hook_base, serve_asgi(create_app(settings)) as base, \
            httpx.AsyncClient(base_url=base, timeout=10) as client:
        url = f"{hook_base}/hook"
        added = await client.post("/_sandbox/webhooks/endpoints",
                                  json={"url": url, "dialect": "adyen"})
        assert added.json()["data"] == [url]
        rows = (await client.get("/_sandbox/accounts")).json()["data"]
        creds = {f"{r['account']}:{r['environment']}": r["adyen"] for r in rows}
        yield Hooked(client, receiver, url, creds)


def valid(item: dict[str, Any], hmac_key: str) -> bool:
    return bool(is_valid_hmac_notification(item, hmac_key))


async def test_authorisation_is_signed_as_adyens_sdk_verifies(hooked: Hooked) -> None:
    body = adyen_body("tok_visa")
    psp = (await pay(hooked.client, body, key=new_key())).json()["pspReference"]
    [item] = await hooked.items_for(psp, 1)
    creds = hooked.credentials["acct_store:test"]
    assert valid(item, creds["hmac_key"])
    assert not valid(item, hooked.credentials["acct_other:test"]["hmac_key"])
    assert (item["eventCode"], item["success"], item["merchantAccountCode"],
            item["merchantReference"], item["amount"]) == \
        ("AUTHORISATION", "true", "acct_store", body["reference"], body["amount"])
    headers, envelope = hooked.receiver.received[0]
    assert envelope["live"] == "false"
    scheme, _, token = headers["authorization"].partition(" ")
    assert scheme == "Basic"
    assert base64.b64decode(token).decode() == \
        f"{creds['webhook_username']}:{creds['webhook_password']}"
    assert creds["webhook_username"] == "paycore"
    # The whole body, as Adyen's SDK takes it, verifies too.
    assert valid(envelope, creds["hmac_key"])


async def test_tampering_breaks_the_signature(hooked: Hooked) -> None:
    psp = (await pay(hooked.client, adyen_body(), key=new_key())).json()["pspReference"]
    [item] = await hooked.items_for(psp, 1)
    forged = dict(item, amount={"value": 1, "currency": "EUR"})
    assert not valid(forged, hooked.credentials["acct_store:test"]["hmac_key"])


async def test_refusal_is_an_unsuccessful_authorisation(hooked: Hooked) -> None:
    psp = (await pay(hooked.client, adyen_body("tok_insufficient_funds"),
                     key=new_key())).json()["pspReference"]
    [item] = await hooked.items_for(psp, 1)
    assert (item["eventCode"], item["success"], item["reason"]) == \
        ("AUTHORISATION", "false", "Not enough balance")
    assert valid(item, hooked.credentials["acct_store:test"]["hmac_key"])


async def test_pending_states_are_not_notified(hooked: Hooked) -> None:
    psp = (await pay(hooked.client, adyen_body("tok_async"),
                     key=new_key())).json()["pspReference"]
    [item] = await hooked.items_for(psp, 1)  # only the final AUTHORISATION
    assert (item["eventCode"], item["success"]) == ("AUTHORISATION", "true")
    await hooked.quiescent()
    assert len([i for i in hooked.receiver.items() if i["pspReference"] == psp]) == 1


@pytest.mark.parametrize(("result", "success", "reason"), [
    ("succeeded", "true", None), ("failed", "false", "3D Not Authenticated")])
async def test_3ds_completed_or_abandoned_via_control(hooked: Hooked, result: str,
                                                      success: str, reason: str | None) -> None:
    psp = (await pay(hooked.client, adyen_body("tok_3ds"), key=new_key())).json()["pspReference"]
    done = await hooked.client.post(f"/_sandbox/payments/{psp}/action", json={"result": result})
    assert done.status_code == 200, done.text
    [item] = await hooked.items_for(psp, 1)
    assert (item["eventCode"], item["success"], item.get("reason")) == \
        ("AUTHORISATION", success, reason)


async def test_an_expired_challenge_is_a_cancellation(hooked: Hooked) -> None:
    psp = (await pay(hooked.client, adyen_body("tok_3ds"), key=new_key())).json()["pspReference"]
    await advance(hooked.client, 901)
    [item] = await hooked.items_for(psp, 1)
    assert (item["eventCode"], item["success"], item["originalReference"]) == \
        ("CANCELLATION", "true", psp)
    assert item["pspReference"] != psp
    assert valid(item, hooked.credentials["acct_store:test"]["hmac_key"])


async def test_refund_is_notified_with_its_amount(hooked: Hooked) -> None:
    psp = (await pay(hooked.client, adyen_body(amount=5000),
                     key=new_key())).json()["pspReference"]
    refunded = await hooked.client.post(f"/_sandbox/payments/{psp}/refund", json={"amount": 1200})
    assert refunded.status_code == 200, refunded.text
    items = await hooked.items_for(psp, 2)
    [refund] = [i for i in items if i["eventCode"] == "REFUND"]
    assert (refund["originalReference"], refund["amount"]["value"], refund["success"]) == \
        (psp, 1200, "true")
    assert valid(refund, hooked.credentials["acct_store:test"]["hmac_key"])


async def test_retried_until_answered_exactly_accepted(hooked: Hooked) -> None:
    hooked.receiver.answers.extend([(200, b""), (500, b"[accepted]"), (200, b"accepted")])
    body = adyen_body()
    psp = (await pay(hooked.client, body, key=new_key())).json()["pspReference"]
    await hooked.items_for(psp, 4)
    await hooked.quiescent()
    attempts = (await hooked.client.get("/_sandbox/webhooks/deliveries",
                                        params={"payment": psp})).json()["data"]
    assert [a["result"] for a in attempts] == ["retry", "retry", "retry", "succeeded"]
    assert [a["status"] for a in attempts] == [200, 500, 200, 200]
    bodies = {orjson.dumps(b) for _, b in hooked.receiver.received}
    assert len(bodies) == 1  # the same notification every attempt


async def test_several_events_batched_in_one_notification(hooked: Hooked) -> None:
    first = (await pay(hooked.client, adyen_body(), key=new_key())).json()["pspReference"]
    second = (await pay(hooked.client, adyen_body("tok_decline"),
                        key=new_key())).json()["pspReference"]
    await hooked.items_for(second, 1)
    await hooked.items_for(first, 1)
    event_ids = [e["id"] for psp in (first, second)
                 for e in (await hooked.client.get("/_sandbox/events",
                                                   params={"payment": psp})).json()["data"]]
    hooked.receiver.received.clear()
    started = await hooked.client.post("/_sandbox/webhooks/batch", json={"events": event_ids})
    assert started.status_code == 200, started.text
    await hooked.quiescent()
    [(_, envelope)] = hooked.receiver.received
    items = [i["NotificationRequestItem"] for i in envelope["notificationItems"]]
    assert [i["pspReference"] for i in items] == [first, second]
    key = hooked.credentials["acct_store:test"]["hmac_key"]
    assert all(valid(i, key) for i in items)


async def test_batch_refuses_cardco_events(hooked: Hooked) -> None:
    payment = (await create(hooked.client, payment_body())).json()
    [event] = (await hooked.client.get("/_sandbox/events",
                                       params={"payment": payment["id"]})).json()["data"]
    refused = await hooked.client.post("/_sandbox/webhooks/batch", json={"events": [event["id"]]})
    assert refused.status_code == 400


async def test_each_dialect_gets_only_its_own_payments(hooked: Hooked) -> None:
    cardco_receiver = Receiver()
    app = Starlette(routes=[Route("/hook", cardco_receiver.handle, methods=["POST"])])
    async with serve_asgi(app) as base:
        await hooked.client.post("/_sandbox/webhooks/endpoints", json={"url": f"{base}/hook"})
        cardco = (await create(hooked.client, payment_body())).json()
        psp = (await pay(hooked.client, adyen_body(), key=new_key())).json()["pspReference"]
        await hooked.items_for(psp, 1)
        await hooked.quiescent()
    assert [body["data"]["object"]["id"] for _, body in cardco_receiver.received] == \
        [cardco["id"]]
    assert [i["pspReference"] for i in hooked.receiver.items()] == [psp]
    listed = await hooked.client.get("/_sandbox/webhooks/endpoints", params={"dialect": "adyen"})
    assert listed.json()["data"] == [hooked.url]


async def test_live_account_notifications_say_live(hooked: Hooked) -> None:
    psp = (await pay(hooked.client, adyen_body(), key=new_key(),
                     api_key=STORE_LIVE_KEY)).json()["pspReference"]
    await hooked.items_for(psp, 1)
    [(_, envelope)] = hooked.receiver.received
    assert envelope["live"] == "true"
    item = envelope["notificationItems"][0]["NotificationRequestItem"]
    assert valid(item, hooked.credentials["acct_store:live"]["hmac_key"])
    assert not valid(item, hooked.credentials["acct_store:test"]["hmac_key"])


# -- settings ----------------------------------------------------------------------------

async def test_webhook_urls_may_name_the_adyen_dialect() -> None:
    settings = SandboxSettings.from_env({
        "PAYCORE_SANDBOX_WEBHOOK_URLS": "adyen=http://127.0.0.1:9/adyen,http://127.0.0.1:9/c"})
    async with serve_asgi(create_app(settings)) as base, \
            httpx.AsyncClient(base_url=base) as client:
        endpoints = "/_sandbox/webhooks/endpoints"
        # Unfiltered, every endpoint as its spec (the Stripe dialect's listing);
        # ?dialect= gives one dialect's URLs.
        assert (await client.get(endpoints)).json()["data"] == \
            ["adyen=http://127.0.0.1:9/adyen", "http://127.0.0.1:9/c"]
        assert (await client.get(endpoints, params={"dialect": "cardco"})).json()["data"] == \
            ["http://127.0.0.1:9/c"]
        assert (await client.get(endpoints, params={"dialect": "adyen"})).json()["data"] == \
            ["http://127.0.0.1:9/adyen"]
    with pytest.raises(ValueError):
        SandboxSettings.from_env({"PAYCORE_SANDBOX_WEBHOOK_URLS": "adyen=not-a-url"})


def test_dev_credentials_are_fixed_per_account() -> None:
    first, again = SandboxSettings.default(), SandboxSettings.default()
    keys = [adyen_webhooks.hmac_key(a) for a in first.accounts]
    assert keys == [adyen_webhooks.hmac_key(a) for a in again.accounts]
    assert len(set(keys)) == len(keys) and all(len(k) == 64 for k in keys)
    int(keys[0], 16)  # hex, as Adyen's key is
    passwords = [adyen_webhooks.webhook_password(a) for a in first.accounts]
    assert len(set(passwords)) == len(passwords)


async def test_cardco_lookups_never_see_adyen_payments(client: httpx.AsyncClient) -> None:
    body = adyen_body()
    psp = (await pay(client, body, key=new_key())).json()["pspReference"]
    by_id = await client.get(f"/v1/payments/{psp}", headers=auth())
    assert by_id.status_code == 404
    by_reference = await client.get("/v1/payments", params={"reference": body["reference"]},
                                    headers=auth())
    assert by_reference.json()["data"] == []


async def test_accounts_show_every_dialects_credentials(client: httpx.AsyncClient) -> None:
    rows = (await client.get("/_sandbox/accounts")).json()["data"]
    accounts = SandboxSettings.default().accounts
    assert [(r["account"], r["environment"]) for r in rows] == \
        [(a.account, a.environment) for a in accounts]
    for row, account in zip(rows, accounts, strict=True):
        same = {"api_key": account.api_key, "webhook_secret": account.webhook_secret}
        assert row["cardco"] == row["stripe"] == same
        assert row["adyen"]["hmac_key"] == adyen_webhooks.hmac_key(account)
        assert row["adyen"]["merchant_account"] == account.account


async def test_adyen_events_show_the_notification_they_become(hooked: Hooked) -> None:
    body = adyen_body("tok_async")
    psp = (await pay(hooked.client, body, key=new_key())).json()["pspReference"]
    await hooked.items_for(psp, 1)
    events = (await hooked.client.get("/_sandbox/events", params={"payment": psp})).json()["data"]
    assert [(e["type"], (e["notificationItem"] or {}).get("eventCode")) for e in events] == \
        [("payment.processing", None), ("payment.succeeded", "AUTHORISATION")]
    assert events[1]["notificationItem"]["merchantReference"] == body["reference"]
