"""Validation of ``POST /v1`` bodies (before anything executes).

A rejection here is a 400 ``parameter_invalid``: nothing is created and the
idempotency key is not stored, so the caller may fix the body and reuse it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from paycore_sandbox.errors import invalid_param
from paycore_sandbox.ledger import CaptureMode
from paycore_sandbox.tokens import Outcome, outcome_for

MAX_REFERENCE = 64
MAX_REASON = 200
ALLOWED_FIELDS = ("amount", "currency", "payment_method", "reference", "description",
                  "return_url", "capture")
CAPTURE_MODES: tuple[CaptureMode, ...] = ("automatic", "manual")
_CURRENCY = re.compile(r"[A-Z]{3}")


@dataclass(frozen=True)
class CreateRequest:
    amount: int
    currency: str
    payment_method: str
    reference: str
    description: str | None
    return_url: str | None
    outcome: Outcome
    capture: CaptureMode = "automatic"


def parse_json(raw: bytes) -> Any:
    """The decoded body, or ``None`` when it is not JSON at all."""
    try:
        return orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        return None


def validate_create(body: Any) -> CreateRequest:
    body = _object_of(body, ALLOWED_FIELDS)
    amount = _amount(body)
    currency = body.get("currency")
    if not isinstance(currency, str) or not _CURRENCY.fullmatch(currency):
        raise invalid_param("currency", "currency must be three upper-case letters.")
    payment_method = body.get("payment_method")
    if not isinstance(payment_method, str) or not payment_method:
        raise invalid_param("payment_method", "payment_method must be a non-empty string.")
    reference = _reference(body)
    description = _optional_str(body, "description")
    return_url = _optional_str(body, "return_url")
    capture = body.get("capture", "automatic")
    if capture not in CAPTURE_MODES:
        raise invalid_param("capture", "capture must be 'automatic' or 'manual'.")
    outcome = outcome_for(payment_method)
    return CreateRequest(amount, currency, payment_method, reference, description,
                         return_url, outcome, capture)


@dataclass(frozen=True)
class CaptureRequest:
    payment: str  # from the path
    amount: int
    reference: str


@dataclass(frozen=True)
class CancelRequest:
    payment: str  # from the path
    reference: str


@dataclass(frozen=True)
class RefundRequest:
    payment: str
    amount: int | None  # None: all that is still refundable
    reference: str
    reason: str | None


def validate_capture(payment_id: str, body: Any) -> CaptureRequest:
    # The amount is required: unlike a refund's, the contract gives it no default.
    body = _object_of(body, ("amount", "reference"))
    return CaptureRequest(payment_id, _amount(body), _reference(body))


def validate_cancel(payment_id: str, body: Any) -> CancelRequest:
    return CancelRequest(payment_id, _reference(_object_of(body, ("reference",))))


def validate_refund(body: Any) -> RefundRequest:
    body = _object_of(body, ("payment", "amount", "reference", "reason"))
    payment = body.get("payment")
    if not isinstance(payment, str) or not payment:
        raise invalid_param("payment", "payment is required: the id of the payment to refund.")
    amount = _amount(body) if "amount" in body else None
    reference = _reference(body)
    reason = _optional_str(body, "reason")
    if reason is not None and len(reason) > MAX_REASON:
        raise invalid_param("reason", f"reason must be at most {MAX_REASON} characters.")
    return RefundRequest(payment, amount, reference, reason)


def _object_of(body: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise invalid_param(None, "The request body must be a JSON object.")
    for name in body:
        if name not in allowed:
            raise invalid_param(name, f"Unknown parameter {name!r}.")
    return body


def _amount(body: dict[str, Any]) -> int:
    amount = body.get("amount")
    # bool is an int subclass in Python; JSON true is not an amount.
    if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
        raise invalid_param("amount", "amount must be a positive integer in minor units.")
    return amount


def _reference(body: dict[str, Any]) -> str:
    reference = body.get("reference")
    if not isinstance(reference, str) or not reference or len(reference) > MAX_REFERENCE:
        raise invalid_param("reference",
                            f"reference is required: a string of 1 to {MAX_REFERENCE} "
                            "characters.")
    return reference


def _optional_str(body: dict[str, Any], name: str) -> str | None:
    if name not in body:
        return None
    value = body[name]
    if not isinstance(value, str):
        raise invalid_param(name, f"{name} must be a string.")
    return value


def reference_of(body: Any) -> str | None:
    """Best-effort reference for fault matching, before validation."""
    if isinstance(body, dict):
        ref = body.get("reference")
        if isinstance(ref, str):
            return ref
    return None
