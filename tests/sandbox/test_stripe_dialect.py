"""The sandbox's Stripe dialect: PaymentIntents over the shared core, over real HTTP.

Raw httpx against the sandbox on a free port (plus the official ``stripe`` SDK
where it is the independent check: its client decodes our answers and
``stripe.Webhook.construct_event`` verifies our signatures).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest
import stripe
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from harness.servers import serve_asgi
from paycore_sandbox.app import create_app
from paycore_sandbox.settings import SandboxSettings
from tests.sandbox.support import (
    OTHER_TEST_KEY,
    STORE_TEST_KEY,
    add_faults,
    advance,
    captured,
    create,
    error_of,
    eventually,
    ledger,
    new_reference,
    payment_body,
)

SECRETS = {(a.account, a.environment): a.webhook_secret
           for a in SandboxSettings.default().accounts}
STORE_SECRET = SECRETS[("acct_store", "test")]
VERSION = "2026-10-28.endive"


def stripe_headers(api_key: str = STORE_TEST_KEY, key: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {api_key}", "Stripe-Version": VERSION}
    if key is not None:
        headers["Idempotency-Key"] = key
    return headers


def intent_form(reference: str | None = None, payment_method: str = "pm_card_visa",
                **extra: str) -> dict[str, str]:
    form = {"amount": "4999", "currency": "eur", "payment_method": payment_method,
            "confirm": "true", "metadata[paycore_reference]": reference or new_reference(),
            "description": "order", "payment_method_types[]": "card"}
    form.update(extra)
    return form


async def create_intent(client: httpx.AsyncClient, form: dict[str, str], *,
                        key: str | None = None, api_key: str = STORE_TEST_KEY
                        ) -> httpx.Response:
    return await client.post("/v1/payment_intents", data=form,
                             headers=stripe_headers(api_key, key or str(uuid.uuid4())))


async def retrieve(client: httpx.AsyncClient, intent_id: str,
                   api_key: str = STORE_TEST_KEY) -> httpx.Response:
    return await client.get(f"/v1/payment_intents/{intent_id}",
                            headers=stripe_headers(api_key))


async def search(client: httpx.AsyncClient, reference: str,
                 api_key: str = STORE_TEST_KEY) -> httpx.Response:
    return await client.get("/v1/payment_intents/search",
                            params={"query": f"metadata['paycore_reference']:'{reference}'"},
                            headers=stripe_headers(api_key))


async def action(client: httpx.AsyncClient, intent_id: str, result: str) -> httpx.Response:
    return await client.post(f"/_sandbox/payments/{intent_id}/action", json={"result": result})


@contextlib.asynccontextmanager
async def sandbox(settings: SandboxSettings) -> AsyncIterator[httpx.AsyncClient]:
    async with serve_asgi(create_app(settings)) as url, \
            httpx.AsyncClient(base_url=url, timeout=10) as client:
        yield client


# -- create and retrieve ---------------------------------------------------------------

async def test_create_confirms_and_retrieve_answers_the_same_intent(
        client: httpx.AsyncClient) -> None:
    reference = new_reference()
    response = await create_intent(client, intent_form(reference))
    assert response.status_code == 200, response.text
    assert response.headers["Stripe-Version"] == VERSION
    assert response.headers["Request-Id"].startswith("req_")
    assert "Idempotent-Replayed" not in response.headers
    intent = response.json()
    assert intent["id"].startswith("pi_") and intent["object"] == "payment_intent"
    assert (intent["status"], intent["amount"], intent["currency"]) == ("succeeded", 4999, "eur")
    assert intent["amount_received"] == 4999 and intent["latest_charge"].startswith("ch_")
    assert intent["metadata"] == {"paycore_reference": reference}
    assert (intent["livemode"], intent["last_payment_error"], intent["next_action"]) == \
        (False, None, None)
    assert intent["payment_method"].startswith("pm_")
    again = await retrieve(client, intent["id"])
    assert (again.status_code, again.json()) == (200, intent)
    # The ledger shows it as the Stripe dialect's, under paycore's Stripe account id.
    [row] = await ledger(client)
    assert (row["id"], row["dialect"], row["provider_account"], row["reference"]) == \
        (intent["id"], "stripe", "stripe:acct_store:test", reference)


async def test_the_official_sdk_reads_the_dialect(sandbox_url: str) -> None:
    client = stripe.StripeClient(STORE_TEST_KEY, base_addresses={"api": sandbox_url},
                                 http_client=stripe.HTTPXClient(), max_network_retries=0)
    reference = new_reference()
    intent = await client.v1.payment_intents.create_async(params={
        "amount": 1200, "currency": "eur", "payment_method": "pm_card_visa", "confirm": True,
        "metadata": {"paycore_reference": reference}, "payment_method_types": ["card"]})
    assert (intent.status, intent.metadata["paycore_reference"]) == ("succeeded", reference)
    fetched = await client.v1.payment_intents.retrieve_async(intent.id)
    assert fetched.id == intent.id
    found = await client.v1.payment_intents.search_async(
        params={"query": f"metadata['paycore_reference']:'{reference}'"})
    assert [i.id for i in found.data] == [intent.id]
    with pytest.raises(stripe.CardError) as declined:
        await client.v1.payment_intents.create_async(params={
            "amount": 1200, "currency": "eur", "payment_method": "pm_card_chargeDeclined",
            "confirm": True, "payment_method_types": ["card"]})
    assert declined.value.code == "card_declined"
    assert declined.value.error is not None and declined.value.error.payment_intent is not None
    assert declined.value.error.payment_intent.status == "requires_payment_method"


@pytest.mark.parametrize(("token", "http", "status", "code", "decline_code"), [
    ("pm_card_visa", 200, "succeeded", None, None),
    ("pm_card_chargeDeclined", 402, "requires_payment_method", "card_declined",
     "generic_decline"),
    ("pm_card_chargeDeclinedInsufficientFunds", 402, "requires_payment_method",
     "card_declined", "insufficient_funds"),
    ("pm_card_chargeDeclinedExpiredCard", 402, "requires_payment_method", "expired_card",
     "expired_card"),
    ("pm_card_threeDSecure2Required", 200, "requires_action", None, None),
    ("pm_card_async", 200, "processing", None, None),
])
async def test_each_test_payment_method_has_its_outcome(
        client: httpx.AsyncClient, token: str, http: int, status: str, code: str | None,
        decline_code: str | None) -> None:
    response = await create_intent(client, intent_form(payment_method=token))
    assert response.status_code == http, response.text
    if http == 402:
        error = error_of(response)
        assert (error["type"], error["code"], error["decline_code"]) == \
            ("card_error", code, decline_code)
        intent = error["payment_intent"]
        assert intent["last_payment_error"]["code"] == code
        assert intent["last_payment_error"]["decline_code"] == decline_code
        assert intent["payment_method"] is None
    else:
        intent = response.json()
    assert intent["status"] == status
    assert (await retrieve(client, intent["id"])).json() == intent


async def test_async_payment_method_succeeds_after_the_delay(
        client: httpx.AsyncClient) -> None:
    intent = (await create_intent(client, intent_form(payment_method="pm_card_async"))).json()
    assert intent["status"] == "processing"
    await advance(client, 1)  # async_delay_s
    assert (await retrieve(client, intent["id"])).json()["status"] == "succeeded"


async def test_three_d_secure_completed(client: httpx.AsyncClient) -> None:
    form = intent_form(payment_method="pm_card_threeDSecure2Required",
                       return_url="https://shop.example/return")
    del form["payment_method_types[]"]
    intent = (await create_intent(client, form)).json()
    assert intent["status"] == "requires_action"
    assert intent["next_action"]["type"] == "redirect_to_url"
    assert intent["next_action"]["redirect_to_url"]["return_url"] == \
        "https://shop.example/return"
    done = await action(client, intent["id"], "succeeded")
    assert (done.status_code, done.json()["object"], done.json()["status"]) == \
        (200, "payment_intent", "succeeded")
    assert (await retrieve(client, intent["id"])).json()["status"] == "succeeded"


async def test_three_d_secure_abandoned_returns_to_requires_payment_method(
        client: httpx.AsyncClient) -> None:
    intent = (await create_intent(
        client, intent_form(payment_method="pm_card_threeDSecure2Required"))).json()
    assert intent["next_action"]["type"] == "use_stripe_sdk"  # no return_url: no redirect
    abandoned = (await action(client, intent["id"], "failed")).json()
    assert abandoned["status"] == "requires_payment_method"
    assert abandoned["last_payment_error"]["code"] == "payment_intent_authentication_failure"
    assert (await retrieve(client, intent["id"])).json() == abandoned


# -- authentication, errors, isolation ---------------------------------------------------

async def test_bad_or_missing_key_is_401_and_never_echoes_the_key(
        client: httpx.AsyncClient) -> None:
    missing = await client.post("/v1/payment_intents", data=intent_form())
    assert missing.status_code == 401
    assert error_of(missing)["type"] == "invalid_request_error"
    wrong_key = "sk_test_not_a_sandbox_key_123456"
    wrong = await create_intent(client, intent_form(), api_key=wrong_key)
    assert wrong.status_code == 401 and wrong_key not in wrong.text
    bad_version = await client.get("/v1/payment_intents/pi_x",
                                   headers={**stripe_headers(), "Stripe-Version": "latest"})
    assert (bad_version.status_code, error_of(bad_version)["param"]) == (400, "Stripe-Version")
    assert await ledger(client) == []


async def test_unknown_intent_is_404_resource_missing(client: httpx.AsyncClient) -> None:
    response = await retrieve(client, "pi_doesnotexist")
    error = error_of(response)
    assert (response.status_code, error["type"], error["code"], error["param"]) == \
        (404, "invalid_request_error", "resource_missing", "intent")


async def test_each_dialect_sees_only_its_own_payments_and_account(
        client: httpx.AsyncClient) -> None:
    intent = (await create_intent(client, intent_form())).json()
    cardco = (await create(client, payment_body())).json()
    assert (await retrieve(client, cardco["id"])).status_code == 404
    assert (await retrieve(client, intent["id"], api_key=OTHER_TEST_KEY)).status_code == 404
    cardco_view = await client.get(f"/v1/payments/{intent['id']}", headers={
        "Authorization": f"Bearer {STORE_TEST_KEY}", "Cardco-Account": "acct_store",
        "Cardco-Version": "2026-11-01"})
    assert cardco_view.status_code == 404


@pytest.mark.parametrize(("change", "param", "code"), [
    ({"colour": "red"}, "colour", "parameter_unknown"),
    ({"amount": "-1"}, "amount", "parameter_invalid"),
    ({"payment_method": "pm_card_unknown"}, "payment_method", "resource_missing"),
    ({"confirm": "false"}, "confirm", "parameter_invalid"),
    ({"payment_method_types[]": None}, "return_url", "parameter_invalid"),
])
async def test_invalid_create_is_400_and_stores_nothing(
        client: httpx.AsyncClient, change: dict[str, str | None], param: str,
        code: str) -> None:
    good = intent_form()
    bad = {k: v for k, v in {**good, **change}.items() if v is not None}
    key = str(uuid.uuid4())
    response = await create_intent(client, bad, key=key)
    error = error_of(response)
    assert (response.status_code, error["type"], error["code"], error["param"]) == \
        (400, "invalid_request_error", code, param)
    assert await ledger(client) == []
    # Failed validation saves nothing under the key: fixed parameters execute with it.
    fixed = await create_intent(client, good, key=key)
    assert fixed.status_code == 200 and "Idempotent-Replayed" not in fixed.headers


async def test_a_body_that_is_not_a_form_is_400(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/payment_intents", content=b"{\"amount\": 1}",
                                 headers=stripe_headers(key=str(uuid.uuid4())))
    assert (response.status_code, error_of(response)["type"]) == (400, "invalid_request_error")


# -- idempotency ---------------------------------------------------------------------------

async def test_same_key_replays_the_stored_answer(client: httpx.AsyncClient) -> None:
    key, form = str(uuid.uuid4()), intent_form()
    first = await create_intent(client, form, key=key)
    replay = await create_intent(client, form, key=key)
    assert replay.status_code == 200 and replay.headers["Idempotent-Replayed"] == "true"
    assert replay.content == first.content
    assert len(await ledger(client)) == 1


async def test_a_declined_answer_is_replayed(client: httpx.AsyncClient) -> None:
    key, form = str(uuid.uuid4()), intent_form(payment_method="pm_card_chargeDeclined")
    first = await create_intent(client, form, key=key)
    replay = await create_intent(client, form, key=key)
    assert (first.status_code, replay.status_code) == (402, 402)
    assert replay.headers["Idempotent-Replayed"] == "true" and replay.content == first.content


async def test_a_500_is_stored_and_replayed(client: httpx.AsyncClient) -> None:
    key, form = str(uuid.uuid4()), intent_form()
    await add_faults(client, {"fault": "error_500_after", "times": 1,
                              "match": {"reference": form["metadata[paycore_reference]"]}})
    first = await create_intent(client, form, key=key)
    assert (first.status_code, error_of(first)["type"]) == (500, "api_error")
    [row] = await ledger(client)  # it executed: the intent exists
    assert row["status"] == "succeeded"
    replay = await create_intent(client, form, key=key)
    assert (replay.status_code, replay.headers["Idempotent-Replayed"]) == (500, "true")
    assert replay.content == first.content
    assert len(await ledger(client)) == 1


async def test_same_key_other_parameters_is_400_idempotency_error(
        client: httpx.AsyncClient) -> None:
    key, form = str(uuid.uuid4()), intent_form()
    assert (await create_intent(client, form, key=key)).status_code == 200
    other = await create_intent(client, {**form, "amount": "5000"}, key=key)
    error = error_of(other)
    assert (other.status_code, error["type"]) == (400, "idempotency_error")
    assert "Idempotent-Replayed" not in other.headers
    assert len(await ledger(client)) == 1


async def test_same_key_while_executing_is_409_and_saves_nothing_for_it(
        client: httpx.AsyncClient) -> None:
    key, form = str(uuid.uuid4()), intent_form()
    await add_faults(client, {"fault": "delay", "delay_ms": 1500, "times": 1,
                              "match": {"reference": form["metadata[paycore_reference]"]}})
    first = asyncio.create_task(create_intent(client, form, key=key))

    async def executing() -> bool:
        return len(await ledger(client)) == 1
    await eventually(executing, what="the first request to execute")
    second = await create_intent(client, form, key=key)
    error = error_of(second)
    assert (second.status_code, error["code"]) == (409, "idempotency_key_in_use")
    done = await first
    assert done.status_code == 200
    assert (await create_intent(client, form, key=key)).headers["Idempotent-Replayed"] == "true"


async def test_without_a_key_every_request_executes(client: httpx.AsyncClient) -> None:
    form = intent_form()
    for _ in range(2):
        response = await client.post("/v1/payment_intents", data=form,
                                      headers=stripe_headers())
        assert response.status_code == 200
    assert len(await ledger(client)) == 2


async def test_keys_do_not_collide_with_cardco_keys(client: httpx.AsyncClient) -> None:
    key = str(uuid.uuid4())
    assert (await create(client, payment_body(), key=key)).status_code == 201
    stripe_answer = await create_intent(client, intent_form(), key=key)
    assert stripe_answer.status_code == 200 and "Idempotent-Replayed" not in stripe_answer.headers


# -- faults on Stripe paths -------------------------------------------------------------

async def test_lost_response_was_processed_and_replays(
        client: httpx.AsyncClient, impatient: httpx.AsyncClient) -> None:
    key, form = str(uuid.uuid4()), intent_form()
    await add_faults(client, {"fault": "lose_response", "times": 1,
                              "match": {"dialect": "stripe", "operation": "create"}})
    with pytest.raises(httpx.ReadTimeout):
        await create_intent(impatient, form, key=key)
    [row] = await ledger(client)
    replay = await create_intent(client, form, key=key)
    assert replay.headers["Idempotent-Replayed"] == "true" and replay.json()["id"] == row["id"]


async def test_dropped_request_is_never_processed(
        client: httpx.AsyncClient, impatient: httpx.AsyncClient) -> None:
    key, form = str(uuid.uuid4()), intent_form()
    await add_faults(client, {"fault": "drop_request", "times": 1, "match": {"any": True}})
    with pytest.raises(httpx.ReadTimeout):
        await create_intent(impatient, form, key=key)
    [seen] = await captured(client)
    assert (seen["path"], seen["fault"], seen["status"]) == \
        ("/v1/payment_intents", "drop_request", None)
    assert seen["headers"]["authorization"] == "sk_test"  # the key is never captured
    assert await ledger(client) == []
    retry = await create_intent(client, form, key=key)
    assert retry.status_code == 200 and "Idempotent-Replayed" not in retry.headers


@pytest.mark.parametrize(("fault", "status", "type_"), [
    ("not_processed_503", 503, "api_error"),
    ("rate_limit", 429, "invalid_request_error"),
])
async def test_arrival_faults_answer_in_stripe_shape_and_execute_nothing(
        client: httpx.AsyncClient, fault: str, status: int, type_: str) -> None:
    key, form = str(uuid.uuid4()), intent_form()
    await add_faults(client, {"fault": fault, "times": 1, "match": {"any": True}})
    response = await create_intent(client, form, key=key)
    assert (response.status_code, error_of(response)["type"]) == (status, type_)
    assert "Retry-After" in response.headers and "Request-Id" in response.headers
    assert await ledger(client) == []
    assert (await create_intent(client, form, key=key)).status_code == 200


async def test_malformed_body_is_a_200_that_does_not_parse(client: httpx.AsyncClient) -> None:
    key, form = str(uuid.uuid4()), intent_form()
    await add_faults(client, {"fault": "malformed_body", "times": 1, "match": {"any": True}})
    response = await create_intent(client, form, key=key)
    assert response.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        response.json()
    assert len(await ledger(client)) == 1


async def test_a_dialect_match_leaves_other_dialects_alone(client: httpx.AsyncClient) -> None:
    await add_faults(client, {"fault": "not_processed_503", "match": {"dialect": "stripe"}})
    assert (await create(client, payment_body())).status_code == 201
    assert (await create_intent(client, intent_form())).status_code == 503


async def test_lookups_share_the_fault_and_rate_limit_machinery(
        client: httpx.AsyncClient) -> None:
    intent = (await create_intent(client, intent_form())).json()
    await add_faults(client, {"fault": "error_500_after", "times": 1,
                              "match": {"operation": "lookup"}})
    failed = await retrieve(client, intent["id"])
    assert (failed.status_code, error_of(failed)["type"]) == (500, "api_error")
    assert (await retrieve(client, intent["id"])).status_code == 200


# -- search ----------------------------------------------------------------------------------

async def test_search_by_reference_newest_first_and_per_account(
        client: httpx.AsyncClient) -> None:
    reference = new_reference()
    first = (await create_intent(client, intent_form(reference))).json()
    second = (await create_intent(
        client, intent_form(reference, payment_method="pm_card_chargeDeclined"))
    ).json()["error"]["payment_intent"]
    await create_intent(client, intent_form())  # another reference
    response = await search(client, reference)
    body = response.json()
    assert (response.status_code, body["object"], body["has_more"]) == \
        (200, "search_result", False)
    assert [i["id"] for i in body["data"]] == [second["id"], first["id"]]
    assert (await search(client, reference, api_key=OTHER_TEST_KEY)).json()["data"] == []


@pytest.mark.parametrize("query", [None, "metadata['paycore_reference']", "amount:'1'",
                                   "status:'succeeded' OR status:'canceled'"])
async def test_a_bad_search_query_is_400(client: httpx.AsyncClient, query: str | None) -> None:
    params = {} if query is None else {"query": query}
    response = await client.get("/v1/payment_intents/search", params=params,
                                headers=stripe_headers())
    error = error_of(response)
    assert (response.status_code, error["type"], error["param"]) == \
        (400, "invalid_request_error", "query")


async def test_search_lags_creation_by_the_configured_sandbox_time() -> None:
    async with sandbox(SandboxSettings(stripe_search_lag_s=30)) as client:
        reference = new_reference()
        intent = (await create_intent(client, intent_form(reference))).json()
        assert (await search(client, reference)).json()["data"] == []
        assert (await retrieve(client, intent["id"])).status_code == 200  # by id: consistent
        await advance(client, 29)
        assert (await search(client, reference)).json()["data"] == []
        await advance(client, 1)
        assert [i["id"] for i in (await search(client, reference)).json()["data"]] == \
            [intent["id"]]


async def test_lookup_stale_hides_an_intent_from_search_and_retrieve(
        client: httpx.AsyncClient) -> None:
    reference = new_reference()
    intent = (await create_intent(client, intent_form(reference))).json()
    await add_faults(client, {"fault": "lookup_stale", "times": 2,
                              "match": {"reference": reference}})
    assert (await search(client, reference)).json()["data"] == []
    assert (await retrieve(client, intent["id"])).status_code == 404
    assert len((await search(client, reference)).json()["data"]) == 1



async def test_search_stale_hides_an_intent_from_search_only_once(
        client: httpx.AsyncClient) -> None:
    reference = new_reference()
    intent = (await create_intent(client, intent_form(reference))).json()
    await add_faults(client, {"fault": "search_stale", "match": {"reference": reference,
                                                                 "dialect": "cardco"}})
    assert len((await search(client, reference)).json()["data"]) == 1  # Cardco's rule only
    await client.delete("/_sandbox/faults")
    await add_faults(client, {"fault": "search_stale", "times": 1,
                              "match": {"reference": reference, "dialect": "stripe"}})

    async def rules() -> list[Any]:
        return [(r["fault"], r["times"])
                for r in (await client.get("/_sandbox/faults")).json()["rules"]]

    # Retrieve by id is consistent and does not use the rule up.
    assert (await retrieve(client, intent["id"])).status_code == 200
    assert await rules() == [("search_stale", 1)]
    # Search: byte for byte the answer for a reference nothing carries.
    hidden = await search(client, reference)
    missing = await search(client, new_reference())
    assert (hidden.status_code, hidden.content) == (missing.status_code, missing.content)
    assert hidden.json()["data"] == []
    assert await rules() == []
    assert [i["id"] for i in (await search(client, reference)).json()["data"]] == \
        [intent["id"]]


# -- webhooks --------------------------------------------------------------------------------

@dataclass
class Hooks:
    received: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)

    async def handle(self, request: Request) -> Response:
        self.received.append((request.url.path, dict(request.headers), await request.body()))
        return Response(status_code=200)

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/stripe", self.handle, methods=["POST"]),
                                 Route("/cardco", self.handle, methods=["POST"])])

    def at(self, path: str) -> list[tuple[dict[str, str], bytes]]:
        return [(h, b) for p, h, b in self.received if p == path]


@contextlib.asynccontextmanager
async def with_hooks(settings: SandboxSettings | None = None,
                     ) -> AsyncIterator[tuple[httpx.AsyncClient, Hooks, str]]:
    hooks = Hooks()
    async with serve_asgi(hooks.app()) as base, \
            sandbox(settings or SandboxSettings(webhook_time_scale=0.0001)) as client:
        yield client, hooks, base


async def _quiescent(client: httpx.AsyncClient) -> None:
    async def idle() -> bool:
        return bool((await client.get("/_sandbox/webhooks/pending")).json()["pending"] == 0)
    await eventually(idle, what="webhook deliveries to finish")


async def test_stripe_events_are_signed_for_the_official_check_and_go_to_stripe_endpoints(
        ) -> None:
    async with with_hooks() as (client, hooks, base):
        for url, dialect in [(f"{base}/stripe", "stripe"), (f"{base}/cardco", None)]:
            body = {"url": url} if dialect is None else {"url": url, "dialect": dialect}
            assert (await client.post("/_sandbox/webhooks/endpoints", json=body)
                    ).status_code == 200
        listed = (await client.get("/_sandbox/webhooks/endpoints")).json()["data"]
        assert listed == [f"stripe={base}/stripe", f"{base}/cardco"]
        intent = (await create_intent(client, intent_form())).json()
        cardco = (await create(client, payment_body())).json()
        await _quiescent(client)
        [(headers, raw)] = hooks.at("/stripe")
        [(cardco_headers, cardco_raw)] = hooks.at("/cardco")
        assert orjson.loads(cardco_raw)["data"]["object"]["id"] == cardco["id"]
        assert "stripe-signature" not in cardco_headers
        # The official check accepts it with the account's secret...
        event = stripe.Webhook.construct_event(raw, headers["stripe-signature"], STORE_SECRET)
        assert (event.type, event.data.object["id"], event.livemode) == \
            ("payment_intent.succeeded", intent["id"], False)
        assert event.id.startswith("evt_") and event.object == "event"
        recorded = (await client.get("/_sandbox/events",
                                     params={"payment": intent["id"]})).json()["data"]
        assert orjson.dumps(recorded[0]) == raw  # the recorded event, byte for byte
        assert abs(int(headers["stripe-signature"].split(",")[0][2:]) - time.time()) < 5
        # ...and refuses another account's secret, or a changed body.
        with pytest.raises(stripe.SignatureVerificationError):
            stripe.Webhook.construct_event(raw, headers["stripe-signature"],
                                           SECRETS[("acct_other", "test")])
        with pytest.raises(stripe.SignatureVerificationError):
            stripe.Webhook.construct_event(raw.replace(b"4999", b"4998"),
                                           headers["stripe-signature"], STORE_SECRET)


async def test_stripe_event_types_follow_the_intent() -> None:
    async with with_hooks() as (client, hooks, base):
        await client.post("/_sandbox/webhooks/endpoints",
                          json={"url": f"{base}/stripe", "dialect": "stripe"})
        declined = (await create_intent(client, intent_form(
            payment_method="pm_card_chargeDeclined"))).json()["error"]["payment_intent"]
        three_ds = (await create_intent(client, intent_form(
            payment_method="pm_card_threeDSecure2Required"))).json()
        await action(client, three_ds["id"], "failed")
        paid = (await create_intent(client, intent_form())).json()
        refund = await client.post(f"/_sandbox/payments/{paid['id']}/refund", json={})
        assert refund.json()["object"] == "payment_intent"
        await _quiescent(client)
        seen = [(e["type"], e["data"]["object"].get("payment_intent",
                                                      e["data"]["object"]["id"]))
                for e in (orjson.loads(b) for _, b in hooks.at("/stripe"))]
        assert sorted(seen) == sorted([
            ("payment_intent.payment_failed", declined["id"]),
            ("payment_intent.requires_action", three_ds["id"]),
            ("payment_intent.payment_failed", three_ds["id"]),
            ("payment_intent.succeeded", paid["id"]),
            ("charge.refunded", paid["id"]),
        ])
        charge = next(orjson.loads(b)["data"]["object"] for _, b in hooks.at("/stripe")
                      if orjson.loads(b)["type"] == "charge.refunded")
        assert (charge["object"], charge["refunded"], charge["amount_refunded"]) == \
            ("charge", True, 4999)


async def test_webhook_faults_apply_to_stripe_events() -> None:
    async with with_hooks() as (client, hooks, base):
        await client.post("/_sandbox/webhooks/endpoints",
                          json={"url": f"{base}/stripe", "dialect": "stripe"})
        form = intent_form()
        await add_faults(client, {"fault": "webhook_duplicate", "times": 1, "match": {
            "reference": form["metadata[paycore_reference]"], "dialect": "stripe"}})
        intent = (await create_intent(client, form)).json()
        await _quiescent(client)
        bodies = [b for _, b in hooks.at("/stripe")]
        assert len(bodies) == 2 and bodies[0] == bodies[1]  # same event, same evt_ id
        for headers, raw in hooks.at("/stripe"):
            event = stripe.Webhook.construct_event(raw, headers["stripe-signature"],
                                                   STORE_SECRET)
            assert event.data.object["id"] == intent["id"]


async def test_endpoints_from_settings_name_their_dialect(tmp_path: Any) -> None:
    hooks = Hooks()
    async with serve_asgi(hooks.app()) as base:
        settings = SandboxSettings.from_env({
            "PAYCORE_SANDBOX_WEBHOOK_URLS": f"stripe={base}/stripe,{base}/cardco",
            "PAYCORE_SANDBOX_WEBHOOK_TIME_SCALE": "0.0001"})
        async with sandbox(settings) as client:
            await create_intent(client, intent_form())
            await _quiescent(client)
            assert len(hooks.at("/stripe")) == 1 and hooks.at("/cardco") == []


def test_settings_parse_dialect_endpoints_and_search_lag() -> None:
    settings = SandboxSettings.from_env({
        "PAYCORE_SANDBOX_WEBHOOK_URLS": "stripe=http://a.example/h?x=1,http://b.example/h?y=2",
        "PAYCORE_SANDBOX_STRIPE_SEARCH_LAG_S": "45"})
    assert settings.webhook_endpoints == ["stripe=http://a.example/h?x=1",
                                          "http://b.example/h?y=2"]
    assert settings.stripe_search_lag_s == 45
    with pytest.raises(ValueError, match=r"webhook_endpoints\[0\]"):
        SandboxSettings.from_env({"PAYCORE_SANDBOX_WEBHOOK_URLS": "stripe=ftp://a.example"})
    with pytest.raises(ValueError, match="stripe_search_lag_s"):
        SandboxSettings.from_env({"PAYCORE_SANDBOX_STRIPE_SEARCH_LAG_S": "-1"})


async def test_an_endpoint_with_an_unknown_dialect_is_400(client: httpx.AsyncClient) -> None:
    response = await client.post("/_sandbox/webhooks/endpoints",
                                 json={"url": "http://a.example/h", "dialect": "paypal"})
    assert (response.status_code, error_of(response)["param"]) == (400, "dialect")
