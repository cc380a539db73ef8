"""The Adyen dialect's modifications: ``POST /v71/payments/{pspReference}/{refunds|captures|cancels}``.

Arrival, faults, keys and execution are :mod:`.adyen_api`'s (``operation`` ``refund`` |
``capture`` | ``cancel`` for fault rules, matched by the modification's ``reference``); the
rules are :mod:`paycore_sandbox.after_payment`'s, on the payment of this dialect, and which
refunds and captures succeed, fail or stay pending is their amount's
(:mod:`paycore_sandbox.movements`: ``…91`` pending then succeeded, ``…92`` pending then
failed, ``…93`` pending until ``/_sandbox/{refunds|captures}/{id}/settle``, else at once).

- Before execution, nothing stored: 422 ``702``/``130``/``100``/``137`` for a body that
  does not fit, 422 ``167`` for a payment the merchant account does not have.
- Executed: always 201 ``{"merchantAccount", "paymentPspReference", "pspReference",
  "reference", "status": "received"}`` (and ``amount`` for a refund or capture), as Adyen
  answers: the outcome comes only by notification (:mod:`.adyen_webhooks`). What the
  rules refuse (nothing refundable, no hold to capture or cancel, an amount above it) is
  received too, then notified ``success: "false"`` with the rule's code as ``reason``:
  Adyen validates a modification asynchronously.
- A refund's or capture's pspReference is derived from the sandbox's movement
  (:func:`.adyen_webhooks.movement_psp_reference`; ``GET /_sandbox/refunds?reference=``
  gives the movement's id for the controls); a cancel's is minted when it executes.
"""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response

from paycore_sandbox import after_payment, lifecycle
from paycore_sandbox.dialects.adyen_api import ANSWERS, AdyenCall, Done, arrive, idempotent
from paycore_sandbox.dialects.adyen_webhooks import CANCEL_REFUSED, MODIFICATION, movement_psp_reference
from paycore_sandbox.dialects.adyen_wire import (
    MODIFICATIONS,
    NAME,
    UNKNOWN_PAYMENT,
    AdyenModification,
    modification_response,
    new_psp_reference,
    validate_modification,
)
from paycore_sandbox.errors import ApiError
from paycore_sandbox.faults import FaultContext
from paycore_sandbox.idempotency import StoredResponse
from paycore_sandbox.ledger import Payment
from paycore_sandbox.movements import Capture, Movement, Refund, new_movement
from paycore_sandbox.transport import with_faults
from paycore_sandbox.validation import CancelRequest, CaptureRequest, RefundRequest, reference_of

__all__ = ["create_cancel", "create_capture", "create_refund"]

CREATED = 201


async def create_refund(request: Request) -> Response:
    return await _modify(request, "refunds")


async def create_capture(request: Request) -> Response:
    return await _modify(request, "captures")


async def create_cancel(request: Request) -> Response:
    return await _modify(request, "cancels")


async def _modify(request: Request, segment: str) -> Response:
    call = await arrive(request)
    if isinstance(call, Response):
        return call
    operation = MODIFICATIONS[segment]
    psp = request.path_params["psp_reference"]
    ctx = FaultContext(call.account.account, operation, reference_of(call.body), NAME)
    # The payment in the path is part of what the key stands for.
    signed = {"payment": psp, "modification": segment, "body": call.body}

    def validate() -> AdyenModification:
        req = validate_modification(operation, call.body)
        if call.state.ledger.find_for(call.account, psp, NAME) is None:
            raise UNKNOWN_PAYMENT
        return req

    async def process(delay_s: float) -> Response:
        return await idempotent(call, operation, signed, delay_s, validate,
                                lambda req, key: _execute(call, psp, req, key or ""))

    return await with_faults(request, call.sandbox, call.state, call.entry, ctx, process,
                             ok_status=CREATED, answers=ANSWERS)


def _execute(call: AdyenCall, psp: str, req: AdyenModification, key: str) -> Done:
    """The modification, done now (no await): received, whatever the rules decide."""
    sandbox, state, account = call.sandbox, call.state, call.account
    lifecycle.sweep(state, sandbox.clock.now())  # a settled refund frees its amount, a hold lapses
    payment = state.ledger.find_for(account, psp, NAME)
    assert payment is not None  # checked before the key was claimed; a payment is never removed
    if req.operation == "cancel":
        modification_psp = _cancel(call, payment, req)
    else:
        modification_psp = movement_psp_reference(_movement(call, payment, req, key).id)
    body = modification_response(account, psp, modification_psp, req)
    return Done(StoredResponse(CREATED, orjson.dumps(body)), modification_psp, req.reference)


def _movement(call: AdyenCall, payment: Payment, req: AdyenModification, key: str) -> Movement:
    """The refund or capture as :mod:`paycore_sandbox.after_payment` makes it, or, refused by
    its rules, one failed at once (notified ``success: "false"``)."""
    sandbox, state, account = call.sandbox, call.state, call.account
    assert req.amount is not None
    try:
        if req.operation == "refund":
            return after_payment.refund(sandbox, state, account,
                                        RefundRequest(payment.id, req.amount, req.reference, None),
                                        key, dialect=NAME)
        return after_payment.capture(sandbox, state, account,
                                     CaptureRequest(payment.id, req.amount, req.reference), key,
                                     dialect=NAME)
    except ApiError as exc:
        if exc.status != 400:  # only a rule's refusal is received; anything else is a bug
            raise
        kind: type[Movement] = Refund if req.operation == "refund" else Capture
        refused = new_movement(kind, "re_" if kind is Refund else "cap_", payment, req.amount,
                               req.reference, key, sandbox.clock.now())
        refused.status, refused.failure_reason = "failed", exc.code
        state.movements.add(refused)
        state.events.emit_movement(refused, f"{refused.object_name}.failed")
        return refused


def _cancel(call: AdyenCall, payment: Payment, req: AdyenModification) -> str:
    """Release the hold (or, refused, say so): the events carry this request's pspReference
    and reference for their CANCELLATION item, through the payment's dialect data while it
    executes (the snapshot is taken at emission, synchronously)."""
    psp = new_psp_reference()
    payment.dialect_data[MODIFICATION] = {"pspReference": psp, "reference": req.reference}
    try:
        after_payment.cancel(call.state, call.account, CancelRequest(payment.id, req.reference),
                             dialect=NAME)
    except ApiError as exc:
        if exc.status != 400:
            raise
        call.state.events.emit(payment, CANCEL_REFUSED)
    finally:
        del payment.dialect_data[MODIFICATION]
    return psp

