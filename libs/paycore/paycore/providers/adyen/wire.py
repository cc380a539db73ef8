"""Adyen's wire (Checkout API v71): the ``/payments`` answer, error bodies and the headers we write.

The contract is ``docs/providers/adyen.md``; what it rests on is Adyen's own
documentation, cited where a rule comes from:

- result codes: https://docs.adyen.com/online-payments/payment-result-codes
- HTTP status codes: https://docs.adyen.com/development-resources/response-handling
- idempotency (``Idempotency-Key`` ≤ 64 characters, kept at least 31 days, the
  ``Transient-Error`` header, error code 704 "request already processed or in
  progress" answered with 422 or 409):
  https://docs.adyen.com/development-resources/api-idempotency

A body that does not fit parses to ``None`` (or :data:`UNREADABLE`), never to a guess.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import httpx

from paycore.domain import Claim, OutcomeKind, ProviderOutcome
from paycore.providers.adyen.provider import NAME as NAME  # re-exported
from paycore.providers.http import header_token
from paycore.providers.json_body import UNREADABLE as UNREADABLE  # re-exported: the client compares with it
from paycore.providers.json_body import Unreadable as Unreadable
from paycore.providers.json_body import is_int as _is_int
from paycore.providers.json_body import optional_str as _optional_str
from paycore.providers.json_body import read_json as read_json
from paycore.providers.package import ProviderAccountConfig

# Idempotency-Key: "a unique identifier for the message with a maximum of 64 characters".
MAX_IDEMPOTENCY_KEY_LEN: Final = 64

# Checkout API merchantReference: at most 80 characters.
MAX_REFERENCE_LEN: Final = 80

CURRENCY_RE: Final = re.compile(r"[A-Z]{3}")

# resultCode → what it says about the payment (result-codes page). Anything else
# (PartiallyAuthorised, AuthenticationFinished, …: flows paycore never asks for) is
# not understood, hence Unknown.
SUCCEEDED_CODES: Final = frozenset({"Authorised"})
# Refused: declined. Cancelled: "cancelled … before processing was completed. This is a
# final state". Error: "There was an error when the payment was being processed …
# This is a final state": the payment Adyen names by pspReference ended without a
# charge, so it is Failed, not Unknown (docs/decisions/0002-adyen-client.md).
FAILED_CODES: Final = frozenset({"Refused", "Cancelled", "Error"})
PROCESSING_CODES: Final = frozenset({"Pending", "Received"})
ACTION_CODES: Final = frozenset(
    {"RedirectShopper", "IdentifyShopper", "ChallengeShopper", "PresentToShopper"})
RESULT_CODES: Final = SUCCEEDED_CODES | FAILED_CODES | PROCESSING_CODES | ACTION_CODES

# "If you submit a duplicate request before the first request has completed, the API
# returns an HTTP 422 – Unprocessable Entity or HTTP 409 - Conflict status with the
# error code 704: request already processed or in progress" (api-idempotency). It is
# typed "validation", so it must be recognised before any validation rule applies.
IN_PROGRESS_CODES: Final = frozenset({"704"})


# ---------------------------------------------------------------------------
# The /payments answer


@dataclass(frozen=True)
class AdyenPayment:
    """A ``/payments`` answer, validated.

    :param psp_reference: Adyen's id of the payment (``pspReference``).
    :param result_code: One of :data:`RESULT_CODES`.
    :param merchant_reference: The ``merchantReference`` it names, when it does.
    :param amount_minor: ``amount.value``, when the answer carries an amount.
    :param currency: ``amount.currency``, when it does.
    :param merchant_account: ``merchantAccount``, when it does.
    :param refusal_reason_code: ``refusalReasonCode`` of a Refused or Error answer.
    :param action: The customer's next action, for the action result codes.
    """

    psp_reference: str
    result_code: str
    merchant_reference: str | None
    amount_minor: int | None
    currency: str | None
    merchant_account: str | None
    refusal_reason_code: str | None = None
    action: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.result_code not in RESULT_CODES:
            raise ValueError(f"unknown resultCode {self.result_code!r}")
        if self.result_code in ACTION_CODES and self.action is None:
            raise ValueError(f"{self.result_code} needs an action")

    def claim(self) -> Claim:
        """What this answer says about its payment, for :func:`paycore.evidence.judge`."""
        return Claim(provider_payment_id=self.psp_reference, reference=self.merchant_reference,
                     amount_minor=self.amount_minor, currency=self.currency,
                     accounts=(self.merchant_account,) if self.merchant_account is not None else ())

    def evidence(self) -> dict[str, Any]:
        """What was seen, for history and escalations: identifiers, never card data."""
        return {"psp_reference": self.psp_reference, "result_code": self.result_code,
                "merchant_reference": self.merchant_reference, "merchant_account": self.merchant_account,
                "amount_minor": self.amount_minor, "currency": self.currency}

    def to_outcome(self) -> ProviderOutcome:
        """What this answer says about the attempt.

        ==============================================  =======================================
        resultCode                                      outcome
        ==============================================  =======================================
        Authorised                                      ``succeeded``
        Refused                                         ``failed``, ``declined:<refusalReasonCode>``
        Error                                           ``failed``, ``error:<refusalReasonCode>``
        Cancelled                                       ``failed``, ``canceled``
        Pending, Received                               ``processing``
        RedirectShopper, IdentifyShopper,               ``requires_action`` with ``action``
        ChallengeShopper, PresentToShopper
        ==============================================  =======================================
        """
        claim = self.claim()
        common: dict[str, Any] = {"amount_minor": self.amount_minor, "currency": self.currency,
                                  "claim": claim, "provider_status": self.result_code}
        if self.result_code in SUCCEEDED_CODES:
            # Built directly: an answer need not carry the amount (ProviderOutcome.succeeded requires one).
            return ProviderOutcome(OutcomeKind.SUCCEEDED, provider_payment_id=self.psp_reference, **common)
        if self.result_code in PROCESSING_CODES:
            return ProviderOutcome.processing(self.psp_reference, **common)
        if self.result_code in ACTION_CODES:
            assert self.action is not None  # enforced by __post_init__
            return ProviderOutcome.requires_action(self.psp_reference, self.action, None, **common)
        code = self.refusal_reason_code or "unspecified"
        reason = {"Refused": f"declined:{code}", "Error": f"error:{code}"}.get(self.result_code, "canceled")
        return ProviderOutcome.failed(reason, provider_payment_id=self.psp_reference, **common)


def parse_payment(obj: Any) -> AdyenPayment | None:
    """A ``/payments`` answer, or ``None`` when the JSON does not fit.

    ``pspReference`` is required for every result code: an answer that names no
    payment cannot be evidence about one.
    """
    if not isinstance(obj, dict):
        return None
    psp, result_code = obj.get("pspReference"), obj.get("resultCode")
    if not isinstance(psp, str) or not psp.strip():
        return None
    if not isinstance(result_code, str) or result_code not in RESULT_CODES:
        return None
    oks = [_optional_str(obj, k) for k in ("merchantReference", "merchantAccount", "refusalReasonCode")]
    if not all(ok for ok, _ in oks):
        return None
    (_, reference), (_, merchant_account), (_, refusal_code) = oks
    amount_minor: int | None = None
    currency: str | None = None
    amount = obj.get("amount")
    if amount is not None:
        if not isinstance(amount, dict):
            return None
        value, cur = amount.get("value"), amount.get("currency")
        if not _is_int(value) or value < 0 or not isinstance(cur, str) or not CURRENCY_RE.fullmatch(cur):
            return None
        amount_minor, currency = value, cur
    action = obj.get("action")
    if action is not None and not isinstance(action, dict):
        return None
    if result_code in ACTION_CODES and action is None:
        return None
    return AdyenPayment(
        psp_reference=psp, result_code=result_code, merchant_reference=reference, amount_minor=amount_minor,
        currency=currency, merchant_account=merchant_account, refusal_reason_code=refusal_code,
        action=action if result_code in ACTION_CODES else None,
    )


@dataclass(frozen=True)
class AdyenError:
    """An Adyen error body: ``{"status", "errorCode", "message", "errorType", "pspReference"?}``."""

    error_code: str
    error_type: str | None
    message: str

    @property
    def in_progress(self) -> bool:
        return self.error_code in IN_PROGRESS_CODES

    @property
    def about_idempotency(self) -> bool:
        """The key is in use, or used for another request: never a rejection of this request alone."""
        return self.in_progress or "idempotency" in self.message.lower()


def parse_error(obj: Any) -> AdyenError | None:
    """The error body, or ``None`` when it is not one."""
    if not isinstance(obj, dict):
        return None
    code, type_, message = obj.get("errorCode"), obj.get("errorType"), obj.get("message", "")
    if not isinstance(code, str) or not code or not (type_ is None or isinstance(type_, str)):
        return None
    if not isinstance(message, str):
        return None
    return AdyenError(code, type_, message)


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """``Retry-After`` as delta-seconds, or ``None`` (Adyen documents no HTTP-date form)."""
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        seconds = float(raw.strip())
    except ValueError:
        return None
    return max(seconds, 0.0) if math.isfinite(seconds) else None


def is_transient(response: httpx.Response) -> bool:
    """``Transient-Error: true``: Adyen asks for a resend with the same key (api-idempotency)."""
    value: str = response.headers.get("transient-error", "")
    return value.strip().lower() == "true"


# ---------------------------------------------------------------------------
# The modifications' answer (refunds, captures, cancels)

# What a modification endpoint answers (201): the request was received, never its outcome,
# which only a notification tells (https://docs.adyen.com/online-payments/refund,
# .../capture, .../cancel).
RECEIVED: Final = "received"


@dataclass(frozen=True)
class AdyenModification:
    """A ``/payments/{pspReference}/{refunds|captures|cancels}`` answer, validated.

    :param psp_reference: The modification's own ``pspReference``.
    :param payment_psp_reference: ``paymentPspReference``: the payment it modifies.
    :param status: ``status`` as answered (Adyen documents ``received`` only).
    :param reference: The ``reference`` it names, when it does.
    :param merchant_account: ``merchantAccount``, when it says.
    :param amount_minor: ``amount.value`` (a refund's or capture's; a cancel has none).
    :param currency: ``amount.currency``.
    """

    psp_reference: str
    payment_psp_reference: str
    status: str
    reference: str | None
    merchant_account: str | None
    amount_minor: int | None
    currency: str | None

    def claim(self) -> Claim:
        """What it says about the operation, for :func:`paycore.evidence.judge` (the payment it names
        is checked apart: the claim's id is an attempt's payment)."""
        return Claim(reference=self.reference, amount_minor=self.amount_minor, currency=self.currency,
                     accounts=(self.merchant_account,) if self.merchant_account is not None else ())

    def evidence(self) -> dict[str, Any]:
        """What was seen, for history and escalations: identifiers only."""
        return {"psp_reference": self.psp_reference, "payment_psp_reference": self.payment_psp_reference,
                "status": self.status, "reference": self.reference, "merchant_account": self.merchant_account,
                "amount_minor": self.amount_minor, "currency": self.currency}


def parse_modification(obj: Any) -> AdyenModification | None:
    """A modification answer, or ``None`` when the JSON does not fit: both pspReferences and the
    status are required (an answer that names no modification and no payment is evidence of
    nothing); ``amount`` is optional here, each caller says whether it needs one."""
    if not isinstance(obj, dict):
        return None
    psp, payment, status = obj.get("pspReference"), obj.get("paymentPspReference"), obj.get("status")
    if not (isinstance(psp, str) and psp.strip() and isinstance(payment, str) and payment.strip()
            and isinstance(status, str) and status):
        return None
    oks = [_optional_str(obj, k) for k in ("reference", "merchantAccount")]
    if not all(ok for ok, _ in oks):
        return None
    (_, reference), (_, merchant_account) = oks
    amount_minor: int | None = None
    currency: str | None = None
    amount = obj.get("amount")
    if amount is not None:
        if not isinstance(amount, dict):
            return None
        value, cur = amount.get("value"), amount.get("currency")
        if not _is_int(value) or value < 0 or not isinstance(cur, str) or not CURRENCY_RE.fullmatch(cur):
            return None
        amount_minor, currency = value, cur
    return AdyenModification(psp_reference=psp, payment_psp_reference=payment, status=status,
                             reference=reference, merchant_account=merchant_account,
                             amount_minor=amount_minor, currency=currency)


# ---------------------------------------------------------------------------
# Headers we write, from configured values


def auth_headers(acct: ProviderAccountConfig) -> dict[str, str]:
    """Credentials for ``acct``, read from configuration now (``X-API-Key``)."""
    return {"X-API-Key": header_token(acct.api_key.reveal())}
