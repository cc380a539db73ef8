"""The Adyen dialect: Checkout API v71 ``POST /v71/payments`` on the sandbox's core.

Order of checks: capture (``X-API-Key`` redacted), authenticate (401), the
body's ``merchantAccount`` must be the key's account (403), faults (see
:mod:`paycore_sandbox.transport`), then validation (422), idempotency and the
payment. Every error is Adyen's shape ``{"status", "errorCode", "message",
"errorType", "pspReference"}``.

- Auth: ``X-API-Key`` = a sandbox account's api key; ``merchantAccount`` = that
  account's name.
- Outcome from ``paymentMethod.encryptedCardNumber`` holding a sandbox token:
  ``tok_visa`` → ``Authorised``; ``tok_decline`` / ``tok_insufficient_funds`` →
  ``Refused`` (``refusalReason``); ``tok_3ds`` → ``RedirectShopper`` with a
  ``redirect`` action (``ChallengeShopper`` with a ``threeDS2`` action when
  ``authenticationData.threeDSRequestData.nativeThreeDS`` is ``preferred``),
  completed or abandoned with ``POST /_sandbox/payments/{pspReference}/action``;
  ``tok_async`` → ``Received``, then ``Authorised`` (notified) after
  ``async_delay_s``; ``tok_expired`` → 422 (nothing stored). ``returnUrl`` is
  required (422).
- Idempotency (``Idempotency-Key``, optional, ≤ 64 characters, kept
  :data:`KEY_RETENTION_S` = 31 days as Adyen documents as its minimum, per
  account): the same key and body replays the stored answer (same
  ``pspReference``); while the first is still executing → 409 ``704``
  with ``Transient-Error: true`` (retry later with the same key); the key with
  another body → 422 ``704`` without it (do not retry). Responses echo the key
  in an ``Idempotency-Key`` header, as Adyen does.
- Faults: ``not_processed_503`` → 503 with ``Transient-Error: true``, before the
  key is claimed (so it is never stored); ``error_500_after`` → 500 *without*
  it after the payment executed: the key keeps the real answer, which a resend
  gets (Adyen does not replay 5xx); ``rate_limit`` → 429; the rest as for Cardco.
  ``match: {"dialect": "adyen"}`` restricts a rule to this dialect.
- No lookup: Adyen has no payment lookup by merchant reference; none is served.

Error codes are Adyen's where its documentation names them (000 unauthorised,
901 invalid merchant account, 704 idempotency, 702 unparseable body, 100/137
amount, 101 invalid card number, 129 expiry date, 130 required field).
"""

from __future__ import annotations

import asyncio
import base64
import re
import secrets
import string
import weakref
from dataclasses import dataclass
from typing import Any, cast

import orjson
from starlette.requests import Request
from starlette.responses import Response

from paycore_sandbox import lifecycle
from paycore_sandbox.api import sandbox_of
from paycore_sandbox.dialects.adyen_webhooks import AUTHENTICATION_FAILED, credentials, refusal
from paycore_sandbox.errors import JSONResponse
from paycore_sandbox.faults import EXECUTION_FAULTS, FaultContext
from paycore_sandbox.idempotency import (
    Claim,
    IdempotencyStore,
    KeyRecord,
    StoredResponse,
    fingerprint,
)
from paycore_sandbox.ledger import Payment
from paycore_sandbox.settings import SandboxAccount
from paycore_sandbox.state import Sandbox, SandboxState
from paycore_sandbox.tokens import OUTCOMES, REJECTED
from paycore_sandbox.transport import FaultAnswers, with_faults
from paycore_sandbox.validation import CreateRequest, parse_json, reference_of

DIALECT = "adyen"
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


class _Replayed(Response):
    """A stored answer sent again (the wire cannot tell; the capture log can)."""


# One key store per sandbox state (a reset forgets it with the state), with
# Adyen's retention rather than the Cardco one.
_STORES: weakref.WeakKeyDictionary[SandboxState, IdempotencyStore] = weakref.WeakKeyDictionary()


def _store(state: SandboxState) -> IdempotencyStore:
    store = _STORES.get(state)
    if store is None:
        store = _STORES[state] = IdempotencyStore(KEY_RETENTION_S)
    return store


ANSWERS = FaultAnswers(not_processed=lambda: NOT_PROCESSED.response(),
                       rate_limited=lambda: RATE_LIMITED.response(),
                       replayed=lambda response: isinstance(response, _Replayed))


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


def _answer(stored: StoredResponse, psp: str, key: str | None, *,
            replayed: bool) -> Response:
    headers = {"pspReference": psp}
    if key is not None:
        headers["Idempotency-Key"] = key
    cls = _Replayed if replayed else Response
    return cls(stored.body, status_code=stored.status, headers=headers,
               media_type="application/json")


# -- POST /v71/payments -----------------------------------------------------------

async def create_payment(request: Request) -> Response:
    sandbox = sandbox_of(request)
    state = sandbox.state
    raw = await request.body()
    entry = state.requests.record(request, raw, sandbox.clock.now())
    account = sandbox.settings.account_for_key(request.headers.get("x-api-key", "").strip())
    if account is None:
        entry.processed(401, False)
        return UNAUTHORIZED.response()
    body = parse_json(raw)
    merchant = body.get("merchantAccount") if isinstance(body, dict) else None
    if isinstance(merchant, str) and merchant != account.account:
        entry.processed(403, False)
        return INVALID_MERCHANT.response()
    key_header = request.headers.get("idempotency-key")
    ctx = FaultContext(account.account, "create", reference_of(body), DIALECT)

    async def process(delay_s: float) -> Response:
        return await _process(sandbox, state, account, key_header, body, delay_s)

    return await with_faults(request, sandbox, state, entry, ctx, process, ok_status=200,
                             answers=ANSWERS)


async def _process(sandbox: Sandbox, state: SandboxState, account: SandboxAccount,
                   key_header: str | None, body: Any, delay_s: float) -> Response:
    try:
        key = parse_key(key_header)
        create = validate(body)
    except AdyenError as exc:  # rejected before execution: nothing stored
        await state.gate.sleep(delay_s)
        return exc.response()
    store = _store(state)
    record: KeyRecord | None = None
    if key is not None:
        scope = (f"{DIALECT}:{account.account}", account.environment)
        claim, record = await store.claim(scope, key, fingerprint(body), sandbox.clock.now())
        if claim is not Claim.FRESH:
            if claim is Claim.MISMATCH:
                response = KEY_REUSED.response(key)
            elif claim is Claim.IN_PROGRESS:
                response = IN_PROGRESS.response(key)
            else:
                assert record.response is not None and record.payment_id is not None
                response = _answer(record.response, record.payment_id, key, replayed=True)
            await state.gate.sleep(delay_s)
            return response
    # Execution runs as its own task: a client that disconnects (cancelling
    # this handler) must not interrupt a payment half-way.
    task = sandbox.spawn(_execute(sandbox, state, store, record, account, create, key,
                                  delay_s), survives_reset=True)
    return cast(Response, await asyncio.shield(task))


async def _execute(sandbox: Sandbox, state: SandboxState, store: IdempotencyStore,
                   record: KeyRecord | None, account: SandboxAccount, create: AdyenCreate,
                   key: str | None, delay_s: float) -> Response:
    try:
        payment = lifecycle.create_payment(sandbox, state, account, create.request,
                                           key or "", dialect=DIALECT,
                                           payment_id=new_psp_reference())
        # Rendered at once, before any await: the key must keep this payment's answer.
        stored = StoredResponse(200, orjson.dumps(payment_response(payment,
                                                                   create.native_3ds)))
    except BaseException:
        if record is not None:
            store.abandon(record)  # nothing executed: nothing to replay
        raise
    ctx = FaultContext(account.account, "create", payment.reference, DIALECT)
    # The payment is executed: the key keeps its real answer whatever this
    # request is told (Adyen does not replay a 500; a resend gets the answer).
    failed = state.faults.take(ctx, EXECUTION_FAULTS) is not None
    if record is not None:
        record.payment_id = payment.id
    try:
        # A `delay` fault answers late with the key still in progress.
        await state.gate.sleep(delay_s)
    finally:
        if record is not None:
            store.complete(record, stored)
    return INTERNAL.response(key) if failed else _answer(stored, payment.id, key,
                                                          replayed=False)


# -- control: dev credentials ----------------------------------------------------

async def accounts(request: Request) -> Response:
    """``GET /_sandbox/accounts``: every account and its dev credentials per dialect."""
    sandbox = sandbox_of(request)
    rows = [{"account": a.account, "environment": a.environment, "api_key": a.api_key,
             "webhook_secret": a.webhook_secret, "adyen": credentials(a)}
            for a in sandbox.settings.accounts]
    return JSONResponse({"data": rows})
