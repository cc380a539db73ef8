"""Payment state changes, each emitting its webhook event.

Time-driven changes (tok_async completion, 3-D Secure expiry, and those of
:mod:`paycore_sandbox.after_payment`: a hold lapsing, a capture or refund
settling) are applied by :func:`sweep`, which runs lazily before every read and
from a timer, so a lookup is never stale and events are emitted even if nobody looks.

An approved payment is ``succeeded`` (charged) when its capture is automatic,
``requires_capture`` (held) when it is manual.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from paycore_sandbox import after_payment
from paycore_sandbox.clock import TIMER_MARGIN_S
from paycore_sandbox.errors import ApiError, invalid_param
from paycore_sandbox.ledger import Payment, PaymentStatus, new_payment_id
from paycore_sandbox.settings import SandboxAccount
from paycore_sandbox.state import Sandbox, SandboxState
from paycore_sandbox.validation import CreateRequest


def create_payment(sandbox: Sandbox, state: SandboxState, account: SandboxAccount,
                   req: CreateRequest, idempotency_key: str, *, dialect: str = "cardco",
                   id_prefix: str = "pay_", payment_id: str | None = None,
                   dialect_data: dict[str, Any] | None = None) -> Payment:
    """Create and record a payment of ``dialect``: its id is ``payment_id`` when the
    dialect mints its own (Adyen's pspReference), else ``id_prefix`` + random hex."""
    now = sandbox.clock.now()
    payment = Payment(
        id=payment_id or new_payment_id(id_prefix), account=account.account,
        environment=account.environment,
        amount=req.amount, currency=req.currency, reference=req.reference,
        payment_method=req.payment_method, idempotency_key=idempotency_key,
        created=int(now), status=req.outcome.status, decline_code=req.outcome.decline_code,
        description=req.description, return_url=req.return_url,
        dialect=dialect, dialect_data=dict(dialect_data or {}), capture=req.capture,
    )
    if payment.status == "succeeded":
        _approve(payment, now)
        if payment.capture_before is not None:
            _sweep_later(sandbox, state, payment.capture_before - now)
    elif payment.status == "requires_action":
        expires_at = payment.created + sandbox.settings.action_expiry_s
        payment.next_action = {"type": "redirect_to_url",
                               "url": f"https://sandbox.cardco.test/3ds/{payment.id}",
                               "expires_at": expires_at}
        _sweep_later(sandbox, state, expires_at - now)
    elif payment.status == "processing":
        payment.completes_at = now + sandbox.settings.async_delay_s
        _sweep_later(sandbox, state, sandbox.settings.async_delay_s)
    state.ledger.add(payment)
    state.events.emit(payment, f"payment.{payment.status}")
    return payment


def _sweep_later(sandbox: Sandbox, state: SandboxState, delay_s: float) -> None:
    async def timer() -> None:
        await asyncio.sleep(max(0.0, delay_s) + TIMER_MARGIN_S)
        sweep(state, sandbox.clock.now())

    sandbox.spawn(timer())


def sweep(state: SandboxState, now: float) -> None:
    for payment in state.ledger.pending():
        if payment.status == "processing" and payment.completes_at is not None \
                and now >= payment.completes_at:
            _transition(state, payment, "succeeded", now)
        elif payment.status == "requires_action" and payment.next_action is not None \
                and now >= payment.next_action["expires_at"]:
            _transition(state, payment, "canceled", now)
        elif payment.status == "requires_capture":
            after_payment.lapse_if_due(state, payment, now)
    after_payment.settle_due(state, now)


def _approve(payment: Payment, now: float) -> None:
    if payment.capture == "manual":
        after_payment.place_hold(payment, now)
    else:
        payment.status = "succeeded"
        payment.amount_captured = payment.amount


def _transition(state: SandboxState, payment: Payment, status: PaymentStatus,
                now: float) -> None:
    payment.status = status
    payment.next_action = None
    payment.completes_at = None
    if status == "succeeded":
        _approve(payment, now)  # a hold lapses by the sweep, which every read runs
    state.events.emit(payment, f"payment.{payment.status}")


def complete_action(state: SandboxState, now: float, payment: Payment,
                    result: Literal["succeeded", "failed"]) -> None:
    sweep(state, now)  # an expired action can no longer be completed
    if payment.status != "requires_action":
        raise ApiError(409, "invalid_request", "payment_unexpected_state",
                       f"Payment is {payment.status}, not requires_action.")
    _transition(state, payment, result, now)


def refund(state: SandboxState, payment: Payment, amount: int | None) -> None:
    """The control's refund (first half of the contract): no refund object, only
    ``payment.refunded``; the API's pending refunds are not refundable again."""
    if payment.status != "succeeded":
        raise ApiError(409, "invalid_request", "payment_unexpected_state",
                       f"Only succeeded payments can be refunded; this one is {payment.status}.")
    remaining = after_payment.refundable(state, payment)
    amount = remaining if amount is None else amount
    if amount <= 0 or amount > remaining:
        raise invalid_param("amount", f"amount must be between 1 and {remaining}.")
    payment.amount_refunded += amount
    state.events.emit(payment, "payment.refunded", amount=amount)
