"""Stripe's wire readers at their edges: what a generated mutation run found untested (issue 26).

Each test names the bound it holds; each was seen to fail with the mutant that moved the bound.
"""

from __future__ import annotations

from typing import Any

from paycore.domain import OutcomeKind
from paycore.providers.stripe import wire


def intent(**changes: Any) -> dict[str, Any]:
    base = {"id": "pi_3Nabc", "object": "payment_intent", "amount": 4999, "currency": "eur",
            "livemode": False, "status": "succeeded", "metadata": {"paycore_reference": "ref-1"}}
    return {**base, **changes}


def charge(**changes: Any) -> dict[str, Any]:
    base = {"id": "ch_3Nabc", "object": "charge", "amount": 4999, "currency": "eur", "livemode": False,
            "status": "succeeded", "payment_intent": "pi_3Nabc", "amount_refunded": 0,
            "metadata": {"paycore_reference": "ref-1"}}
    return {**base, **changes}


def test_an_intent_of_no_amount_is_not_a_payment() -> None:
    assert wire.parse_intent(intent(amount=1)) is not None
    assert wire.parse_intent(intent(amount=0)) is None
    assert wire.parse_intent(intent(amount=-1)) is None


def test_a_charge_refunded_in_full_is_read_and_more_than_its_amount_is_not() -> None:
    full = wire.parse_charge(charge(amount_refunded=4999))
    assert full is not None and full.amount_refunded == 4999
    assert wire.parse_charge(charge(amount_refunded=5000)) is None
    assert wire.parse_charge(charge(amount_refunded=-1)) is None


def test_a_refund_naming_a_bare_prefix_as_its_intent_is_refused() -> None:
    refund = {"id": "re_1", "object": "refund", "amount": 100, "currency": "eur", "status": "succeeded",
              "metadata": {"paycore_reference": "ref-r"}}
    assert wire.parse_refund({**refund, "payment_intent": "pi_1"}) is not None
    assert wire.parse_refund({**refund, "payment_intent": {"id": "pi_1"}}) is not None
    assert wire.parse_refund({**refund, "payment_intent": "pi_"}) is None
    assert wire.parse_refund({**refund, "payment_intent": {"id": "pi_"}}) is None


def test_a_header_in_a_plain_mapping_is_found_whatever_its_case() -> None:
    # The SDK may hand back a plain dict, whose keys keep the server's case.
    headers = {"Request-Id": "req_1", "Idempotent-Replayed": "true"}
    assert wire.header(headers, "idempotent-replayed") == "true"
    assert wire.header(headers, "request-id") == "req_1"
    assert wire.header(headers, "retry-after") is None
    assert wire.is_replayed(headers)
    assert not wire.is_replayed({"Request-Id": "req_1"})


def test_a_charge_claims_the_mode_it_names_and_none_when_it_names_none() -> None:
    # The mode is compared with the attempt's account: a charge that names one must claim it.
    live, test = wire.parse_charge(charge(livemode=True)), wire.parse_charge(charge(livemode=False))
    assert live is not None and live.claim().livemodes == (True,)
    assert test is not None and test.claim().livemodes == (False,)
    silent = wire.parse_charge({k: v for k, v in charge().items() if k != "livemode"})
    assert silent is not None and silent.claim().livemodes == ()


def refund(**changes: Any) -> dict[str, Any]:
    base = {"id": "re_1", "object": "refund", "amount": 100, "currency": "eur", "status": "succeeded",
            "payment_intent": "pi_1", "created": 1_700_000_000, "metadata": {"paycore_reference": "ref-r"}}
    return {**base, **changes}


def test_an_intent_without_metadata_is_read_with_no_reference() -> None:
    bare = wire.parse_intent({k: v for k, v in intent().items() if k != "metadata"})
    assert bare is not None and bare.reference is None
    assert wire.parse_intent(intent(metadata="ref-1")) is None


def test_an_intent_is_refused_for_each_field_that_does_not_fit() -> None:
    assert wire.parse_intent(intent(id="pi_")) is None
    assert wire.parse_intent(intent(id="ch_3Nabc")) is None
    assert wire.parse_intent(intent(currency="euro")) is None
    assert wire.parse_intent(intent(currency=978)) is None
    declined = {"code": "card_declined", "decline_code": "insufficient_funds"}
    failed = intent(status="requires_payment_method", last_payment_error=declined)
    assert wire.parse_intent(failed) is not None
    assert wire.parse_intent(intent(status="requires_payment_method",
                                    last_payment_error={**declined, "decline_code": 5})) is None
    assert wire.parse_intent(intent(status="requires_payment_method",
                                    last_payment_error={**declined, "code": 5})) is None


def test_an_intent_still_processing_is_processing_whatever_next_action_says() -> None:
    processing = wire.parse_intent(intent(status="processing", next_action={"type": "redirect_to_url"}))
    assert processing is not None
    outcome = processing.to_outcome()
    assert outcome.kind is OutcomeKind.PROCESSING and outcome.next_action is None


def test_a_charge_without_amount_refunded_has_none_refunded_and_names_a_payment_intent() -> None:
    silent = wire.parse_charge({k: v for k, v in charge().items() if k != "amount_refunded"})
    assert silent is not None and silent.amount_refunded == 0
    assert wire.parse_charge(charge(payment_intent="ch_3Nabc")) is None
    assert wire.parse_charge(charge(payment_intent=7)) is None


def test_a_refund_is_read_with_its_defaults_and_refused_for_a_field_that_does_not_fit() -> None:
    undated = wire.parse_refund({k: v for k, v in refund().items() if k != "created"})
    assert undated is not None and undated.created == 0
    unlinked = wire.parse_refund(refund(payment_intent=None))
    assert unlinked is not None and unlinked.payment_intent is None
    assert wire.parse_refund(refund(payment_intent=7)) is None
    assert wire.parse_refund(refund(status="reversed")) is None
    assert wire.parse_refund(refund(created="yesterday")) is None
    assert wire.parse_refund(refund(failure_reason=3)) is None


def test_a_held_intent_reads_nothing_received_and_refuses_what_does_not_fit() -> None:
    held = intent(status="requires_capture", capture_method="manual", amount_received=0, latest_charge="ch_1")
    read = wire.parse_held_intent(held)
    assert read is not None and read.amount_received == 0
    assert wire.parse_held_intent({**held, "amount_received": -1}) is None
    assert wire.parse_held_intent({**held, "capture_method": 1}) is None
    assert wire.parse_held_intent({**held, "cancellation_reason": 1}) is None
    assert wire.parse_held_intent({**held, "latest_charge": "pi_1"}) is None
    assert wire.parse_held_intent({**held, "metadata": {"paycore_capture_reference": 1}}) is None


def test_retry_after_of_zero_or_less_is_zero() -> None:
    assert wire.retry_after_seconds({"retry-after": "0"}) == 0.0
    assert wire.retry_after_seconds({"retry-after": "-5"}) == 0.0
    assert wire.retry_after_seconds({"retry-after": "2.5"}) == 2.5
