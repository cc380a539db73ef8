"""Validation of ``POST /v1/payments`` bodies (before anything executes).

A rejection here is a 400 ``parameter_invalid``: no payment is created and the
idempotency key is not stored, so the caller may fix the body and reuse it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from paycore_sandbox.errors import invalid_param
from paycore_sandbox.tokens import Outcome, outcome_for

MAX_REFERENCE = 64
ALLOWED_FIELDS = ("amount", "currency", "payment_method", "reference", "description",
                  "return_url")
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


def parse_json(raw: bytes) -> Any:
    """The decoded body, or ``None`` when it is not JSON at all."""
    try:
        return orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        return None


def validate_create(body: Any) -> CreateRequest:
    if not isinstance(body, dict):
        raise invalid_param(None, "The request body must be a JSON object.")
    for name in body:
        if name not in ALLOWED_FIELDS:
            raise invalid_param(name, f"Unknown parameter {name!r}.")
    amount = body.get("amount")
    # bool is an int subclass in Python; JSON true is not an amount.
    if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
        raise invalid_param("amount", "amount must be a positive integer in minor units.")
    currency = body.get("currency")
    if not isinstance(currency, str) or not _CURRENCY.fullmatch(currency):
        raise invalid_param("currency", "currency must be three upper-case letters.")
    payment_method = body.get("payment_method")
    if not isinstance(payment_method, str) or not payment_method:
        raise invalid_param("payment_method", "payment_method must be a non-empty string.")
    reference = body.get("reference")
    if not isinstance(reference, str) or not reference or len(reference) > MAX_REFERENCE:
        raise invalid_param("reference",
                            f"reference is required: a string of 1 to {MAX_REFERENCE} "
                            "characters.")
    description = _optional_str(body, "description")
    return_url = _optional_str(body, "return_url")
    outcome = outcome_for(payment_method)
    return CreateRequest(amount, currency, payment_method, reference, description,
                         return_url, outcome)


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
