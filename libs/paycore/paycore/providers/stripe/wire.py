"""Stripe's wire: the PaymentIntent, Charge and Refund objects, error bodies, keys and modes.

The contract is ``docs/providers/stripe.md``. A body that does not fit parses to
``None``, never to a guess. Stripe's documentation this relies on:

- PaymentIntent statuses: https://docs.stripe.com/payments/paymentintents/lifecycle
- Error object (``type``, ``code``, ``decline_code``, ``payment_intent``):
  https://docs.stripe.com/api/errors
- Idempotency and replays: https://docs.stripe.com/idempotency,
  https://docs.stripe.com/error-low-level
- Refund object and statuses: https://docs.stripe.com/api/refunds/object
- Capturing and canceling a hold: https://docs.stripe.com/payments/place-a-hold-on-a-payment-method
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from paycore.domain import HOLD_STATUS, Claim, ProviderOutcome
from paycore.providers.http import is_token as is_token  # re-exported: the client checks header values
from paycore.providers.json_body import UNREADABLE as UNREADABLE  # re-exported: the client compares with it
from paycore.providers.json_body import is_int as _is_int
from paycore.providers.json_body import optional_str as _optional_str
from paycore.providers.json_body import read_json as read_json
from paycore.providers.stripe.provider import NAME as NAME  # re-exported

# The metadata key every PaymentIntent we create carries our reference under (a refund we
# send carries its own reference under the same key).
REFERENCE_KEY: Final = "paycore_reference"
# The metadata key a capture we send writes its own reference under: a capture has no object
# of its own at Stripe, so the PaymentIntent it captured keeps it (capture takes ``metadata``).
CAPTURE_REFERENCE_KEY: Final = "paycore_capture_reference"

# Every PaymentIntent status Stripe documents; anything else is unrecognised.
INTENT_STATUSES: Final = frozenset({
    "requires_payment_method", "requires_confirmation", "requires_action", "processing",
    "requires_capture", "canceled", "succeeded",
})

# Every Refund status Stripe documents (https://docs.stripe.com/api/refunds/object#refund_object-status).
REFUND_STATUSES: Final = frozenset({"pending", "requires_action", "succeeded", "failed", "canceled"})

# Stripe's documented limit on an idempotency key (https://docs.stripe.com/idempotency).
MAX_IDEMPOTENCY_KEY_LEN: Final = 255

# A Stripe secret or restricted key says its mode in its prefix.
_KEY_MODE_RE: Final = re.compile(r"(?:sk|rk)_(test|live)_[A-Za-z0-9_]+")
_CURRENCY_RE: Final = re.compile(r"[a-zA-Z]{3}")


def key_environment(api_key: str) -> str | None:
    """``test`` or ``live`` from a secret (``sk_``) or restricted (``rk_``) key's prefix, else ``None``."""
    match = _KEY_MODE_RE.fullmatch(api_key)
    return match.group(1) if match else None


# ---------------------------------------------------------------------------
# The PaymentIntent


@dataclass(frozen=True)
class PaymentIntent:
    """A Stripe PaymentIntent, validated.

    :param id: ``pi_…``.
    :param livemode: Whether it lives in live mode (Stripe objects always say).
    :param amount_minor: Amount in minor units.
    :param currency: Upper-cased (Stripe answers lower case).
    :param reference: ``metadata[paycore_reference]``, when present.
    :param status: One of :data:`INTENT_STATUSES`.
    :param failure_code: ``last_payment_error.decline_code`` or ``.code``, when it has one.
    :param next_action: The customer's next action while ``requires_action``.
    """

    id: str
    livemode: bool | None
    amount_minor: int
    currency: str
    reference: str | None
    status: str
    failure_code: str | None = None
    has_payment_error: bool = False
    next_action: dict[str, Any] | None = None

    def evidence(self) -> dict[str, Any]:
        """What was seen, for history and escalations: identifiers, never card data."""
        return {"id": self.id, "status": self.status, "livemode": self.livemode, "reference": self.reference,
                "amount_minor": self.amount_minor, "currency": self.currency}

    def claim(self) -> Claim:
        """What it says about itself. A PaymentIntent names no account: ``accounts`` is empty."""
        return Claim(provider_payment_id=self.id, reference=self.reference, amount_minor=self.amount_minor,
                     currency=self.currency, accounts=(),
                     livemodes=(self.livemode,) if self.livemode is not None else ())

    def to_outcome(self) -> ProviderOutcome:
        """What this intent says about the attempt.

        =============================================  ==============================================
        status                                         outcome
        =============================================  ==============================================
        succeeded                                      ``succeeded``
        processing                                     ``processing``
        requires_action                                ``requires_action`` with ``next_action``
        requires_payment_method + ``last_payment_error``  ``failed`` ``declined:<code>`` (a decline, or
                                                       a failed 3-D Secure authentication)
        canceled                                       ``failed`` ``canceled``
        requires_payment_method (no error)             ``processing``: created, not yet confirmed
        requires_confirmation                          ``processing``: we always send ``confirm=true``,
                                                       so it is not final; recovery keeps looking
        requires_capture                               ``succeeded``, provider status
                                                       ``requires_capture``: a hold (manual capture),
                                                       authorised, nothing charged yet
        =============================================  ==============================================
        """
        common: dict[str, Any] = {"amount_minor": self.amount_minor, "currency": self.currency,
                                  "claim": self.claim(), "provider_status": self.status}
        if self.status == "succeeded":
            return ProviderOutcome.succeeded(self.id, self.amount_minor, self.currency, claim=self.claim())
        if self.status == HOLD_STATUS:
            return ProviderOutcome.succeeded(self.id, self.amount_minor, self.currency, claim=self.claim(),
                                             provider_status=HOLD_STATUS)
        if self.status == "requires_action" and self.next_action is not None:
            return ProviderOutcome.requires_action(self.id, self.next_action, None, **common)
        if self.status == "requires_payment_method" and self.has_payment_error:
            return ProviderOutcome.failed(f"declined:{self.failure_code or 'unspecified'}",
                                          provider_payment_id=self.id, **common)
        if self.status == "canceled":
            return ProviderOutcome.failed("canceled", provider_payment_id=self.id, **common)
        # processing, requires_confirmation, requires_payment_method without an error: the
        # intent exists and is not final.
        return ProviderOutcome.processing(self.id, **common)


def _reference_of(obj: Mapping[str, Any]) -> tuple[bool, str | None]:
    metadata = obj.get("metadata")
    if metadata is None:
        return True, None
    if not isinstance(metadata, dict):
        return False, None
    return _optional_str(metadata, REFERENCE_KEY)


def _common_fields(obj: Any, prefix: str) -> tuple[str, int, str, bool | None, str | None] | None:
    """``(id, amount, CURRENCY, livemode, reference)`` of a Stripe money object, or ``None``."""
    if not isinstance(obj, dict):
        return None
    oid, amount = obj.get("id"), obj.get("amount")
    currency, livemode = obj.get("currency"), obj.get("livemode")
    if not isinstance(oid, str) or not oid.startswith(prefix) or len(oid) == len(prefix):
        return None
    if not _is_int(amount) or amount <= 0:
        return None
    if not isinstance(currency, str) or not _CURRENCY_RE.fullmatch(currency):
        return None
    if livemode is not None and not isinstance(livemode, bool):
        return None
    ok, reference = _reference_of(obj)
    if not ok:
        return None
    return oid, amount, currency.upper(), livemode, reference


def parse_intent(obj: Any) -> PaymentIntent | None:
    """A PaymentIntent, or ``None`` when the JSON does not fit."""
    common = _common_fields(obj, "pi_")
    if common is None or obj.get("object", "payment_intent") != "payment_intent":
        return None
    pid, amount, currency, livemode, reference = common
    status = obj.get("status")
    if not isinstance(status, str) or status not in INTENT_STATUSES:
        return None
    error = obj.get("last_payment_error")
    if error is not None and not isinstance(error, dict):
        return None
    failure_code: str | None = None
    if error is not None:
        ok_decline, decline = _optional_str(error, "decline_code")
        ok_code, code = _optional_str(error, "code")
        if not (ok_decline and ok_code):
            return None
        failure_code = decline or code
    next_action = obj.get("next_action")
    if next_action is not None and not isinstance(next_action, dict):
        return None
    if status == "requires_action" and not next_action:
        return None
    return PaymentIntent(id=pid, livemode=livemode, amount_minor=amount, currency=currency,
                         reference=reference, status=status, failure_code=failure_code,
                         has_payment_error=error is not None,
                         next_action=next_action)


# ---------------------------------------------------------------------------
# The Charge (charge.refunded events)


@dataclass(frozen=True)
class Charge:
    """A Stripe Charge, validated: the object of ``charge.refunded``."""

    id: str
    payment_intent: str
    livemode: bool | None
    amount_minor: int
    currency: str
    reference: str | None
    status: str
    amount_refunded: int

    def claim(self) -> Claim:
        """What it says about its PaymentIntent (the payment an attempt records)."""
        return Claim(provider_payment_id=self.payment_intent, reference=self.reference,
                     amount_minor=self.amount_minor, currency=self.currency, accounts=(),
                     livemodes=(self.livemode,) if self.livemode is not None else ())

    def to_outcome(self) -> ProviderOutcome:
        """A refunded charge is a payment that succeeded (the refund is recorded as such)."""
        if self.status == "succeeded":
            return ProviderOutcome.succeeded(self.payment_intent, self.amount_minor, self.currency,
                                             claim=self.claim())
        return ProviderOutcome.failed(self.status, provider_payment_id=self.payment_intent,
                                      provider_status=self.status, amount_minor=self.amount_minor,
                                      currency=self.currency, claim=self.claim())


def parse_charge(obj: Any) -> Charge | None:
    """A Charge naming its PaymentIntent, or ``None``."""
    common = _common_fields(obj, "ch_")
    if common is None or obj.get("object", "charge") != "charge":
        return None
    cid, amount, currency, livemode, reference = common
    intent, status, refunded = obj.get("payment_intent"), obj.get("status"), obj.get("amount_refunded", 0)
    if not isinstance(intent, str) or not intent.startswith("pi_"):
        return None
    if status not in ("succeeded", "pending", "failed"):
        return None
    if not _is_int(refunded) or not 0 <= refunded <= amount:
        return None
    return Charge(id=cid, payment_intent=intent, livemode=livemode, amount_minor=amount, currency=currency,
                  reference=reference, status=status, amount_refunded=refunded)


# ---------------------------------------------------------------------------
# After the payment: the Refund, and a PaymentIntent as a capture or cancel reads it


@dataclass(frozen=True)
class Refund:
    """A Stripe Refund, validated.

    :param payment_intent: The intent it refunds (``None`` for a refund made by charge only).
    :param livemode: Stripe's Refund object has no ``livemode``; kept when one is present.
    :param reference: ``metadata[paycore_reference]``: the refund operation's own reference.
    :param status: One of :data:`REFUND_STATUSES`.
    """

    id: str
    payment_intent: str | None
    livemode: bool | None
    amount_minor: int
    currency: str
    reference: str | None
    status: str
    failure_reason: str | None = None
    created: int = 0

    def claim(self) -> Claim:
        """What it says about itself. ``provider_payment_id`` stays ``None``: the claim's id is
        an attempt's payment, which the caller checks apart (``payment_intent``)."""
        return Claim(reference=self.reference, amount_minor=self.amount_minor, currency=self.currency,
                     accounts=(), livemodes=(self.livemode,) if self.livemode is not None else ())


def _object_id(value: Any, prefix: str) -> tuple[bool, str | None]:
    """An expandable field (an id, or the object with its ``id``), or ``None``; ``False`` when
    it is neither."""
    if value is None:
        return True, None
    if isinstance(value, dict):
        value = value.get("id")
    if isinstance(value, str) and value.startswith(prefix) and len(value) > len(prefix):
        return True, value
    return False, None


def parse_refund(obj: Any) -> Refund | None:
    """A Refund, or ``None`` when the JSON does not fit."""
    common = _common_fields(obj, "re_") or _common_fields(obj, "pyr_")
    if common is None or obj.get("object", "refund") != "refund":
        return None
    rid, amount, currency, livemode, reference = common
    ok_intent, intent = _object_id(obj.get("payment_intent"), "pi_")
    status, created = obj.get("status"), obj.get("created", 0)
    ok_failure, failure = _optional_str(obj, "failure_reason")
    if not ok_intent or not ok_failure or status not in REFUND_STATUSES or not _is_int(created):
        return None
    return Refund(id=rid, payment_intent=intent, livemode=livemode, amount_minor=amount, currency=currency,
                  reference=reference, status=status, failure_reason=failure, created=created)


@dataclass(frozen=True)
class HeldIntent:
    """A PaymentIntent as a capture or a cancel reads it: the intent, and what it says of its hold.

    :param capture_method: ``automatic``, ``automatic_async``, ``manual`` (a hold), …
    :param amount_received: What was captured (``None`` when the object does not say).
    :param latest_charge: The charge's id: a capture's own id (Stripe has no capture object).
    :param cancellation_reason: Why it was canceled: ``None`` or a merchant's reason for a
        cancel request, Stripe's own (``automatic``, ``abandoned``, …) otherwise.
    :param capture_reference: ``metadata[paycore_capture_reference]``: the capture that took it.
    """

    intent: PaymentIntent
    capture_method: str | None
    amount_received: int | None
    latest_charge: str | None
    cancellation_reason: str | None
    capture_reference: str | None

    def claim(self) -> Claim:
        """The intent's account and mode only: its reference and amount are the payment's."""
        return Claim(livemodes=self.intent.claim().livemodes)


def parse_held_intent(obj: Any) -> HeldIntent | None:
    """A PaymentIntent with its hold's fields, or ``None`` when the JSON does not fit."""
    intent = parse_intent(obj)
    if intent is None:
        return None
    ok_method, method = _optional_str(obj, "capture_method")
    ok_reason, reason = _optional_str(obj, "cancellation_reason")
    ok_charge, charge = _object_id(obj.get("latest_charge"), "ch_")
    received = obj.get("amount_received")
    metadata = obj.get("metadata")
    ok_ref, capture_reference = _optional_str(metadata, CAPTURE_REFERENCE_KEY) if isinstance(metadata, dict) \
        else (True, None)
    if not (ok_method and ok_reason and ok_charge and ok_ref):
        return None
    if received is not None and (not _is_int(received) or received < 0):
        return None
    return HeldIntent(intent=intent, capture_method=method, amount_received=received, latest_charge=charge,
                      cancellation_reason=reason, capture_reference=capture_reference)


# ---------------------------------------------------------------------------
# Bodies and errors


@dataclass(frozen=True)
class StripeErrorBody:
    """The ``error`` object of a Stripe error response (https://docs.stripe.com/api/errors)."""

    type: str | None
    code: str | None
    param: str | None
    decline_code: str | None
    payment_intent: Any  # the raw object, when the error involves a PaymentIntent


def parse_error(obj: Any) -> StripeErrorBody | None:
    """The error object, or ``None`` when the body is not a Stripe error."""
    if not isinstance(obj, dict) or not isinstance(obj.get("error"), dict):
        return None
    err = obj["error"]
    fields = [_optional_str(err, k) for k in ("type", "code", "param", "decline_code")]
    if not all(ok for ok, _ in fields):
        return None
    (_, type_), (_, code), (_, param), (_, decline) = fields
    return StripeErrorBody(type=type_, code=code, param=param or None, decline_code=decline,
                           payment_intent=err.get("payment_intent"))


@dataclass(frozen=True)
class SdkAnswer:
    """A response as the SDK handed it back (a success, or the parts of a ``StripeError``)."""

    status: int
    body: str | bytes | None
    headers: Mapping[str, str]


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """``Retry-After`` as delta-seconds, or ``None`` (Stripe sends no HTTP-dates)."""
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        seconds = float(raw.strip())
    except ValueError:
        return None
    return max(seconds, 0.0) if math.isfinite(seconds) else None


def header(headers: Mapping[str, str], name: str) -> str | None:
    """A header by case-insensitive name (the SDK hands back ``httpx.Headers`` or a plain dict)."""
    value = headers.get(name)
    if value is None:
        for k, v in headers.items():
            if k.lower() == name:
                return v
    return value


def is_replayed(headers: Mapping[str, str]) -> bool:
    """``Idempotent-Replayed: true``: Stripe answered a stored response for the key."""
    value = header(headers, "idempotent-replayed")
    return value is not None and value.strip().lower() == "true"

