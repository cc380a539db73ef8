"""Stripe's PaymentIntents wire, as data: test payment methods, objects, events,
errors, webhook signatures, form bodies and search queries.

Pure functions over the core payment (:class:`paycore_sandbox.ledger.Payment`);
the HTTP handlers are in :mod:`paycore_sandbox.dialects.stripe_api`.

Core status → PaymentIntent ``status``: ``succeeded``, ``processing`` and
``requires_action`` as they are; ``declined`` (a card decline) and ``failed``
(3-D Secure failed or abandoned) → ``requires_payment_method`` with a
``last_payment_error``; ``canceled`` (the customer action expired) →
``canceled`` with ``cancellation_reason: abandoned``.

After the payment (``capture_method=manual``): a hold (``requires_capture``) is
``requires_capture`` with ``amount_capturable``; while a capture of it is pending
(the core's ``amount_capturable`` 0) ``processing``; once captured ``succeeded`` with
``amount_received`` the captured amount; a hold canceled by request is ``canceled``
with the request's ``cancellation_reason`` (``null`` without one), one that lapsed
``canceled`` with ``automatic``. A refund is the core's refund (a movement) as
Stripe's Refund object (:func:`render_refund`).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from typing import Any
from urllib.parse import parse_qsl

from paycore_sandbox.errors import ApiError, FaultAnswers
from paycore_sandbox.ledger import Payment
from paycore_sandbox.tokens import Outcome

NAME = "stripe"
# The SDK's pinned version (stripe==16.1.0), answered when a request sends none.
DEFAULT_API_VERSION = "2026-10-28.endive"
MAX_KEY_LENGTH = 255  # Stripe: "Idempotency keys are up to 255 characters long"
WEBHOOK_USER_AGENT = "Stripe/1.0 (+https://stripe.com/docs/webhooks)"

# Stripe's documented test PaymentMethods, plus one sandbox-only asynchronous
# token (``pm_card_async``: processing, then succeeded after ``async_delay_s``).
# A declined create answers 402; the decline code here is Stripe's.
TOKENS: dict[str, Outcome] = {
    "pm_card_visa": Outcome("succeeded", 200),
    "pm_card_chargeDeclined": Outcome("declined", 402, "generic_decline"),
    "pm_card_chargeDeclinedInsufficientFunds": Outcome("declined", 402, "insufficient_funds"),
    "pm_card_chargeDeclinedExpiredCard": Outcome("declined", 402, "expired_card"),
    "pm_card_threeDSecure2Required": Outcome("requires_action", 200),
    "pm_card_async": Outcome("processing", 200),
}

_DECLINE_MESSAGES = {
    "generic_decline": "Your card was declined.",
    "insufficient_funds": "Your card has insufficient funds.",
    "expired_card": "Your card has expired.",
}
_AUTHENTICATION_FAILURE = (
    "The provided PaymentMethod has failed authentication. You can provide "
    "payment_method_data or a new PaymentMethod to attempt to fulfill this "
    "PaymentIntent again.")
_INTENT_STATUS = {
    "succeeded": "succeeded", "processing": "processing",
    "requires_action": "requires_action", "declined": "requires_payment_method",
    "failed": "requires_payment_method", "canceled": "canceled",
    "requires_capture": "requires_capture",
}
# Set by a cancel request on the payment's dialect_data: why it was canceled (None: no reason).
CANCELED_BY_REQUEST = "canceled_by_request"
CANCELLATION_REASON = "cancellation_reason"
# Core event type → Stripe event type.
EVENT_TYPES = {
    "payment.succeeded": "payment_intent.succeeded",
    "payment.processing": "payment_intent.processing",
    "payment.requires_action": "payment_intent.requires_action",
    "payment.declined": "payment_intent.payment_failed",
    "payment.failed": "payment_intent.payment_failed",
    "payment.canceled": "payment_intent.canceled",
    "payment.refunded": "charge.refunded",
    # A hold placed (capture_method=manual): Stripe's event for amount_capturable changing.
    "payment.requires_capture": "payment_intent.amount_capturable_updated",
}


# -- objects -------------------------------------------------------------------

def _suffix(payment: Payment) -> str:
    return payment.id.removeprefix("pi_")


def charge_id(payment: Payment) -> str:
    return "ch_" + _suffix(payment)


def payment_method_id(payment: Payment) -> str:
    # Stripe turns a test token (pm_card_visa) into a fresh PaymentMethod id.
    return "pm_" + _suffix(payment)


def _has_charge(payment: Payment) -> bool:
    # A hold is an authorised, uncaptured charge, and stays one when it is canceled.
    return payment.status in ("succeeded", "processing", "declined", "requires_capture") \
        or (payment.status == "canceled" and payment.capture == "manual")


def intent_status(payment: Payment) -> str:
    """The intent's status: the core's, and ``processing`` while a capture of the hold is pending
    (the capture took ``amount_capturable``)."""
    if payment.status == "requires_capture" and payment.amount_capturable == 0:
        return "processing"
    return _INTENT_STATUS[payment.status]


def cancellation_reason(payment: Payment) -> str | None:
    if payment.status != "canceled":
        return None
    if CANCELED_BY_REQUEST in payment.dialect_data:
        reason: str | None = payment.dialect_data.get(CANCELLATION_REASON)
        return reason
    # Stripe's own: a hold that lapsed, or a customer action that expired.
    return "automatic" if payment.capture == "manual" else "abandoned"


def last_payment_error(payment: Payment) -> dict[str, Any] | None:
    if payment.status == "declined":
        decline = payment.decline_code or "generic_decline"
        return {"type": "card_error",
                "code": "expired_card" if decline == "expired_card" else "card_declined",
                "decline_code": decline, "message": _DECLINE_MESSAGES.get(decline,
                                                                          "Your card was declined."),
                "charge": charge_id(payment),
                "payment_method": {"id": payment_method_id(payment),
                                   "object": "payment_method", "type": "card"}}
    if payment.status == "failed":
        return {"type": "invalid_request_error",
                "code": "payment_intent_authentication_failure",
                "message": _AUTHENTICATION_FAILURE,
                "payment_method": {"id": payment_method_id(payment),
                                   "object": "payment_method", "type": "card"}}
    return None


def next_action(payment: Payment) -> dict[str, Any] | None:
    if payment.status != "requires_action":
        return None
    url = f"https://hooks.sandbox.stripe.test/3d_secure_2/authenticate/{payment.id}"
    if payment.return_url:
        return {"type": "redirect_to_url",
                "redirect_to_url": {"url": url, "return_url": payment.return_url}}
    return {"type": "use_stripe_sdk",
            "use_stripe_sdk": {"type": "three_d_secure_redirect", "stripe_js": url}}


def render_intent(payment: Payment) -> dict[str, Any]:
    """The PaymentIntent object for a payment of the Stripe dialect."""
    data = payment.dialect_data
    status = intent_status(payment)
    secret = hashlib.sha256(f"client-secret:{payment.id}".encode()).hexdigest()[:24]
    return {
        "id": payment.id, "object": "payment_intent", "amount": payment.amount,
        "amount_capturable": payment.amount_capturable if status == "requires_capture" else 0,
        "amount_received": payment.amount_captured if status == "succeeded" else 0,
        "automatic_payment_methods": data.get("automatic_payment_methods"),
        "canceled_at": None,
        "cancellation_reason": cancellation_reason(payment),
        "capture_method": payment.capture, "client_secret": f"{payment.id}_secret_{secret}",
        "confirmation_method": "automatic", "created": payment.created,
        "currency": payment.currency.lower(), "customer": None,
        "description": payment.description,
        "last_payment_error": last_payment_error(payment),
        "latest_charge": charge_id(payment) if _has_charge(payment) else None,
        "livemode": payment.livemode, "metadata": dict(data.get("metadata", {})),
        "next_action": next_action(payment),
        "payment_method": None if status == "requires_payment_method"
        else payment_method_id(payment),
        "payment_method_types": list(data.get("payment_method_types", ["card"])),
        "status": status,
    }


def render_charge(payment: Payment) -> dict[str, Any]:
    """The Charge of a succeeded intent (``charge.refunded`` carries it)."""
    return {
        "id": charge_id(payment), "object": "charge", "amount": payment.amount,
        "amount_captured": payment.amount_captured, "amount_refunded": payment.amount_refunded,
        "captured": True, "created": payment.created, "currency": payment.currency.lower(),
        "livemode": payment.livemode,
        "metadata": dict(payment.dialect_data.get("metadata", {})), "paid": True,
        "payment_intent": payment.id, "payment_method": payment_method_id(payment),
        "refunded": payment.amount_refunded >= payment.amount, "status": "succeeded",
    }


def render_event(payment: Payment, core_type: str) -> tuple[str, dict[str, Any]]:
    wire_type = EVENT_TYPES[core_type]
    data = render_charge(payment) if wire_type == "charge.refunded" else render_intent(payment)
    return wire_type, data


def render_refund(refund: dict[str, Any], *, reason: str | None = None,
                  metadata: dict[str, str] | None = None) -> dict[str, Any]:
    """Stripe's Refund object for a core refund, from its public (contract) object: what the
    API answers (with the request's ``reason`` and ``metadata``), and what a webhook carries (the
    event's snapshot: ``metadata`` is then the refund's reference alone, ``reason`` null)."""
    if metadata is None:
        metadata = {"paycore_reference": refund["reference"]} if refund["reference"] else {}
    intent = str(refund["payment"])
    return {
        "id": refund["id"], "object": "refund", "amount": refund["amount"],
        "balance_transaction": None, "charge": "ch_" + intent.removeprefix("pi_"),
        "created": refund["created"], "currency": str(refund["currency"]).lower(),
        "failure_reason": refund["failure_reason"] if refund["status"] == "failed" else None,
        "metadata": dict(metadata), "payment_intent": intent, "reason": reason,
        "receipt_number": None, "status": refund["status"],
    }


def refund_event_type(core_type: str, sequence: int) -> str:
    """A core ``refund.<status>`` event's Stripe type: its first is ``refund.created`` (whatever its
    status), a failure ``refund.failed``, any other change ``refund.updated``."""
    if sequence == 1:
        return "refund.created"
    return "refund.failed" if core_type == "refund.failed" else "refund.updated"


# -- webhook signatures ------------------------------------------------------------

def signature(secret: str, timestamp: int, body: bytes) -> str:
    """Stripe's ``v1``: HMAC-SHA256, keyed with the whole ``whsec_`` string,
    over ``"<timestamp>." + body``, hex."""
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body,
                    hashlib.sha256).hexdigest()


def signature_header(secret: str, timestamp: int, body: bytes) -> str:
    return f"t={timestamp},v1={signature(secret, timestamp, body)}"


# -- errors ------------------------------------------------------------------------

def invalid_request(message: str, *, param: str | None = None,
                    code: str = "parameter_invalid", status: int = 400) -> ApiError:
    return ApiError(status, "invalid_request_error", code, message, param=param)


def unknown_parameter(name: str) -> ApiError:
    return invalid_request(f"Received unknown parameter: {name}", param=name,
                           code="parameter_unknown")


def missing_parameter(name: str) -> ApiError:
    return invalid_request(f"Missing required param: {name}.", param=name,
                           code="parameter_missing")


def unauthorized(message: str) -> ApiError:
    return invalid_request(message, code="api_key_invalid", status=401)


def resource_missing(kind: str, value: str, param: str, *, status: int = 404) -> ApiError:
    """404 for the object a path names; 400 for one a parameter names."""
    return invalid_request(f"No such {kind}: '{value}'", param=param,
                           code="resource_missing", status=status)


def idempotency_mismatch(key: str) -> ApiError:
    return ApiError(400, "idempotency_error", "idempotency_error",
                    "Keys for idempotent requests can only be used with the same parameters "
                    f"they were first used with. Try using a key other than '{key}' if you "
                    "meant to execute a different request.")


def idempotency_in_use() -> ApiError:
    return invalid_request(
        "There is currently another in-progress request using this Idempotent Key "
        "(that probably means you submitted twice, and the other request is still "
        "going through). Please retry that request in a few seconds.",
        code="idempotency_key_in_use", status=409)


def unexpected_state(payment: Payment, message: str) -> ApiError:
    """400 for an operation the intent's status does not allow; the error carries the intent."""
    return ApiError(400, "invalid_request_error", "payment_intent_unexpected_state", message,
                    extra={"payment_intent": render_intent(payment)})


def card_error(payment: Payment) -> ApiError:
    """402 for a declined confirmation: the error carries the intent, now in
    ``requires_payment_method``."""
    error = last_payment_error(payment)
    assert error is not None
    return ApiError(402, "card_error", error["code"], error["message"],
                    extra={"decline_code": error["decline_code"], "charge": error["charge"],
                           "payment_intent": render_intent(payment),
                           "payment_method": error["payment_method"]})


def not_processed() -> ApiError:
    return ApiError(503, "api_error", "not_processed",
                    "The request was not processed; it is safe to retry.",
                    headers={"Retry-After": "1", "Stripe-Should-Retry": "true"})


def rate_limited(retry_after_s: int) -> ApiError:
    return ApiError(429, "invalid_request_error", "rate_limit",
                    "Request rate limit exceeded. Learn more about rate limits here "
                    "https://stripe.com/docs/rate-limits.",
                    headers={"Retry-After": str(max(1, retry_after_s))})


def internal() -> ApiError:
    return ApiError(500, "api_error", "api_error",
                    "An unknown error occurred; the PaymentIntent may or may not exist.")


ANSWERS = FaultAnswers(not_processed, rate_limited, internal)


# -- form bodies -----------------------------------------------------------------

_NAME = re.compile(r"([A-Za-z0-9_]+)((?:\[[^\[\]]*\])*)")
_INDEX = re.compile(r"\[([^\[\]]*)\]")


def decode_form(raw: bytes) -> dict[str, Any] | None:
    """Stripe's form encoding (``metadata[k]=v``, ``payment_method_types[]=card``,
    ``list[0]=x``) as nested dicts and lists; ``None`` if it is not a form."""
    try:
        pairs = parse_qsl(raw.decode("utf-8"), keep_blank_values=True, strict_parsing=True) \
            if raw else []
    except (UnicodeDecodeError, ValueError):
        return None
    out: dict[str, Any] = {}
    for name, value in pairs:
        match = _NAME.fullmatch(name)
        if match is None:
            return None
        if not _insert(out, [match[1], *_INDEX.findall(match[2])], value):
            return None
    return out


def _insert(into: dict[str, Any], parts: list[str], value: str) -> bool:
    head, rest = parts[0], parts[1:]
    if not rest:
        if head in into:
            return False  # a scalar given twice is ambiguous
        into[head] = value
        return True
    if rest[0] == "" or rest[0].isdigit():  # a list
        items = into.setdefault(head, [])
        if not isinstance(items, list) or len(rest) > 1:
            return False
        items.append(value)
        return True
    child = into.setdefault(head, {})
    return isinstance(child, dict) and _insert(child, rest, value)


def reference_in(params: Any) -> str | None:
    """``metadata[paycore_reference]``, if present (fault matching, before validation)."""
    if isinstance(params, dict) and isinstance(params.get("metadata"), dict):
        ref = params["metadata"].get("paycore_reference")
        if isinstance(ref, str) and ref:
            return ref
    return None


# -- search queries ----------------------------------------------------------------

_CLAUSE = re.compile(
    r"""\s*(?:metadata\[(?P<kq>['"])(?P<key>[^'"\[\]]+)(?P=kq)\]|(?P<field>[a-z_]+))"""
    r"""\s*:\s*(?P<q>['"])(?P<value>(?:\\.|(?!(?P=q)).)*)(?P=q)\s*""")
SEARCH_FIELDS = frozenset({"status", "currency"})


def parse_query(query: str) -> list[tuple[str, str]]:
    """``metadata['k']:'v'`` / ``status:'succeeded'`` / ``currency:'eur'`` clauses
    joined by ``AND`` → ``[(field, value)]`` (metadata fields as ``metadata.k``)."""
    clauses: list[tuple[str, str]] = []
    rest = query
    while True:
        match = _CLAUSE.match(rest)
        if match is None:
            raise invalid_request(f"Invalid or unsupported search query: {query!r}.",
                                  param="query")
        if match["field"] is not None and match["field"] not in SEARCH_FIELDS:
            raise invalid_request(f"Field '{match['field']}' is an unsupported search "
                                  "field for this resource.", param="query")
        field = f"metadata.{match['key']}" if match["key"] is not None else str(match["field"])
        clauses.append((field, re.sub(r"\\(.)", r"\1", match["value"])))
        rest = rest[match.end():]
        if not rest:
            return clauses
        if not rest.startswith("AND "):
            raise invalid_request(f"Invalid or unsupported search query: {query!r}.",
                                  param="query")
        rest = rest[4:]


def matches(intent: dict[str, Any], clauses: list[tuple[str, str]]) -> bool:
    for field, value in clauses:
        if field.startswith("metadata."):
            if intent["metadata"].get(field.removeprefix("metadata.")) != value:
                return False
        elif str(intent[field]) != value:
            return False
    return True
