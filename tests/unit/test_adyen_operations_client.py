"""The Adyen client's captures, cancels and refunds against the real sandbox over HTTP, and the
notifications that end them.

Adyen answers a modification "received" and tells its ending only by notification, so every
send here is ``PENDING`` (never a success) or ``REJECTED``/``UNKNOWN``; the endings come as the
sandbox's signed ``REFUND``/``CAPTURE``/``CANCELLATION`` items (amounts ending 91/92/93, rules'
refusals), verified by paycore's own verifier and read by
:func:`~paycore.providers.adyen.parse_operation_item`. Resends go under the same key with the
same bytes; the lookups answer ``unavailable`` and send nothing. Nothing the provider does raises.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
import pytest
from Adyen.util import generate_notification_sig  # type: ignore[import-untyped]
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from harness.servers import free_port, serve_asgi
from paycore.clock import SystemClock
from paycore.config import ProviderAccountConfig, Secret
from paycore.domain import OperationKind, OutcomeKind
from paycore.errors import InvalidPaymentMethod
from paycore.evidence import judge
from paycore.providers.adyen import (
    OPERATION_EVENT_CODES,
    AdyenProvider,
    InvalidItem,
    parse_operation_item,
    parse_operation_notification,
)
from paycore.providers.adyen.notifications import batch_items, parse_item
from paycore.providers.adyen.operations import NO_MODIFICATION_LOOKUP, build_operation_body
from paycore.providers.adyen.provider import AdyenAccountConfig
from paycore.providers.base import (
    Notification,
    OperationCalls,
    OperationEnding,
    OperationNotification,
    OperationOutcome,
    StoredRequest,
)
from paycore.providers.http import NotBuildable
from paycore_sandbox.app import create_app
from paycore_sandbox.settings import SandboxSettings
from tests.sandbox.support import STORE_TEST_KEY, add_faults, captured, eventually, new_key, new_reference
from tests.support.scripted_adyen import running_scripted_adyen

CAPTURE, CANCEL, REFUND = OperationKind.CAPTURE, OperationKind.CANCEL, OperationKind.REFUND
PENDING, SUCCEEDED, FAILED = OperationEnding.PENDING, OperationEnding.SUCCEEDED, OperationEnding.FAILED
MERCHANT = "acct_store"
ACCOUNT = f"adyen:{MERCHANT}:test"
RETURN_URL = "https://shop.example/return"
PAYMENT_AMOUNT = 4999


# ---------------------------------------------------------------------------
# The sandbox, a notification endpoint, and paycore's client on the sandbox's account


@dataclass
class Receiver:
    """An Adyen notification endpoint: keeps every delivery, answers ``[accepted]``."""

    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)

    async def handle(self, request: Request) -> Response:
        self.received.append((dict(request.headers), await request.body()))
        return Response(b"[accepted]")


@dataclass
class Adyen:
    control: httpx.AsyncClient
    receiver: Receiver
    client: AdyenProvider
    account: ProviderAccountConfig

    def items(self) -> list[dict[str, Any]]:
        """Every item delivered so far, each batch verified by paycore's verifier first (basic
        auth and every item's HMAC, as the intake does)."""
        out: list[dict[str, Any]] = []
        for headers, body in self.receiver.received:
            self.client.verify_deliveries(headers, body, now=datetime.now(UTC))
            out.extend(batch_items(body)[1])
        return out

    async def notified(self, psp_reference: str, count: int = 1) -> list[OperationNotification]:
        """The ``count`` operation notifications whose pspReference is the modification's."""

        async def arrived() -> list[OperationNotification] | None:
            found = [parse_operation_item("false", i) for i in self.items()
                     if i["pspReference"] == psp_reference]
            return [n for n in found if n is not None] if len(found) >= count else None

        return await eventually(arrived, what=f"{count} notification(s) of {psp_reference}")

    async def of_payment(self, psp: str) -> list[str]:
        """The eventCodes delivered about a payment, once every delivery is done."""

        async def idle() -> bool:
            pending: int = (await self.control.get("/_sandbox/webhooks/pending")).json()["pending"]
            return pending == 0

        await eventually(idle, what="webhook deliveries to finish")
        return [i["eventCode"] for i in self.items()
                if psp in (i["pspReference"], i.get("originalReference"))]


def account_config(base_url: str, credentials: dict[str, str] | None = None) -> AdyenAccountConfig:
    creds = credentials or {}
    return AdyenAccountConfig(
        provider="adyen", account=MERCHANT, environment="test", base_url=base_url,
        api_key=Secret(STORE_TEST_KEY),
        webhook_secret=Secret(creds["hmac_key"]) if creds else None, api_version="v71",
        webhook_username=creds.get("webhook_username"),
        webhook_password=Secret(creds["webhook_password"]) if creds else None, return_url=RETURN_URL)


@pytest.fixture
async def adyen() -> AsyncIterator[Adyen]:
    receiver = Receiver()
    hook = Starlette(routes=[Route("/hook", receiver.handle, methods=["POST"])])
    # A short async delay, so the pending movements that settle by themselves do so quickly.
    settings = SandboxSettings(async_delay_s=0.05, webhook_time_scale=0.0001)
    async with serve_asgi(hook) as hook_url, serve_asgi(create_app(settings)) as url, \
            httpx.AsyncClient(base_url=url, timeout=10) as control:
        added = await control.post("/_sandbox/webhooks/endpoints",
                                   json={"url": f"{hook_url}/hook", "dialect": "adyen"})
        assert added.status_code == 200, added.text
        rows = (await control.get("/_sandbox/accounts")).json()["data"]
        [creds] = [r["adyen"] for r in rows if (r["account"], r["environment"]) == (MERCHANT, "test")]
        acct = account_config(url, creds)
        client = AdyenProvider([acct], SystemClock(), max_call_duration_s=30)
        try:
            yield Adyen(control, receiver, client, acct)
        finally:
            await client.aclose()


async def payment(adyen: Adyen, *, hold: bool = False, amount: int = PAYMENT_AMOUNT, **extra: Any) -> str:
    """An authorised Adyen payment (held for a manual capture when ``hold``): its pspReference."""
    body: dict[str, Any] = {
        "amount": {"value": amount, "currency": "EUR"}, "reference": new_reference(),
        "merchantAccount": MERCHANT, "paymentMethod": {"type": "scheme", "encryptedCardNumber": "tok_visa"},
        "returnUrl": RETURN_URL, **extra}
    if hold:
        body["additionalData"] = {"manualCapture": "true"}
    response = await adyen.control.post("/v71/payments", json=body,
                                        headers={"X-API-Key": STORE_TEST_KEY, "Idempotency-Key": new_key()})
    assert response.status_code == 200 and response.json()["resultCode"] == "Authorised", response.text
    psp: str = response.json()["pspReference"]
    return psp


def stored(adyen: Adyen, kind: OperationKind, psp: str, amount: int, **overrides: Any) -> StoredRequest:
    reference = overrides.pop("reference", None) or new_reference()
    values: dict[str, Any] = {
        "attempt_id": uuid.uuid4(), "provider_account": ACCOUNT,
        "endpoint": adyen.client.operation_endpoint(adyen.account, kind, psp),
        "api_version": "v71", "idempotency_key": new_key(),
        "request_body": adyen.client.build_operation_body(kind, provider_payment_id=psp, amount_minor=amount,
                                                          reference=reference, currency="EUR",
                                                          account=adyen.account),
        "client_reference": reference, "amount_minor": amount, "currency": "EUR",
    }
    values.update(overrides)
    return StoredRequest(**values)


async def send(client: AdyenProvider, request: StoredRequest, kind: OperationKind, psp: str, *,
               first_send: bool = True, budget_s: float = 10) -> OperationOutcome:
    return await client.send_operation(request, kind, provider_payment_id=psp, budget_s=budget_s,
                                       first_send=first_send)


async def operation(adyen: Adyen, kind: OperationKind, amount: int, *, hold: bool | None = None,
                    **faults: Any) -> tuple[StoredRequest, str, OperationOutcome]:
    """A payment fit for ``kind`` (unless ``hold`` says otherwise), the operation stored, ``faults``
    added for it, and its first send."""
    budget_s = faults.pop("budget_s", 10)
    psp = await payment(adyen, hold=kind is not REFUND if hold is None else hold)
    request = stored(adyen, kind, psp, amount)
    if faults:
        await add_faults(adyen.control, {**faults, "match": {"reference": request.client_reference,
                                                             "operation": kind.value}})
    return request, psp, await send(adyen.client, request, kind, psp, budget_s=budget_s)


def modification_posts(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in log if r["method"] == "POST" and r["path"] != "/v71/payments"]


def test_the_provider_is_the_operation_calls() -> None:
    calls: OperationCalls = AdyenProvider([account_config("https://checkout-test.adyen.com")], SystemClock(),
                                          max_call_duration_s=5)
    assert calls.operation_endpoint(account_config("https://checkout-test.adyen.com/"), REFUND, "PSP/1") == (
        "https://checkout-test.adyen.com/v71/payments/PSP%2F1/refunds")


# ---------------------------------------------------------------------------
# Bodies


def test_bodies_are_canonical_json() -> None:
    common: dict[str, Any] = {"provider_payment_id": "NC6HT9CRT65ZGN82", "merchant_account": MERCHANT,
                              "currency": "EUR"}
    assert build_operation_body(REFUND, amount_minor=1500, reference="r1", **common) == (
        '{"amount":{"currency":"EUR","value":1500},"merchantAccount":"acct_store","reference":"r1"}')
    assert build_operation_body(CAPTURE, amount_minor=3000, reference="c1", **common) == (
        '{"amount":{"currency":"EUR","value":3000},"merchantAccount":"acct_store","reference":"c1"}')
    assert build_operation_body(CANCEL, amount_minor=4999, reference="v1", **common) == (
        '{"merchantAccount":"acct_store","reference":"v1"}')
    # A cancel moves no amount of its own: it needs no currency.
    no_currency = {**common, "currency": None}
    assert build_operation_body(CANCEL, amount_minor=4999, reference="v1", **no_currency) == (
        '{"merchantAccount":"acct_store","reference":"v1"}')


@pytest.mark.parametrize("overrides", [
    {"amount_minor": 0}, {"amount_minor": True}, {"reference": ""}, {"reference": "x" * 81},
    {"reference": "4111111111111111"}, {"provider_payment_id": ""}, {"currency": None}, {"currency": "eur"},
    {"reason": "x" * 201}, {"kind": CAPTURE, "reason": "why"}, {"account": None},
])
def test_bodies_refuse_what_adyen_would(overrides: dict[str, Any]) -> None:
    acct = account_config("https://checkout-test.adyen.com")
    client = AdyenProvider([acct], SystemClock(), max_call_duration_s=5)
    values: dict[str, Any] = {"kind": REFUND, "provider_payment_id": "NC6HT9CRT65ZGN82", "amount_minor": 100,
                              "reference": "r1", "currency": "EUR", "account": acct, **overrides}
    kind = values.pop("kind")
    with pytest.raises(InvalidPaymentMethod):
        client.build_operation_body(kind, **values)


def test_a_refund_reason_is_checked_but_not_sent() -> None:
    acct = account_config("https://checkout-test.adyen.com")
    client = AdyenProvider([acct], SystemClock(), max_call_duration_s=5)
    body = client.build_operation_body(REFUND, provider_payment_id="P", amount_minor=1, reference="r",
                                       reason="requested_by_customer", currency="EUR", account=acct)
    assert "reason" not in orjson.loads(body) and "merchantRefundReason" not in orjson.loads(body)


def test_an_account_the_provider_does_not_serve_is_not_buildable() -> None:
    client = AdyenProvider([account_config("https://checkout-test.adyen.com")], SystemClock(),
                           max_call_duration_s=5)
    other = dataclasses.replace(account_config("https://checkout-test.adyen.com"), account="OtherECOM")
    with pytest.raises(NotBuildable):
        client.build_operation_body(CANCEL, provider_payment_id="P", amount_minor=1, reference="r",
                                    account=other)


# ---------------------------------------------------------------------------
# "received" is pending, and the notification ends it


@pytest.mark.parametrize(("kind", "amount"), [
    (REFUND, 1000), (REFUND, 1091), (REFUND, 1092), (CAPTURE, 3000), (CAPTURE, 3092),
    (CANCEL, PAYMENT_AMOUNT),
])
async def test_received_is_pending_never_a_success(adyen: Adyen, kind: OperationKind, amount: int) -> None:
    request, psp, outcome = await operation(adyen, kind, amount)
    assert (outcome.operation, outcome.ending, outcome.provider_status) == (kind, PENDING, "received")
    assert (outcome.provider_payment_id, outcome.http_status, outcome.replayed) == (psp, 201, False)
    assert outcome.reason is None and not outcome.request_rejected
    assert outcome.provider_operation_id is not None and len(outcome.provider_operation_id) == 16
    assert outcome.provider_operation_id != psp
    assert outcome.claim is not None and outcome.claim.reference == request.client_reference
    assert judge(request, outcome.claim).accepted
    expected = (None, None) if kind is CANCEL else (amount, "EUR")
    assert (outcome.amount_minor, outcome.currency) == expected


@pytest.mark.parametrize(("kind", "amount", "code", "success", "ending"), [
    (REFUND, 1000, "REFUND", "true", SUCCEEDED),
    (REFUND, 1091, "REFUND", "true", SUCCEEDED),
    (REFUND, 1092, "REFUND", "false", FAILED),
    (CAPTURE, 3000, "CAPTURE", "true", SUCCEEDED),
    (CAPTURE, 3091, "CAPTURE", "true", SUCCEEDED),
    (CAPTURE, 3092, "CAPTURE", "false", FAILED),
    (CANCEL, PAYMENT_AMOUNT, "CANCELLATION", "true", SUCCEEDED),
])
async def test_the_notification_ends_what_was_received(
        adyen: Adyen, kind: OperationKind, amount: int, code: str, success: str,
        ending: OperationEnding) -> None:
    request, psp, sent = await operation(adyen, kind, amount)
    assert sent.ending is PENDING and sent.provider_operation_id is not None
    [n] = await adyen.notified(sent.provider_operation_id)
    assert (n.event_type, n.outcome.provider_status) == (code, f"{code}:{success}")
    assert (n.outcome.operation, n.outcome.ending) == (kind, ending)
    assert n.outcome.provider_operation_id == sent.provider_operation_id
    assert n.outcome.provider_payment_id == psp
    assert (n.payload_account, n.payload_livemode) == (MERCHANT, False)
    assert n.outcome.claim is not None and n.outcome.claim.reference == request.client_reference
    assert judge(request, n.outcome.claim).accepted  # evidence about this very operation
    assert (n.outcome.amount_minor, n.outcome.currency) == (amount, "EUR")
    assert n.outcome.reason == (None if ending is SUCCEEDED else "refused")


async def test_a_93_refund_stays_pending_until_settled(adyen: Adyen) -> None:
    request, _, sent = await operation(adyen, REFUND, 1093)
    assert sent.ending is PENDING and sent.provider_operation_id is not None
    [movement] = (await adyen.control.get("/_sandbox/refunds",
                                          params={"reference": request.client_reference})).json()["data"]
    settled = await adyen.control.post(f"/_sandbox/refunds/{movement['id']}/settle",
                                       json={"result": "succeeded"})
    assert settled.status_code == 200, settled.text
    [n] = await adyen.notified(sent.provider_operation_id)
    assert (n.event_type, n.outcome.ending) == ("REFUND", SUCCEEDED)


async def test_a_refund_that_fails_after_succeeding_is_notified_failed(adyen: Adyen) -> None:
    request, _, sent = await operation(adyen, REFUND, 1000)
    assert sent.provider_operation_id is not None
    [succeeded] = await adyen.notified(sent.provider_operation_id)
    [movement] = (await adyen.control.get("/_sandbox/refunds",
                                          params={"reference": request.client_reference})).json()["data"]
    assert (await adyen.control.post(f"/_sandbox/refunds/{movement['id']}/fail")).status_code == 200
    _, failed = await adyen.notified(sent.provider_operation_id, 2)
    assert (succeeded.outcome.ending, failed.outcome.ending) == (SUCCEEDED, FAILED)
    assert succeeded.event_id != failed.event_id  # two events: the domain makes the refund Returned


async def _exceeds_refundable(adyen: Adyen) -> tuple[str, OperationKind, int]:
    return await payment(adyen), REFUND, PAYMENT_AMOUNT + 1


async def _not_refundable(adyen: Adyen) -> tuple[str, OperationKind, int]:
    return await payment(adyen, hold=True), REFUND, 100


async def _not_capturable(adyen: Adyen) -> tuple[str, OperationKind, int]:
    return await payment(adyen), CAPTURE, 100  # captured at once: no hold


async def _too_large(adyen: Adyen) -> tuple[str, OperationKind, int]:
    return await payment(adyen, hold=True), CAPTURE, PAYMENT_AMOUNT + 1


async def _not_cancelable(adyen: Adyen) -> tuple[str, OperationKind, int]:
    return await payment(adyen), CANCEL, PAYMENT_AMOUNT


@pytest.mark.parametrize(("setup", "code", "why"), [
    (_exceeds_refundable, "REFUND", "amount_exceeds_refundable"),
    (_not_refundable, "REFUND", "payment_not_refundable"),
    (_not_capturable, "CAPTURE", "payment_not_capturable"),
    (_too_large, "CAPTURE", "amount_too_large"),
    (_not_cancelable, "CANCELLATION", None),
])
async def test_what_the_rules_refuse_is_received_then_notified_failed(adyen: Adyen, setup: Any, code: str,
                                                                      why: str | None) -> None:
    """Adyen validates a modification asynchronously: its answer is still "received"."""
    psp, kind, amount = await setup(adyen)
    request = stored(adyen, kind, psp, amount)
    sent = await send(adyen.client, request, kind, psp)
    assert (sent.ending, sent.provider_status) == (PENDING, "received")
    assert sent.provider_operation_id is not None
    [n] = await adyen.notified(sent.provider_operation_id)
    assert (n.event_type, n.outcome.operation, n.outcome.ending, n.outcome.reason) == (
        code, kind, FAILED, "refused")
    assert n.event["notificationItems"][0]["NotificationRequestItem"].get("reason") == why


async def test_a_capture_or_refund_is_notified_once_as_itself(adyen: Adyen) -> None:
    """The payment events a settlement makes are not notified: no second AUTHORISATION after a
    capture, no payment-level REFUND beside the refund's own."""
    _, held, captured_ = await operation(adyen, CAPTURE, PAYMENT_AMOUNT)
    assert captured_.provider_operation_id is not None
    await adyen.notified(captured_.provider_operation_id)
    _, charged, refunded = await operation(adyen, REFUND, 1000)
    assert refunded.provider_operation_id is not None
    await adyen.notified(refunded.provider_operation_id)
    assert await adyen.of_payment(held) == ["AUTHORISATION", "CAPTURE"]
    assert await adyen.of_payment(charged) == ["AUTHORISATION", "REFUND"]


async def test_capture_delay_hours_holds_the_payment(adyen: Adyen) -> None:
    psp = await payment(adyen, captureDelayHours=24)
    request = stored(adyen, CAPTURE, psp, 2000)  # a partial capture of the hold
    sent = await send(adyen.client, request, CAPTURE, psp)
    assert sent.provider_operation_id is not None
    [n] = await adyen.notified(sent.provider_operation_id)
    assert (n.outcome.ending, n.outcome.amount_minor) == (SUCCEEDED, 2000)


# ---------------------------------------------------------------------------
# Resends: the same key, the same bytes


@pytest.mark.parametrize("kind", [REFUND, CAPTURE, CANCEL])
async def test_a_resend_goes_under_the_same_key_with_the_same_bytes(adyen: Adyen,
                                                                   kind: OperationKind) -> None:
    request, psp, first = await operation(adyen, kind, 3000 if kind is not CANCEL else PAYMENT_AMOUNT)
    again = await send(adyen.client, request, kind, psp, first_send=False)
    assert (again.ending, again.provider_operation_id) == (PENDING, first.provider_operation_id)
    posts = modification_posts(await captured(adyen.control))
    assert [p["replayed"] for p in posts] == [False, True]  # executed once
    assert posts[0]["body"] == posts[1]["body"] == request.request_body
    assert {p["headers"]["idempotency-key"] for p in posts} == {request.idempotency_key}
    assert {p["headers"]["x-api-key"] for p in posts} == {"sk_test"}  # never the key itself


@pytest.mark.parametrize("kind", [REFUND, CAPTURE, CANCEL])
async def test_a_lost_response_is_unknown_and_a_resend_learns_it_was_received(adyen: Adyen,
                                                                            kind: OperationKind) -> None:
    request, psp, lost = await operation(adyen, kind, 3000 if kind is not CANCEL else PAYMENT_AMOUNT,
                                         fault="lose_response", times=1, budget_s=0.5)
    assert (lost.ending, lost.reason) == (OperationEnding.UNKNOWN, "provider.no-response.caller")
    again = await send(adyen.client, request, kind, psp, first_send=False)
    assert again.ending is PENDING and again.provider_operation_id is not None
    [n] = await adyen.notified(again.provider_operation_id)  # the one execution, notified once
    assert n.outcome.ending is SUCCEEDED


# ---------------------------------------------------------------------------
# Refusals, errors and answers that prove nothing


async def test_a_validation_error_is_rejected_on_the_first_send_only(adyen: Adyen) -> None:
    # A payment this merchant account does not have: 422 "167", nothing stored under the key.
    request = stored(adyen, REFUND, "NOSUCHPAYMENT000", 1000)
    first = await send(adyen.client, request, REFUND, "NOSUCHPAYMENT000")
    assert (first.ending, first.reason, first.http_status) == (OperationEnding.REJECTED, "rejected:167", 422)
    assert first.request_rejected
    # The same refusal of a resend proves nothing about an earlier send that may have executed.
    resent = await send(adyen.client, request, REFUND, "NOSUCHPAYMENT000", first_send=False)
    assert (resent.ending, resent.reason) == (OperationEnding.UNKNOWN, "provider.rejected-this-send.167")
    assert resent.request_rejected


async def test_an_amount_adyen_refuses_is_rejected(adyen: Adyen) -> None:
    psp = await payment(adyen)
    body = '{"amount":{"currency":"EUR","value":0},"merchantAccount":"acct_store","reference":"r0"}'
    request = stored(adyen, REFUND, psp, 1, request_body=body, reference="r0")
    outcome = await send(adyen.client, request, REFUND, psp)
    assert (outcome.ending, outcome.reason) == (OperationEnding.REJECTED, "rejected:137")


@pytest.mark.parametrize(("fault", "reason", "status"), [
    ("error_500_after", "provider.http-500", 500),
    ("not_processed_503", "provider.transient-error", 503),
])
async def test_server_errors_are_unknown(adyen: Adyen, fault: str, reason: str, status: int) -> None:
    request, psp, outcome = await operation(adyen, REFUND, 1000, fault=fault, times=1)
    assert (outcome.ending, outcome.reason, outcome.http_status) == (OperationEnding.UNKNOWN, reason, status)
    # Adyen replays no 5xx: the resend gets the real answer (executed once, or now).
    again = await send(adyen.client, request, REFUND, psp, first_send=False)
    assert again.ending is PENDING
    executed = [p for p in modification_posts(await captured(adyen.control)) if not p["replayed"]]
    assert [p["status"] for p in executed] == ([500] if status == 500 else [503, 201])


async def test_rate_limited_is_unknown_with_when_to_ask_again(adyen: Adyen) -> None:
    request, psp, outcome = await operation(adyen, CAPTURE, 3000, fault="rate_limit", times=1)
    assert (outcome.ending, outcome.reason, outcome.http_status) == (
        OperationEnding.UNKNOWN, "provider.rate-limited", 429)
    assert outcome.detail["retry_after_s"] == 1.0
    assert (await send(adyen.client, request, CAPTURE, psp, first_send=False)).ending is PENDING


async def test_a_concurrent_send_under_the_key_is_unknown(adyen: Adyen) -> None:
    psp = await payment(adyen)
    request = stored(adyen, REFUND, psp, 1000)
    await add_faults(adyen.control, {"fault": "delay", "delay_ms": 1500, "times": 1,
                                     "match": {"reference": request.client_reference, "operation": "refund"}})
    first = asyncio.create_task(send(adyen.client, request, REFUND, psp))

    async def executing() -> bool:
        refunds = (await adyen.control.get("/_sandbox/refunds",
                                           params={"reference": request.client_reference})).json()["data"]
        return bool(refunds)

    await eventually(executing, what="the refund to execute")
    second = await send(adyen.client, request, REFUND, psp, first_send=False)
    # 409 704 with Transient-Error: true (the same-key resend is to come later).
    assert (second.ending, second.reason, second.http_status) == (
        OperationEnding.UNKNOWN, "provider.transient-error", 409)
    assert (await first).ending is PENDING


async def test_a_key_reused_with_another_body_is_unknown(adyen: Adyen) -> None:
    request, psp, _ = await operation(adyen, REFUND, 1000)
    other = stored(adyen, REFUND, psp, 1001, idempotency_key=request.idempotency_key)
    outcome = await send(adyen.client, other, REFUND, psp, first_send=False)
    assert (outcome.ending, outcome.http_status) == (OperationEnding.UNKNOWN, 422)
    assert outcome.reason == "provider.in-progress"  # Adyen's 704 for either: never a rejection


# A refund's: the shared conformance suite (tests/provider_conformance).
@pytest.mark.parametrize("kind", [CANCEL])
@pytest.mark.parametrize("fault", ["malformed_body", "empty_body"])
async def test_an_unreadable_body_is_unknown(adyen: Adyen, kind: OperationKind, fault: str) -> None:
    amount = 1000 if kind is REFUND else PAYMENT_AMOUNT
    _, _, outcome = await operation(adyen, kind, amount, fault=fault, times=1)
    assert (outcome.ending, outcome.reason) == (OperationEnding.UNKNOWN, "provider.body-unreadable")


@pytest.mark.parametrize(("override", "attribute"), [
    ({"client_reference": "ORD-not-sent"}, "reference"),
    ({"amount_minor": 999}, "amount"),
    ({"currency": "USD"}, "currency"),
])
async def test_an_answer_naming_another_operation_is_not_evidence(adyen: Adyen, override: dict[str, Any],
                                                                  attribute: str) -> None:
    psp = await payment(adyen)
    request = stored(adyen, REFUND, psp, 1000, **override)
    outcome = await send(adyen.client, request, REFUND, psp)
    assert outcome.ending is OperationEnding.UNKNOWN
    assert outcome.reason == f"provider.response-mismatch.{attribute}"
    assert outcome.provider_operation_id is None and outcome.provider_status is None
    assert outcome.detail["reported"]["status"] == "received"


async def test_a_request_naming_another_payment_is_not_sent(adyen: Adyen) -> None:
    psp, other = await payment(adyen, hold=True), await payment(adyen, hold=True)
    for kind in (REFUND, CAPTURE, CANCEL):
        outcome = await send(adyen.client, stored(adyen, kind, psp, 100), kind, other)
        assert outcome.ending is OperationEnding.UNKNOWN
        assert outcome.reason == "request.not-buildable.endpoint-changed"
    body = '{"merchantAccount":"OtherECOM","reference":"v1"}'  # the body names another merchant account
    outcome = await send(adyen.client, stored(adyen, CANCEL, psp, 100, request_body=body), CANCEL, psp)
    assert outcome.reason == "request.not-buildable.merchant-account-mismatch"
    assert modification_posts(await captured(adyen.control)) == []


def _answer(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"merchantAccount": MERCHANT, "paymentPspReference": "NC6HT9CRT65ZGN82",
                            "pspReference": "QFQTPCQ8HXSKGK82", "reference": "ORD-5521-refund1",
                            "status": "received", "amount": {"value": 1000, "currency": "EUR"}}
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not None}


@pytest.mark.parametrize(("status", "body", "reason"), [
    (201, _answer(paymentPspReference="OTHERPAYMENT0000"), "provider.response-mismatch.payment"),
    (201, _answer(merchantAccount="OtherECOM"), "provider.response-mismatch.account"),
    (201, _answer(status="authorised"), "provider.body-unrecognized"),
    (201, _answer(amount=None), "provider.body-unrecognized"),
    (201, _answer(pspReference=None), "provider.body-unrecognized"),
    (200, _answer(), "provider.unexpected-status-200"),
])
async def test_an_answer_that_proves_nothing_is_unknown(status: int, body: dict[str, Any],
                                                        reason: str) -> None:
    """What the sandbox never answers: a scripted server does."""
    async with running_scripted_adyen() as server:
        acct = account_config(server.base_url)
        client = AdyenProvider([acct], SystemClock(), max_call_duration_s=30)
        try:
            request = StoredRequest(
                attempt_id=uuid.uuid4(), provider_account=ACCOUNT,
                endpoint=client.operation_endpoint(acct, REFUND, "NC6HT9CRT65ZGN82"), api_version="v71",
                idempotency_key=new_key(),
                request_body=client.build_operation_body(REFUND, provider_payment_id="NC6HT9CRT65ZGN82",
                                                         amount_minor=1000, reference="ORD-5521-refund1",
                                                         currency="EUR", account=acct),
                client_reference="ORD-5521-refund1", amount_minor=1000, currency="EUR")
            server.reply(status, body)
            outcome = await send(client, request, REFUND, "NC6HT9CRT65ZGN82")
            assert (outcome.ending, outcome.reason) == (OperationEnding.UNKNOWN, reason)
            assert outcome.provider_operation_id is None
            [received] = server.received
            assert received.body == request.request_body.encode()
            assert received.path == "/v71/payments/NC6HT9CRT65ZGN82/refunds"
        finally:
            await client.aclose()


async def test_no_answer_at_all_is_unknown(adyen: Adyen) -> None:
    psp = await payment(adyen)
    base_url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    nowhere = AdyenProvider([account_config(base_url)], SystemClock(), max_call_duration_s=5)
    try:
        request = stored(adyen, REFUND, psp, 100, endpoint=f"{base_url}/v71/payments/{psp}/refunds")
        refused = await send(nowhere, request, REFUND, psp)
        assert refused.ending is OperationEnding.UNKNOWN and refused.reason is not None
        assert refused.reason.startswith("provider.transport.")
        spent = await send(nowhere, request, REFUND, psp, budget_s=0)
        assert (spent.ending, spent.reason) == (OperationEnding.UNKNOWN, "provider.no-response.caller")
        unconfigured = await send(nowhere, dataclasses.replace(request, provider_account="adyen:x:test"),
                                  REFUND, psp)
        assert unconfigured.reason == "request.not-buildable.account-not-configured"
    finally:
        await nowhere.aclose()


# ---------------------------------------------------------------------------
# Lookups: none


async def test_lookups_are_unavailable_and_send_nothing(adyen: Adyen) -> None:
    for kind in (REFUND, CAPTURE, CANCEL):
        found = await adyen.client.find_operation_by_reference(ACCOUNT, kind, "ORD-1-refund1", budget_s=5)
        assert (found.kind, found.reason, found.found) == ("unavailable", NO_MODIFICATION_LOOKUP, ())
    refund = await adyen.client.get_refund(ACCOUNT, "QFQTPCQ8HXSKGK82", budget_s=5)
    assert (refund.kind, refund.reason) == ("unavailable", NO_MODIFICATION_LOOKUP)
    assert found.outcome_kind == "unsupported"  # recovery resends instead: only the key can tell
    assert await captured(adyen.control) == []


# ---------------------------------------------------------------------------
# The notification parser: each eventCode, HMAC-signed, verified, then read

HMAC_KEY = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"


def _item(event_code: str, success: str, **overrides: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "pspReference": "QFQTPCQ8HXSKGK82", "originalReference": "NC6HT9CRT65ZGN82",
        "merchantAccountCode": MERCHANT, "merchantReference": "ORD-5521-a1-refund1",
        "amount": {"value": 1000, "currency": "EUR"}, "eventCode": event_code, "success": success,
        "eventDate": "2026-11-29T12:00:00+01:00", "paymentMethod": "visa", "reason": "",
    }
    obj.update(overrides)
    return {k: v for k, v in obj.items() if v is not None}


def _signed(item: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(item)
    signature = generate_notification_sig(copy.deepcopy(item), HMAC_KEY).decode()
    out["additionalData"] = {"hmacSignature": signature}
    return out


def _verified(*items: dict[str, Any], live: str = "false") -> list[OperationNotification | None]:
    """Items signed by Adyen's SDK, verified by paycore's verifier, then read as operations."""
    acct = dataclasses.replace(account_config("https://checkout-test.adyen.com"),
                               webhook_secret=Secret(HMAC_KEY), webhook_username="paycore",
                               webhook_password=Secret("pw"))
    provider = AdyenProvider([acct], SystemClock(), max_call_duration_s=5)
    body = orjson.dumps({"live": live, "notificationItems": [{"NotificationRequestItem": _signed(i)}
                                                             for i in items]})
    headers = {"authorization": "Basic cGF5Y29yZTpwdw=="}  # paycore:pw
    assert len(provider.verify_deliveries(headers, body, now=datetime.now(UTC))) == len(items)
    live_value, verified = batch_items(body)
    return [parse_operation_item(live_value, i) for i in verified]


@pytest.mark.parametrize(("code", "success", "kind", "ending", "reason"), [
    ("REFUND", "true", REFUND, SUCCEEDED, None),
    ("REFUND", "false", REFUND, FAILED, "refused"),
    ("REFUND_FAILED", "true", REFUND, FAILED, "refund-failed"),
    ("REFUNDED_REVERSED", "true", REFUND, FAILED, "refunded-reversed"),
    ("CAPTURE", "true", CAPTURE, SUCCEEDED, None),
    ("CAPTURE", "false", CAPTURE, FAILED, "refused"),
    ("CAPTURE_FAILED", "true", CAPTURE, FAILED, "capture-failed"),
    ("CANCELLATION", "true", CANCEL, SUCCEEDED, None),
    ("CANCELLATION", "false", CANCEL, FAILED, "refused"),
    ("TECHNICAL_CANCEL", "true", CANCEL, SUCCEEDED, None),
])
def test_each_operation_event_code(code: str, success: str, kind: OperationKind, ending: OperationEnding,
                                   reason: str | None) -> None:
    [n] = _verified(_item(code, success))
    assert n is not None
    assert (n.event_type, n.payload_account, n.payload_livemode) == (code, MERCHANT, False)
    o = n.outcome
    assert (o.operation, o.ending, o.reason, o.provider_status) == (kind, ending, reason, f"{code}:{success}")
    assert (o.provider_operation_id, o.provider_payment_id) == ("QFQTPCQ8HXSKGK82", "NC6HT9CRT65ZGN82")
    assert (o.amount_minor, o.currency) == (1000, "EUR")
    assert o.claim is not None
    claim = o.claim
    assert (claim.reference, claim.amount_minor, claim.currency, claim.accounts, claim.livemodes) == (
        "ORD-5521-a1-refund1", 1000, "EUR", (MERCHANT,), (False,))
    assert claim.provider_payment_id is None  # the payment is checked apart, as a send's answer
    assert code in OPERATION_EVENT_CODES


@pytest.mark.parametrize("code", ["AUTHORISATION", "OFFER_CLOSED", "CANCEL_OR_REFUND", "REPORT_AVAILABLE"])
@pytest.mark.parametrize("success", ["true", "false"])
def test_an_item_about_no_operation_is_none(code: str, success: str) -> None:
    assert _verified(_item(code, success, originalReference="")) == [None]


@pytest.mark.parametrize("code", ["REFUND_FAILED", "REFUNDED_REVERSED", "CAPTURE_FAILED", "TECHNICAL_CANCEL"])
def test_an_undocumented_success_value_is_not_applied(code: str) -> None:
    with pytest.raises(InvalidItem, match=f"not-applicable:{code}:false"):
        _verified(_item(code, "false"))


@pytest.mark.parametrize(("overrides", "why"), [
    ({"originalReference": ""}, "modification-without-original-reference"),
    ({"pspReference": " "}, "invalid-fields"),
    ({"success": "maybe"}, "invalid-fields"),
    ({"amount": {"value": 1, "currency": "eur"}}, "invalid-amount"),
])
def test_an_operation_item_that_does_not_fit_is_invalid(overrides: dict[str, Any], why: str) -> None:
    values = {"event_code": "REFUND", "success": "true", **overrides}
    with pytest.raises(InvalidItem, match=why):
        _verified(_item(**values))


def test_a_batch_neither_live_nor_test_is_invalid() -> None:
    with pytest.raises(InvalidItem, match="invalid-live"):
        _verified(_item("REFUND", "true"), live="maybe")


def test_the_key_is_per_item_and_the_stored_event_reads_back() -> None:
    ok, refused = _verified(_item("REFUND", "true"), _item("REFUND", "false"))
    assert ok is not None and refused is not None
    assert ok.event_id is not None and ok.event_id != refused.event_id  # distinct per success value
    again = parse_operation_notification(orjson.dumps(ok.event))
    assert again is not None and (again.event_id, again.outcome) == (ok.event_id, ok.outcome)
    authorisation = {"live": "false", "notificationItems": [
        {"NotificationRequestItem": _item("AUTHORISATION", "true", originalReference="")}]}
    assert parse_operation_notification(orjson.dumps(authorisation)) is None
    with pytest.raises(InvalidItem, match="not-one-item"):
        parse_operation_notification(orjson.dumps({"live": "false", "notificationItems": [
            {"NotificationRequestItem": _item("REFUND", "true")}] * 2}))


def test_how_the_payment_reading_of_the_same_items_goes() -> None:
    """Each item is also read as a payment's notification (:func:`parse_item`): a REFUND or
    CANCELLATION as the payment's (refunded; canceled), the rest kept raw and never applied.
    The intake tells them apart by finding the operation (its pspReference or reference)."""
    refund = parse_item("false", _item("REFUND", "true"))
    assert isinstance(refund, Notification) and refund.is_refund and refund.payment_id == "NC6HT9CRT65ZGN82"
    canceled = parse_item("false", _item("CANCELLATION", "true", amount={"value": 4999, "currency": "EUR"}))
    assert (canceled.event_type, canceled.outcome.kind) == ("payment.canceled", OutcomeKind.FAILED)
    for code, success in [("REFUND", "false"), ("REFUND_FAILED", "true"), ("CAPTURE", "true"),
                          ("CAPTURE_FAILED", "true"), ("TECHNICAL_CANCEL", "true"),
                          ("REFUNDED_REVERSED", "true")]:
        with pytest.raises(InvalidItem, match="not-applicable"):
            parse_item("false", _item(code, success))
