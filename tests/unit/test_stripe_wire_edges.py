"""Stripe's wire readers at their edges: what a generated mutation run found untested (issue 26).

Each test names the bound it holds; each was seen to fail with the mutant that moved the bound.
"""

from __future__ import annotations

from typing import Any

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
