"""The Cardco adapter against a real HTTP server that plays Cardco from a script.

Each test scripts the exact status, body and headers the provider answers with,
and asserts on the exact requests the server received. Budgets run on
:class:`FakeClock`; synchronisation is by deadline-bounded polling, never by
fixed sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import socket
import struct
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
import pytest

from harness.servers import free_port
from paycore.clock import FakeClock
from paycore.config import ProviderAccountConfig, Secret
from paycore.domain import Claim, OutcomeKind, ProviderOutcome
from paycore.errors import InvalidPaymentMethod
from paycore.providers.cardco import (
    CardcoClient,
    LookupResult,
    ProviderPayment,
    StoredRequest,
    build_request_body,
)
from paycore.providers.cardco.provider import API_VERSION as CARDCO_API_VERSION
from tests.support.scripted_cardco import (
    REFERENCE,
    Reply,
    ScriptedCardco,
    payment_object,
    running_scripted_cardco,
)

API_KEY = "sk_test_x"
OTHER_KEY = "sk_test_other"
IDEMPOTENCY_KEY = "8e03978e-6f0a-4b7e-9c1d-2f3a4b5c6d7e"


# ---------------------------------------------------------------------------
# The scripted provider


def error_body(code: str, type_: str = "invalid_request", param: str | None = None) -> dict[str, Any]:
    err: dict[str, Any] = {"type": type_, "code": code, "message": "scripted"}
    if param is not None:
        err["param"] = param
    return {"error": err}


def account(base_url: str, *, name: str = "acct_store", key: str = API_KEY,
            api_version: str = CARDCO_API_VERSION) -> ProviderAccountConfig:
    return ProviderAccountConfig(
        provider="cardco", account=name, environment="test", base_url=base_url,
        api_key=Secret(key), webhook_secret=None, api_version=api_version,
    )


def stored_request(base_url: str, **overrides: Any) -> StoredRequest:
    values: dict[str, Any] = {
        "attempt_id": uuid.uuid4(),
        "provider_account": "cardco:acct_store:test",
        "endpoint": base_url + "/v1/payments",
        "api_version": CARDCO_API_VERSION,
        "idempotency_key": IDEMPOTENCY_KEY,
        "request_body": build_request_body(
            amount_minor=4999, currency="EUR", payment_method="tok_visa", reference=REFERENCE,
            description="order ORD-5521 – café",
        ),
        "client_reference": REFERENCE,
        "amount_minor": 4999,
        "currency": "EUR",
    }
    values.update(overrides)
    return StoredRequest(**values)


async def eventually(predicate: Callable[[], bool], *, within_s: float = 5.0) -> None:
    """Poll ``predicate`` until it holds, failing after ``within_s`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.002)


@pytest.fixture
async def cardco() -> AsyncIterator[ScriptedCardco]:
    async with running_scripted_cardco() as server:
        yield server


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def client(cardco: ScriptedCardco, clock: FakeClock) -> AsyncIterator[CardcoClient]:
    c = CardcoClient(
        [account(cardco.base_url), account(cardco.base_url, name="acct_other", key=OTHER_KEY)],
        clock, max_call_duration_s=30,
    )
    try:
        yield c
    finally:
        await c.aclose()


async def create(client: CardcoClient, cardco: ScriptedCardco, *, first_send: bool = True,
                 budget_s: float | None = 15, **overrides: Any) -> ProviderOutcome:
    return await client.create_payment(stored_request(cardco.base_url, **overrides),
                                       budget_s=budget_s, first_send=first_send)


# ---------------------------------------------------------------------------
# Construction and the stored request


def test_build_request_body_is_canonical_json() -> None:
    body = build_request_body(amount_minor=4999, currency="EUR", payment_method="tok_visa",
                              reference="ORD-1", description="café", return_url=None)
    assert body == ('{"amount":4999,"currency":"EUR","description":"café",'
                    '"payment_method":"tok_visa","reference":"ORD-1"}')
    assert list(orjson.loads(body)) == sorted(orjson.loads(body))


@pytest.mark.parametrize(
    "overrides",
    [{"amount_minor": 0}, {"amount_minor": True}, {"currency": "eur"}, {"reference": ""},
     {"reference": "x" * 65}, {"payment_method": ""}],
)
def test_build_request_body_rejects_what_the_contract_would(overrides: dict[str, Any]) -> None:
    values: dict[str, Any] = {"amount_minor": 1, "currency": "EUR", "payment_method": "tok_visa",
                              "reference": "r"}
    values.update(overrides)
    with pytest.raises(InvalidPaymentMethod):  # the library's error, still a ValueError for callers
        build_request_body(**values)


def test_stored_request_from_record_and_repr_hides_the_body() -> None:
    attempt_id = uuid.uuid4()
    row = {
        "attempt_id": str(attempt_id), "provider_account": "cardco:acct_store:test",
        "endpoint": "http://x/v1/payments", "api_version": CARDCO_API_VERSION,
        "idempotency_key": "k", "request_body": '{"payment_method":"tok_secret"}',
        "client_reference": "r", "amount_minor": 5, "currency": "EUR", "state": "Started",
    }
    stored = StoredRequest.from_record(row)
    assert stored.attempt_id == attempt_id
    assert stored.request_body == '{"payment_method":"tok_secret"}'
    assert (stored.amount_minor, stored.currency, stored.client_reference) == (5, "EUR", "r")
    assert "tok_secret" not in repr(stored)


# ---------------------------------------------------------------------------
# What goes on the wire


async def test_request_is_built_only_from_the_stored_attempt(
    client: CardcoClient, cardco: ScriptedCardco
) -> None:
    # Not canonical on purpose: the stored text is sent as it is, never re-serialized.
    raw_body = '{"reference": "ORD-5521-a1", "amount": 4999, "currency": "EUR", "description": "ünïcode"}'
    cardco.reply(201, payment_object())
    outcome = await create(client, cardco, request_body=raw_body, api_version="2026-11-01")
    assert outcome.kind is OutcomeKind.SUCCEEDED

    [req] = cardco.received
    assert (req.method, req.path) == ("POST", "/v1/payments")
    assert req.body == raw_body.encode("utf-8")
    assert req.headers["idempotency-key"] == f'"{IDEMPOTENCY_KEY}"'
    assert req.headers["cardco-version"] == "2026-11-01"
    assert req.headers["content-type"] == "application/json"
    assert req.headers["authorization"] == f"Bearer {API_KEY}"
    assert req.headers["cardco-account"] == "acct_store"
    assert req.headers["content-length"] == str(len(raw_body.encode("utf-8")))


async def test_two_sends_are_byte_identical(client: CardcoClient, cardco: ScriptedCardco) -> None:
    stored = stored_request(cardco.base_url)
    cardco.reply(500, error_body("internal", "api_error"))
    cardco.reply(201, payment_object(), headers={"Idempotent-Replayed": "true"})
    first = await client.create_payment(stored, budget_s=15, first_send=True)
    second = await client.create_payment(stored, budget_s=15, first_send=False)
    assert first.reason == "provider.http-500"
    assert second.kind is OutcomeKind.SUCCEEDED and second.replayed

    one, two = cardco.received
    assert one.body == two.body == stored.request_body.encode("utf-8")
    for name in ("idempotency-key", "cardco-version", "authorization", "cardco-account", "content-type"):
        assert one.headers[name] == two.headers[name]


async def test_idempotency_key_is_a_quoted_structured_field_string(
    client: CardcoClient, cardco: ScriptedCardco
) -> None:
    cardco.reply(201, payment_object())
    await create(client, cardco, idempotency_key='ab"c\\d')
    assert cardco.received[0].headers["idempotency-key"] == '"ab\\"c\\\\d"'


async def test_a_send_carries_the_stored_api_version_after_the_account_moved_to_a_newer_one(
    cardco: ScriptedCardco, clock: FakeClock
) -> None:
    # The attempt was stored (and first sent) under CARDCO_API_VERSION; the account has been
    # configured for a newer version since. A resend must stay the same request.
    acct = account(cardco.base_url, api_version="2027-01-01")
    async with CardcoClient([acct], clock, max_call_duration_s=30) as client:
        cardco.reply(201, payment_object())
        await create(client, cardco, first_send=False)
    [req] = cardco.received
    assert req.headers["cardco-version"] == CARDCO_API_VERSION


async def test_credentials_are_those_of_the_stored_account(
    client: CardcoClient, cardco: ScriptedCardco
) -> None:
    cardco.reply(201, payment_object(account="acct_other"))
    outcome = await create(client, cardco, provider_account="cardco:acct_other:test")
    assert outcome.kind is OutcomeKind.SUCCEEDED
    assert cardco.received[0].headers["authorization"] == f"Bearer {OTHER_KEY}"
    assert cardco.received[0].headers["cardco-account"] == "acct_other"


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"provider_account": "cardco:acct_store:live"}, "account-not-configured"),
        ({"endpoint": "/v1/payments"}, "endpoint-changed"),
        ({"endpoint": "ftp://127.0.0.1/v1/payments"}, "endpoint-changed"),
        ({"endpoint": "http://[::1/v1/payments"}, "endpoint-changed"),
        ({"idempotency_key": "key\r\nX-Injected: 1"}, "invalid-header"),
        ({"idempotency_key": "clé"}, "invalid-header"),
        ({"idempotency_key": "k" * 256}, "invalid-header"),
        ({"api_version": "2026-11-01\r\nX: y"}, "invalid-header"),
        ({"api_version": ""}, "invalid-header"),
        ({"request_body": "\ud800"}, "invalid-body"),
    ],
)
async def test_a_stored_request_that_cannot_be_built_is_unknown_and_not_sent(
    client: CardcoClient, cardco: ScriptedCardco, overrides: dict[str, Any], reason: str
) -> None:
    outcome = await create(client, cardco, **overrides)
    assert outcome.kind is OutcomeKind.UNKNOWN
    assert outcome.reason == f"request.not-buildable.{reason}"
    assert outcome.http_status is None
    assert cardco.received == []


async def test_endpoint_on_another_port_or_with_userinfo_is_not_sent(
    client: CardcoClient, cardco: ScriptedCardco
) -> None:
    other_port = cardco.base_url.replace(cardco.base_url.rsplit(":", 1)[1], str(free_port()))
    with_userinfo = cardco.base_url.replace("http://", "http://user:pw@")
    for endpoint in (other_port + "/v1/payments", with_userinfo + "/v1/payments",
                     cardco.base_url.replace("http://", "https://") + "/v1/payments"):
        outcome = await create(client, cardco, endpoint=endpoint)
        assert outcome.reason == "request.not-buildable.endpoint-changed", endpoint
    assert cardco.received == []


async def test_redirects_are_not_followed(client: CardcoClient, cardco: ScriptedCardco) -> None:
    cardco.reply(307, b"", headers={"Location": cardco.base_url + "/v1/payments"})
    outcome = await create(client, cardco)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, "provider.unexpected-status-307")
    assert len(cardco.received) == 1


# ---------------------------------------------------------------------------
# Classification of answers


NEXT_ACTION = {"type": "redirect_to_url", "url": "https://3ds.example/c/1", "expires_at": 1795900900}


@pytest.mark.parametrize(
    ("reply", "first_send", "kind", "reason"),
    [
        (Reply(201, payment_object("succeeded")), True, OutcomeKind.SUCCEEDED, None),
        (Reply(201, payment_object("processing")), True, OutcomeKind.PROCESSING, None),
        (Reply(201, payment_object("requires_action", next_action=NEXT_ACTION)), True,
         OutcomeKind.REQUIRES_ACTION, None),
        (Reply(201, payment_object("declined", decline_code="card_declined")), True,
         OutcomeKind.FAILED, "declined:card_declined"),
        (Reply(201, payment_object("failed")), True, OutcomeKind.FAILED, "failed"),
        (Reply(201, payment_object("canceled")), True, OutcomeKind.FAILED, "canceled"),
        (Reply(402, payment_object("declined", decline_code="insufficient_funds")), True,
         OutcomeKind.FAILED, "declined:insufficient_funds"),
        (Reply(402, payment_object("declined", decline_code="card_declined")), False,
         OutcomeKind.FAILED, "declined:card_declined"),
        # 400: a no-effect rejection means NotApplied only on the first send.
        (Reply(400, error_body("parameter_invalid", param="payment_method")), True,
         OutcomeKind.NOT_APPLIED, "rejected:parameter_invalid:payment_method"),
        (Reply(400, error_body("invalid_request")), True,
         OutcomeKind.NOT_APPLIED, "rejected:invalid_request"),
        (Reply(400, error_body("missing_idempotency_key")), True,
         OutcomeKind.NOT_APPLIED, "rejected:missing_idempotency_key"),
        (Reply(400, error_body("version_invalid")), True,
         OutcomeKind.NOT_APPLIED, "rejected:version_invalid"),
        (Reply(400, error_body("parameter_invalid", param="payment_method")), False,
         OutcomeKind.UNKNOWN, "provider.rejected-this-send.parameter_invalid"),
        (Reply(400, error_body("version_invalid")), False,
         OutcomeKind.UNKNOWN, "provider.rejected-this-send.version_invalid"),
        (Reply(400, error_body("invalid_request"), headers={"Idempotent-Replayed": "true"}), True,
         OutcomeKind.UNKNOWN, "provider.rejected-this-send.invalid_request"),
        (Reply(400, error_body("something_new")), True, OutcomeKind.UNKNOWN, "provider.body-unrecognized"),
        (Reply(400, b"<html>bad request</html>"), True, OutcomeKind.UNKNOWN, "provider.body-unreadable"),
        (Reply(429, error_body("rate_limited", "rate_limited"), headers={"Retry-After": "2"}), True,
         OutcomeKind.NOT_APPLIED, "rejected:rate_limited"),
        (Reply(429, error_body("rate_limited", "rate_limited"), headers={"Retry-After": "2"}), False,
         OutcomeKind.UNKNOWN, "provider.rate-limited"),
        # A replayed 429 is off-contract (a 429 is never stored under the key): it proves nothing.
        (Reply(429, error_body("rate_limited", "rate_limited"), headers={"Idempotent-Replayed": "true"}),
         True, OutcomeKind.UNKNOWN, "provider.rate-limited"),
        (Reply(409, error_body("request_in_progress", "idempotency_error"), headers={"Retry-After": "1"}),
         True, OutcomeKind.UNKNOWN, "provider.in-progress"),
        (Reply(409, error_body("request_in_progress", "idempotency_error")), False,
         OutcomeKind.UNKNOWN, "provider.in-progress"),
        (Reply(401, error_body("unauthorized", "authentication_error")), True,
         OutcomeKind.UNKNOWN, "provider.rejected.auth"),
        (Reply(403, error_body("forbidden", "authentication_error")), True,
         OutcomeKind.UNKNOWN, "provider.rejected.auth"),
        (Reply(500, error_body("internal", "api_error")), True, OutcomeKind.UNKNOWN, "provider.http-500"),
        (Reply(503, error_body("not_processed", "api_error")), True,
         OutcomeKind.UNKNOWN, "provider.http-503"),
        (Reply(502, b"bad gateway"), True, OutcomeKind.UNKNOWN, "provider.http-502"),
        (Reply(504, b""), False, OutcomeKind.UNKNOWN, "provider.http-504"),
        (Reply(200, payment_object()), True, OutcomeKind.UNKNOWN, "provider.unexpected-status-200"),
        (Reply(404, error_body("not_found")), True, OutcomeKind.UNKNOWN, "provider.unexpected-status-404"),
        (Reply(418, b""), True, OutcomeKind.UNKNOWN, "provider.unexpected-status-418"),
    ],
)
async def test_classification(
    client: CardcoClient, cardco: ScriptedCardco, reply: Reply, first_send: bool,
    kind: OutcomeKind, reason: str | None,
) -> None:
    cardco.replies.append(reply)
    outcome = await create(client, cardco, first_send=first_send)
    assert (outcome.kind, outcome.reason) == (kind, reason)
    assert outcome.http_status == reply.status
    assert outcome.replayed is (reply.headers.get("Idempotent-Replayed") == "true")
    assert len(cardco.received) == 1  # exactly one send, whatever the answer


async def test_succeeded_carries_the_payment(client: CardcoClient, cardco: ScriptedCardco) -> None:
    cardco.reply(201, payment_object("succeeded"), headers={"Idempotent-Replayed": "true"})
    outcome = await create(client, cardco)
    assert outcome == ProviderOutcome.succeeded(
        "pay_3f9c", 4999, "EUR", http_status=201, replayed=True,
        claim=Claim(provider_payment_id="pay_3f9c", reference=REFERENCE, amount_minor=4999, currency="EUR",
                    accounts=("acct_store",), livemodes=(False,)),
    )


async def test_processing_carries_the_payment(client: CardcoClient, cardco: ScriptedCardco) -> None:
    cardco.reply(201, payment_object("processing"))
    outcome = await create(client, cardco)
    assert outcome.kind is OutcomeKind.PROCESSING
    assert (outcome.provider_payment_id, outcome.provider_status) == ("pay_3f9c", "processing")
    assert (outcome.amount_minor, outcome.currency) == (4999, "EUR")


async def test_requires_action_carries_the_next_action_and_its_expiry(
    client: CardcoClient, cardco: ScriptedCardco
) -> None:
    cardco.reply(201, payment_object("requires_action", next_action=NEXT_ACTION))
    outcome = await create(client, cardco)
    assert outcome.kind is OutcomeKind.REQUIRES_ACTION
    assert outcome.provider_payment_id == "pay_3f9c"
    assert outcome.provider_status == "requires_action"
    assert outcome.next_action == NEXT_ACTION
    assert outcome.next_action_expires_at == datetime.fromtimestamp(1795900900, UTC)
    assert outcome.next_action_expires_at.tzinfo is UTC


async def test_requires_action_without_expiry(client: CardcoClient, cardco: ScriptedCardco) -> None:
    cardco.reply(201, payment_object("requires_action",
                                     next_action={"type": "redirect_to_url", "url": "https://x"}))
    outcome = await create(client, cardco)
    assert outcome.kind is OutcomeKind.REQUIRES_ACTION
    assert outcome.next_action_expires_at is None


async def test_declined_402_carries_the_payment(client: CardcoClient, cardco: ScriptedCardco) -> None:
    cardco.reply(402, payment_object("declined", decline_code="insufficient_funds"))
    outcome = await create(client, cardco)
    assert outcome.kind is OutcomeKind.FAILED and outcome.is_final
    assert outcome.reason == "declined:insufficient_funds"
    assert (outcome.provider_payment_id, outcome.provider_status) == ("pay_3f9c", "declined")
    assert (outcome.amount_minor, outcome.currency, outcome.http_status) == (4999, "EUR", 402)


async def test_rate_limit_keeps_retry_after(client: CardcoClient, cardco: ScriptedCardco) -> None:
    cardco.reply(429, error_body("rate_limited", "rate_limited"), headers={"Retry-After": "2"})
    outcome = await create(client, cardco)
    assert outcome.detail == {"retry_after_s": 2.0}


async def test_key_reused_is_logged_as_our_bug(
    client: CardcoClient, cardco: ScriptedCardco, caplog: pytest.LogCaptureFixture
) -> None:
    cardco.reply(422, error_body("key_reused", "idempotency_error"))
    stored = stored_request(cardco.base_url)
    with caplog.at_level(logging.ERROR, logger="paycore.providers.cardco"):
        outcome = await client.create_payment(stored, budget_s=15, first_send=False)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, "provider.key-reused")
    assert outcome.http_status == 422
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.name == "paycore.providers.cardco"
    assert str(stored.attempt_id) in record.getMessage()


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (201, b"", "provider.body-unreadable"),
        (201, b"   ", "provider.body-unreadable"),
        (201, b'{"id": "pay_3f9c", "status": "succ', "provider.body-unreadable"),
        (201, b"\xff\xfe not utf-8", "provider.body-unreadable"),
        (201, b"null", "provider.body-unrecognized"),
        (201, b"[]", "provider.body-unrecognized"),
        (201, error_body("internal"), "provider.body-unrecognized"),
        (201, {k: v for k, v in payment_object().items() if k != "id"}, "provider.body-unrecognized"),
        (201, {k: v for k, v in payment_object().items() if k != "status"}, "provider.body-unrecognized"),
        (201, {k: v for k, v in payment_object().items() if k != "amount"}, "provider.body-unrecognized"),
        (201, {k: v for k, v in payment_object().items() if k != "currency"}, "provider.body-unrecognized"),
        (201, payment_object(id=""), "provider.body-unrecognized"),
        (201, payment_object(id=17), "provider.body-unrecognized"),
        (201, payment_object(status="charged"), "provider.body-unrecognized"),
        (201, payment_object(amount="4999"), "provider.body-unrecognized"),
        (201, payment_object(amount=True), "provider.body-unrecognized"),
        (201, payment_object(amount=4999.0), "provider.body-unrecognized"),
        (201, payment_object(amount=-1), "provider.body-unrecognized"),
        (201, payment_object(amount=0), "provider.body-unrecognized"),  # the contract: at least 1
        (201, payment_object(currency="eur"), "provider.body-unrecognized"),
        (201, payment_object(livemode="no"), "provider.body-unrecognized"),
        (201, payment_object(reference=5), "provider.body-unrecognized"),
        (201, payment_object(amount_refunded=True), "provider.body-unrecognized"),
        (201, payment_object("requires_action"), "provider.body-unrecognized"),
        (201, payment_object("requires_action", next_action="redirect"), "provider.body-unrecognized"),
        (201, payment_object("requires_action", next_action={"expires_at": "soon"}),
         "provider.body-unrecognized"),
        (201, payment_object("requires_action", next_action={"expires_at": True}),
         "provider.body-unrecognized"),
        (201, payment_object("requires_action", next_action={"expires_at": 10**15}),
         "provider.body-unrecognized"),
        (402, payment_object("succeeded"), "provider.body-unrecognized"),
        (402, error_body("card_declined", "card_error"), "provider.body-unrecognized"),
        (402, b"", "provider.body-unreadable"),
        # A payment that answers a different request than the one we sent.
        (201, payment_object(reference="ORD-other"), "provider.response-mismatch.reference"),
        (201, payment_object(amount=5000), "provider.response-mismatch.amount"),
        (201, payment_object(currency="USD"), "provider.response-mismatch.currency"),
        (201, payment_object(account="acct_other"), "provider.response-mismatch.account"),
        (201, payment_object(livemode=True), "provider.response-mismatch.environment"),
        (402, payment_object("declined", amount=1), "provider.response-mismatch.amount"),
    ],
)
async def test_unreadable_or_unrecognized_bodies_are_unknown(
    client: CardcoClient, cardco: ScriptedCardco, status: int, body: Any, reason: str
) -> None:
    cardco.reply(status, body)
    outcome = await create(client, cardco)
    assert (outcome.kind, outcome.reason, outcome.http_status) == (OutcomeKind.UNKNOWN, reason, status)


@pytest.mark.parametrize(
    ("answered", "field"),
    [(payment_object(reference="ORD-other", id="pay_foreign"), "reference"),
     (payment_object(account="acct_other", id="pay_foreign"), "account"),
     (payment_object(livemode=True, id="pay_foreign"), "environment")],
)
async def test_a_create_answer_naming_another_payment_never_carries_its_id_or_status(
    client: CardcoClient, cardco: ScriptedCardco, answered: dict[str, Any], field: str
) -> None:
    cardco.reply(201, answered)
    outcome = await create(client, cardco)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, f"provider.response-mismatch.{field}")
    assert outcome.provider_payment_id is None and outcome.provider_status is None
    assert outcome.claim is not None and outcome.claim.provider_payment_id == "pay_foreign"
    assert outcome.detail["reported_payment"]["id"] == "pay_foreign"


async def test_undecodable_content_encoding_is_unknown(client: CardcoClient, cardco: ScriptedCardco) -> None:
    cardco.reply(201, b"this is not gzip", headers={"Content-Encoding": "gzip"})
    outcome = await create(client, cardco)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, "provider.body-unreadable")


# ---------------------------------------------------------------------------
# Transport failures


async def test_body_shorter_than_content_length_is_a_transport_error(
    client: CardcoClient, cardco: ScriptedCardco
) -> None:
    cardco.reply(201, b'{"id": "pay_3f9c", "sta', headers={"Content-Length": "400"})
    outcome = await create(client, cardco)
    assert (outcome.kind, outcome.reason) == (OutcomeKind.UNKNOWN, "provider.transport.RemoteProtocolError")
    assert outcome.http_status is None


async def test_response_breaking_mid_stream_is_a_transport_error(
    client: CardcoClient, cardco: ScriptedCardco
) -> None:
    cardco.reply(201, payment_object(), fail_mid_stream=True)
    outcome = await create(client, cardco)
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


@pytest.mark.parametrize(
    ("reset", "reasons"),
    [
        (False, {"provider.transport.RemoteProtocolError"}),
        # A reset surfaces as a read or a protocol error depending on timing.
        (True, {"provider.transport.ReadError", "provider.transport.RemoteProtocolError"}),
    ],
)
async def test_connection_closed_without_answer_is_a_transport_error(
    clock: FakeClock, reset: bool, reasons: set[str]
) -> None:
    async with raw_tcp_server(reset=reset) as (base_url, received), CardcoClient(
        [account(base_url)], clock, max_call_duration_s=30
    ) as client:
        outcome = await client.create_payment(stored_request(base_url), budget_s=15, first_send=True)
    assert outcome.kind is OutcomeKind.UNKNOWN
    assert outcome.reason in reasons
    assert len(received) == 1  # sent once, and not resent on a fresh connection


class _BuggyTransport(httpx.AsyncBaseTransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raise TypeError("a bug, not a provider outcome")


async def test_programming_errors_propagate(clock: FakeClock) -> None:
    base_url = "http://cardco.test"
    async with CardcoClient([account(base_url)], clock, max_call_duration_s=30,
                            transport=_BuggyTransport()) as client:
        with pytest.raises(TypeError, match="a bug"):
            await client.create_payment(stored_request(base_url), budget_s=15, first_send=True)


# ---------------------------------------------------------------------------
# Budgets


async def start_held_call(
    client: CardcoClient, cardco: ScriptedCardco, *, budget_s: float | None
) -> tuple[asyncio.Task[ProviderOutcome], asyncio.Event]:
    """Start a create call and return once the server holds its request."""
    release = cardco.hang()
    task = asyncio.create_task(create(client, cardco, budget_s=budget_s))
    await eventually(lambda: len(cardco.received) == 1)
    return task, release


async def test_budget_not_yet_spent_does_not_fire(
    client: CardcoClient, cardco: ScriptedCardco, clock: FakeClock
) -> None:
    task, release = await start_held_call(client, cardco, budget_s=15)
    clock.advance(14)
    # The budget's timer is still registered: advancing did not fire it.
    assert clock.pending_timers == 1
    release.set()
    outcome = await asyncio.wait_for(task, timeout=5)
    assert outcome.kind is OutcomeKind.SUCCEEDED


async def test_cancellation_from_outside_propagates(
    client: CardcoClient, cardco: ScriptedCardco, clock: FakeClock
) -> None:
    task, release = await start_held_call(client, cardco, budget_s=15)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    assert clock.pending_timers == 0  # the budget was cleaned up


async def test_the_pool_is_usable_after_a_budget_fired(
    client: CardcoClient, cardco: ScriptedCardco, clock: FakeClock
) -> None:
    task, release = await start_held_call(client, cardco, budget_s=1)
    clock.advance(2)
    assert (await asyncio.wait_for(task, timeout=5)).reason == "provider.no-response.caller"
    release.set()
    cardco.reply(201, payment_object())
    assert (await create(client, cardco)).kind is OutcomeKind.SUCCEEDED


# ---------------------------------------------------------------------------
# Lookups


async def test_get_payment_found(client: CardcoClient, cardco: ScriptedCardco) -> None:
    cardco.reply(200, payment_object("requires_action", next_action=NEXT_ACTION, amount_refunded=0))
    result = await client.get_payment("cardco:acct_store:test", "pay_3f9c", budget_s=5)
    assert result.kind == "found"
    assert result.payment == ProviderPayment(
        id="pay_3f9c", account="acct_store", livemode=False, amount_minor=4999, currency="EUR",
        reference=REFERENCE, status="requires_action", decline_code=None, amount_refunded=0,
        next_action=NEXT_ACTION, next_action_expires_at=datetime.fromtimestamp(1795900900, UTC),
    )
    [req] = cardco.received
    assert (req.method, req.path, req.body) == ("GET", "/v1/payments/pay_3f9c", b"")
    assert req.headers["authorization"] == f"Bearer {API_KEY}"
    assert req.headers["cardco-account"] == "acct_store"
    assert req.headers["cardco-version"] == CARDCO_API_VERSION
    assert "idempotency-key" not in req.headers


async def test_lookups_use_the_accounts_base_url_and_api_version(
    cardco: ScriptedCardco, clock: FakeClock
) -> None:
    acct = account(cardco.base_url + "/", name="acct_other", key=OTHER_KEY, api_version="2027-01-01")
    async with CardcoClient([acct], clock, max_call_duration_s=30) as client:
        cardco.reply(200, payment_object(account="acct_other"))
        await client.get_payment("cardco:acct_other:test", "pay/../x y", budget_s=5)
    [req] = cardco.received
    assert req.path == "/v1/payments/pay%2F..%2Fx%20y"  # the id stays one path segment
    assert req.headers["cardco-version"] == "2027-01-01"
    assert req.headers["authorization"] == f"Bearer {OTHER_KEY}"
    assert req.headers["cardco-account"] == "acct_other"


async def test_get_payment_not_found(client: CardcoClient, cardco: ScriptedCardco) -> None:
    cardco.reply(404, error_body("resource_missing"))
    result = await client.get_payment("cardco:acct_store:test", "pay_x", budget_s=5)
    assert result == LookupResult("not_found")


@pytest.mark.parametrize(
    ("headers", "retry_after_s"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({}, 1.0),
        ({"Retry-After": "soon"}, 1.0),
        ({"Retry-After": email.utils.format_datetime(datetime(2026, 11, 29, 12, 0, 30, tzinfo=UTC),
                                                     usegmt=True)}, 30.0),
        ({"Retry-After": email.utils.format_datetime(datetime(2026, 11, 29, 11, 0, tzinfo=UTC),
                                                     usegmt=True)}, 0.0),
        # An HTTP-date with the "-0000" zone reads as a naive time: GMT, by the HTTP definition.
        ({"Retry-After": "Sun, 29 Nov 2026 12:00:30 -0000"}, 30.0),
    ],
)
async def test_lookup_rate_limited(
    client: CardcoClient, cardco: ScriptedCardco, headers: dict[str, str], retry_after_s: float
) -> None:
    cardco.reply(429, error_body("rate_limited", "rate_limited"), headers=headers)
    result = await client.get_payment("cardco:acct_store:test", "pay_x", budget_s=5)
    assert (result.kind, result.retry_after_s, result.payments) == ("rate_limited", retry_after_s, ())


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (Reply(500, error_body("internal", "api_error")), "provider.http-500"),
        (Reply(503, b""), "provider.http-503"),
        (Reply(401, b""), "provider.rejected.auth"),
        (Reply(400, error_body("version_invalid")), "provider.unexpected-status-400"),
        (Reply(200, b""), "provider.body-unreadable"),
        (Reply(200, b"{not json"), "provider.body-unreadable"),
        (Reply(200, {"data": []}), "provider.body-unrecognized"),
        (Reply(200, payment_object(amount=True)), "provider.body-unrecognized"),
        (Reply(200, payment_object(), headers={"Content-Length": "999"}),
         "provider.transport.RemoteProtocolError"),
    ],
)
async def test_get_payment_failed(
    client: CardcoClient, cardco: ScriptedCardco, reply: Reply, reason: str
) -> None:
    cardco.replies.append(reply)
    result = await client.get_payment("cardco:acct_store:test", "pay_3f9c", budget_s=5)
    assert (result.kind, result.reason, result.payments) == ("failed", reason, ())


async def test_lookup_budget_fires(client: CardcoClient, cardco: ScriptedCardco, clock: FakeClock) -> None:
    release = cardco.hang()
    task = asyncio.create_task(client.get_payment("cardco:acct_store:test", "pay_3f9c", budget_s=None))
    await eventually(lambda: len(cardco.received) == 1)
    clock.advance(31)
    result = await asyncio.wait_for(task, timeout=5)
    release.set()
    assert (result.kind, result.reason) == ("failed", "provider.no-response.client-ceiling")


async def test_find_by_reference(client: CardcoClient, cardco: ScriptedCardco) -> None:
    older = payment_object("failed", id="pay_1", reference="ORD 1&x=y")
    newer = payment_object("succeeded", id="pay_2", reference="ORD 1&x=y", amount_refunded=100)
    cardco.reply(200, {"data": [older, newer]})
    result = await client.find_by_reference("cardco:acct_store:test", "ORD 1&x=y", budget_s=5)
    assert result.kind == "found"
    assert [p.id for p in result.payments] == ["pay_1", "pay_2"]
    assert result.payments[1].amount_refunded == 100
    [req] = cardco.received
    assert (req.method, req.path) == ("GET", "/v1/payments")
    assert req.query == b"reference=ORD+1%26x%3Dy"
    assert req.headers["cardco-account"] == "acct_store"


@pytest.mark.parametrize(
    "answered",
    [payment_object(id="pay_other"), payment_object(account="acct_other"), payment_object(livemode=True),
     payment_object(reference="ORD-other"), payment_object(amount=1)],
    ids=["another-id", "another-account", "live-mode", "another-reference", "another-amount"],
)
async def test_a_lookup_reports_a_payment_that_is_not_this_attempts_as_found_never_as_failed(
    client: CardcoClient, cardco: ScriptedCardco, answered: dict[str, Any]
) -> None:
    # Whether it is evidence about the attempt is the caller's judgement (recovery
    # escalates a mismatch at once); a "failed" lookup would back off for hours and
    # drop what was seen.
    cardco.reply(200, answered)
    by_id = await client.get_payment("cardco:acct_store:test", "pay_3f9c", budget_s=5)
    cardco.reply(200, {"data": [answered]})
    by_reference = await client.find_by_reference("cardco:acct_store:test", REFERENCE, budget_s=5)
    for result in (by_id, by_reference):
        assert result.kind == "found" and result.reason is None
        [payment] = result.payments
        assert payment.evidence() == {
            "id": answered["id"], "status": answered["status"], "account": answered["account"],
            "livemode": answered["livemode"], "reference": answered["reference"],
            "amount_minor": answered["amount"], "currency": answered["currency"]}


async def test_find_by_reference_none(client: CardcoClient, cardco: ScriptedCardco) -> None:
    cardco.reply(200, {"data": []})
    result = await client.find_by_reference("cardco:acct_store:test", REFERENCE, budget_s=5)
    assert result == LookupResult("not_found")


@pytest.mark.parametrize(
    ("reply", "kind", "reason"),
    [
        (Reply(200, payment_object()), "failed", "provider.body-unrecognized"),
        (Reply(200, {"data": [payment_object(), {"id": "pay_2"}]}), "failed", "provider.body-unrecognized"),
        (Reply(404, b""), "failed", "provider.unexpected-status-404"),
        (Reply(429, b"", headers={"Retry-After": "3"}), "rate_limited", "provider.rate-limited"),
        (Reply(502, b""), "failed", "provider.http-502"),
    ],
)
async def test_find_by_reference_other_answers(
    client: CardcoClient, cardco: ScriptedCardco, reply: Reply, kind: str, reason: str
) -> None:
    cardco.replies.append(reply)
    result = await client.find_by_reference("cardco:acct_store:test", REFERENCE, budget_s=5)
    assert (result.kind, result.reason, result.payments) == (kind, reason, ())


def _payment(status: str, **kw: Any) -> ProviderPayment:
    values: dict[str, Any] = {"id": "pay_1", "account": "acct_store", "livemode": False, "amount_minor": 100,
                              "currency": "EUR", "reference": "r", "status": status}
    values.update(kw)
    return ProviderPayment(**values)


def test_provider_payment_to_outcome() -> None:
    expiry = datetime(2026, 11, 29, 12, 15, tzinfo=UTC)
    assert _payment("succeeded").to_outcome() == ProviderOutcome.succeeded(
        "pay_1", 100, "EUR", claim=Claim(provider_payment_id="pay_1", reference="r", amount_minor=100,
                                         currency="EUR", accounts=("acct_store",), livemodes=(False,)))
    processing = _payment("processing").to_outcome()
    assert (processing.kind, processing.provider_payment_id) == (OutcomeKind.PROCESSING, "pay_1")
    action = _payment("requires_action", next_action={"type": "redirect_to_url"},
                      next_action_expires_at=expiry).to_outcome()
    assert (action.kind, action.next_action, action.next_action_expires_at) == (
        OutcomeKind.REQUIRES_ACTION, {"type": "redirect_to_url"}, expiry)
    for status, code, reason in [("declined", "card_declined", "declined:card_declined"),
                                 ("declined", None, "declined:unspecified"),
                                 ("failed", None, "failed"), ("canceled", None, "canceled")]:
        outcome = _payment(status, decline_code=code).to_outcome()
        assert (outcome.kind, outcome.reason, outcome.provider_status) == (OutcomeKind.FAILED, reason, status)
        assert (outcome.provider_payment_id, outcome.amount_minor, outcome.currency) == ("pay_1", 100, "EUR")


def test_provider_payment_rejects_impossible_states() -> None:
    with pytest.raises(ValueError):
        _payment("charged")
    with pytest.raises(ValueError):
        _payment("requires_action")


# ---------------------------------------------------------------------------
# Logs


async def test_logs_carry_no_secrets_or_bodies(
    client: CardcoClient, cardco: ScriptedCardco, caplog: pytest.LogCaptureFixture
) -> None:
    stored = stored_request(cardco.base_url)
    cardco.reply(500, error_body("internal", "api_error"))
    cardco.reply(422, error_body("key_reused", "idempotency_error"))
    cardco.reply(429, b"")
    with caplog.at_level(logging.DEBUG):
        await client.create_payment(stored, budget_s=15, first_send=True)
        await client.create_payment(stored, budget_s=15, first_send=False)
        await client.get_payment("cardco:acct_store:test", "pay_3f9c", budget_s=5)
    ours = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("paycore"))
    assert str(stored.attempt_id) in ours and "provider.http-500" in ours
    everything = caplog.text + "\n".join(r.getMessage() for r in caplog.records)
    for secret in (API_KEY, "Bearer", "tok_visa", stored.request_body):
        assert secret not in everything


def test_time_helpers_sanity() -> None:
    # FakeClock's start is what the HTTP-date cases above are relative to.
    assert FakeClock().now() + timedelta(seconds=30) == datetime(2026, 11, 29, 12, 0, 30, tzinfo=UTC)
