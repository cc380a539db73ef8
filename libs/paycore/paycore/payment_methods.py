"""What a storefront may send as ``payment_method``: a token, or a provider's encrypted object.

paycore never holds card data: the storefront's provider library (Stripe.js,
Adyen's Drop-in) turns the card into a token (``tok_…``, ``pm_…``) or encrypted
fields before anything reaches checkout. This gate refuses what looks like raw
card data before any row is written, and never repeats the value in its answer: a
Luhn-valid run of 12 to 19 digits anywhere in the value (a token, a field, a number) is one.
Which tokens or objects a provider takes is the provider's own check
(``build_request_body`` raises ``ValueError``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from paycore.errors import InvalidPaymentMethod
from paycore.providers.base import PaymentMethod

TOKEN: Final = re.compile(r"[a-z]{2,8}_[A-Za-z0-9_]{1,200}")
FIELD: Final = re.compile(r"[A-Za-z][A-Za-z0-9_.]{0,63}")
# Field names that only ever hold card data in the clear (compared case-insensitively).
CARD_FIELDS: Final = frozenset({"number", "cardnumber", "pan", "cvc", "cvv", "cvv2", "securitycode",
                                "card_number", "security_code"})
DIGIT_RUN: Final = re.compile(r"[0-9]+(?:[ -][0-9]+)*")
MAX_FIELDS: Final = 32
MAX_VALUE_CHARS: Final = 10_000  # encrypted fields are a few hundred characters


def luhn_valid(digits: str) -> bool:
    """The Luhn checksum every card number carries."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def contains_card_number(text: str) -> bool:
    """A 12 to 19 digit Luhn-valid number anywhere in ``text``: a run of digits, or consecutive
    groups of one joined by single spaces or dashes (``4242 4242 4242 4242``). Groups are never
    cut, so a longer number is judged by its own groups, not by every window of its digits.

    The one rule for free text a provider will show (references, descriptions), so both
    adapters and the order ids paycore makes agree on it."""
    for match in DIGIT_RUN.finditer(text):
        groups = re.split(r"[ -]", match.group())
        for start in range(len(groups)):
            digits = ""
            for group in groups[start:]:
                digits += group
                if len(digits) > 19:
                    break
                if len(digits) >= 12 and luhn_valid(digits):
                    return True
    return False


def checked_payment_method(value: Any) -> PaymentMethod:
    """``value`` if it may be stored and sent, else :class:`InvalidPaymentMethod`.

    A string must be a token (``tok_…``, ``pm_…``); an object holds at most 32 string,
    number or boolean fields (one level of nesting), none named like card data and no
    value that looks like a card number.
    """
    if isinstance(value, str):
        # A card number anywhere, even inside something shaped like a token (tok_5555555555554444).
        if contains_card_number(value) or not TOKEN.fullmatch(value):
            raise InvalidPaymentMethod("payment_method must be a token (tok_..., pm_...) or the provider's "
                                       "encrypted payment-method object, never card details")
        return value
    if isinstance(value, Mapping):
        _check_object(value, depth=0)
        return dict(value)
    raise InvalidPaymentMethod("payment_method must be a token string or an object")


def _check_object(obj: Mapping[Any, Any], *, depth: int) -> None:
    if not obj or len(obj) > MAX_FIELDS:
        raise InvalidPaymentMethod(f"payment_method must hold 1 to {MAX_FIELDS} fields")
    for key, value in obj.items():
        if not isinstance(key, str) or not FIELD.fullmatch(key):
            raise InvalidPaymentMethod("payment_method has a field name that is not a plain identifier")
        if key.lower() in CARD_FIELDS:
            raise InvalidPaymentMethod(f"payment_method.{key} holds card data in the clear: send the "
                                       "provider's encrypted fields instead")
        if isinstance(value, Mapping) and depth == 0:
            _check_object(value, depth=1)
        elif isinstance(value, str):
            if len(value) > MAX_VALUE_CHARS or contains_card_number(value):
                raise InvalidPaymentMethod(f"payment_method.{key} looks like card data")
        elif isinstance(value, int) and not isinstance(value, bool) and contains_card_number(str(value)):
            raise InvalidPaymentMethod(f"payment_method.{key} looks like card data")
        elif value is not None and not isinstance(value, bool | int | float):
            raise InvalidPaymentMethod(f"payment_method.{key} must be a string, number or boolean")
