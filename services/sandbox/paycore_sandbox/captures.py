"""Cardco's ``/v1`` captures and cancels of held payments, and capture lookups.

(``capture.py`` is something else: the log of captured *requests*.)

- ``POST /v1/payments/{id}/captures`` ``{"amount", "reference"}`` → 201 capture
  (``succeeded`` or ``pending``); 400 ``payment_not_capturable`` /
  ``amount_too_large``; 404 for a payment the account does not have.
- ``POST /v1/payments/{id}/cancel`` ``{"reference"}`` → 200 payment ``canceled``;
  400 ``payment_not_cancelable``.
- ``GET /v1/captures?payment=`` / ``?reference=`` → ``{"data": [capture, …]}``,
  oldest first.

Both POSTs follow the idempotency rules of ``POST /v1/payments`` with their own
keys; the rules themselves are :mod:`paycore_sandbox.after_payment`'s, and which
captures stay pending, fail or succeed at once is decided by their amount
(:mod:`paycore_sandbox.movements`).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from paycore_sandbox import after_payment, lifecycle
from paycore_sandbox.api import Executed, IdempotentPost, idempotent_post, list_movements
from paycore_sandbox.movements import Capture
from paycore_sandbox.settings import SandboxAccount
from paycore_sandbox.state import Sandbox, SandboxState
from paycore_sandbox.validation import (
    CancelRequest,
    CaptureRequest,
    validate_cancel,
    validate_capture,
)


def _capture(sandbox: Sandbox, state: SandboxState, account: SandboxAccount,
             req: CaptureRequest, key: str) -> Executed:
    lifecycle.sweep(state, sandbox.clock.now())  # a lapsed hold cannot be captured
    made = after_payment.capture(sandbox, state, account, req, key)
    return Executed(201, made.to_public(), req.reference)


def _cancel(sandbox: Sandbox, state: SandboxState, account: SandboxAccount,
            req: CancelRequest, key: str) -> Executed:
    lifecycle.sweep(state, sandbox.clock.now())
    payment = after_payment.cancel(state, account, req)
    return Executed(200, payment.to_public(), req.reference)


CAPTURE = IdempotentPost("/v1/payments/{id}/captures", "capture", 201,
                         lambda call: validate_capture(str(call.target), call.body), _capture)
CANCEL = IdempotentPost("/v1/payments/{id}/cancel", "cancel", 200,
                        lambda call: validate_cancel(str(call.target), call.body), _cancel)


async def create_capture(request: Request) -> Response:
    return await idempotent_post(request, CAPTURE, request.path_params["payment_id"])


async def cancel_payment(request: Request) -> Response:
    return await idempotent_post(request, CANCEL, request.path_params["payment_id"])


async def list_captures(request: Request) -> Response:
    return await list_movements(request, Capture)
