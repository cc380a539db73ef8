"""Cardco's events at their edges: what a payment event's envelope may and may not say, the
envelope's account and mode as statements beside the object's, and an operation event's kind,
claim and id as the verifier reads them.

Each test here answers a survivor of the generated mutation run (``make mutate-generated``
over ``providers/cardco/events.py``) and was seen red against it.
"""

from __future__ import annotations

import base64
import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from paycore.domain import OperationKind
from paycore.providers.base import OperationNotification
from paycore.providers.cardco.events import (
    InvalidEvent,
    WebhookVerifier,
    operation_notification,
    parse_event,
    parse_operation_event,
)
from paycore.providers.cardco.version import API_VERSION
from paycore.providers.package import ProviderAccountConfig
from paycore.settings_spec import Secret
from paycore.webhook_signatures import signed_headers
from tests.support.scripted_cardco import payment_object
from tests.unit.test_cardco_operations_wire import MISSING, capture_object, event_body, refund_object

SECRET = "whsec_" + base64.b64encode(b"cardco-events-edges-secret-32byt").decode()
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def payment_event(**overrides: Any) -> bytes:
    return event_body("payment.succeeded", payment_object("succeeded"), **overrides)


# -- a payment event's envelope --------------------------------------------------------------------


@pytest.mark.parametrize(("overrides", "reason"), [
    pytest.param({"sequence": 0}, "invalid-sequence", id="sequence-zero"),
    pytest.param({"sequence": True}, "invalid-sequence", id="sequence-bool"),
    pytest.param({"sequence": "1"}, "invalid-sequence", id="sequence-string"),
    pytest.param({"account": 1}, "invalid-account", id="account-int"),
    pytest.param({"livemode": 0}, "invalid-livemode", id="livemode-int"),
    pytest.param({"id": 81}, "invalid-id", id="id-int"),
])
def test_a_payment_events_envelope_field_of_the_wrong_type_is_refused(overrides: dict[str, Any],
                                                                       reason: str) -> None:
    with pytest.raises(InvalidEvent) as refused:
        parse_event(payment_event(**overrides))
    assert str(refused.value) == reason


def test_a_payment_events_envelope_may_leave_out_its_optional_fields() -> None:
    n = parse_event(payment_event(id=MISSING, sequence=MISSING, account=MISSING, livemode=MISSING))
    assert (n.event_id, n.sequence, n.payload_account, n.payload_livemode) == (None, None, None, None)
    assert n.outcome.claim is not None
    # Only the object's statements: an envelope that says nothing adds nothing to judge.
    assert (n.outcome.claim.accounts, n.outcome.claim.livemodes) == (("acct_store",), (False,))


def test_the_envelopes_account_and_mode_join_the_objects_as_statements_to_agree() -> None:
    n = parse_event(payment_event(account="acct_other", livemode=True))
    assert n.outcome.claim is not None
    assert (n.outcome.claim.accounts, n.outcome.claim.livemodes) == (("acct_store", "acct_other"),
                                                                     (False, True))
    assert (n.payload_account, n.object_account) == ("acct_other", "acct_store")


# -- an operation event ----------------------------------------------------------------------------


def test_an_operation_event_created_at_the_epoch_is_read() -> None:
    assert parse_operation_event(event_body("refund.succeeded", refund_object(), created=0)).created == 0


@pytest.mark.parametrize(("event_type", "obj", "kind"), [
    pytest.param("refund.succeeded", refund_object(), OperationKind.REFUND, id="refund"),
    pytest.param("capture.succeeded", capture_object(), OperationKind.CAPTURE, id="capture"),
])
def test_an_operation_notification_is_of_the_kind_its_object_is(event_type: str, obj: dict[str, Any],
                                                                kind: OperationKind) -> None:
    n = operation_notification(parse_operation_event(event_body(event_type, obj)))
    assert n.outcome.operation is kind


def test_an_operation_notifications_claim_holds_the_envelopes_statements_only_when_made() -> None:
    said = operation_notification(parse_operation_event(
        event_body("refund.succeeded", refund_object(), account="acct_other", livemode=True)))
    assert said.outcome.claim is not None
    assert (said.outcome.claim.accounts, said.outcome.claim.livemodes) == (("acct_store", "acct_other"),
                                                                           (False, True))
    silent = operation_notification(parse_operation_event(
        event_body("refund.succeeded", refund_object(), account=None, livemode=None)))
    assert silent.outcome.claim is not None
    assert (silent.outcome.claim.accounts, silent.outcome.claim.livemodes) == (("acct_store",), (False,))


# -- the verifier: an operation event's id and the delivery's ------------------------------------


def verifier() -> WebhookVerifier:
    return WebhookVerifier([ProviderAccountConfig(
        "cardco", "acct_store", "test", "http://127.0.0.1:9", Secret("sk_test_x"), Secret(SECRET),
        API_VERSION)])


def delivered(body: bytes, webhook_id: str) -> Any:
    headers = signed_headers(SECRET, webhook_id, int(NOW.timestamp()), body)
    return verifier().verify(headers, body, now=NOW)


def test_an_operation_event_without_an_id_is_keyed_by_its_webhook_id() -> None:
    delivery = delivered(event_body("refund.succeeded", refund_object(), id=None), "msg_2b1")
    assert isinstance(delivery.parsed, OperationNotification), delivery.parsed
    assert delivery.key == "msg_2b1"


def test_an_operation_event_whose_id_differs_from_its_webhook_id_is_kept_raw() -> None:
    delivery = delivered(event_body("refund.succeeded", refund_object(), id="evt_81c2"), "msg_2b1")
    assert isinstance(delivery.parsed, InvalidEvent)
    assert str(delivery.parsed) == "id-differs-from-webhook-id"
    same = delivered(event_body("refund.succeeded", refund_object(), id="evt_81c2"), "evt_81c2")
    assert isinstance(same.parsed, OperationNotification) and same.key == "evt_81c2"



def test_an_operation_event_created_before_the_epoch_is_refused() -> None:
    with pytest.raises(InvalidEvent, match="invalid-created"):
        parse_operation_event(event_body("refund.succeeded", refund_object(), created=-1))


def test_an_operation_events_repr_leaves_out_the_event_as_received() -> None:
    event = parse_operation_event(event_body("refund.succeeded", refund_object()))
    assert "'data'" not in repr(event) and "re_9a07" in repr(event)


def test_only_a_delivery_the_previous_secret_verified_is_logged_as_such(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    assert not delivered(event_body("refund.succeeded", refund_object()), "evt_81c2").previous_secret
    assert [r for r in caplog.records if "previous" in r.getMessage()] == []
