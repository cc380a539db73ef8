"""The Adyen dialect's wire: error shapes, request validation, ``/payments`` answers.

Error codes are Adyen's where its documentation names them (000 unauthorised
or generic, 901 invalid merchant account, 704 idempotency, 702 unparseable
body, 100/137 amount, 101 invalid card number, 129 expiry date, 130 required
field); see :mod:`paycore_sandbox.dialects.adyen` for when each is answered.
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
from paycore_sandbox.ledger import Payment
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
    request = CreateRequest(value, currency, token, reference, None, return_url, outcome)
    auth = body.get("authenticationData")
    three_ds = auth.get("threeDSRequestData") if isinstance(auth, dict) else None
    native = isinstance(three_ds, dict) and three_ds.get("nativeThreeDS") == "preferred"
    return AdyenCreate(request, native)


# -- answers ---------------------------------------------------------------------

def payment_response(payment: Payment, native_3ds: bool) -> dict[str, Any]:
    """The ``/payments`` response for a just-created payment."""
    out: dict[str, Any] = {
        "amount": {"currency": payment.currency, "value": payment.amount},
        "merchantReference": payment.reference,
        "paymentMethod": {"brand": "visa", "type": "scheme"},
        "pspReference": payment.id,
    }
    if payment.status == "succeeded":
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
