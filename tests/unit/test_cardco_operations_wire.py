"""Cardco after the payment, on the wire: refund and capture objects, the payment's capture
fields, the lookups' lists and the refund and capture events.

Tables of objects the contract allows and of objects it does not (one case per field and
way of being wrong), then the running sandbox's own objects and events, which must all
parse: the parser and the sandbox read the contract the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import orjson
import pytest

from harness.servers import serve_asgi
from paycore.domain import HOLD_STATUS, OutcomeKind, ProviderOutcome
from paycore.providers.cardco.events import (
    EVENT_TYPES,
    OPERATION_EVENT_TYPES,
    InvalidEvent,
    OperationEvent,
    is_operation_event,
    parse_event,
    parse_operation_event,
)
from paycore.providers.cardco.wire import (
    OUTCOME_STATUSES,
    PAYMENT_STATUSES,
    ProviderCapture,
    ProviderPayment,
    ProviderRefund,
    parse_capture,
    parse_list,
    parse_payment,
    parse_payment_object,
    parse_refund,
)
from paycore_sandbox.app import create_app
from paycore_sandbox.settings import SandboxSettings
from tests.sandbox.support import eventually, get_json, new_reference, paid, post
from tests.support.scripted_cardco import payment_object

MISSING = object()  # an override that removes the field


def _with(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    obj = {**base, **overrides}
    return {k: v for k, v in obj.items() if v is not MISSING}


def refund_object(**overrides: Any) -> dict[str, Any]:
    return _with({"id": "re_9a07", "object": "refund", "payment": "pay_3f9c", "account": "acct_store",
                  "livemode": False, "amount": 1500, "currency": "EUR", "reference": "ORD-5521-r1",
                  "status": "succeeded", "failure_reason": None, "created": 1795900200}, overrides)


def capture_object(**overrides: Any) -> dict[str, Any]:
    return _with({"id": "cap_5d1e", "object": "capture", "payment": "pay_3f9c", "account": "acct_store",
                  "livemode": False, "amount": 3000, "currency": "EUR", "reference": "ORD-5521-cap1",
                  "status": "succeeded", "failure_reason": None, "created": 1795900100}, overrides)


def held_payment(**overrides: Any) -> dict[str, Any]:
    return payment_object("requires_capture", **{
        "capture": "manual", "amount_capturable": 4999, "amount_captured": 0,
        "capture_before": 1796504800, **overrides})


def event_body(event_type: str, obj: Any, **overrides: Any) -> bytes:
    event = _with({"id": "evt_81c2", "type": event_type, "created": 1795900203, "account": "acct_store",
                   "livemode": False, "sequence": 1, "data": {"object": obj}}, overrides)
    return orjson.dumps(event)


def object_for(event_type: str, **overrides: Any) -> dict[str, Any]:
    kind, _, status = event_type.partition(".")
    reason = "declined" if status == "failed" else None
    make = refund_object if kind == "refund" else capture_object
    return make(status=status, failure_reason=reason, **overrides)


# -- refunds and captures ------------------------------------------------------------

VALID_REFUNDS = [
    pytest.param(refund_object(), id="succeeded"),
    pytest.param(refund_object(status="pending"), id="pending"),
    pytest.param(refund_object(status="failed", failure_reason="expired_or_canceled_card"), id="failed"),
    pytest.param(refund_object(status="canceled"), id="canceled"),
    pytest.param(refund_object(status="canceled", failure_reason="merchant_request"),
                 id="canceled-with-reason"),
    pytest.param(refund_object(failure_reason=MISSING), id="failure_reason-absent-reads-null"),
    pytest.param(refund_object(livemode=True, amount=1, currency="JPY", created=0), id="edges"),
    pytest.param(refund_object(reference="R" * 64), id="reference-64"),
    pytest.param(refund_object(reference="R"), id="reference-1"),
    pytest.param(refund_object(reason="requested_by_customer", metadata={"a": 1}), id="unknown-fields"),
]

VALID_CAPTURES = [
    pytest.param(capture_object(), id="succeeded"),
    pytest.param(capture_object(status="pending"), id="pending"),
    pytest.param(capture_object(status="failed", failure_reason="declined"), id="failed"),
    pytest.param(capture_object(livemode=True, amount=1), id="edges"),
    pytest.param(capture_object(later_field="x"), id="unknown-fields"),
]


@pytest.mark.parametrize("obj", VALID_REFUNDS)
def test_a_refund_of_the_contract_parses(obj: dict[str, Any]) -> None:
    refund = parse_refund(obj)
    assert refund == ProviderRefund(
        id=obj["id"], payment=obj["payment"], account=obj["account"], livemode=obj["livemode"],
        amount_minor=obj["amount"], currency=obj["currency"], reference=obj["reference"],
        status=obj["status"], failure_reason=obj.get("failure_reason"), created=obj["created"])


@pytest.mark.parametrize("obj", VALID_CAPTURES)
def test_a_capture_of_the_contract_parses(obj: dict[str, Any]) -> None:
    capture = parse_capture(obj)
    assert capture == ProviderCapture(
        id=obj["id"], payment=obj["payment"], account=obj["account"], livemode=obj["livemode"],
        amount_minor=obj["amount"], currency=obj["currency"], reference=obj["reference"],
        status=obj["status"], failure_reason=obj["failure_reason"], created=obj["created"])


# What is wrong with an object of either kind, as overrides of a valid one (a succeeded one).
MALFORMED_EITHER: list[tuple[str, dict[str, Any]]] = [
    ("object-missing", {"object": MISSING}),
    ("object-payment", {"object": "payment"}),
    ("id-missing", {"id": MISSING}),
    ("id-null", {"id": None}),
    ("id-int", {"id": 7}),
    ("id-prefix-only", {"id": "{prefix}"}),
    ("id-other-prefix", {"id": "pay_9a07"}),
    ("payment-missing", {"payment": MISSING}),
    ("payment-not-pay", {"payment": "re_3f9c"}),
    ("payment-prefix-only", {"payment": "pay_"}),
    ("account-missing", {"account": MISSING}),
    ("account-null", {"account": None}),
    ("account-empty", {"account": ""}),
    ("account-int", {"account": 1}),
    ("livemode-missing", {"livemode": MISSING}),
    ("livemode-int", {"livemode": 0}),
    ("livemode-string", {"livemode": "false"}),
    ("amount-missing", {"amount": MISSING}),
    ("amount-zero", {"amount": 0}),
    ("amount-negative", {"amount": -1500}),
    ("amount-bool", {"amount": True}),
    ("amount-float", {"amount": 1500.0}),
    ("amount-string", {"amount": "1500"}),
    ("currency-missing", {"currency": MISSING}),
    ("currency-lower", {"currency": "eur"}),
    ("currency-long", {"currency": "EURO"}),
    ("currency-non-ascii", {"currency": "ÉUR"}),
    ("currency-newline", {"currency": "EUR\n"}),
    ("reference-missing", {"reference": MISSING}),
    ("reference-null", {"reference": None}),
    ("reference-empty", {"reference": ""}),
    ("reference-65", {"reference": "R" * 65}),
    ("reference-int", {"reference": 5521}),
    ("status-missing", {"status": MISSING}),
    ("status-unknown", {"status": "refunded"}),
    ("status-upper", {"status": "SUCCEEDED"}),
    ("status-of-a-payment", {"status": "requires_capture"}),
    ("succeeded-with-failure_reason", {"failure_reason": "declined"}),
    ("pending-with-failure_reason", {"status": "pending", "failure_reason": "declined"}),
    ("failed-without-failure_reason", {"status": "failed", "failure_reason": None}),
    ("failed-failure_reason-absent", {"status": "failed", "failure_reason": MISSING}),
    ("failed-failure_reason-empty", {"status": "failed", "failure_reason": ""}),
    ("failed-failure_reason-int", {"status": "failed", "failure_reason": 5}),
    ("created-missing", {"created": MISSING}),
    ("created-null", {"created": None}),
    ("created-negative", {"created": -1}),
    ("created-float", {"created": 1795900200.5}),
    ("created-bool", {"created": True}),
    ("created-string", {"created": "1795900200"}),
]


def _malformed(kind: str, prefix: str) -> list[Any]:
    return [pytest.param({k: (v.format(prefix=prefix) if isinstance(v, str) and "{" in v else v)
                          for k, v in overrides.items()}, id=f"{kind}-{name}")
            for name, overrides in MALFORMED_EITHER]


MALFORMED_REFUNDS = [*_malformed("refund", "re_"),
                     pytest.param({"object": "capture"}, id="refund-object-capture"),
                     pytest.param({"id": "cap_9a07"}, id="refund-id-of-a-capture"),
                     pytest.param({"status": "canceled", "failure_reason": ""},
                                  id="refund-canceled-failure_reason-empty")]
MALFORMED_CAPTURES = [*_malformed("capture", "cap_"),
                      pytest.param({"object": "refund"}, id="capture-object-refund"),
                      pytest.param({"id": "re_5d1e"}, id="capture-id-of-a-refund"),
                      pytest.param({"status": "canceled"}, id="capture-canceled-is-no-capture-status")]


@pytest.mark.parametrize("overrides", MALFORMED_REFUNDS)
def test_a_malformed_refund_is_none(overrides: dict[str, Any]) -> None:
    assert parse_refund(refund_object(**overrides)) is None


@pytest.mark.parametrize("overrides", MALFORMED_CAPTURES)
def test_a_malformed_capture_is_none(overrides: dict[str, Any]) -> None:
    assert parse_capture(capture_object(**overrides)) is None


@pytest.mark.parametrize("obj", [None, [], "re_9a07", 1500, True, b"{}"],
                         ids=["null", "list", "string", "int", "bool", "bytes"])
def test_what_is_not_an_object_is_none(obj: Any) -> None:
    assert parse_refund(obj) is None
    assert parse_capture(obj) is None


def test_the_dataclasses_refuse_what_parsing_refuses() -> None:
    # A bug building one by hand raises; it never stands for a provider's answer.
    refund = parse_refund(refund_object())
    assert refund is not None
    with pytest.raises(ValueError, match="unknown refund status"):
        dataclasses.replace(refund, status="refunded")
    with pytest.raises(ValueError, match="failure_reason"):
        dataclasses.replace(refund, status="failed")
    capture = parse_capture(capture_object())
    assert capture is not None
    with pytest.raises(ValueError, match="unknown capture status"):
        dataclasses.replace(capture, status="canceled")
    with pytest.raises(dataclasses.FrozenInstanceError):
        capture.status = "failed"  # type: ignore[misc]


# -- lists ---------------------------------------------------------------------------


def test_a_list_parses_in_its_order() -> None:
    first, second = refund_object(id="re_1"), refund_object(id="re_2", status="pending")
    parsed = parse_list({"data": [first, second], "has_more": False}, parse_refund)
    assert parsed is not None
    assert [r.id for r in parsed] == ["re_1", "re_2"]
    assert parse_list({"data": []}, parse_capture) == []
    captures = parse_list({"data": [capture_object()]}, parse_capture)
    assert captures == [parse_capture(capture_object())]


@pytest.mark.parametrize("body", [
    pytest.param(None, id="null"),
    pytest.param([refund_object()], id="bare-list"),
    pytest.param({}, id="no-data"),
    pytest.param({"data": None}, id="data-null"),
    pytest.param({"data": refund_object()}, id="data-an-object"),
    pytest.param({"data": [refund_object(), refund_object(amount=0)]}, id="one-malformed"),
    pytest.param({"data": [refund_object(), None]}, id="one-null"),
    pytest.param({"data": [refund_object(), capture_object()]}, id="one-of-another-kind"),
])
def test_a_list_with_anything_wrong_is_none(body: Any) -> None:
    assert parse_list(body, parse_refund) is None


# -- the payment's capture fields ------------------------------------------------------


def test_a_payment_without_capture_fields_parses_as_before() -> None:
    # An older Cardco server, and every existing fixture: nothing new is required (but of a
    # hold, which must say it is manual and when it lapses).
    assert parse_payment(payment_object("requires_capture")) is None
    for status in OUTCOME_STATUSES - {"requires_capture"}:
        extra = {"next_action": {"type": "redirect_to_url", "url": "https://x", "expires_at": 1795900900}} \
            if status == "requires_action" else {}
        payment = parse_payment(payment_object(status, **extra))
        assert payment is not None, status
        assert (payment.capture, payment.amount_capturable, payment.amount_captured,
                payment.capture_before) == (None, None, None, None)


@pytest.mark.parametrize("status", sorted(OUTCOME_STATUSES - {"requires_action", "requires_capture"}))
def test_capture_fields_never_change_an_outcome(status: str) -> None:
    older = parse_payment(payment_object(status))
    newer = parse_payment(payment_object(status, capture="automatic", amount_capturable=0,
                                         amount_captured=4999, capture_before=None))
    assert older is not None and newer is not None
    assert (newer.capture, newer.amount_capturable, newer.amount_captured, newer.capture_before) == (
        "automatic", 0, 4999, None)
    assert _same_outcome(newer.to_outcome(), older.to_outcome())


def _same_outcome(a: ProviderOutcome, b: ProviderOutcome) -> bool:
    return dataclasses.asdict(a) == dataclasses.asdict(b)


def test_a_hold_is_a_success_whose_provider_status_says_nothing_is_charged() -> None:
    obj = held_payment()
    held = parse_payment(obj)
    assert held is not None and parse_payment_object(obj) == held
    assert (held.status, held.capture, held.amount_capturable, held.amount_captured, held.capture_before) == (
        "requires_capture", "manual", 4999, 0, 1796504800)
    outcome = held.to_outcome()  # never a failure: a hold is the authorization obtained, once
    assert (outcome.kind, outcome.provider_status, outcome.amount_minor) == (
        OutcomeKind.SUCCEEDED, HOLD_STATUS, 4999)
    assert "requires_capture" in PAYMENT_STATUSES


def test_a_hold_whose_capture_is_pending_has_nothing_capturable() -> None:
    held = parse_payment_object(held_payment(amount_capturable=0))
    assert held is not None and held.amount_capturable == 0


def test_amount_refunded_is_read_as_before() -> None:
    assert (p := parse_payment(payment_object(amount_refunded=1500))) and p.amount_refunded == 1500
    assert (p := parse_payment(payment_object(amount_refunded=None))) and p.amount_refunded == 0
    assert (p := parse_payment(_with(payment_object(), {"amount_refunded": MISSING}))) and \
        p.amount_refunded == 0
    assert parse_payment(payment_object(amount_refunded=-1)) is None


@pytest.mark.parametrize("overrides", [
    pytest.param({"capture": None}, id="capture-null"),
    pytest.param({"capture": "later"}, id="capture-unknown"),
    pytest.param({"capture": "Manual"}, id="capture-case"),
    pytest.param({"capture": True}, id="capture-bool"),
    pytest.param({"amount_capturable": None}, id="amount_capturable-null"),
    pytest.param({"amount_capturable": -1}, id="amount_capturable-negative"),
    pytest.param({"amount_capturable": "0"}, id="amount_capturable-string"),
    pytest.param({"amount_capturable": False}, id="amount_capturable-bool"),
    pytest.param({"amount_capturable": 0.0}, id="amount_capturable-float"),
    pytest.param({"amount_captured": None}, id="amount_captured-null"),
    pytest.param({"amount_captured": -4999}, id="amount_captured-negative"),
    pytest.param({"amount_captured": True}, id="amount_captured-bool"),
    pytest.param({"amount_captured": 4999.0}, id="amount_captured-float"),
    pytest.param({"capture_before": "1796504800"}, id="capture_before-string"),
    pytest.param({"capture_before": 1796504800.5}, id="capture_before-float"),
    pytest.param({"capture_before": True}, id="capture_before-bool"),
    pytest.param({"capture_before": -1}, id="capture_before-negative"),
])
@pytest.mark.parametrize("parse", [parse_payment, parse_payment_object],
                         ids=["parse_payment", "parse_payment_object"])
def test_a_present_but_malformed_capture_field_makes_the_payment_malformed(
        parse: Callable[[Any], ProviderPayment | None], overrides: dict[str, Any]) -> None:
    assert parse(payment_object("succeeded", **overrides)) is None


@pytest.mark.parametrize("overrides", [
    pytest.param({"capture": "automatic"}, id="automatic"),
    pytest.param({"capture": MISSING}, id="capture-absent"),
    pytest.param({"capture_before": None}, id="capture_before-null"),
    pytest.param({"capture_before": MISSING}, id="capture_before-absent"),
])
def test_a_hold_must_say_it_is_manual_and_when_it_lapses(overrides: dict[str, Any]) -> None:
    assert parse_payment_object(_with(held_payment(), overrides)) is None


# -- events ---------------------------------------------------------------------------


def test_the_operation_types_are_each_object_and_status() -> None:
    assert {f"refund.{s}" for s in ProviderRefund.STATUSES} | {
        f"capture.{s}" for s in ProviderCapture.STATUSES} == OPERATION_EVENT_TYPES
    assert not OPERATION_EVENT_TYPES & EVENT_TYPES


@pytest.mark.parametrize("event_type", sorted(OPERATION_EVENT_TYPES))
def test_each_operation_event_parses(event_type: str) -> None:
    obj = object_for(event_type)
    body = event_body(event_type, obj, sequence=2)
    event = parse_operation_event(body)
    operation = parse_refund(obj) if event_type.startswith("refund.") else parse_capture(obj)
    assert operation is not None
    assert event == OperationEvent(event_id="evt_81c2", event_type=event_type, created=1795900203,
                                   sequence=2, account="acct_store", livemode=False,
                                   operation=operation, event=orjson.loads(body))
    assert event.event == orjson.loads(body)
    assert is_operation_event(event_type) and is_operation_event(body)
    # The payment events' parser refuses it, as it always has.
    with pytest.raises(InvalidEvent, match="unknown-type"):
        parse_event(body)


def test_an_envelope_may_leave_out_what_a_payment_events_may() -> None:
    for key in ("id", "created", "sequence", "account", "livemode"):
        event = parse_operation_event(event_body("refund.succeeded", refund_object(), **{key: None}))
        assert event.operation.id == "re_9a07"
    event = parse_operation_event(event_body("refund.succeeded", refund_object(), id="  "))
    assert event.event_id is None  # blank ids count as missing, as for payment events


def test_the_envelope_and_the_object_may_disagree_for_the_caller_to_judge() -> None:
    event = parse_operation_event(event_body("capture.succeeded", capture_object(account="acct_other"),
                                             livemode=True))
    assert (event.account, event.livemode) == ("acct_store", True)
    assert (event.operation.account, event.operation.livemode) == ("acct_other", False)


@pytest.mark.parametrize(("body", "reason"), [
    pytest.param(b"{not json", "not-json", id="not-json"),
    pytest.param(b"", "not-json", id="empty"),
    pytest.param(b"[]", "not-an-object", id="a-list"),
    pytest.param(event_body("payment.succeeded", payment_object()), "unknown-type", id="a-payment-event"),
    pytest.param(event_body("refund.refunded", refund_object()), "unknown-type", id="type-unknown"),
    pytest.param(event_body("Refund.Succeeded", refund_object()), "unknown-type", id="type-case"),
    pytest.param(event_body("refund.succeeded", refund_object(), type=MISSING), "unknown-type",
                 id="type-missing"),
    pytest.param(event_body("refund.succeeded", refund_object(), id=81), "invalid-id", id="id-int"),
    pytest.param(event_body("refund.succeeded", refund_object(), sequence=0), "invalid-sequence",
                 id="sequence-zero"),
    pytest.param(event_body("refund.succeeded", refund_object(), sequence=True), "invalid-sequence",
                 id="sequence-bool"),
    pytest.param(event_body("refund.succeeded", refund_object(), sequence="1"), "invalid-sequence",
                 id="sequence-string"),
    pytest.param(event_body("refund.succeeded", refund_object(), created=1.5), "invalid-created",
                 id="created-float"),
    pytest.param(event_body("refund.succeeded", refund_object(), created=-3), "invalid-created",
                 id="created-negative"),
    pytest.param(event_body("refund.succeeded", refund_object(), account=1), "invalid-account",
                 id="account-int"),
    pytest.param(event_body("refund.succeeded", refund_object(), livemode=0), "invalid-livemode",
                 id="livemode-int"),
    pytest.param(event_body("refund.succeeded", None), "missing-object", id="object-null"),
    pytest.param(event_body("refund.succeeded", None, data=MISSING), "missing-object", id="data-missing"),
    pytest.param(event_body("refund.succeeded", None, data={}), "missing-object", id="data-empty"),
    pytest.param(event_body("refund.succeeded", None, data=[refund_object()]), "missing-object",
                 id="data-a-list"),
    pytest.param(event_body("refund.succeeded", capture_object()), "wrong-object", id="refund-type-capture"),
    pytest.param(event_body("capture.succeeded", refund_object()), "wrong-object", id="capture-type-refund"),
    pytest.param(event_body("refund.succeeded", payment_object()), "wrong-object", id="refund-type-payment"),
    pytest.param(event_body("refund.succeeded", [refund_object()]), "wrong-object", id="object-a-list"),
    pytest.param(event_body("refund.succeeded", refund_object(amount=0)), "invalid-refund",
                 id="refund-malformed"),
    pytest.param(event_body("capture.failed", capture_object(status="failed")), "invalid-capture",
                 id="capture-failed-without-reason"),
    pytest.param(event_body("refund.succeeded", object_for("refund.failed")), "status-differs-from-type",
                 id="refund-succeeded-about-a-failed-refund"),
    pytest.param(event_body("refund.canceled", object_for("refund.pending")), "status-differs-from-type",
                 id="refund-canceled-about-a-pending-refund"),
    pytest.param(event_body("capture.pending", object_for("capture.succeeded")), "status-differs-from-type",
                 id="capture-pending-about-a-succeeded-capture"),
])
def test_a_malformed_operation_event_is_refused_with_its_reason(body: bytes, reason: str) -> None:
    with pytest.raises(InvalidEvent) as refused:
        parse_operation_event(body)
    assert str(refused.value) == reason


def test_a_refused_event_never_echoes_what_it_carried() -> None:
    secret = "4242424242424242"
    for body in (event_body("refund.succeeded", refund_object(reference=secret, amount=0)),
                 event_body("refund.succeeded", refund_object(id=secret)),
                 event_body(secret, refund_object())):
        with pytest.raises(InvalidEvent) as refused:
            parse_operation_event(body)
        assert secret not in str(refused.value) and secret not in repr(refused.value)


@pytest.mark.parametrize(("body_or_type", "expected"), [
    ("refund.failed", True), ("capture.pending", True), ("payment.succeeded", False),
    ("payment.refunded", False), ("refund", False), ("", False),
    (event_body("payment.refunded", payment_object()), False),
    (b"not json", False), (b"[]", False), (orjson.dumps({"type": 7}), False),
])
def test_is_operation_event_routes(body_or_type: bytes | str, expected: bool) -> None:
    assert is_operation_event(body_or_type) is expected


def test_payment_events_parse_as_before() -> None:
    n = parse_event(event_body("payment.succeeded", payment_object()))
    assert (n.event_type, n.status, n.amount_minor) == ("payment.succeeded", "succeeded", 4999)
    placed = parse_event(event_body("payment.requires_capture", held_payment()))  # a hold placed
    assert (placed.status, placed.outcome.kind, placed.outcome.provider_status) == (
        "requires_capture", OutcomeKind.SUCCEEDED, HOLD_STATUS)


# -- the sandbox's own objects and events ------------------------------------------------------


@pytest.fixture
async def sandbox() -> AsyncIterator[httpx.AsyncClient]:
    # A short async delay, so the pending movements that settle by themselves do so quickly.
    app = create_app(SandboxSettings(async_delay_s=0.05))
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        yield client


async def _made(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await post(client, path, body)
    assert response.status_code in (200, 201), response.text
    made: dict[str, Any] = response.json()
    return made


async def _refund(client: httpx.AsyncClient, payment_id: str, amount: int) -> dict[str, Any]:
    return await _made(client, "/v1/refunds", {"payment": payment_id, "amount": amount,
                                               "reference": new_reference()})


async def _capture(client: httpx.AsyncClient, payment_id: str, amount: int) -> dict[str, Any]:
    return await _made(client, f"/v1/payments/{payment_id}/captures", {"amount": amount,
                                                                      "reference": new_reference()})


async def _control(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post(path, json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def _settled(client: httpx.AsyncClient, path: str) -> dict[str, Any]:
    """The movement at ``path`` once it is no longer pending (it settles by itself)."""
    async def probe() -> dict[str, Any] | None:
        obj: dict[str, Any] = await get_json(client, path)
        return obj if obj["status"] != "pending" else None
    return await eventually(probe, what=f"{path} to settle")


async def _payments(client: httpx.AsyncClient) -> tuple[dict[str, Any], ...]:
    """Payments whose refunds and captures cover every status, each way the sandbox gets there."""
    charged = await paid(client)
    assert (await _refund(client, charged["id"], 1000))["status"] == "succeeded"
    returned = await _refund(client, charged["id"], 1200)
    await _control(client, f"/_sandbox/refunds/{returned['id']}/fail", {})
    for amount, result in ((1093, "canceled"), (1193, "failed")):
        pending = await _refund(client, charged["id"], amount)
        assert pending["status"] == "pending"
        await _control(client, f"/_sandbox/refunds/{pending['id']}/settle",
                       {"result": result, "failure_reason": "merchant_request"})
    auto = await _refund(client, charged["id"], 391)
    assert (await _settled(client, f"/v1/refunds/{auto['id']}"))["status"] == "succeeded"

    held = await paid(client, capture="manual")
    failing = await _capture(client, held["id"], 2092)
    assert failing["status"] == "pending"
    await eventually(lambda: _capture_status(client, held["id"], "failed"), what="the capture to fail")
    later = await _capture(client, held["id"], 3093)  # the hold stays after a failed capture
    await _control(client, f"/_sandbox/captures/{later['id']}/settle", {"result": "succeeded"})

    captured_at_once = await paid(client, capture="manual")
    await _capture(client, captured_at_once["id"], 3000)
    released = await paid(client, capture="manual")
    await _made(client, f"/v1/payments/{released['id']}/cancel", {"reference": new_reference()})
    still_held = await paid(client, capture="manual")
    return charged, held, captured_at_once, released, still_held


async def _capture_status(client: httpx.AsyncClient, payment_id: str, status: str) -> bool:
    captures = (await get_json(client, "/v1/captures", payment=payment_id))["data"]
    return bool(captures) and captures[-1]["status"] == status


async def test_every_object_and_event_the_sandbox_makes_parses(sandbox: httpx.AsyncClient) -> None:
    payments = await _payments(sandbox)
    seen_types: set[str] = set()
    seen_statuses: set[str] = set()
    for payment in payments:
        pid = payment["id"]
        current = await get_json(sandbox, f"/v1/payments/{pid}")
        parsed = parse_payment_object(current)
        assert parsed is not None, current
        assert parsed.capture in ("automatic", "manual")
        seen_statuses.add(parsed.status)

        refunds = parse_list(await get_json(sandbox, "/v1/refunds", payment=pid), parse_refund)
        captures = parse_list(await get_json(sandbox, "/v1/captures", payment=pid), parse_capture)
        assert refunds is not None and captures is not None
        for refund in refunds:
            assert parse_refund(await get_json(sandbox, f"/v1/refunds/{refund.id}")) == refund
            by_reference = parse_list(await get_json(sandbox, "/v1/refunds", reference=refund.reference),
                                      parse_refund)
            assert by_reference == [refund]
        for capture in captures:
            captures_by_reference = parse_list(
                await get_json(sandbox, "/v1/captures", reference=capture.reference), parse_capture)
            assert captures_by_reference == [capture]

        events = (await sandbox.get("/_sandbox/events", params={"payment": pid})).json()["data"]
        for event in events:
            body = orjson.dumps(event)
            seen_types.add(event["type"])
            if is_operation_event(body):
                parsed_event = parse_operation_event(body)
                assert parsed_event.event_id == event["id"]
                assert parsed_event.operation.payment == pid
                assert parsed_event.operation.id in {m.id for m in [*refunds, *captures]}
            elif event["type"] in EVENT_TYPES:
                assert parse_payment_object(event["data"]["object"]) is not None
                parse_event(body)  # a payment event reads as before
            else:
                assert event["type"] == "payment.requires_capture"
                held = parse_payment_object(event["data"]["object"])
                assert held is not None and held.status == "requires_capture"

    assert OPERATION_EVENT_TYPES <= seen_types
    assert {"succeeded", "canceled", "requires_capture"} <= seen_statuses
