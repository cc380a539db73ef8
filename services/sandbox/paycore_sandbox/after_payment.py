"""After the payment: holds, captures, cancels and refunds, each change emitting its events.

The rules of the contract's second half, on the payments of the dialect that
asks (``dialect``: Cardco's endpoints, Stripe's refunds, captures and cancels,
and Adyen's modifications, each answering in its own wire). Every check and the
change it guards run without an await in between, so two concurrent requests can never both pass a check
that only one of them may pass (two refunds that together exceed the
refundable amount: exactly one is made).

Time-driven changes (a hold lapsing at ``capture_before``, a pending capture or
refund settling by itself; see :mod:`paycore_sandbox.movements` for which do)
are applied by :func:`paycore_sandbox.lifecycle.sweep`, like the payments' own.
"""

from __future__ import annotations

import asyncio

from paycore_sandbox.clock import TIMER_MARGIN_S
from paycore_sandbox.errors import ApiError
from paycore_sandbox.ledger import Payment
from paycore_sandbox.movements import (
    AUTO_FAILURE_REASON,
    Capture,
    Movement,
    Refund,
    Settled,
    new_movement,
    outcome_for_amount,
)
from paycore_sandbox.settings import SandboxAccount
from paycore_sandbox.state import Sandbox, SandboxState
from paycore_sandbox.validation import CancelRequest, CaptureRequest, RefundRequest

# How long an uncaptured hold lasts in the sandbox (the contract: 7 days).
HOLD_WINDOW_S = 7 * 86400
DEFAULT_REFUND_FAILURE = "expired_or_canceled_card"


def _refused(code: str, message: str) -> ApiError:
    return ApiError(400, "invalid_request", code, message)


def _unexpected(what: str, status: str, expected: str) -> ApiError:
    # As the payment action control answers a payment in the wrong state.
    return ApiError(409, "invalid_request", f"{what}_unexpected_state",
                    f"The {what} is {status}, not {expected}.")


def payment_for(state: SandboxState, account: SandboxAccount, payment_id: str,
                param: str | None = None, *, dialect: str = "cardco") -> Payment:
    """The account's payment ``payment_id`` of ``dialect``, or 404."""
    payment = state.ledger.find_for(account, payment_id, dialect)
    if payment is None:
        raise ApiError(404, "invalid_request", "resource_missing",
                       f"No such payment: {payment_id}", param=param)
    return payment


# -- holds ---------------------------------------------------------------------

def place_hold(payment: Payment, now: float) -> None:
    """An approved manual payment: the amount is held until ``capture_before``."""
    payment.status = "requires_capture"
    payment.amount_capturable = payment.amount
    payment.capture_before = int(now) + HOLD_WINDOW_S


def _capturable(payment: Payment) -> bool:
    # A pending capture has taken the hold (amount_capturable 0): one capture per payment.
    return payment.status == "requires_capture" and payment.amount_capturable > 0


def lapse_if_due(state: SandboxState, payment: Payment, now: float) -> None:
    """Cancel a hold whose ``capture_before`` passed with nothing captured."""
    if _capturable(payment) and payment.capture_before is not None \
            and now >= payment.capture_before:
        _release(state, payment)


def _release(state: SandboxState, payment: Payment) -> None:
    payment.status = "canceled"
    payment.amount_capturable = 0
    payment.capture_before = None
    state.events.emit(payment, "payment.canceled")


def cancel(state: SandboxState, account: SandboxAccount, req: CancelRequest, *,
           dialect: str = "cardco") -> Payment:
    payment = payment_for(state, account, req.payment, dialect=dialect)
    if not _capturable(payment):
        raise _refused("payment_not_cancelable",
                       f"Only an uncaptured hold can be canceled; the payment is "
                       f"{payment.status}, amount_capturable {payment.amount_capturable}.")
    payment.cancel_reference = req.reference
    _release(state, payment)
    return payment


# -- captures and refunds --------------------------------------------------------

def capture(sandbox: Sandbox, state: SandboxState, account: SandboxAccount,
            req: CaptureRequest, key: str, *, dialect: str = "cardco") -> Capture:
    payment = payment_for(state, account, req.payment, dialect=dialect)
    if not _capturable(payment):
        raise _refused("payment_not_capturable",
                       f"The payment is {payment.status}: it has no hold to capture.")
    if req.amount > payment.amount_capturable:
        raise _refused("amount_too_large",
                       f"amount must be at most amount_capturable, {payment.amount_capturable}.")
    made = new_movement(Capture, "cap_", payment, req.amount, req.reference, key,
                        sandbox.clock.now())
    assert isinstance(made, Capture)
    payment.amount_capturable = 0  # taken by this capture until it settles
    _begin(sandbox, state, made)
    return made


def refundable(state: SandboxState, payment: Payment) -> int:
    """Captured minus refunded, pending refunds counting as refunded."""
    pending = sum(m.amount for m in state.movements.of_payment(payment.id)
                  if isinstance(m, Refund) and m.pending)
    return payment.amount_captured - payment.amount_refunded - pending


def refund(sandbox: Sandbox, state: SandboxState, account: SandboxAccount,
           req: RefundRequest, key: str, *, dialect: str = "cardco") -> Refund:
    payment = payment_for(state, account, req.payment, param="payment", dialect=dialect)
    if payment.status != "succeeded":
        raise _refused("payment_not_refundable",
                       f"Only a succeeded payment can be refunded; this one is "
                       f"{payment.status}.")
    left = refundable(state, payment)
    amount = left if req.amount is None else req.amount
    if amount > left or amount == 0:  # 0: nothing is left to refund by default
        raise _refused("amount_exceeds_refundable",
                       f"amount must be at most what is still refundable, {left}.")
    made = new_movement(Refund, "re_", payment, amount, req.reference, key,
                        sandbox.clock.now())
    assert isinstance(made, Refund)
    made.reason = req.reason
    _begin(sandbox, state, made)
    return made


def _begin(sandbox: Sandbox, state: SandboxState, movement: Movement) -> None:
    """Record a new capture or refund and start it as its amount decides."""
    plan = outcome_for_amount(movement.amount)
    state.movements.add(movement)
    if plan == "now":
        _settle(state, movement, "succeeded")
        return
    if plan != "by_control":
        delay_s = sandbox.settings.async_delay_s
        movement.settles_at = sandbox.clock.now() + delay_s
        movement.settles_to = "succeeded" if plan == "later_succeeded" else "failed"
        _settle_later(sandbox, state, delay_s)
    _emit(state, movement)


def _settle_later(sandbox: Sandbox, state: SandboxState, delay_s: float) -> None:
    # Events are emitted even if nobody looks, as for tok_async payments.
    async def timer() -> None:
        await asyncio.sleep(max(0.0, delay_s) + TIMER_MARGIN_S)
        settle_due(state, sandbox.clock.now())

    sandbox.spawn(timer())


def settle_due(state: SandboxState, now: float) -> None:
    """Settle the pending captures and refunds whose time has come."""
    for movement in state.movements.pending():
        if movement.settles_at is not None and movement.settles_to is not None \
                and now >= movement.settles_at:
            reason = AUTO_FAILURE_REASON if movement.settles_to == "failed" else None
            _settle(state, movement, movement.settles_to, reason)


def settle(state: SandboxState, movement: Movement, result: Settled,
           failure_reason: str | None) -> None:
    """The control's settlement of a pending capture or refund."""
    if not movement.pending:
        raise _unexpected(movement.object_name, movement.status, "pending")
    _settle(state, movement, result, failure_reason if result == "failed" else None)


def fail_refund(state: SandboxState, refund_: Refund, failure_reason: str) -> None:
    """The card network returned a succeeded refund: it fails, its amount is refundable again."""
    if refund_.status != "succeeded":
        raise _unexpected("refund", refund_.status, "succeeded")
    payment = state.ledger.get(refund_.payment_id)
    assert payment is not None
    payment.amount_refunded -= refund_.amount
    refund_.status = "failed"
    refund_.failure_reason = failure_reason
    _emit(state, refund_)


def _settle(state: SandboxState, movement: Movement, status: Settled,
            failure_reason: str | None = None) -> None:
    """``movement`` becomes ``status``; its payment changes with it, events for each."""
    payment = state.ledger.get(movement.payment_id)
    assert payment is not None
    movement.status = status
    movement.settles_at = movement.settles_to = None
    if status == "failed":
        movement.failure_reason = failure_reason or AUTO_FAILURE_REASON
    _emit(state, movement)
    if isinstance(movement, Capture):
        if status == "succeeded":
            payment.status = "succeeded"
            payment.amount_captured = movement.amount
            payment.amount_capturable = 0  # the rest of the hold is released
            payment.capture_before = None
            state.events.emit(payment, "payment.succeeded", caused_by=movement.id)
        else:  # the hold stays as it was (and may lapse at the next sweep)
            payment.amount_capturable = payment.amount
    elif status == "succeeded":
        payment.amount_refunded += movement.amount
        state.events.emit(payment, "payment.refunded", amount=movement.amount,
                          caused_by=movement.id)


def _emit(state: SandboxState, movement: Movement) -> None:
    state.events.emit_movement(movement, f"{movement.object_name}.{movement.status}")
