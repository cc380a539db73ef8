"""What Stripe is sent: the create body and the bodies of captures, cancels and refunds
(form-encoded once, stored on the attempt or operation), and a stored body read back into the
parameters the SDK sends.

Decision record: ``docs/decisions/0003-stripe-stored-request.md``. The stored body is
the exact ``application/x-www-form-urlencoded`` string; every send transmits these
bytes. The SDK encodes parameters itself (``urlencode`` of its flattened pairs, then
``%5B``/``%5D`` turned back into brackets), so the stored string is produced by the
same encoding, read back into ordered pairs at send time, and re-encoded here and
compared: a stored body the SDK would not reproduce byte for byte is never sent.
A test checks the bytes the server receives are the stored ones.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode

from paycore.domain import OperationKind
from paycore.errors import InvalidPaymentMethod
from paycore.payment_methods import contains_card_number
from paycore.providers.http import NotBuildable, header_token
from paycore.providers.stripe.wire import CAPTURE_REFERENCE_KEY, MAX_IDEMPOTENCY_KEY_LEN, REFERENCE_KEY

# Stripe's maximum charge amount is eight digits in most currencies
# (https://docs.stripe.com/currencies#minimum-and-maximum-charge-amounts).
MAX_AMOUNT_MINOR: Final = 99_999_999
_CURRENCY_RE: Final = re.compile(r"[A-Z]{3}")
# A PaymentIntent id: one path segment of letters, digits and underscores.
INTENT_ID_RE: Final = re.compile(r"pi_[A-Za-z0-9_]{1,250}")
# A PaymentMethod id, as Stripe.js and the API hand it out (pm_…).
_PAYMENT_METHOD_RE: Final = re.compile(r"pm_[A-Za-z0-9_]{1,250}")
# A reference goes into a search query between single quotes: no quote, no backslash,
# no control characters (https://docs.stripe.com/search#search-query-language).
_REFERENCE_RE: Final = re.compile(r"[^'\\\x00-\x1f\x7f]{1,64}")

# The parameters a stored body may hold, and nothing else: a key the SDK would take
# as a request option (``idempotency_key``, ``stripe_version``, ``api_key``,
# ``headers``…) can never be smuggled into a send.
ALLOWED_PARAMS: Final = frozenset({
    "amount", "currency", "payment_method", "confirm", f"metadata[{REFERENCE_KEY}]", "description",
    "return_url", "payment_method_types[]", "capture_method",
})


# The refund reasons Stripe takes (https://docs.stripe.com/api/refunds/create#create_refund-reason);
# any other reason goes into the refund's metadata under REASON_KEY.
REFUND_REASONS: Final = frozenset({"duplicate", "fraudulent", "requested_by_customer"})
REASON_KEY: Final = "paycore_reason"
MAX_METADATA_VALUE_LEN: Final = 500  # Stripe's limit on a metadata value
# What each operation's stored body may hold, and nothing else (as ALLOWED_PARAMS for a create).
OPERATION_PARAMS: Final = {
    OperationKind.REFUND: frozenset({"payment_intent", "amount", f"metadata[{REFERENCE_KEY}]", "reason",
                                     f"metadata[{REASON_KEY}]"}),
    OperationKind.CAPTURE: frozenset({"amount_to_capture", f"metadata[{CAPTURE_REFERENCE_KEY}]"}),
    OperationKind.CANCEL: frozenset(),
}


def encode_form(pairs: list[tuple[str, str]]) -> str:
    """The SDK's form encoding of ordered pairs (``stripe._api_requestor``: ``urlencode``, then
    the bracket escapes turned back into ``[`` and ``]``)."""
    return urlencode(pairs).replace("%5B", "[").replace("%5D", "]")


def build_request_body(*, amount_minor: int, currency: str, payment_method: str | Mapping[str, Any],
                       reference: str, description: str | None = None, return_url: str | None = None,
                       manual_capture: bool = False) -> str:
    """Serialize the body of ``POST /v1/payment_intents``, once, for storing on the attempt.

    ``amount``, ``currency`` (lower case), ``payment_method``, ``confirm=true``,
    ``metadata[paycore_reference]``, ``description`` when given, then ``return_url``
    when the account has one, else ``payment_method_types[]=card`` (a card-only
    intent needs no return URL: https://docs.stripe.com/api/payment_intents/create).

    :raises InvalidPaymentMethod: A value Stripe would reject, or anything that looks like a
        raw card number (only a ``pm_…`` id is ever accepted); a ``ValueError``.
    """
    if (isinstance(amount_minor, bool) or not isinstance(amount_minor, int)
            or not 0 < amount_minor <= MAX_AMOUNT_MINOR):
        raise InvalidPaymentMethod(f"amount_minor must be an integer from 1 to {MAX_AMOUNT_MINOR}")
    if not isinstance(currency, str) or not _CURRENCY_RE.fullmatch(currency):
        raise InvalidPaymentMethod("currency must be three upper-case letters")
    if not isinstance(payment_method, str):
        raise InvalidPaymentMethod("a Stripe payment method is a PaymentMethod id (pm_…), not an object")
    for name, value in (("payment_method", payment_method), ("reference", reference),
                        ("description", description or "")):
        if contains_card_number(value):
            raise InvalidPaymentMethod(f"{name} looks like a card number; send a PaymentMethod id (pm_…)")
    if not _PAYMENT_METHOD_RE.fullmatch(payment_method):
        raise InvalidPaymentMethod("payment_method must be a PaymentMethod id (pm_…)")
    if not _REFERENCE_RE.fullmatch(reference):
        raise InvalidPaymentMethod("reference must be 1 to 64 characters, without quotes, backslashes or "
                                   "control characters")
    if description is not None and not 0 < len(description) <= 1000:
        raise InvalidPaymentMethod("description must be 1 to 1000 characters")
    if return_url is not None and not return_url.startswith(("https://", "http://")):
        raise InvalidPaymentMethod("return_url must be an http(s) URL")
    pairs = [
        ("amount", str(amount_minor)),
        ("currency", currency.lower()),
        ("payment_method", payment_method),
        ("confirm", "true"),
        (f"metadata[{REFERENCE_KEY}]", reference),
    ]
    if description is not None:
        pairs.append(("description", description))
    if manual_capture:  # a hold: requires_capture until captured or cancelled
        pairs.append(("capture_method", "manual"))
    if return_url is not None:
        pairs.append(("return_url", return_url))
    else:
        pairs.append(("payment_method_types[]", "card"))
    return encode_form(pairs)


def operation_path(kind: OperationKind, provider_payment_id: str) -> str:
    """The path an operation of ``kind`` on the intent is sent to (the id is checked by the caller)."""
    if kind is OperationKind.REFUND:
        return "/v1/refunds"
    action = "capture" if kind is OperationKind.CAPTURE else "cancel"
    return f"/v1/payment_intents/{provider_payment_id}/{action}"


def build_operation_body(kind: OperationKind, *, provider_payment_id: str, amount_minor: int,
                         reference: str, reason: str | None = None) -> str:
    """Serialize the body of a capture, cancel or refund once, for storing: the create's form encoding.

    - refund (``POST /v1/refunds``): ``payment_intent``, ``amount`` (always: paycore decides
      the amount, never Stripe's default of all that is left), ``metadata[paycore_reference]``,
      then the reason: ``reason=<it>`` when Stripe takes it (:data:`REFUND_REASONS`), else
      ``metadata[paycore_reason]=<it>``;
    - capture (``POST /v1/payment_intents/{id}/capture``): ``amount_to_capture`` and
      ``metadata[paycore_capture_reference]`` (the intent keeps it: how a lookup finds it);
    - cancel (``POST /v1/payment_intents/{id}/cancel``): nothing. Stripe's cancel takes no
      metadata, so the reference is recorded but never sent; the key alone identifies it
      (no ``cancellation_reason`` either: a canceled intent's reason is then ``null``, which
      tells our cancel from Stripe's own, ``automatic`` or ``abandoned``).

    :raises InvalidPaymentMethod: A value Stripe would reject (a ``ValueError``): an amount
        outside 1 … 99 999 999, an intent id that is not ``pi_…``, a reference as the create's
        rule refuses, a reason on a capture or cancel, or one longer than 500 characters, or
        anything that looks like a card number.
    """
    if (isinstance(amount_minor, bool) or not isinstance(amount_minor, int)
            or not 0 < amount_minor <= MAX_AMOUNT_MINOR):
        raise InvalidPaymentMethod(f"amount_minor must be an integer from 1 to {MAX_AMOUNT_MINOR}")
    if not INTENT_ID_RE.fullmatch(provider_payment_id):
        raise InvalidPaymentMethod("provider_payment_id must be a PaymentIntent id (pi_…)")
    if not _REFERENCE_RE.fullmatch(reference) or contains_card_number(reference):
        raise InvalidPaymentMethod("reference must be 1 to 64 characters, without quotes, backslashes or "
                                   "control characters")
    if reason is not None and (kind is not OperationKind.REFUND or contains_card_number(reason)
                               or not 0 < len(reason) <= MAX_METADATA_VALUE_LEN):
        raise InvalidPaymentMethod(f"only a refund takes a reason, of 1 to {MAX_METADATA_VALUE_LEN} "
                                   "characters")
    if kind is OperationKind.CANCEL:
        return ""
    if kind is OperationKind.CAPTURE:
        return encode_form([("amount_to_capture", str(amount_minor)),
                            (f"metadata[{CAPTURE_REFERENCE_KEY}]", reference)])
    pairs = [("payment_intent", provider_payment_id), ("amount", str(amount_minor)),
             (f"metadata[{REFERENCE_KEY}]", reference)]
    if reason in REFUND_REASONS:
        pairs.append(("reason", reason))
    elif reason is not None:
        pairs.append((f"metadata[{REASON_KEY}]", reason))
    return encode_form(pairs)


def stored_params(request_body: str, allowed: frozenset[str] = ALLOWED_PARAMS) -> dict[str, str]:
    """The stored body as the ordered parameters the SDK is given.

    :param allowed: The parameters the body may hold: a create's (:data:`ALLOWED_PARAMS`), or
        an operation's (:data:`OPERATION_PARAMS`).
    :raises NotBuildable: ``invalid-body`` when the body is not one this module
        writes: not decodable, a parameter outside ``allowed`` or given
        twice, or pairs the SDK's encoding would not turn back into the same bytes.
    """
    try:
        pairs = parse_qsl(request_body, keep_blank_values=True, strict_parsing=True, errors="strict")
    except (ValueError, UnicodeError):
        raise NotBuildable("invalid-body") from None
    params = dict(pairs)
    if len(params) != len(pairs) or not params.keys() <= allowed:
        raise NotBuildable("invalid-body")
    if encode_form(pairs) != request_body:
        raise NotBuildable("invalid-body")
    return params


def check_idempotency_key(key: str) -> str:
    """The stored key, as a header value Stripe accepts.

    An empty key is refused too: the SDK would send a POST without one under a key it invents
    (``stripe._api_requestor``), which no later send could repeat.

    :raises NotBuildable: ``invalid-header``.
    """
    if not 0 < len(key) <= MAX_IDEMPOTENCY_KEY_LEN:
        raise NotBuildable("invalid-header")
    return header_token(key)
