"""Cardco's ``/v1/refunds``: make a refund, look refunds up.

- ``POST /v1/refunds`` ``{"payment", "amount"?, "reference", "reason"?}`` → 201
  refund (``succeeded`` or ``pending``); 400 ``payment_not_refundable`` /
  ``amount_exceeds_refundable``; 404 (``param: payment``) for a payment the
  account does not have.
- ``GET /v1/refunds/{id}`` → 200 refund, or 404.
- ``GET /v1/refunds?payment=`` / ``?reference=`` → ``{"data": [refund, …]}``,
  oldest first.

The POST follows the idempotency rules of ``POST /v1/payments`` with its own
keys; the rules themselves are :mod:`paycore_sandbox.after_payment`'s, and which
refunds stay pending, fail or succeed at once is decided by their amount
(:mod:`paycore_sandbox.movements`).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from paycore_sandbox import after_payment, lifecycle
from paycore_sandbox.api import (
    Executed,
    IdempotentPost,
    get_movement,
    idempotent_post,
    list_movements,
)
from paycore_sandbox.movements import Refund
from paycore_sandbox.settings import SandboxAccount
from paycore_sandbox.state import Sandbox, SandboxState
from paycore_sandbox.validation import RefundRequest, validate_refund


def _refund(sandbox: Sandbox, state: SandboxState, account: SandboxAccount,
            req: RefundRequest, key: str) -> Executed:
    lifecycle.sweep(state, sandbox.clock.now())  # settled refunds free their amount first
    made = after_payment.refund(sandbox, state, account, req, key)
    return Executed(201, made.to_public(), req.reference)


REFUND = IdempotentPost("/v1/refunds", "refund", 201,
                        lambda call: validate_refund(call.body), _refund)


async def create_refund(request: Request) -> Response:
    return await idempotent_post(request, REFUND)


async def get_refund(request: Request) -> Response:
    return await get_movement(request, Refund)


async def list_refunds(request: Request) -> Response:
    return await list_movements(request, Refund)
