"""The Adyen dialect's wire: error shapes, request validation, ``/payments`` and modification answers.

Error codes are Adyen's where its documentation names them (000 unauthorised
or generic, 901 invalid merchant account, 704 idempotency, 702 unparseable
body, 100/137 amount, 101 invalid card number, 129 expiry date, 130 required
field, 167 original pspReference); see :mod:`paycore_sandbox.dialects.adyen` for
when each is answered.
"""

from __future__ import annotations

import base64
import re
import secrets
import string
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.responses import Response

from paycore_sandbox.dialects.adyen_webhooks import AUTHENTICATION_FAILED, refusal
from paycore_sandbox.faults import RequestOperation
from paycore_sandbox.ledger import CaptureMode, Payment
from paycore_sandbox.settings import SandboxAccount
from paycore_sandbox.tokens import OUTCOMES, REJECTED
from paycore_sandbox.validation import CreateRequest

NAME = "adyen"
API_VERSION = "v71"
PAYMENTS_PATH = f"/{API_VERSION}/payments"
KEY_RETENTION_S = 31 * 86_400
MAX_KEY_LENGTH = 64
MAX_REFERENCE = 80
_CURRENCY = re.compile(r"[A-Z]{3}")
_PSP_ALPHABET = string.ascii_uppercase + string.digits


def new_psp_reference() -> str:
    """A payment's pspReference: 16 upper-case letters and digits, like Adyen's."""
    return "".join(secrets.choice(_PSP_ALPHABET) for _ in range(16))


class AdyenError(Exception):
    """An Adyen error answer (``transient``: with ``Transient-Error: true``)."""

    def __init__(self, status: int, error_code: str, message: str, error_type: str, *,
                 transient: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message
        self.error_type = error_type
        self.transient = transient

    def response(self, key: str | None = None) -> Response:
        psp = new_psp_reference()
        body = {"status": self.status, "errorCode": self.error_code, "message": self.message,
                "errorType": self.error_type, "pspReference": psp}
        headers = {"pspReference": psp}
        if self.transient:
            headers["Transient-Error"] = "true"
        if key is not None:
            headers["Idempotency-Key"] = key
        return Response(orjson.dumps(body), status_code=self.status, headers=headers,
                        media_type="application/json")


def _required(field: str) -> AdyenError:
    return AdyenError(422, "130", f"Required field '{field}' is not provided.", "validation")


UNAUTHORIZED = AdyenError(401, "000", "HTTP Status Response - Unauthorized", "security")
INVALID_MERCHANT = AdyenError(403, "901", "Invalid Merchant Account", "security")
IN_PROGRESS = AdyenError(409, "704", "request already processed or in progress", "validation",
                         transient=True)
KEY_REUSED = AdyenError(422, "704", "request already processed or in progress: this "
                        "Idempotency-Key was used for a different request", "validation")
INTERNAL = AdyenError(500, "000", "An internal error occurred; the payment may or may not "
                      "have been processed.", "internal")
NOT_PROCESSED = AdyenError(503, "000", "Service unavailable; the request was not processed.",
                           "internal", transient=True)
RATE_LIMITED = AdyenError(429, "000", "Too many requests.", "validation")
# A modification of a payment this merchant account does not have (nothing is stored).
UNKNOWN_PAYMENT = AdyenError(422, "167", "Original pspReference is invalid for this environment!",
                             "validation")


# -- validation ------------------------------------------------------------------

@dataclass(frozen=True)
class AdyenCreate:
    request: CreateRequest
    native_3ds: bool


def parse_key(raw: str | None) -> str | None:
    if raw is None:
        return None
    key = raw.strip()
    if not key or len(key) > MAX_KEY_LENGTH:
        raise AdyenError(422, "000", f"Idempotency-Key must be 1 to {MAX_KEY_LENGTH} "
                         "characters.", "validation")
    return key


def validate(body: Any) -> AdyenCreate:
    if not isinstance(body, dict):
        raise AdyenError(422, "702", "The request body is not a JSON object.", "validation")
    if not isinstance(body.get("merchantAccount"), str) or not body["merchantAccount"]:
        raise _required("merchantAccount")
    amount = body.get("amount")
    if amount is None:
        raise AdyenError(422, "100", "No amount specified", "validation")
    value = amount.get("value") if isinstance(amount, dict) else None
    currency = amount.get("currency") if isinstance(amount, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 \
            or not isinstance(currency, str) or not _CURRENCY.fullmatch(currency):
        raise AdyenError(422, "137", "Invalid amount specified", "validation")
    reference = body.get("reference")
    if not isinstance(reference, str) or not reference or len(reference) > MAX_REFERENCE:
        raise _required("reference")
    method = body.get("paymentMethod")
    if not isinstance(method, dict) or not isinstance(method.get("type"), str):
        raise _required("paymentMethod")
    token = method.get("encryptedCardNumber")
    if not isinstance(token, str) or not token:
        raise _required("paymentMethod.encryptedCardNumber")
    if token in REJECTED:
        raise AdyenError(422, "129", "Expiry Date Invalid", "validation")
    outcome = OUTCOMES.get(token)
    if outcome is None:
        # Never echoed: the field could hold anything a storefront sent.
        raise AdyenError(422, "101", "Invalid card number", "validation")
    return_url = body.get("returnUrl")
    if not isinstance(return_url, str) or not return_url:
        raise _required("returnUrl")
    request = CreateRequest(value, currency, token, reference, None, return_url, outcome,
                            _capture_mode(body))
    auth = body.get("authenticationData")
    three_ds = auth.get("threeDSRequestData") if isinstance(auth, dict) else None
    native = isinstance(three_ds, dict) and three_ds.get("nativeThreeDS") == "preferred"
    return AdyenCreate(request, native)


def _capture_mode(body: dict[str, Any]) -> CaptureMode:
    """``manual`` (authorised and held, not captured) when the request delays or switches off
    the automatic capture: ``captureDelayHours`` above 0 (the sandbox never runs the delayed
    capture itself: the hold waits for a ``/captures`` or lapses) or
    ``additionalData.manualCapture: "true"``."""
    delay = body.get("captureDelayHours")
    if delay is not None and (isinstance(delay, bool) or not isinstance(delay, int) or delay < 0):
        raise AdyenError(422, "000", "captureDelayHours must be a non-negative integer.",
                         "validation")
    extra = body.get("additionalData")
    manual = isinstance(extra, dict) and extra.get("manualCapture") in ("true", True)
    return "manual" if manual or (delay or 0) > 0 else "automatic"


# -- modifications ---------------------------------------------------------------

# The path segment of each modification under /v71/payments/{pspReference}/, and the
# operation its fault rules match.
MODIFICATIONS: dict[str, RequestOperation] = {"refunds": "refund", "captures": "capture",
                                               "cancels": "cancel"}
RECEIVED = "received"


@dataclass(frozen=True)
class AdyenModification:
    """A validated refund, capture or cancel request (a cancel has no amount)."""

    operation: RequestOperation
    amount: int | None
    currency: str | None
    reference: str


def validate_modification(operation: RequestOperation, body: Any) -> AdyenModification:
    """The body of ``POST /v71/payments/{pspReference}/{refunds|captures|cancels}``:
    ``merchantAccount`` and ``reference`` always, ``amount`` for a refund or capture."""
    if not isinstance(body, dict):
        raise AdyenError(422, "702", "The request body is not a JSON object.", "validation")
    if not isinstance(body.get("merchantAccount"), str) or not body["merchantAccount"]:
        raise _required("merchantAccount")
    reference = body.get("reference")
    if not isinstance(reference, str) or not reference or len(reference) > MAX_REFERENCE:
        raise _required("reference")
    if operation == "cancel":
        return AdyenModification(operation, None, None, reference)
    amount = body.get("amount")
    if amount is None:
        raise AdyenError(422, "100", "No amount specified", "validation")
    value = amount.get("value") if isinstance(amount, dict) else None
    currency = amount.get("currency") if isinstance(amount, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 \
            or not isinstance(currency, str) or not _CURRENCY.fullmatch(currency):
        raise AdyenError(422, "137", "Invalid amount specified", "validation")
    return AdyenModification(operation, value, currency, reference)


def modification_response(account: SandboxAccount, payment_psp: str, psp: str,
                           req: AdyenModification) -> dict[str, Any]:
    """What a modification answers (201): received, never its outcome (a notification tells)."""
    out: dict[str, Any] = {"merchantAccount": account.account, "paymentPspReference": payment_psp,
                           "pspReference": psp, "reference": req.reference, "status": RECEIVED}
    if req.amount is not None:
        out["amount"] = {"currency": req.currency, "value": req.amount}
    return out


# -- answers ---------------------------------------------------------------------

def payment_response(payment: Payment, native_3ds: bool) -> dict[str, Any]:
    """The ``/payments`` response for a just-created payment."""
    out: dict[str, Any] = {
        "amount": {"currency": payment.currency, "value": payment.amount},
        "merchantReference": payment.reference,
        "paymentMethod": {"brand": "visa", "type": "scheme"},
        "pspReference": payment.id,
    }
    if payment.status in ("succeeded", "requires_capture"):  # a hold is authorised too
        out["resultCode"] = "Authorised"
    elif payment.status == "declined":
        reason, code = refusal(payment.decline_code)
        out.update(resultCode="Refused", refusalReason=reason, refusalReasonCode=code)
    elif payment.status == "failed":
        reason, code = AUTHENTICATION_FAILED
        out.update(resultCode="Refused", refusalReason=reason, refusalReasonCode=code)
    elif payment.status == "processing":
        out["resultCode"] = "Received"
    elif payment.status == "requires_action" and native_3ds:
        token = base64.b64encode(orjson.dumps({"threeDSServerTransID": payment.id,
                                               "acsURL": _acs_url(payment)})).decode()
        out.update(resultCode="ChallengeShopper", action={
            "paymentMethodType": "scheme", "subtype": "challenge", "token": token,
            "type": "threeDS2", "paymentData": "sandbox-" + payment.id,
            "authorisationToken": "sandbox-" + payment.id})
    elif payment.status == "requires_action":
        out.update(resultCode="RedirectShopper", action={
            "paymentMethodType": "scheme", "url": _acs_url(payment), "method": "GET",
            "type": "redirect"})
    else:  # canceled at creation cannot happen; say so rather than guess
        out["resultCode"] = "Cancelled"
    return out


def _acs_url(payment: Payment) -> str:
    return f"https://sandbox.adyen.test/threeDS/redirect/{payment.id}"
