"""The payment-method gate: tokens and encrypted objects pass, card data never does."""

from __future__ import annotations

from typing import Any

import pytest

from paycore.errors import InvalidPaymentMethod
from paycore.payment_methods import checked_payment_method, looks_like_card_number, luhn_valid

ADYEN_ENCRYPTED = {"type": "scheme", "encryptedCardNumber": "adyenjs_0_1_25$MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8A",
                   "encryptedExpiryMonth": "adyenjs_0_1_25$abc", "encryptedExpiryYear": "adyenjs_0_1_25$def",
                   "encryptedSecurityCode": "adyenjs_0_1_25$ghi", "holderName": "J. Smith",
                   "browserInfo": {"colorDepth": 24, "javaEnabled": False}}


@pytest.mark.parametrize("value", ["tok_visa", "pm_card_visa", "pm_1PqRsT2eZvKYlo2C", ADYEN_ENCRYPTED,
                                   {"type": "scheme", "encryptedCardNumber": "tok_3ds"}])
def test_tokens_and_encrypted_objects_pass_unchanged(value: Any) -> None:
    assert checked_payment_method(value) == value


@pytest.mark.parametrize("value", [
    "4111111111111111", "4111 1111 1111 1111", "4111-1111-1111-1111", "378282246310005",
    {"type": "scheme", "cardNumber": "tok_visa"},
    {"type": "scheme", "cvc": "737"},
    {"type": "scheme", "encryptedCardNumber": "5555 5555 5555 4444"},
    {"type": "scheme", "billing": {"note": "4111111111111111"}},
    {"type": "scheme", "deep": {"deeper": {"x": "y"}}},
    {"type": "scheme", "list": ["tok_visa"]},
    {}, {f"f{i}": "x" for i in range(33)}, {"bad key": "x"},
    "", "tok visa", "TOK_VISA", 4111111111111111, None, ["tok_visa"],
])
def test_card_data_and_shapes_no_provider_takes_are_refused_without_echo(value: Any) -> None:
    with pytest.raises(InvalidPaymentMethod) as refused:
        checked_payment_method(value)
    assert "4111" not in str(refused.value) and "5555" not in str(refused.value)


def test_the_luhn_check_tells_card_numbers_from_other_digit_runs() -> None:
    assert luhn_valid("4242424242424242") and not luhn_valid("4242424242424241")
    assert looks_like_card_number("4242 4242 4242 4242")
    assert not looks_like_card_number("4242424242424241")  # fails Luhn: an order number, say
    assert not looks_like_card_number("12345")  # too short
