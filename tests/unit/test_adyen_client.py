"""The Adyen adapter against a real HTTP server that plays Adyen's Checkout API from a script.

Each test scripts the exact status, body and headers Adyen answers with and asserts on the
exact requests the server received (no mock transports). Budgets run on
:class:`FakeClock`; synchronisation is by deadline-bounded polling, never by fixed sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest

from paycore.clock import FakeClock
from paycore.config import ProviderAccountConfig, Secret
from paycore.domain import OutcomeKind, ProviderOutcome
from paycore.errors import InvalidPaymentMethod
from paycore.providers.adyen import CAPABILITIES, NAME, AdyenProvider, build_request_body
from paycore.providers.base import ReferenceLookup, StoredRequest
from paycore.providers.http import NotBuildable
from tests.support.scripted_adyen import (
    MERCHANT_ACCOUNT,
    PSP_REFERENCE,
    REFERENCE,
    ScriptedAdyen,
    error_body,
    payment_response,
    running_scripted_adyen,
)

API_KEY = "AQEyhmfxK4_adyen_test_key_x"
OTHER_KEY = "AQEyhmfxK4_adyen_test_key_other"
IDEMPOTENCY_KEY = "8e03978e-6f0a-4b7e-9c1d-2f3a4b5c6d7e"
RETURN_URL = "https://shop.example/checkout/return"
PAYMENT_METHOD = {"type": "scheme", "encryptedCardNumber": "adyenjs_0_1_25$cipher",
                  "encryptedSecurityCode": "adyenjs_0_1_25$cvc", "encryptedExpiryMonth": "adyenjs$m",
                  "encryptedExpiryYear": "adyenjs$y"}


def account(base_url: str, *, name: str = MERCHANT_ACCOUNT, key: str = API_KEY, environment: str = "test",
            return_url: str | None = RETURN_URL) -> ProviderAccountConfig:
    return ProviderAccountConfig(provider="adyen", account=name, environment=environment, base_url=base_url,
                                 api_key=Secret(key), webhook_secret=None, api_version="v71",
                                 key_retention_s=31 * 86_400, return_url=return_url)


def body_for(merchant_account: str = MERCHANT_ACCOUNT, **overrides: Any) -> str:
    values: dict[str, Any] = {"amount_minor": 4999, "currency": "EUR", "payment_method": PAYMENT_METHOD,
                              "reference": REFERENCE, "merchant_account": merchant_account,
                              "return_url": RETURN_URL, "environment": "test"}
    values.update(overrides)
    return build_request_body(**values)


def stored_request(base_url: str, **overrides: Any) -> StoredRequest:
    values: dict[str, Any] = {
        "attempt_id": uuid.uuid4(), "provider_account": f"adyen:{MERCHANT_ACCOUNT}:test",
        "endpoint": base_url + "/v71/payments", "api_version": "v71", "idempotency_key": IDEMPOTENCY_KEY,
        "request_body": body_for(), "client_reference": REFERENCE, "amount_minor": 4999, "currency": "EUR",
    }
    values.update(overrides)
    return StoredRequest(**values)


async def eventually(predicate: Callable[[], bool], *, within_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.002)


@pytest.fixture
async def adyen() -> AsyncIterator[ScriptedAdyen]:
    async with running_scripted_adyen() as server:
        yield server


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def client(adyen: ScriptedAdyen, clock: FakeClock) -> AsyncIterator[AdyenProvider]:
    c = AdyenProvider([account(adyen.base_url), account(adyen.base_url, name="OtherECOM", key=OTHER_KEY)],
                      clock, max_call_duration_s=30)
    try:
        yield c
    finally:
        await c.aclose()


async def create(client: AdyenProvider, adyen: ScriptedAdyen, *, first_send: bool = True,
                 budget_s: float | None = 15, **overrides: Any) -> ProviderOutcome:
    return await client.create_payment(stored_request(adyen.base_url, **overrides), budget_s=budget_s,
                                       first_send=first_send)


# ---------------------------------------------------------------------------
# What Adyen is


def test_name_and_capabilities() -> None:
    assert NAME == "adyen"
    assert CAPABILITIES.lookup_by_reference is ReferenceLookup.UNSUPPORTED
    assert CAPABILITIES.key_retention_s == 31 * 86_400
    assert CAPABILITIES.server_errors_replayed is False


# ---------------------------------------------------------------------------
# Building the stored body


def test_body_is_the_documented_payments_request() -> None:
    body = orjson.loads(body_for())
    assert body == {"amount": {"value": 4999, "currency": "EUR"}, "reference": REFERENCE,
                    "merchantAccount": MERCHANT_ACCOUNT, "paymentMethod": PAYMENT_METHOD,
                    "returnUrl": RETURN_URL}


async def test_provider_builds_for_the_named_account(client: AdyenProvider, adyen: ScriptedAdyen) -> None:
    other = account(adyen.base_url, name="OtherECOM", key=OTHER_KEY)
    body = client.build_request_body(other, amount_minor=100, currency="EUR", payment_method=PAYMENT_METHOD,
                                     reference="R-1")
    assert orjson.loads(body)["merchantAccount"] == "OtherECOM"
    with pytest.raises(NotBuildable, match="account-not-configured"):
        client.build_request_body(account(adyen.base_url, name="Nobody"), amount_minor=100, currency="EUR",
                                  payment_method=PAYMENT_METHOD, reference="R-1")


def test_building_without_a_return_url_is_refused(clock: FakeClock) -> None:
    with pytest.raises(InvalidPaymentMethod, match="returnUrl"):
        body_for(return_url=None)
    acct = account("https://checkout-test.adyen.com", return_url=None)
    provider = AdyenProvider([acct], clock, max_call_duration_s=30)
    with pytest.raises(InvalidPaymentMethod, match="PAYCORE_ADYEN_RETURN_URL"):
        provider.build_request_body(acct, amount_minor=100, currency="EUR", payment_method=PAYMENT_METHOD,
                                    reference="R-1")


@pytest.mark.parametrize("payment_method", [
    {"type": "scheme", "encryptedCardNumber": "4111111111111111"},  # a raw PAN where a cipher belongs
    {"type": "scheme", "encryptedCardNumber": "4111 1111 1111 1111"},
    {"type": "scheme", "number": "adyenjs$x"},  # raw card fields by name
    {"type": "scheme", "cvc": "737"},
    {"type": "scheme", "extra": {"nested": ["5555-5555-5555-4444"]}},
    "4111111111111111",
    "tok_visa 4111111111111111",
], ids=["pan", "pan-spaced", "number-field", "cvc-field", "nested-pan", "plain-pan", "pan-in-token"])
def test_building_refuses_raw_card_data(payment_method: Any) -> None:
    with pytest.raises(InvalidPaymentMethod, match="card"):
        body_for(payment_method=payment_method)


def test_a_non_luhn_digit_string_is_not_taken_for_a_card() -> None:
    body_for(payment_method={"type": "scheme", "encryptedCardNumber": "4111111111111112"})


@pytest.mark.parametrize(("payment_method", "environment"), [
    ("tok_visa", "live"), ("pm_card_visa", "test"), ("", "test"), ({"encryptedCardNumber": "x"}, "test"),
])
def test_building_refuses_what_adyen_would(payment_method: Any, environment: str) -> None:
    with pytest.raises(ValueError):
        body_for(payment_method=payment_method, environment=environment)


def test_a_sandbox_token_string_is_accepted_in_test_only() -> None:
    body = orjson.loads(body_for(payment_method="tok_3ds"))
    assert body["paymentMethod"] == {"type": "scheme", "encryptedCardNumber": "tok_3ds"}


@pytest.mark.parametrize("overrides", [
    {"amount_minor": 0}, {"amount_minor": True}, {"currency": "eur"}, {"reference": ""},
    {"reference": "R" * 81}, {"return_url": "shop.example/return"}, {"merchant_account": ""},
])
def test_building_refuses_invalid_values(overrides: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        body_for(**overrides)


# ---------------------------------------------------------------------------
# What is sent


async def test_the_request_is_the_stored_one(client: AdyenProvider, adyen: ScriptedAdyen) -> None:
    adyen.reply(200, payment_response())
    stored = stored_request(adyen.base_url)
    await client.create_payment(stored, budget_s=15, first_send=True)
    [got] = adyen.received
    assert (got.method, got.path) == ("POST", "/v71/payments")
    assert got.headers["x-api-key"] == API_KEY
    assert got.headers["idempotency-key"] == IDEMPOTENCY_KEY
    assert got.headers["content-type"] == "application/json"
    assert "authorization" not in got.headers
    assert got.body == stored.request_body.encode("utf-8")


async def test_every_send_carries_the_same_key_and_body_bytes_one_request_per_call(
    client: AdyenProvider, adyen: ScriptedAdyen
) -> None:
    stored = stored_request(adyen.base_url)
    adyen.reply(500, error_body(500, "000", "internal"))
    adyen.reply(200, payment_response(), headers={"Transient-Error": "true"})
    adyen.reply(200, payment_response())
    outcomes = [await client.create_payment(stored, budget_s=15, first_send=i == 0) for i in range(3)]
    assert [o.kind for o in outcomes] == [OutcomeKind.UNKNOWN, OutcomeKind.UNKNOWN, OutcomeKind.SUCCEEDED]
    assert len(adyen.received) == 3  # one request per call, never a retry
    assert {r.headers["idempotency-key"] for r in adyen.received} == {IDEMPOTENCY_KEY}
    assert {r.body for r in adyen.received} == {stored.request_body.encode("utf-8")}


async def test_credentials_are_those_of_the_stored_account(
    client: AdyenProvider, adyen: ScriptedAdyen
) -> None:
    adyen.reply(200, payment_response(merchantAccount="OtherECOM"))
    outcome = await create(client, adyen, provider_account="adyen:OtherECOM:test",
                           request_body=body_for(merchant_account="OtherECOM"))
    assert outcome.kind is OutcomeKind.SUCCEEDED
    assert adyen.received[0].headers["x-api-key"] == OTHER_KEY


@pytest.mark.parametrize(("overrides", "reason"), [
    # The body pays into PaycoreECOM; OtherECOM's key must never carry it.
    ({"provider_account": "adyen:OtherECOM:test"}, "merchant-account-mismatch"),
    ({"idempotency_key": "k" * 65}, "invalid-header"),
    ({"idempotency_key": "key with spaces"}, "invalid-header"),
    ({"request_body": "\ud800"}, "invalid-body"),
])
async def test_a_stored_request_that_cannot_be_built_is_unknown_and_not_sent(
    client: AdyenProvider, adyen: ScriptedAdyen, overrides: dict[str, Any], reason: str
) -> None:
    outcome = await create(client, adyen, **overrides)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, f"request.not-buildable.{reason}")
    assert client.unbuildable_reason(stored_request(adyen.base_url, **overrides)) == reason
    assert adyen.received == []


@pytest.mark.parametrize(("stored_endpoint", "base_url"), [
    ("http://[::1/v71/payments", None),  # the stored endpoint does not parse
    (None, "http://[::1"),  # the account's base URL does not parse
], ids=["stored-endpoint", "base-url"])
async def test_a_url_that_does_not_parse_is_endpoint_changed_and_nothing_is_sent(
    adyen: ScriptedAdyen, clock: FakeClock, stored_endpoint: str | None, base_url: str | None
) -> None:
    provider = AdyenProvider([account(base_url or adyen.base_url)], clock, max_call_duration_s=30)
    stored = stored_request(adyen.base_url, **({"endpoint": stored_endpoint} if stored_endpoint else {}))
    assert provider.unbuildable_reason(stored) == "endpoint-changed"
    outcome = await provider.create_payment(stored, budget_s=15, first_send=True)
    await provider.aclose()
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, "request.not-buildable.endpoint-changed")
    assert adyen.received == []


@pytest.mark.parametrize("key", ["AQE key with a space", "AQE\r\nX-Injected: 1", "AQEé", ""],
                         ids=["space", "crlf", "non-ascii", "empty"])
async def test_an_api_key_that_is_no_header_value_is_invalid_header_and_nothing_is_sent(
    adyen: ScriptedAdyen, clock: FakeClock, key: str
) -> None:
    provider = AdyenProvider([account(adyen.base_url, key=key)], clock, max_call_duration_s=30)
    stored = stored_request(adyen.base_url)
    assert provider.unbuildable_reason(stored) == "invalid-header"
    outcome = await provider.create_payment(stored, budget_s=15, first_send=True)
    await provider.aclose()
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, "request.not-buildable.invalid-header")
    assert adyen.received == []


async def test_a_64_character_key_is_sent(client: AdyenProvider, adyen: ScriptedAdyen) -> None:
    adyen.reply(200, payment_response())
    outcome = await create(client, adyen, idempotency_key="k" * 64)
    assert outcome.kind is OutcomeKind.SUCCEEDED
    assert adyen.received[0].headers["idempotency-key"] == "k" * 64


async def test_redirects_are_not_followed(client: AdyenProvider, adyen: ScriptedAdyen) -> None:
    adyen.reply(307, b"", headers={"Location": adyen.base_url + "/elsewhere"})
    outcome = await create(client, adyen)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, "provider.unexpected-status-307")
    assert len(adyen.received) == 1


# ---------------------------------------------------------------------------
# resultCode → outcome


@pytest.mark.parametrize(("result_code", "kind", "reason"), [
    ("Authorised", OutcomeKind.SUCCEEDED, None),
    ("Refused", OutcomeKind.FAILED, "declined:2"),
    ("Error", OutcomeKind.FAILED, "error:2"),
    ("Cancelled", OutcomeKind.FAILED, "canceled"),
    ("Pending", OutcomeKind.PROCESSING, None),
    ("Received", OutcomeKind.PROCESSING, None),
    ("RedirectShopper", OutcomeKind.REQUIRES_ACTION, None),
    ("IdentifyShopper", OutcomeKind.REQUIRES_ACTION, None),
    ("ChallengeShopper", OutcomeKind.REQUIRES_ACTION, None),
    ("PresentToShopper", OutcomeKind.REQUIRES_ACTION, None),
])
async def test_each_result_code(client: AdyenProvider, adyen: ScriptedAdyen, result_code: str,
                                kind: OutcomeKind, reason: str | None) -> None:
    adyen.reply(200, payment_response(result_code))
    outcome = await create(client, adyen)
    assert (outcome.kind, outcome.reason, outcome.http_status) == (kind, reason, 200)
    assert outcome.provider_payment_id == PSP_REFERENCE
    assert outcome.provider_status == result_code
    assert outcome.claim is not None and outcome.claim.reference == REFERENCE
    if kind is OutcomeKind.REQUIRES_ACTION:
        assert outcome.next_action == payment_response(result_code)["action"]


async def test_an_answer_without_amount_still_succeeds(client: AdyenProvider, adyen: ScriptedAdyen) -> None:
    adyen.reply(200, payment_response(amount=None, merchantReference=None))
    outcome = await create(client, adyen)
    assert (outcome.kind, outcome.provider_payment_id) == (OutcomeKind.SUCCEEDED, PSP_REFERENCE)


@pytest.mark.parametrize("answer", [
    payment_response("PartiallyAuthorised"),  # a flow paycore never asks for
    payment_response("AuthenticationFinished"),
    payment_response(pspReference=None),  # names no payment
    payment_response("RedirectShopper", action=None),
    payment_response(amount={"value": "4999", "currency": "EUR"}),
    [payment_response()],
], ids=["partially-authorised", "authentication-finished", "no-psp-reference", "action-missing",
        "amount-as-text", "not-an-object"])
async def test_an_unrecognized_answer_is_unknown(
    client: AdyenProvider, adyen: ScriptedAdyen, answer: Any
) -> None:
    adyen.reply(200, answer)
    outcome = await create(client, adyen)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, "provider.body-unrecognized")
    assert outcome.provider_payment_id is None


# ---------------------------------------------------------------------------
# Every Unknown path, by name


@pytest.mark.parametrize(("answer", "field"), [
    (payment_response(merchantReference="ORD-other", pspReference="FOREIGN00000001"), "reference"),
    (payment_response(amount={"value": 100, "currency": "EUR"}, pspReference="FOREIGN00000001"), "amount"),
    (payment_response(amount={"value": 4999, "currency": "USD"}, pspReference="FOREIGN00000001"), "currency"),
    (payment_response(merchantAccount="OtherECOM", pspReference="FOREIGN00000001"), "account"),
])
async def test_an_answer_about_another_payment_is_not_this_attempts_evidence(
    client: AdyenProvider, adyen: ScriptedAdyen, answer: dict[str, Any], field: str
) -> None:
    adyen.reply(200, answer)
    outcome = await create(client, adyen)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, f"provider.response-mismatch.{field}")
    assert outcome.provider_payment_id is None and outcome.provider_status is None
    assert outcome.claim is not None and outcome.claim.provider_payment_id == "FOREIGN00000001"
    assert outcome.detail["reported_payment"]["psp_reference"] == "FOREIGN00000001"


@pytest.mark.parametrize(("status", "body"), [
    (200, payment_response()),
    (422, error_body(422, "14_004")),
    (500, error_body(500, "000", "internal")),
    (503, b""),
], ids=["200", "422", "500", "503"])
@pytest.mark.parametrize("first_send", [True, False])
async def test_any_answer_with_transient_error_true_is_unknown(
    client: AdyenProvider, adyen: ScriptedAdyen, status: int, body: Any, first_send: bool
) -> None:
    adyen.reply(status, body, headers={"Transient-Error": "true"})
    outcome = await create(client, adyen, first_send=first_send)
    assert (outcome.kind, outcome.reason, outcome.http_status) == (
        OutcomeKind.UNKNOWN, "provider.transient-error", status)
    assert outcome.provider_payment_id is None


@pytest.mark.parametrize("status", [422, 409])
async def test_idempotency_in_progress_704_is_unknown_even_on_the_first_send(
    client: AdyenProvider, adyen: ScriptedAdyen, status: int
) -> None:
    # Documented body: {"status":409,"errorCode":"704","message":"request already processed or in
    # progress","errorType":"validation"}: "validation", yet never a rejection of this request.
    adyen.reply(status, error_body(status, "704", "validation", "request already processed or in progress"))
    outcome = await create(client, adyen, first_send=True)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, "provider.in-progress")
    assert outcome.request_rejected is False


async def test_idempotency_key_reused_for_another_request_is_unknown(
    client: AdyenProvider, adyen: ScriptedAdyen, caplog: pytest.LogCaptureFixture
) -> None:
    adyen.reply(422, error_body(422, "707", "validation", "Idempotency key used for a different request"))
    with caplog.at_level(logging.ERROR, logger="paycore.providers.adyen"):
        outcome = await create(client, adyen, first_send=True)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, "provider.key-reused")
    assert "idempotency key refused" in caplog.text


async def test_another_conflict_is_unknown(client: AdyenProvider, adyen: ScriptedAdyen) -> None:
    adyen.reply(409, error_body(409, "999", "validation"))
    outcome = await create(client, adyen)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, "provider.conflict")


@pytest.mark.parametrize("status", [500, 502, 503, 504])
async def test_a_server_error_is_unknown(client: AdyenProvider, adyen: ScriptedAdyen, status: int) -> None:
    adyen.reply(status, error_body(status, "000", "internal"))
    outcome = await create(client, adyen)
    assert (outcome.kind, outcome.reason, outcome.http_status) == (
        OutcomeKind.UNKNOWN, f"provider.http-{status}", status)


@pytest.mark.parametrize("status", [201, 204, 302, 404, 418])
async def test_an_unexpected_status_is_unknown(
    client: AdyenProvider, adyen: ScriptedAdyen, status: int
) -> None:
    adyen.reply(status, payment_response())
    outcome = await create(client, adyen)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, f"provider.unexpected-status-{status}")


async def test_rate_limited_is_unknown(client: AdyenProvider, adyen: ScriptedAdyen) -> None:
    adyen.reply(429, error_body(429, "000", "security"), headers={"Retry-After": "2"})
    outcome = await create(client, adyen, first_send=True)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, "provider.rate-limited")


@pytest.mark.parametrize(("status", "body", "reason"), [
    (200, b"", "provider.body-unreadable"),
    (200, b"{not json", "provider.body-unreadable"),
    (200, b"\xff\xfe", "provider.body-unreadable"),
    (422, b"<html>Bad</html>", "provider.body-unreadable"),
    (422, {"unexpected": True}, "provider.body-unrecognized"),
    (422, error_body(422, "14_004", "configuration"), "provider.body-unrecognized"),
])
async def test_an_unreadable_or_unrecognized_body_is_unknown(
    client: AdyenProvider, adyen: ScriptedAdyen, status: int, body: Any, reason: str
) -> None:
    adyen.reply(status, body)
    outcome = await create(client, adyen)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, reason)


async def test_undecodable_content_encoding_is_unknown(client: AdyenProvider, adyen: ScriptedAdyen) -> None:
    adyen.reply(200, b"this is not gzip", headers={"Content-Encoding": "gzip"})
    outcome = await create(client, adyen)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, "provider.body-unreadable")


async def test_a_connection_reset_mid_body_is_unknown(client: AdyenProvider, adyen: ScriptedAdyen) -> None:
    adyen.reply(200, payment_response(), fail_mid_stream=True)
    outcome = await create(client, adyen)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, "provider.transport.RemoteProtocolError")
    assert len(adyen.received) == 1


async def test_a_body_shorter_than_its_content_length_is_unknown(
    client: AdyenProvider, adyen: ScriptedAdyen
) -> None:
    adyen.reply(200, b'{"pspReference": "NC6H', headers={"Content-Length": "400"})
    outcome = await create(client, adyen)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, "provider.transport.RemoteProtocolError")


@contextlib.asynccontextmanager
async def raw_tcp_server(*, reset: bool) -> AsyncIterator[tuple[str, list[bytes]]]:
    """A TCP server that reads a request, then closes (or resets) without answering."""
    received: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await reader.readuntil(b"\r\n\r\n"))
        if reset:  # SO_LINGER 0: close() sends RST instead of FIN
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", received
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize(("reset", "reasons"), [
    (False, {"provider.transport.RemoteProtocolError"}),
    (True, {"provider.transport.ReadError", "provider.transport.RemoteProtocolError"}),
])
async def test_a_connection_closed_or_reset_without_answer_is_unknown(
    clock: FakeClock, reset: bool, reasons: set[str]
) -> None:
    async with raw_tcp_server(reset=reset) as (base_url, received), AdyenProvider(
        [account(base_url)], clock, max_call_duration_s=30
    ) as client:
        outcome = await client.create_payment(stored_request(base_url), budget_s=15, first_send=True)
    assert outcome.kind is OutcomeKind.UNKNOWN and outcome.reason in reasons
    assert len(received) == 1  # sent once, not resent on a fresh connection


# ---------------------------------------------------------------------------
# NotApplied: a documented rejection of the first send only


@pytest.mark.parametrize(("status", "body", "not_applied_reason", "resend_reason"), [
    (422, error_body(422, "14_004", "validation", "Missing payment method details"),
     "rejected:14_004", "provider.rejected-this-send.14_004"),
    (400, error_body(400, "702", "validation", "Unexpected input"),
     "rejected:702", "provider.rejected-this-send.702"),
    (401, b"", "rejected:auth", "provider.rejected.auth"),
    (403, error_body(403, "010", "security", "Not allowed"), "rejected:auth", "provider.rejected.auth"),
], ids=["422-validation", "400-validation", "401", "403"])
async def test_a_rejection_is_not_applied_only_on_the_first_send(
    client: AdyenProvider, adyen: ScriptedAdyen, status: int, body: Any, not_applied_reason: str,
    resend_reason: str
) -> None:
    adyen.reply(status, body)
    adyen.reply(status, body)
    first = await create(client, adyen, first_send=True)
    resend = await create(client, adyen, first_send=False)
    assert (first.kind, first.reason, first.http_status) == (
        OutcomeKind.NOT_APPLIED, not_applied_reason, status)
    assert (resend.kind, resend.reason) == (OutcomeKind.UNKNOWN, resend_reason)
    assert len(adyen.received) == 2


# ---------------------------------------------------------------------------
# No lookups


async def test_a_lookup_by_id_is_unsupported_and_sends_nothing(client: AdyenProvider,
                                                                adyen: ScriptedAdyen) -> None:
    # By reference: the shared conformance suite (its capabilities say unsupported).
    by_id = await client.get_payment(f"adyen:{MERCHANT_ACCOUNT}:test", PSP_REFERENCE, budget_s=5)
    assert (by_id.kind, by_id.payments) == ("unsupported", ())
    assert adyen.received == []


# ---------------------------------------------------------------------------
# Construction and logs


async def test_logs_carry_no_secrets_or_bodies(
    client: AdyenProvider, adyen: ScriptedAdyen, caplog: pytest.LogCaptureFixture
) -> None:
    stored = stored_request(adyen.base_url)
    adyen.reply(500, error_body(500, "000", "internal"))
    adyen.reply(422, error_body(422, "704", "validation"))
    adyen.reply(422, error_body(422, "707", "validation", "idempotency key reused"))
    adyen.reply(200, payment_response())
    with caplog.at_level(logging.DEBUG):
        for first_send in (True, False, False, False):
            await client.create_payment(stored, budget_s=15, first_send=first_send)
        await client.get_payment(stored.provider_account, PSP_REFERENCE, budget_s=5)
    ours = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("paycore"))
    assert str(stored.attempt_id) in ours and "provider.http-500" in ours
    everything = caplog.text + "\n".join(r.getMessage() for r in caplog.records)
    for secret in (API_KEY, "adyenjs", stored.request_body, RETURN_URL):
        assert secret not in everything
