"""What Adyen is sent: the ``/payments`` body (serialized once, stored on the attempt) and
the create request built from the stored attempt plus the account's credentials.

Body fields are those of ``POST /v71/payments``
(https://docs.adyen.com/api-explorer/Checkout/71/post/payments): ``amount``
(``value`` in minor units, ``currency``), ``reference`` (≤ 80 characters),
``merchantAccount``, ``paymentMethod`` (the object Drop-in/Components produce,
passed through as given) and ``returnUrl`` (required by ``/payments``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import httpx
import orjson

from paycore.errors import InvalidPaymentMethod
from paycore.payment_methods import contains_card_number
from paycore.providers.adyen.wire import CURRENCY_RE, MAX_IDEMPOTENCY_KEY_LEN, MAX_REFERENCE_LEN, auth_headers
from paycore.providers.base import StoredRequest
from paycore.providers.http import DEFAULT_PORTS, NotBuildable, header_token, stored_body, stored_url
from paycore.providers.package import ProviderAccountConfig

# A sandbox/test token accepted as a plain string in the test environment only.
_TEST_TOKEN_RE: Final = re.compile(r"tok_[A-Za-z0-9_]{1,64}")
# Raw card fields by name: paycore never sends unencrypted card data (Adyen accepts them
# only from PCI-certified integrations, which paycore is not).
RAW_CARD_FIELDS: Final = frozenset({"number", "cvc", "expiryMonth", "expiryYear"})


def _refuse_card_data(value: Any, path: str = "paymentMethod") -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise InvalidPaymentMethod(f"{path} keys must be strings")
            if k in RAW_CARD_FIELDS:
                raise InvalidPaymentMethod(
                    f"{path}.{k}: raw card data is never sent; use the encrypted fields")
            _refuse_card_data(v, f"{path}.{k}")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _refuse_card_data(v, f"{path}[{i}]")
    elif isinstance(value, str):
        if contains_card_number(value):
            raise InvalidPaymentMethod(f"{path} holds what looks like a card number")
    elif value is not None and not isinstance(value, bool | int | float):
        raise InvalidPaymentMethod(f"{path} must be JSON")


def payment_method_object(payment_method: str | Mapping[str, Any], *, environment: str) -> dict[str, Any]:
    """The ``paymentMethod`` object to send.

    An object (Drop-in/Components state) is passed through as given, once checked for
    raw card data. A plain string is accepted only in the test environment and only as
    a sandbox token (``tok_…``), as ``{"type": "scheme", "encryptedCardNumber": token}``.

    :raises InvalidPaymentMethod: Anything else (a ``ValueError``).
    """
    if isinstance(payment_method, str):
        if contains_card_number(payment_method):
            raise InvalidPaymentMethod("payment_method looks like a card number; raw card data is never sent")
        if environment != "test" or not _TEST_TOKEN_RE.fullmatch(payment_method):
            raise InvalidPaymentMethod("Adyen needs a paymentMethod object (Drop-in/Components state); "
                             "a plain string is accepted only as a tok_… token in the test environment")
        return {"type": "scheme", "encryptedCardNumber": payment_method}
    if not isinstance(payment_method, Mapping):
        raise InvalidPaymentMethod("payment_method must be an object")
    pm_type = payment_method.get("type")
    if not isinstance(pm_type, str) or not pm_type:
        raise InvalidPaymentMethod("paymentMethod.type must be a non-empty string")
    _refuse_card_data(payment_method)
    return dict(payment_method)


def build_request_body(
    *,
    amount_minor: int,
    currency: str,
    payment_method: str | Mapping[str, Any],
    reference: str,
    merchant_account: str,
    return_url: str | None,
    environment: str,
    manual_capture: bool = False,
) -> str:
    """Serialize the body of ``POST /v71/payments``, once, for storing on the attempt.

    Every send transmits the stored string, so Adyen sees the same request under the
    key each time. The customer's description is not sent: ``/payments`` has no
    free-text description field.

    :raises InvalidPaymentMethod: A value Adyen would reject, raw card data, or no ``returnUrl`` (a
        ``ValueError``).
    """
    if isinstance(amount_minor, bool) or not isinstance(amount_minor, int) or amount_minor <= 0:
        raise InvalidPaymentMethod("amount_minor must be a positive integer")
    if not CURRENCY_RE.fullmatch(currency):
        raise InvalidPaymentMethod("currency must be three upper-case letters")
    if not 1 <= len(reference) <= MAX_REFERENCE_LEN:
        raise InvalidPaymentMethod(f"reference must be 1 to {MAX_REFERENCE_LEN} characters")
    if contains_card_number(reference):
        raise InvalidPaymentMethod("reference looks like a card number")
    if not merchant_account:
        raise InvalidPaymentMethod("merchant account must not be empty")
    if not return_url:
        raise InvalidPaymentMethod(
            "Adyen requires a returnUrl: configure PAYCORE_ADYEN_RETURN_URL for the account")
    url = httpx.URL(return_url)
    if url.scheme not in DEFAULT_PORTS or not url.host:
        raise InvalidPaymentMethod("returnUrl must be an absolute http(s) URL")
    body: dict[str, Any] = {
        "amount": {"value": amount_minor, "currency": currency},
        "reference": reference,
        "merchantAccount": merchant_account,
        "paymentMethod": payment_method_object(payment_method, environment=environment),
        "returnUrl": return_url,
    }
    if manual_capture:  # authorise and hold: a /captures call charges it later
        body["additionalData"] = {"manualCapture": "true"}
    return orjson.dumps(body).decode("utf-8")


def stored_merchant_account(request_body: str) -> str | None:
    """The ``merchantAccount`` inside a stored body, or ``None`` when it names none."""
    try:
        body = orjson.loads(request_body)
    except orjson.JSONDecodeError:
        return None
    value = body.get("merchantAccount") if isinstance(body, dict) else None
    return value if isinstance(value, str) else None


def create_request(stored: StoredRequest, acct: ProviderAccountConfig) -> httpx.Request:
    """``POST /v71/payments`` exactly as stored, with ``acct``'s credentials applied now.

    :raises NotBuildable: the endpoint left the account's origin; the key is empty, longer
        than 64 characters or not a header value; the body is not sendable as stored or
        names another merchant account than the credentials about to be applied.
    """
    url = stored_url(stored, acct.base_url, max_key_length=MAX_IDEMPOTENCY_KEY_LEN)
    content = stored_body(stored)
    # The body names the merchant account it pays into; the key must be that account's.
    if stored_merchant_account(stored.request_body) != acct.account:
        raise NotBuildable("merchant-account-mismatch")
    headers = {
        "Idempotency-Key": header_token(stored.idempotency_key),
        "Content-Type": "application/json",
        **auth_headers(acct),
    }
    return httpx.Request("POST", url, headers=headers, content=content)
