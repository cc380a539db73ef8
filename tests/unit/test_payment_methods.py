"""The payment-method gate: tokens and encrypted objects pass, card data never does."""

from __future__ import annotations

from typing import Any

import pytest

from paycore.errors import InvalidPaymentMethod
from paycore.payment_methods import (
    checked_payment_method,
    contains_card_number,
    luhn_valid,
)

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
    # A card number inside what is shaped like a token or an encrypted field is still one.
    "tok_5555555555554444", "pm_card_4111111111111111_x", "tok_4111-1111-1111-1111",
    {"type": "scheme", "encryptedCardNumber": "adyenjs_0_1_25$4111111111111111"},
    {"type": "scheme", "storedPaymentMethodId": 4111111111111111},
])
def test_card_data_and_shapes_no_provider_takes_are_refused_without_echo(value: Any) -> None:
    with pytest.raises(InvalidPaymentMethod) as refused:
        checked_payment_method(value)
    assert "4111" not in str(refused.value) and "5555" not in str(refused.value)


def test_the_luhn_check_tells_card_numbers_from_other_digit_runs() -> None:
    assert luhn_valid("4242424242424242") and not luhn_valid("4242424242424241")
    assert contains_card_number("4242 4242 4242 4242")
    assert not contains_card_number("4242424242424241")  # fails Luhn: an order number, say
    assert not contains_card_number("12345")  # too short


def test_an_order_id_never_holds_what_a_provider_adapter_refuses_as_a_card_number(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The order id is the provider's reference and description. A bare 24-hex-digit id holds a
    Luhn-valid run of 12+ digits about once in 500 (seen in CI: ``ord_5fff44d0b2c3969796837840``,
    refused by the Stripe adapter as a card number), so such draws are redrawn."""
    from paycore import orders
    from paycore.providers.stripe.request import build_request_body

    assert contains_card_number("ord_5fff44d0b2c3969796837840")
    draws = iter(["5fff44d0b2c3969796837840", "5fff44d0b2c3ab9796837840"])
    monkeypatch.setattr(orders.secrets, "token_hex", lambda n: next(draws))
    order_id = orders.new_order_id()
    assert order_id == "ord_5fff44d0b2c3ab9796837840"
    build_request_body(amount_minor=100, currency="EUR", payment_method="pm_card_visa",
                       reference=f"{order_id}-a1", description=f"order {order_id}", return_url=None)
