"""The sandbox's Stripe dialect after the payment: holds, captures, cancels and refunds, over real HTTP.

The official ``stripe`` SDK is the independent check that the objects read as Stripe's; the
outcome rule by amount and the faults are the core's (``test_refunds.py``, ``test_captures.py``),
and the paycore client's endings are ``tests/unit/test_stripe_operations_client.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
import stripe

from harness.servers import serve_asgi
from paycore_sandbox.app import create_app
from paycore_sandbox.settings import SandboxSettings
from tests.sandbox.support import (
    STORE_TEST_KEY,
    advance,
    auth,
    error_of,
    eventually,
    new_reference,
    paid,
    post,
)
from tests.sandbox.test_stripe_dialect import (
    STORE_SECRET,
    _quiescent,
    create_intent,
    intent_form,
    stripe_headers,
    with_hooks,
)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with serve_asgi(create_app(SandboxSettings(async_delay_s=0.05))) as url, \
            httpx.AsyncClient(base_url=url, timeout=10) as c:
        yield c


async def held(client: httpx.AsyncClient) -> dict[str, Any]:
    response = await create_intent(client, intent_form(capture_method="manual"))
    assert response.status_code == 200, response.text
    intent: dict[str, Any] = response.json()
    return intent


async def charged(client: httpx.AsyncClient) -> dict[str, Any]:
    response = await create_intent(client, intent_form())
    assert response.status_code == 200, response.text
    intent: dict[str, Any] = response.json()
    return intent


async def stripe_post(client: httpx.AsyncClient, path: str, form: dict[str, str], *,
                      key: str | None = None) -> httpx.Response:
    return await client.post(path, data=form, headers=stripe_headers(key=key or str(uuid.uuid4())))


async def test_the_official_sdk_captures_cancels_and_refunds(client: httpx.AsyncClient) -> None:
    sdk = stripe.StripeClient(STORE_TEST_KEY, base_addresses={"api": str(client.base_url)},
                              http_client=stripe.HTTPXClient(), max_network_retries=0)
    hold = await sdk.v1.payment_intents.create_async(params={
        "amount": 4999, "currency": "eur", "payment_method": "pm_card_visa", "confirm": True,
        "capture_method": "manual",
        "automatic_payment_methods": {"enabled": True, "allow_redirects": "never"},
        "metadata": {"paycore_reference": new_reference()}})
    assert (hold.status, hold.amount_capturable, hold.capture_method) == (
        "requires_capture", 4999, "manual")
    captured = await sdk.v1.payment_intents.capture_async(hold.id, params={
        "amount_to_capture": 3000, "metadata": {"paycore_capture_reference": "CAP-1"}})
    assert (captured.status, captured.amount_received, captured.latest_charge) == (
        "succeeded", 3000, "ch_" + hold.id.removeprefix("pi_"))
    assert captured.metadata["paycore_capture_reference"] == "CAP-1"
    refund = await sdk.v1.refunds.create_async(params={
        "payment_intent": hold.id, "amount": 1000, "reason": "requested_by_customer",
        "metadata": {"paycore_reference": "REF-1", "note": "kept"}})
    assert (refund.status, refund.amount, refund.payment_intent, refund.reason) == (
        "succeeded", 1000, hold.id, "requested_by_customer")
    assert refund.metadata is not None
    assert refund.metadata.to_dict() == {"paycore_reference": "REF-1", "note": "kept"}
    assert (await sdk.v1.refunds.retrieve_async(refund.id)).id == refund.id
    listed = await sdk.v1.refunds.list_async(params={"payment_intent": hold.id})
    assert [r.id for r in listed.data] == [refund.id]
    with pytest.raises(stripe.InvalidRequestError) as too_much:
        await sdk.v1.refunds.create_async(params={"payment_intent": hold.id, "amount": 2001})
    assert (too_much.value.code, too_much.value.param) == ("amount_too_large", "amount")
    other = await sdk.v1.payment_intents.create_async(params={
        "amount": 4999, "currency": "eur", "payment_method": "pm_card_visa", "confirm": True,
        "capture_method": "manual",
        "automatic_payment_methods": {"enabled": True, "allow_redirects": "never"}})
    canceled = await sdk.v1.payment_intents.cancel_async(other.id, params={
        "cancellation_reason": "requested_by_customer"})
    assert (canceled.status, canceled.cancellation_reason) == ("canceled", "requested_by_customer")
    with pytest.raises(stripe.InvalidRequestError) as again:
        await sdk.v1.payment_intents.cancel_async(other.id)
    assert again.value.code == "payment_intent_unexpected_state"
    assert again.value.error is not None and again.value.error.payment_intent is not None


async def test_a_hold_lapses_as_stripe_cancels_it(client: httpx.AsyncClient) -> None:
    hold = await held(client)
    assert (hold["status"], hold["amount_capturable"], hold["amount_received"]) == (
        "requires_capture", 4999, 0)
    assert hold["latest_charge"] is not None
    await advance(client, 7 * 86400 + 1)
    lapsed = (await client.get(f"/v1/payment_intents/{hold['id']}", headers=stripe_headers())).json()
    assert (lapsed["status"], lapsed["cancellation_reason"]) == ("canceled", "automatic")
    refused = await stripe_post(client, f"/v1/payment_intents/{hold['id']}/capture", {})
    assert (refused.status_code, error_of(refused)["code"]) == (400, "payment_intent_unexpected_state")


async def test_a_pending_capture_shows_the_intent_processing(client: httpx.AsyncClient) -> None:
    hold = await held(client)
    made = await stripe_post(client, f"/v1/payment_intents/{hold['id']}/capture",
                             {"amount_to_capture": "3091"})
    assert (made.json()["status"], made.json()["amount_capturable"]) == ("processing", 0)

    async def captured() -> dict[str, Any] | None:
        response = await client.get(f"/v1/payment_intents/{hold['id']}", headers=stripe_headers())
        intent: dict[str, Any] = response.json()
        return intent if intent["status"] == "succeeded" else None

    assert (await eventually(captured, what="the capture to settle"))["amount_received"] == 3091


async def test_the_refund_paths_are_stripes_with_stripe_version_and_cardcos_without(
        client: httpx.AsyncClient) -> None:
    intent, payment = await charged(client), await paid(client)
    stripe_refund = await stripe_post(client, "/v1/refunds",
                                      {"payment_intent": intent["id"], "amount": "100"})
    assert (stripe_refund.status_code, stripe_refund.json()["object"]) == (200, "refund")
    cardco_refund = await post(client, "/v1/refunds", {"payment": payment["id"], "amount": 100,
                                                       "reference": new_reference()})
    assert (cardco_refund.status_code, cardco_refund.json()["payment"]) == (201, payment["id"])
    # Each wire sees its own refunds only.
    cardco_view = await client.get("/v1/refunds", params={"payment": intent["id"]}, headers=auth())
    assert cardco_view.json()["data"] == []
    stripe_view = await client.get("/v1/refunds", params={"payment_intent": intent["id"]},
                                   headers=stripe_headers())
    assert [r["id"] for r in stripe_view.json()["data"]] == [stripe_refund.json()["id"]]
    foreign = await client.get(f"/v1/refunds/{cardco_refund.json()['id']}", headers=stripe_headers())
    assert (foreign.status_code, error_of(foreign)["code"]) == (404, "resource_missing")
    # A Cardco payment is no PaymentIntent.
    unknown = await stripe_post(client, "/v1/refunds", {"payment_intent": payment["id"]})
    assert (unknown.status_code, error_of(unknown)["param"]) == (400, "payment_intent")


async def test_a_validation_failure_stores_nothing_and_a_refusal_is_replayed(
        client: httpx.AsyncClient) -> None:
    intent, key = await charged(client), str(uuid.uuid4())
    invalid = await stripe_post(client, "/v1/refunds", {"payment_intent": intent["id"], "amount": "x"},
                                key=key)
    assert (invalid.status_code, error_of(invalid)["param"]) == (400, "amount")
    too_much = {"payment_intent": intent["id"], "amount": "5000"}
    refused = await stripe_post(client, "/v1/refunds", too_much, key=key)  # the key was not kept
    assert (refused.status_code, error_of(refused)["code"]) == (400, "amount_too_large")
    again = await stripe_post(client, "/v1/refunds", too_much, key=key)
    assert (again.content, again.headers["Idempotent-Replayed"]) == (refused.content, "true")
    # A key names one request: another path with it is refused.
    elsewhere = await stripe_post(client, f"/v1/payment_intents/{intent['id']}/cancel", {}, key=key)
    assert (elsewhere.status_code, error_of(elsewhere)["type"]) == (400, "idempotency_error")
    for path, form in (("/v1/refunds", {"charge": "ch_1"}),
                       (f"/v1/payment_intents/{intent['id']}/cancel", {"cancellation_reason": "bored"}),
                       (f"/v1/payment_intents/{intent['id']}/capture", {"amount": "1"})):
        assert (await stripe_post(client, path, form)).status_code == 400


async def test_refund_events_are_stripes_and_go_to_stripe_endpoints_only() -> None:
    async with with_hooks(SandboxSettings(webhook_time_scale=0.0001, async_delay_s=0.05)) as (
            client, hooks, base):
        for body in ({"url": f"{base}/stripe", "dialect": "stripe"}, {"url": f"{base}/cardco"}):
            assert (await client.post("/_sandbox/webhooks/endpoints", json=body)).status_code == 200
        intent, hold = await charged(client), await held(client)
        refund = (await stripe_post(client, "/v1/refunds", {
            "payment_intent": intent["id"], "amount": "1091", "metadata[paycore_reference]": "REF-9"})).json()
        await stripe_post(client, f"/v1/payment_intents/{hold['id']}/capture",
                          {"metadata[paycore_capture_reference]": "CAP-9"})

        async def settled() -> bool:
            response = await client.get("/_sandbox/events", params={"payment": intent["id"]})
            return any(e["type"] == "charge.refunded" for e in response.json()["data"])

        await eventually(settled, what="the refund to settle")
        await _quiescent(client)
        assert hooks.at("/cardco") == []
        seen = [stripe.Webhook.construct_event(raw, headers["stripe-signature"], STORE_SECRET)
                for headers, raw in hooks.at("/stripe")]
        objects = [(e.type, e.data.object.to_dict()) for e in seen]
        about_refund = [(t, o["status"]) for t, o in objects if o["id"] == refund["id"]]
        assert sorted(about_refund) == [("refund.created", "pending"), ("refund.updated", "succeeded")]
        [created] = [o for t, o in objects if t == "refund.created"]
        assert (created["object"], created["payment_intent"], created["metadata"]["paycore_reference"]) == (
            "refund", intent["id"], "REF-9")
        # A capture has no object and no event of its own at Stripe: the intent's tell of it.
        about_hold = sorted((t, o["status"]) for t, o in objects if o["id"] == hold["id"])
        assert about_hold == [("payment_intent.amount_capturable_updated", "requires_capture"),
                              ("payment_intent.succeeded", "succeeded")]
        [succeeded] = [o for t, o in objects if t == "payment_intent.succeeded" and o["id"] == hold["id"]]
        assert succeeded["metadata"]["paycore_capture_reference"] == "CAP-9"
        assert all(orjson.loads(raw)["type"] != "capture.succeeded" for _, raw in hooks.at("/stripe"))
