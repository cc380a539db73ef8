"""What Cardco is sent: the create body (serialized once, stored on the attempt) and the
create request built from the stored attempt plus the account's credentials.

The stored request itself is the attempt's record, provider-neutral:
:class:`paycore.providers.base.StoredRequest`.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from paycore.errors import InvalidPaymentMethod
from paycore.providers.base import StoredRequest
from paycore.providers.cardco.wire import CURRENCY_RE, MAX_IDEMPOTENCY_KEY_LEN, auth_headers, sf_string
from paycore.providers.http import stored_body, stored_url
from paycore.providers.package import ProviderAccountConfig


def build_request_body(
    *,
    amount_minor: int,
    currency: str,
    payment_method: str,
    reference: str,
    description: str | None = None,
    return_url: str | None = None,
    manual_capture: bool = False,
) -> str:
    """Serialize the body of ``POST /v1/payments``, once, for storing on the attempt.

    The result is canonical JSON (orjson, keys sorted, no whitespace); optional
    fields that are ``None`` are left out. It is built once when the attempt is
    created and never again: every send transmits the stored string, so the
    provider's body fingerprint for the key cannot change between sends.

    :param amount_minor: Positive amount in minor units.
    :param currency: Three upper-case letters, e.g. ``'EUR'``.
    :param payment_method: The payment-method token.
    :param reference: The attempt's client reference (1 to 64 characters).
    :param description: Optional free text.
    :param return_url: Optional URL the customer returns to after an action.
    :param manual_capture: ``"capture": "manual"``: authorize and hold (``requires_capture``);
        left out otherwise (the contract's default is ``automatic``, so an automatic payment's
        body stays what it always was).
    :return: The JSON text.
    :raises InvalidPaymentMethod: A value the contract would reject (a ``ValueError``).
    """
    if isinstance(amount_minor, bool) or not isinstance(amount_minor, int) or amount_minor <= 0:
        raise InvalidPaymentMethod("amount_minor must be a positive integer")
    if not CURRENCY_RE.fullmatch(currency):
        raise InvalidPaymentMethod("currency must be three upper-case letters")
    if not payment_method:
        raise InvalidPaymentMethod("payment_method must not be empty")
    if not 1 <= len(reference) <= 64:
        raise InvalidPaymentMethod("reference must be 1 to 64 characters")
    body: dict[str, Any] = {
        "amount": amount_minor,
        "currency": currency,
        "payment_method": payment_method,
        "reference": reference,
    }
    if description is not None:
        body["description"] = description
    if return_url is not None:
        body["return_url"] = return_url
    if manual_capture:
        body["capture"] = "manual"
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS).decode("utf-8")


def create_request(stored: StoredRequest, acct: ProviderAccountConfig) -> httpx.Request:
    """``POST /v1/payments`` exactly as stored, with ``acct``'s credentials applied now.

    :raises NotBuildable: the endpoint left the account's origin, or a stored header
        or body cannot be sent as stored.
    """
    url = stored_url(stored, acct.base_url, max_key_length=MAX_IDEMPOTENCY_KEY_LEN)
    headers = {
        "Idempotency-Key": sf_string(stored.idempotency_key),
        "Content-Type": "application/json",
        **auth_headers(acct, stored.api_version),
    }
    return httpx.Request("POST", url, headers=headers, content=stored_body(stored))
