"""The Adyen dialect's handler: Checkout API v71 ``POST /v71/payments`` on the sandbox's core.

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
- Manual capture: ``captureDelayHours`` above 0 or ``additionalData.manualCapture:
  "true"`` → ``Authorised`` and held (``requires_capture``; ``AUTHORISATION``
  notified), until a ``/captures`` or ``/cancels``
  (:mod:`paycore_sandbox.dialects.adyen_modifications`) or the hold lapses.
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

Wire shapes, validation and error codes: :mod:`paycore_sandbox.dialects.adyen_wire`.
The modifications share this module's arrival (:func:`arrive`), key store and
execution (:func:`idempotent`): the key scope is the merchant account's, and what
a key stands for includes the path.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import orjson
from starlette.requests import Request
from starlette.responses import Response

from paycore_sandbox import lifecycle
from paycore_sandbox.api import sandbox_of
from paycore_sandbox.capture import CapturedRequest
from paycore_sandbox.dialects.adyen_wire import (
    IN_PROGRESS,
    INTERNAL,
    INVALID_MERCHANT,
    KEY_RETENTION_S,
    KEY_REUSED,
    NAME,
    NOT_PROCESSED,
    PAYMENTS_PATH,
    RATE_LIMITED,
    UNAUTHORIZED,
    AdyenCreate,
    AdyenError,
    new_psp_reference,
    parse_key,
    payment_response,
    validate,
)
from paycore_sandbox.errors import FaultAnswers
from paycore_sandbox.faults import EXECUTION_FAULTS, FaultContext, RequestOperation
from paycore_sandbox.idempotency import (
    Claim,
    IdempotencyStore,
    KeyRecord,
    StoredResponse,
    fingerprint,
)
from paycore_sandbox.settings import SandboxAccount
from paycore_sandbox.state import Sandbox, SandboxState
from paycore_sandbox.transport import with_faults
from paycore_sandbox.validation import parse_json, reference_of

__all__ = ["ANSWERS", "PAYMENTS_PATH", "AdyenCall", "Done", "arrive", "create_payment", "idempotent"]


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


ANSWERS = FaultAnswers(not_processed=lambda: NOT_PROCESSED,
                       rate_limited=lambda retry_after_s: RATE_LIMITED,
                       internal=lambda: INTERNAL,
                       replayed=lambda response: isinstance(response, _Replayed))


def _answer(stored: StoredResponse, psp: str, key: str | None, *,
            replayed: bool) -> Response:
    headers = {"pspReference": psp}
    if key is not None:
        headers["Idempotency-Key"] = key
    cls = _Replayed if replayed else Response
    return cls(stored.body, status_code=stored.status, headers=headers,
               media_type="application/json")


# -- what every POST shares ---------------------------------------------------------

@dataclass(frozen=True)
class AdyenCall:
    """A captured, authenticated POST, detached from the HTTP request."""

    sandbox: Sandbox
    state: SandboxState
    entry: CapturedRequest
    account: SandboxAccount
    body: Any
    key_header: str | None


async def arrive(request: Request) -> AdyenCall | Response:
    """Capture the request, then authenticate it (401) and check that the body's
    ``merchantAccount``, when it names one, is the key's (403)."""
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
    return AdyenCall(sandbox, state, entry, account, body, request.headers.get("idempotency-key"))


@dataclass(frozen=True)
class Done:
    """What an executed request answers, the pspReference its header (and a replay) names,
    and the reference its execution faults match."""

    answer: StoredResponse
    psp_reference: str
    reference: str


V = TypeVar("V")


async def idempotent(call: AdyenCall, operation: RequestOperation, signed: Any, delay_s: float,
                     validate: Callable[[], V], execute: Callable[[V, str | None], Done]) -> Response:
    """Validate (422, nothing stored), claim the key (``signed``: what it stands for), then
    execute once: ``execute`` runs without an await, so no other request's checks interleave."""
    state = call.state
    try:
        key = parse_key(call.key_header)
        req = validate()
    except AdyenError as exc:  # rejected before execution: nothing stored
        await state.gate.sleep(delay_s)
        return exc.response()
    store = _store(state)
    record: KeyRecord | None = None
    if key is not None:
        scope = (f"{NAME}:{call.account.account}", call.account.environment)
        claim, record = await store.claim(scope, key, fingerprint(signed), call.sandbox.clock.now())
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
    # this handler) must not interrupt it half-way.
    task = call.sandbox.spawn(_execute(call, store, record, operation, key, delay_s,
                                       lambda: execute(req, key)), survives_reset=True)
    return cast(Response, await asyncio.shield(task))


async def _execute(call: AdyenCall, store: IdempotencyStore, record: KeyRecord | None,
                   operation: RequestOperation, key: str | None, delay_s: float,
                   run: Callable[[], Done]) -> Response:
    state = call.state
    try:
        done = run()
    except BaseException:
        if record is not None:
            store.abandon(record)  # nothing executed: nothing to replay
        raise
    ctx = FaultContext(call.account.account, operation, done.reference, NAME)
    # Executed: the key keeps its real answer whatever this request is told
    # (Adyen does not replay a 500; a resend gets the answer).
    failed = state.faults.take(ctx, EXECUTION_FAULTS) is not None
    if record is not None:
        record.payment_id = done.psp_reference
    try:
        # A `delay` fault answers late with the key still in progress.
        await state.gate.sleep(delay_s)
    finally:
        if record is not None:
            store.complete(record, done.answer)
    return INTERNAL.response(key) if failed else _answer(done.answer, done.psp_reference, key,
                                                          replayed=False)


# -- POST /v71/payments -----------------------------------------------------------

async def create_payment(request: Request) -> Response:
    call = await arrive(request)
    if isinstance(call, Response):
        return call
    ctx = FaultContext(call.account.account, "create", reference_of(call.body), NAME)

    async def process(delay_s: float) -> Response:
        return await idempotent(call, "create", call.body, delay_s, lambda: validate(call.body),
                                lambda create, key: _create(call, create, key))

    return await with_faults(request, call.sandbox, call.state, call.entry, ctx, process,
                             ok_status=200, answers=ANSWERS)


def _create(call: AdyenCall, create: AdyenCreate, key: str | None) -> Done:
    payment = lifecycle.create_payment(call.sandbox, call.state, call.account, create.request,
                                       key or "", dialect=NAME, payment_id=new_psp_reference(),
                                       dialect_data={"native_3ds": create.native_3ds})
    # Rendered at once, before any await: the key must keep this payment's answer.
    answer = StoredResponse(200, orjson.dumps(payment_response(payment, create.native_3ds)))
    return Done(answer, payment.id, payment.reference)
