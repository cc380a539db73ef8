"""Adyen's wire readers at their edges: what a generated mutation run found untested (issue 26).

An amount of zero is read, not refused as unreadable: the answer then names a payment or a
modification whose amount is not ours, which evidence judges (and escalates) with what it said.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from paycore.domain import OperationKind
from paycore.providers.adyen import operations, request, wire
from paycore.providers.base import StoredRequest
from paycore.providers.http import NotBuildable
from paycore.providers.package import ProviderAccountConfig
from paycore.settings_spec import Secret


def payment(**changes: Any) -> dict[str, Any]:
    base = {"pspReference": "PSP0001", "resultCode": "Authorised", "merchantReference": "ref-1",
            "merchantAccount": "StoreECOM", "amount": {"value": 4999, "currency": "EUR"}}
    return {**base, **changes}


def modification(**changes: Any) -> dict[str, Any]:
    base = {"pspReference": "PSPR001", "paymentPspReference": "PSP0001", "status": "received",
            "reference": "ref-r", "merchantAccount": "StoreECOM", "amount": {"value": 100, "currency": "EUR"}}
    return {**base, **changes}


def test_a_payment_answer_of_amount_zero_is_read_for_evidence_to_judge() -> None:
    zero = wire.parse_payment(payment(amount={"value": 0, "currency": "EUR"}))
    assert zero is not None and zero.amount_minor == 0
    assert wire.parse_payment(payment(amount={"value": -1, "currency": "EUR"})) is None


def test_a_modification_answer_of_amount_zero_is_read_for_evidence_to_judge() -> None:
    zero = wire.parse_modification(modification(amount={"value": 0, "currency": "EUR"}))
    assert zero is not None and zero.amount_minor == 0
    assert wire.parse_modification(modification(amount={"value": -1, "currency": "EUR"})) is None


def test_an_error_body_may_omit_its_type_but_not_give_another_kind() -> None:
    untyped = wire.parse_error({"status": 422, "errorCode": "14_030", "message": "Return URL is missing."})
    assert untyped is not None
    typed = wire.parse_error({"errorCode": "14_030", "errorType": "validation", "message": "x"})
    assert typed is not None
    assert wire.parse_error({"status": 422, "errorCode": "14_030", "errorType": 5, "message": "x"}) is None


@pytest.mark.parametrize("currency", ["eur", 978, "EURO", None])
def test_an_amount_whose_currency_is_no_iso_code_makes_the_answer_unreadable(currency: Any) -> None:
    amount = {"value": 4999, "currency": currency}
    assert wire.parse_payment(payment(amount=amount)) is None
    assert wire.parse_modification(modification(amount=amount)) is None


@pytest.mark.parametrize("code", ["", 14030, None])
def test_an_error_body_without_a_textual_error_code_is_no_error_body(code: Any) -> None:
    error = {"status": 422, "errorCode": code, "errorType": "validation", "message": "x"}
    assert wire.parse_error(error) is None


@pytest.mark.parametrize(("raw", "seconds"), [("5", 5.0), (" 0.5 ", 0.5), ("0", 0.0), ("-3", 0.0),
                                              ("nan", None), ("inf", None), ("soon", None)])
def test_retry_after_is_finite_delta_seconds_never_below_zero(raw: str, seconds: float | None) -> None:
    assert wire.retry_after_seconds({"retry-after": raw}) == seconds


@pytest.mark.parametrize("changes", [
    pytest.param({"status": ""}, id="status-empty"),
    pytest.param({"status": 1}, id="status-not-text"),
    pytest.param({"status": None}, id="status-missing"),
    pytest.param({"pspReference": " "}, id="psp-blank"),
    pytest.param({"paymentPspReference": None}, id="payment-psp-missing"),
])
def test_a_modification_answer_needs_both_psp_references_and_a_status(changes: dict[str, Any]) -> None:
    body = {k: v for k, v in modification(**changes).items() if v is not None}
    assert wire.parse_modification(body) is None


def test_a_reference_is_one_to_eighty_characters_for_a_payment_and_a_modification() -> None:
    def payment_body(reference: str) -> str:
        return request.build_request_body(amount_minor=4999, currency="EUR", payment_method="tok_visa",
                                          reference=reference, merchant_account="StoreECOM",
                                          return_url="https://shop.example/r", environment="test")

    def refund_body(reference: str) -> str:
        return operations.build_operation_body(OperationKind.REFUND, provider_payment_id="PSP0001",
                                               amount_minor=100, reference=reference,
                                               merchant_account="StoreECOM", currency="EUR")

    for build in (payment_body, refund_body):
        assert build("r" * 80)
        with pytest.raises(ValueError, match="1 to 80"):
            build("r" * 81)


def test_an_idempotency_key_is_at_most_sixty_four_characters() -> None:
    body = request.build_request_body(amount_minor=4999, currency="EUR", payment_method="tok_visa",
                                      reference="ref-1", merchant_account="StoreECOM",
                                      return_url="https://shop.example/r", environment="test")
    acct = ProviderAccountConfig("adyen", "StoreECOM", "test", "https://checkout-test.adyen.com",
                                 Secret("AQE_key"), None, "v71")

    def stored(key: str) -> StoredRequest:
        return StoredRequest(uuid.uuid4(), acct.provider_account, acct.payments_endpoint, "v71", key, body,
                             "ref-1", 4999, "EUR")

    assert request.create_request(stored("k" * 64), acct).headers["Idempotency-Key"] == "k" * 64
    with pytest.raises(NotBuildable, match="invalid-header"):
        request.create_request(stored("k" * 65), acct)
