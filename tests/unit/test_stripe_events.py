"""Stripe webhooks: ``Stripe-Signature`` verification against every account's secret, and parsing.

Signatures are computed here independently with the SDK's own routine
(``stripe.WebhookSignature``), so the verifier is checked against Stripe's code.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
import stripe

from paycore.clock import FakeClock
from paycore.config import ConfigError, ProviderAccountConfig, Secret
from paycore.domain import OutcomeKind
from paycore.providers.base import InvalidNotification, Notification, NotificationUnverified
from paycore.providers.cardco.version import API_VERSION as CARDCO_API_VERSION
from paycore.providers.stripe import STRIPE_EVENTS, StripeProvider, parse_event, signature_header
from paycore.providers.stripe.events import WebhookVerifier
from paycore.providers.stripe.provider import API_VERSION
from tests.support.scripted_stripe import INTENT_ID, REFERENCE, intent

SECRET = "whsec_store_5f1f0b2c9d8e7a6b"
OTHER_SECRET = "whsec_other_0a1b2c3d4e5f6a7b"
NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
T = int(NOW.timestamp())


def account(name: str, secret: str | None) -> ProviderAccountConfig:
    return ProviderAccountConfig(
        provider="stripe",
        account=name,
        environment="test",
        base_url="https://api.stripe.com",
        api_key=Secret("sk_test_x"),
        webhook_secret=Secret(secret) if secret else None,
        api_version=API_VERSION,
    )


STORE = account("acct_store", SECRET)
OTHER = account("acct_other", OTHER_SECRET)


def event(type_: str = "payment_intent.succeeded", obj: dict[str, Any] | None = None, **kw: Any) -> bytes:
    body: dict[str, Any] = {
        "id": "evt_1QxA",
        "object": "event",
        "type": type_,
        "created": T,
        "livemode": False,
        "api_version": "2026-10-28.endive",
        "data": {"object": obj if obj is not None else intent()},
    }
    body.update(kw)
    return orjson.dumps(body)


def sdk_signature(secret: str, timestamp: int, body: bytes) -> str:
    """What Stripe's own SDK computes for the ``v1`` scheme."""
    payload = f"{timestamp}.{body.decode('utf-8')}"
    return stripe.WebhookSignature._compute_signature(payload, secret)


@pytest.fixture
def verifier() -> WebhookVerifier:
    return WebhookVerifier([STORE, OTHER])


def test_our_signature_is_the_sdks() -> None:
    body = event()
    assert signature_header(SECRET, T, body) == f"t={T},v1={sdk_signature(SECRET, T, body)}"


def test_the_sdk_verifies_what_we_sign() -> None:
    body = event()
    header = signature_header(SECRET, int(time.time()), body)
    assert stripe.WebhookSignature.verify_header(body.decode(), header, SECRET, tolerance=300)


def test_a_valid_signature_verifies_and_names_its_account(verifier: WebhookVerifier) -> None:
    body = event()
    delivery = verifier.verify({"Stripe-Signature": signature_header(OTHER_SECRET, T, body)}, body, now=NOW)
    assert delivery.account is OTHER
    assert delivery.delivery_id == "evt_1QxA"
    assert delivery.key == "evt_1QxA"
    assert delivery.replay is not None and (delivery.replay.webhook_id, delivery.replay.timestamp) == (
        "evt_1QxA",
        T,
    )
    assert isinstance(delivery.parsed, Notification)


def test_the_account_is_whose_secret_verified_it_never_the_payload(verifier: WebhookVerifier) -> None:
    body = event(account="acct_other")  # a Connect-style claim in the payload
    delivery = verifier.verify({"stripe-signature": signature_header(SECRET, T, body)}, body, now=NOW)
    assert delivery.account is STORE


@pytest.mark.parametrize("skew_s", [301, -301, 86_400])
def test_a_timestamp_outside_300_s_is_unverified(verifier: WebhookVerifier, skew_s: int) -> None:
    body = event()
    header = signature_header(SECRET, T, body)
    with pytest.raises(NotificationUnverified) as info:
        verifier.verify({"Stripe-Signature": header}, body, now=NOW + timedelta(seconds=skew_s))
    assert (info.value.reason, info.value.malformed) == ("timestamp-outside-tolerance", False)


@pytest.mark.parametrize("skew_s", [300, -300, 0])
def test_a_timestamp_inside_300_s_verifies(verifier: WebhookVerifier, skew_s: int) -> None:
    body = event()
    header = signature_header(SECRET, T, body)
    assert (
        verifier.verify({"Stripe-Signature": header}, body, now=NOW + timedelta(seconds=skew_s)).account
        is STORE
    )


def test_several_v1_entries_any_one_verifies(verifier: WebhookVerifier) -> None:
    # During a secret roll Stripe signs with both secrets; other schemes are ignored.
    body = event()
    good = sdk_signature(OTHER_SECRET, T, body)
    header = f"t={T},v1={'0' * 64},v0=deadbeef,v1={good}"
    assert verifier.verify({"Stripe-Signature": header}, body, now=NOW).account is OTHER


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Stripe-Signature": ""},
        {"Stripe-Signature": "v1=abc"},
        {"Stripe-Signature": f"t={T}"},
        {"Stripe-Signature": f"t=soon,v1={'0' * 64}"},
        {"Stripe-Signature": f"t={T},t={T},v1={'0' * 64}"},
        {"Stripe-Signature": "garbage"},
        {"webhook-signature": "v1,abc"},
    ],
)
def test_a_missing_or_malformed_header_is_malformed(
    verifier: WebhookVerifier, headers: dict[str, str]
) -> None:
    with pytest.raises(NotificationUnverified) as info:
        verifier.verify(headers, event(), now=NOW)
    assert info.value.malformed


def test_no_secret_configured_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        WebhookVerifier([account("acct_store", None)])
    with pytest.raises(ConfigError):
        StripeProvider(
            [account("acct_store", None)], FakeClock(), max_call_duration_s=30
        ).check_notification_secrets()


def test_a_secret_that_is_not_whsec_is_refused() -> None:
    with pytest.raises(ValueError, match="whsec_"):
        WebhookVerifier([account("acct_store", "not-a-secret")])


def test_the_provider_verifies_against_its_stripe_accounts_only() -> None:
    cardco = ProviderAccountConfig(
        provider="cardco",
        account="acct_store",
        environment="test",
        base_url="https://c",
        api_key=Secret("sk_test_c"),
        webhook_secret=Secret(OTHER_SECRET),
        api_version=CARDCO_API_VERSION,
    )
    p = StripeProvider([STORE, cardco], FakeClock(), max_call_duration_s=30)
    body = event()
    assert (
        p.verify_notification({"Stripe-Signature": signature_header(SECRET, T, body)}, body, now=NOW).account
        is STORE
    )
    with pytest.raises(NotificationUnverified):
        p.verify_notification({"Stripe-Signature": signature_header(OTHER_SECRET, T, body)}, body, now=NOW)


def test_a_verified_body_that_is_not_an_event_is_kept_raw(verifier: WebhookVerifier) -> None:
    for body in (b"not json", event("customer.created", {"id": "cus_1", "object": "customer"})):
        delivery = verifier.verify({"Stripe-Signature": signature_header(SECRET, T, body)}, body, now=NOW)
        assert isinstance(delivery.parsed, InvalidNotification)
        assert delivery.key is None
    assert (
        WebhookVerifier([STORE])
        .verify({"Stripe-Signature": signature_header(SECRET, T, b"x")}, b"x", now=NOW)
        .delivery_id.startswith("sha256:")
    )


# ---------------------------------------------------------------------------
# Parsing


@pytest.mark.parametrize(
    ("type_", "obj", "kind", "reason"),
    [
        ("payment_intent.succeeded", intent(), OutcomeKind.SUCCEEDED, None),
        ("payment_intent.processing", intent("processing"), OutcomeKind.PROCESSING, None),
        (
            "payment_intent.requires_action",
            intent("requires_action", next_action={"type": "use_stripe_sdk"}),
            OutcomeKind.REQUIRES_ACTION,
            None,
        ),
        (
            "payment_intent.payment_failed",
            intent(
                "requires_payment_method",
                last_payment_error={"code": "card_declined", "decline_code": "insufficient_funds"},
            ),
            OutcomeKind.FAILED,
            "declined:insufficient_funds",
        ),
        ("payment_intent.canceled", intent("canceled"), OutcomeKind.FAILED, "canceled"),
        ("payment_intent.created", intent("requires_payment_method"), OutcomeKind.PROCESSING, None),
    ],
)
def test_each_intent_event_parses_to_a_notification(
    type_: str, obj: dict[str, Any], kind: OutcomeKind, reason: str | None
) -> None:
    n = parse_event(event(type_, obj))
    assert (n.event_id, n.event_type, n.payment_id, n.reference) == ("evt_1QxA", type_, INTENT_ID, REFERENCE)
    assert (n.status, n.amount_minor, n.currency, n.amount_refunded) == (obj["status"], 4999, "EUR", 0)
    assert (n.outcome.kind, n.outcome.reason) == (kind, reason)
    assert (n.payload_account, n.payload_livemode, n.object_account, n.object_livemode) == (
        None,
        False,
        None,
        False,
    )
    claim = n.outcome.evidence()
    assert (claim.provider_payment_id, claim.reference, claim.accounts, claim.livemodes) == (
        INTENT_ID,
        REFERENCE,
        (),
        (False, False),
    )
    assert STRIPE_EVENTS.notification_key(n) == "evt_1QxA"
    assert not n.is_refund


def test_charge_refunded_is_about_its_payment_intent() -> None:
    charge = {
        "id": "ch_1",
        "object": "charge",
        "amount": 4999,
        "amount_refunded": 4999,
        "currency": "eur",
        "livemode": False,
        "status": "succeeded",
        "refunded": True,
        "payment_intent": INTENT_ID,
        "metadata": {"paycore_reference": REFERENCE},
    }
    n = parse_event(event("charge.refunded", charge))
    assert (n.payment_id, n.reference, n.amount_refunded, n.is_refund) == (INTENT_ID, REFERENCE, 4999, True)
    assert n.outcome.kind is OutcomeKind.SUCCEEDED
    assert n.outcome.evidence().provider_payment_id == INTENT_ID


@pytest.mark.parametrize("refunded", [5000, 999_999, -1])
def test_a_charge_refunding_more_than_it_charged_or_less_than_nothing_is_invalid(refunded: int) -> None:
    # Taken as read, 999,999 refunded on a 4,999 charge would queue a refund-request for it.
    charge = {"id": "ch_1", "object": "charge", "amount": 4999, "amount_refunded": refunded,
              "currency": "eur", "livemode": False, "status": "succeeded", "refunded": True,
              "payment_intent": INTENT_ID, "metadata": {"paycore_reference": REFERENCE}}
    with pytest.raises(InvalidNotification, match="invalid-object"):
        parse_event(event("charge.refunded", charge))
    assert parse_event(event("charge.refunded", dict(charge, amount_refunded=4999))).amount_refunded == 4999


def test_the_envelopes_mode_is_a_second_statement() -> None:
    n = parse_event(event(livemode=True))
    assert n.outcome.evidence().livemodes == (False, True)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"[1]", "not-an-object"),
        (b"nope", "not-json"),
        (event("invoice.paid"), "unknown-type"),
        (event(id=None), "invalid-id"),
        (event(id="not-evt"), "invalid-id"),
        (event(livemode="no"), "invalid-livemode"),
        (event(obj={"id": "pi_1"}), "invalid-object"),
        (event("charge.refunded", intent()), "invalid-object"),
        (event(obj=intent(amount=-1)), "invalid-object"),
        (event(obj=intent(metadata="x")), "invalid-object"),
    ],
)
def test_what_is_not_an_event_we_understand_is_invalid(body: bytes, reason: str) -> None:
    with pytest.raises(InvalidNotification, match=reason):
        parse_event(body)


def test_the_dedup_key_is_the_event_id_for_every_redelivery() -> None:
    first, again = parse_event(event()), parse_event(event(created=T + 3600))
    assert STRIPE_EVENTS.notification_key(first) == STRIPE_EVENTS.notification_key(again) == "evt_1QxA"
    assert STRIPE_EVENTS.name == "stripe"
