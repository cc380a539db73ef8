"""Stripe's webhooks at their edges: the ``Stripe-Signature`` header's bounds and items, the
shortest webhook secret, an id-less operation event's key, and which succeeded intents end a
capture of paycore's. Each test answers a survivor of the generated mutation
run over ``providers/stripe/events.py`` and was seen red against it."""

from __future__ import annotations

from typing import Any

import pytest

from paycore.providers.base import NotificationUnverified
from paycore.providers.stripe import signature_header
from paycore.providers.stripe.events import WebhookVerifier, parse_operation_notification
from tests.unit.test_stripe_events import NOW, SECRET, STORE, T, account, event
from tests.unit.test_stripe_operations_client import event as ops_event
from tests.unit.test_stripe_operations_client import held


@pytest.mark.parametrize(("timestamp", "reason", "malformed"), [
    # Twelve digits are a timestamp (the year 5138): well formed, and outside the tolerance.
    pytest.param(10**11, "timestamp-outside-tolerance", False, id="twelve-digits"),
    # Thirteen are not read at all (no date is that far; nor is an integer parsed without bound).
    pytest.param(10**12, "malformed-signature-header", True, id="thirteen-digits"),
])
def test_a_timestamp_of_twelve_digits_is_read_and_one_of_thirteen_is_malformed(
    timestamp: int, reason: str, malformed: bool,
) -> None:
    body = event()
    with pytest.raises(NotificationUnverified) as refused:
        WebhookVerifier([STORE]).verify({"Stripe-Signature": signature_header(SECRET, timestamp, body)}, body,
                                        now=NOW)
    assert (refused.value.reason, refused.value.malformed) == (reason, malformed)


def test_a_secret_that_is_only_the_prefix_is_refused() -> None:
    with pytest.raises(ValueError, match="whsec_"):
        WebhookVerifier([account("acct_store", "whsec_")])


@pytest.mark.parametrize("header", [
    pytest.param(f"t={T},v0={'0' * 64}", id="only-a-v0"),
    pytest.param(f"t={T},v1=", id="an-empty-v1"),
    pytest.param(f"t={T},v1=  ", id="a-blank-v1"),
])
def test_a_header_without_a_v1_signature_is_malformed(header: str) -> None:
    with pytest.raises(NotificationUnverified) as refused:
        WebhookVerifier([STORE]).verify({"Stripe-Signature": header}, event(), now=NOW)
    assert (refused.value.reason, refused.value.malformed) == ("malformed-signature-header", True)


def test_an_item_without_a_value_is_skipped_and_the_rest_is_read() -> None:
    body = event()
    header = "scheme-note," + signature_header(SECRET, T, body)
    assert WebhookVerifier([STORE]).verify({"Stripe-Signature": header}, body, now=NOW).account is STORE


@pytest.mark.parametrize("intent", [
    # Captured outside paycore (the Dashboard): no capture of paycore's to end.
    pytest.param(held("succeeded", amount_received=3000), id="manual-without-paycore-capture-reference"),
    # An intent that captured by itself is the payment's event, whatever its metadata says.
    pytest.param(held("succeeded", capture_method="automatic", amount_received=4999,
                      metadata={"paycore_reference": "ORD-5521", "paycore_capture_reference": "ORD-cap"}),
                 id="automatic-with-a-capture-reference"),
])
def test_a_succeeded_intent_is_a_capture_only_when_paycore_captured_its_hold(intent: dict[str, Any]) -> None:
    assert parse_operation_notification(ops_event("payment_intent.succeeded", intent)) is None
