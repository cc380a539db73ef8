"""Stripe's refunds, and a hold's capture and cancel, over the sandbox core.

Routes (mounted by :mod:`.stripe`; those on ``/v1/refunds``, a path Cardco's wire has too,
take only requests carrying ``Stripe-Version``, which the SDK always sends):

- ``POST /v1/refunds`` (form: ``payment_intent``, ``amount``, ``reason``, ``metadata[…]``,
  ``expand[]``) → 200 Refund (``succeeded`` or ``pending``);
- ``GET /v1/refunds?payment_intent=&limit=`` → list, newest first; ``GET /v1/refunds/{id}``;
- ``POST /v1/payment_intents/{intent}/capture`` (``amount_to_capture``, ``metadata[…]``,
  ``expand[]``) → 200 intent (``succeeded``, or ``processing`` while the capture is pending);
  its metadata is merged into the intent's, as Stripe's is;
- ``POST /v1/payment_intents/{intent}/cancel`` (``cancellation_reason``, ``expand[]``) → 200
  intent ``canceled``.

The rules, and which captures and refunds stay pending, fail or succeed at once (by the last
two digits of the amount: 91, 92, 93), are the core's, Cardco's
(:mod:`paycore_sandbox.after_payment`, :mod:`paycore_sandbox.movements`); only a hold can be
captured or canceled. Their refusals are answered in Stripe's shape: 400
``payment_intent_unexpected_state`` (the error carries the intent), ``amount_too_large``,
``charge_already_refunded``; an unknown intent 400 ``resource_missing`` (``param:
payment_intent``) for a refund, 404 for a capture or cancel.

Idempotency is the create's (:mod:`.stripe_api`): ``Idempotency-Key`` optional, one namespace
per account (the same key on another path or with other parameters: 400
``idempotency_error``); a request that fails validation stores nothing; once execution
began its answer is stored and replayed (``Idempotent-Replayed: true``), a refusal by the
rules and an ``error_500_after`` included.

Faults match ``operation`` ``refund`` | ``capture`` | ``cancel`` and the operation's own
reference: a refund's ``metadata[paycore_reference]``, a capture's
``metadata[paycore_capture_reference]``; a cancel carries none (match it by operation,
account or dialect). Lookups: ``lookup_stale`` hides a refund from ``GET /v1/refunds/{id}``,
``search_stale`` from the list, each on the refund's own reference.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

import orjson
from starlette.requests import Request
from starlette.responses import Response

from paycore_sandbox import after_payment, api, lifecycle
from paycore_sandbox.dialects import stripe_api
from paycore_sandbox.dialects import stripe_wire as wire
from paycore_sandbox.errors import ApiError, JSONResponse
from paycore_sandbox.faults import (
    EXECUTION_FAULTS,
    STALE_LOOKUP_FAULTS,
    STALE_SEARCH_FAULTS,
    FaultContext,
    RequestOperation,
)
from paycore_sandbox.idempotency import Claim, KeyRecord, StoredResponse, fingerprint
from paycore_sandbox.ledger import Payment
from paycore_sandbox.movements import Movement, Refund
from paycore_sandbox.settings import SandboxAccount
from paycore_sandbox.state import Sandbox, SandboxState
from paycore_sandbox.transport import with_faults
from paycore_sandbox.validation import CancelRequest, CaptureRequest, RefundRequest

REFUND_REASONS = ("duplicate", "fraudulent", "requested_by_customer")
CANCELLATION_REASONS = ("abandoned", "duplicate", "fraudulent", "requested_by_customer")
CAPTURE_REFERENCE = "paycore_capture_reference"
# Where a refund's request metadata is kept (on its payment), for the API's answers.
_REFUND_METADATA = "refund_metadata"

Req = TypeVar("Req")


@dataclass(frozen=True)
class Call:
    """A POST, detached from its HTTP request (a late arrival outlives it)."""

    account: SandboxAccount
    key_header: str | None
    params: dict[str, Any] | None  # None: the body was not a form
    path: str
    target: str | None  # the intent in the path, if any


@dataclass(frozen=True)
class Done:
    """What an executed POST answers, and the reference its execution faults match."""

    body: dict[str, Any]
    reference: str | None


@dataclass(frozen=True)
class StripePost(Generic[Req]):
    """One after-payment POST: what its faults match before validation, its validation (a 400
    stores nothing) and its execution (no await; an :class:`ApiError` is a refusal by the rules)."""

    operation: RequestOperation
    reference: Callable[[dict[str, Any] | None], str | None]
    validate: Callable[[Call], Req]
    execute: Callable[[Sandbox, SandboxState, SandboxAccount, Req, str], Done]


async def stripe_post(request: Request, post: StripePost[Req], target: str | None = None) -> Response:
    arrival = await api.arrive(request, stripe_api.authenticate)
    if arrival.account is None:
        return stripe_api.finish(request, cast(Response, arrival.rejection))
    sandbox, state, account = arrival.sandbox, arrival.state, arrival.account
    params = wire.decode_form(await request.body())
    call = Call(account, request.headers.get("idempotency-key"), params, request.url.path, target)
    ctx = FaultContext(account.account, post.operation, post.reference(params), wire.NAME)

    async def process(delay_s: float) -> Response:
        return await _process(sandbox, state, post, call, delay_s)

    response = await with_faults(request, sandbox, state, arrival.entry, ctx, process,
                                 ok_status=200, answers=wire.ANSWERS)
    return stripe_api.finish(request, response)


async def _process(sandbox: Sandbox, state: SandboxState, post: StripePost[Req], call: Call,
                   delay_s: float) -> Response:
    key = None if call.key_header is None else call.key_header.strip()
    if key is not None and not 0 < len(key) <= wire.MAX_KEY_LENGTH:
        await state.gate.sleep(delay_s)
        return wire.invalid_request(
            f"Idempotency-Key must be 1 to {wire.MAX_KEY_LENGTH} characters.",
            param="Idempotency-Key").response()
    record: KeyRecord | None = None
    if key is not None:
        scope = (f"{wire.NAME}:{call.account.account}", call.account.environment)
        claim, record = await state.keys.claim(
            scope, key, fingerprint({"path": call.path, "params": call.params}), sandbox.clock.now())
        if claim is not Claim.FRESH:
            if claim is Claim.MISMATCH:
                response = wire.idempotency_mismatch(key).response()
            elif claim is Claim.IN_PROGRESS:
                response = wire.idempotency_in_use().response()
            else:
                assert record.response is not None
                response = record.response.to_response(replayed=True)
            await state.gate.sleep(delay_s)
            return response
    try:
        req = post.validate(call)
    except ApiError as exc:  # failed validation: nothing saved under the key
        if record is not None:
            state.keys.abandon(record)
        await state.gate.sleep(delay_s)
        return exc.response()
    # Execution runs as its own task: a client that disconnects must not interrupt it half-way.
    task = sandbox.spawn(_execute(sandbox, state, post, record, call.account, req, key or "", delay_s),
                         survives_reset=True)
    return cast(Response, await asyncio.shield(task))


async def _execute(sandbox: Sandbox, state: SandboxState, post: StripePost[Req], record: KeyRecord | None,
                   account: SandboxAccount, req: Req, key: str, delay_s: float) -> Response:
    try:
        done = post.execute(sandbox, state, account, req, key)
    except ApiError as exc:
        # Refused by the rules once execution began: Stripe stores it under the key.
        stored = StoredResponse.of_error(exc)
    except BaseException:
        if record is not None:
            state.keys.abandon(record)  # nothing happened: nothing to replay
        raise
    else:
        ctx = FaultContext(account.account, post.operation, done.reference, wire.NAME)
        if state.faults.take(ctx, EXECUTION_FAULTS) is not None:
            stored = StoredResponse.of_error(wire.internal())
        else:
            stored = StoredResponse(200, orjson.dumps(done.body))
    try:
        await state.gate.sleep(delay_s)  # a `delay` fault answers late, the key in progress
    finally:
        if record is not None:
            state.keys.complete(record, stored)
    return stored.to_response(replayed=False)


# -- validation ---------------------------------------------------------------------------

def _form(call: Call, allowed: frozenset[str]) -> dict[str, Any]:
    if call.params is None:
        raise wire.invalid_request("The request body must be form-encoded "
                                   "(application/x-www-form-urlencoded).")
    for name in call.params:
        if name not in allowed:
            raise wire.unknown_parameter(name)
    return call.params


def _choice(params: dict[str, Any], name: str, allowed: tuple[str, ...]) -> str | None:
    value = stripe_api.string_param(params, name) or None
    if value is not None and value not in allowed:
        raise wire.invalid_request(f"Invalid {name}: must be one of {', '.join(allowed)}", param=name)
    return value


def _metadata_reference(params: dict[str, Any] | None, key: str) -> str | None:
    metadata = params.get("metadata") if isinstance(params, dict) else None
    value = metadata.get(key) if isinstance(metadata, dict) else None
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class RefundParams:
    payment_intent: str
    amount: int | None
    reason: str | None
    metadata: dict[str, str]


@dataclass(frozen=True)
class CaptureParams:
    payment_intent: str
    amount: int | None
    metadata: dict[str, str]


@dataclass(frozen=True)
class CancelParams:
    payment_intent: str
    reason: str | None


def _validate_refund(call: Call) -> RefundParams:
    params = _form(call, frozenset({"payment_intent", "amount", "reason", "metadata", "expand", "charge"}))
    if "charge" in params:
        raise wire.invalid_request("The sandbox's Stripe dialect refunds by payment_intent only.",
                                   param="charge")
    amount = stripe_api.integer_param(params, "amount") if "amount" in params else None
    return RefundParams(stripe_api.string_param(params, "payment_intent", required=True), amount,
                        _choice(params, "reason", REFUND_REASONS),
                        stripe_api.metadata_param(params.get("metadata", {})))


def _validate_capture(call: Call) -> CaptureParams:
    params = _form(call, frozenset({"amount_to_capture", "metadata", "expand"}))
    amount = stripe_api.integer_param(params, "amount_to_capture") if "amount_to_capture" in params else None
    return CaptureParams(str(call.target), amount, stripe_api.metadata_param(params.get("metadata", {})))


def _validate_cancel(call: Call) -> CancelParams:
    params = _form(call, frozenset({"cancellation_reason", "expand"}))
    return CancelParams(str(call.target), _choice(params, "cancellation_reason", CANCELLATION_REASONS))


# -- execution ----------------------------------------------------------------------------

def _intent(state: SandboxState, account: SandboxAccount, intent_id: str, *, param: str,
            status: int) -> Payment:
    payment = state.ledger.find_for(account, intent_id, wire.NAME)
    if payment is None:
        raise wire.resource_missing("payment_intent", intent_id, param, status=status)
    return payment


def _in_stripes_words(exc: ApiError, state: SandboxState, payment: Payment) -> ApiError:
    """A refusal of the core's rules (Cardco's codes) as Stripe answers it."""
    status = wire.intent_status(payment)
    if exc.code not in ("payment_not_refundable", "amount_exceeds_refundable", "amount_too_large",
                        "payment_not_capturable", "payment_not_cancelable"):
        return wire.invalid_request(exc.message, param=exc.param, code=exc.code, status=exc.status)
    if exc.code == "payment_not_refundable":
        return wire.unexpected_state(payment, f"This PaymentIntent ({payment.id}) does not have a "
                                              f"successful charge to refund; its status is {status}.")
    if exc.code == "amount_exceeds_refundable":
        left = after_payment.refundable(state, payment)
        if left == 0:
            return wire.invalid_request(f"Charge {wire.charge_id(payment)} has already been refunded.",
                                        code="charge_already_refunded")
        return wire.invalid_request(f"Refund amount is greater than unrefunded amount on charge ({left}).",
                                    param="amount", code="amount_too_large")
    if exc.code == "amount_too_large":
        return wire.invalid_request(f"amount_to_capture must be at most amount_capturable "
                                    f"({payment.amount_capturable}).", param="amount_to_capture",
                                    code="amount_too_large")
    verb = "captured" if exc.code == "payment_not_capturable" else "canceled"
    return wire.unexpected_state(payment, f"This PaymentIntent could not be {verb} because it has a "
                                          f"status of {status}; only an uncaptured hold "
                                          f"(requires_capture) can be {verb} in the sandbox.")


def _refund(sandbox: Sandbox, state: SandboxState, account: SandboxAccount, req: RefundParams,
            key: str) -> Done:
    lifecycle.sweep(state, sandbox.clock.now())  # settled refunds free their amount first
    payment = _intent(state, account, req.payment_intent, param="payment_intent", status=400)
    reference = req.metadata.get("paycore_reference", "")
    try:
        made = after_payment.refund(sandbox, state, account,
                                    RefundRequest(payment.id, req.amount, reference, req.reason), key,
                                    dialect=wire.NAME)
    except ApiError as exc:
        raise _in_stripes_words(exc, state, payment) from None
    payment.dialect_data.setdefault(_REFUND_METADATA, {})[made.id] = dict(req.metadata)
    return Done(refund_object(state, made), reference or None)


def _capture(sandbox: Sandbox, state: SandboxState, account: SandboxAccount, req: CaptureParams,
             key: str) -> Done:
    lifecycle.sweep(state, sandbox.clock.now())  # a lapsed hold cannot be captured
    payment = _intent(state, account, req.payment_intent, param="intent", status=404)
    reference = req.metadata.get(CAPTURE_REFERENCE, "")
    # The intent takes the capture's metadata before the capture runs, so the events it emits
    # (payment_intent.succeeded) show it, as Stripe's do; a refusal puts the old back.
    metadata = payment.dialect_data.setdefault("metadata", {})
    before = dict(metadata)
    metadata.update(req.metadata)
    amount = payment.amount_capturable if req.amount is None else req.amount
    try:
        after_payment.capture(sandbox, state, account, CaptureRequest(payment.id, amount, reference), key,
                              dialect=wire.NAME)
    except ApiError as exc:
        metadata.clear()
        metadata.update(before)
        raise _in_stripes_words(exc, state, payment) from None
    return Done(wire.render_intent(payment), reference or None)


def _cancel(sandbox: Sandbox, state: SandboxState, account: SandboxAccount, req: CancelParams,
            key: str) -> Done:
    del key  # a cancel leaves no object the key could name
    lifecycle.sweep(state, sandbox.clock.now())
    payment = _intent(state, account, req.payment_intent, param="intent", status=404)
    data = payment.dialect_data
    before = {k: data[k] for k in (wire.CANCELED_BY_REQUEST, wire.CANCELLATION_REASON) if k in data}
    # Marked before the hold is released, so payment_intent.canceled shows the reason; a
    # refusal puts back what was there.
    data.update({wire.CANCELED_BY_REQUEST: True, wire.CANCELLATION_REASON: req.reason})
    try:
        after_payment.cancel(state, account, CancelRequest(payment.id, ""), dialect=wire.NAME)
    except ApiError as exc:
        for k in (wire.CANCELED_BY_REQUEST, wire.CANCELLATION_REASON):
            data.pop(k, None)
        data.update(before)
        raise _in_stripes_words(exc, state, payment) from None
    return Done(wire.render_intent(payment), None)


REFUND: StripePost[RefundParams] = StripePost(
    "refund", lambda params: _metadata_reference(params, "paycore_reference"), _validate_refund, _refund)
CAPTURE: StripePost[CaptureParams] = StripePost(
    "capture", lambda params: _metadata_reference(params, CAPTURE_REFERENCE), _validate_capture, _capture)
CANCEL: StripePost[CancelParams] = StripePost("cancel", lambda params: None, _validate_cancel, _cancel)


async def create_refund(request: Request) -> Response:
    return await stripe_post(request, REFUND)


async def capture_intent(request: Request) -> Response:
    return await stripe_post(request, CAPTURE, request.path_params["intent"])


async def cancel_intent(request: Request) -> Response:
    return await stripe_post(request, CANCEL, request.path_params["intent"])


# -- lookups ------------------------------------------------------------------------------

def refund_object(state: SandboxState, refund: Movement) -> dict[str, Any]:
    """The Refund as the API answers it: with its request's reason and metadata."""
    payment = state.ledger.get(refund.payment_id)
    kept = payment.dialect_data.get(_REFUND_METADATA, {}) if payment is not None else {}
    reason = refund.reason if isinstance(refund, Refund) else None
    return wire.render_refund(refund.to_public(), reason=reason, metadata=kept.get(refund.id))


def _hidden(state: SandboxState, account: SandboxAccount, refund: Movement, faults: frozenset[str]) -> bool:
    ctx = FaultContext(account.account, "lookup", refund.reference or None, wire.NAME)
    return state.faults.take(ctx, faults) is not None


def _refund_for(state: SandboxState, account: SandboxAccount, refund_id: str) -> Movement | None:
    found = state.movements.get(refund_id)
    return found if isinstance(found, Refund) and found.visible_to(account, wire.NAME) else None


async def get_refund(request: Request) -> Response:
    arrival = await api.arrive(request, stripe_api.authenticate)
    if arrival.account is None:
        return stripe_api.finish(request, cast(Response, arrival.rejection))
    sandbox, state, account = arrival.sandbox, arrival.state, arrival.account
    refund_id = request.path_params["refund"]
    lifecycle.sweep(state, sandbox.clock.now())
    found = _refund_for(state, account, refund_id)
    ctx = FaultContext(account.account, "lookup", (found.reference or None) if found else None, wire.NAME)

    def answer() -> Response:
        refund = _refund_for(state, account, refund_id)
        if refund is None or _hidden(state, account, refund, STALE_LOOKUP_FAULTS):
            return wire.resource_missing("refund", refund_id, "id").response()
        return JSONResponse(refund_object(state, refund))

    response = await api.rate_limited_lookup(request, arrival, ctx, answer, answers=wire.ANSWERS)
    return stripe_api.finish(request, response)


async def list_refunds(request: Request) -> Response:
    arrival = await api.arrive(request, stripe_api.authenticate)
    if arrival.account is None:
        return stripe_api.finish(request, cast(Response, arrival.rejection))
    state, account = arrival.state, arrival.account
    intent_id = request.query_params.get("payment_intent") or None
    # A list by intent is about no one reference: only rules without one match it.
    ctx = FaultContext(account.account, "lookup", None, wire.NAME)

    def answer() -> Response:
        try:
            return JSONResponse(_list(state, account, intent_id, request))
        except ApiError as exc:
            return exc.response()

    response = await api.rate_limited_lookup(request, arrival, ctx, answer, answers=wire.ANSWERS)
    return stripe_api.finish(request, response)


def _list(state: SandboxState, account: SandboxAccount, intent_id: str | None,
          request: Request) -> dict[str, Any]:
    for name in request.query_params:
        if name not in ("payment_intent", "limit"):
            raise wire.unknown_parameter(name)
    limit_raw = request.query_params.get("limit", "10")
    if not limit_raw.isdigit() or not 1 <= int(limit_raw) <= 100:
        raise wire.invalid_request("limit must be an integer between 1 and 100.", param="limit")
    if intent_id is not None:
        _intent(state, account, intent_id, param="payment_intent", status=400)
    made = state.movements.of_payment(intent_id) if intent_id is not None else list(state.movements)
    refunds = [m for m in reversed(made) if isinstance(m, Refund) and m.visible_to(account, wire.NAME)
               and not _hidden(state, account, m, STALE_SEARCH_FAULTS)]
    limit = int(limit_raw)
    return {"object": "list", "url": "/v1/refunds", "has_more": len(refunds) > limit,
            "data": [refund_object(state, m) for m in refunds[:limit]]}
