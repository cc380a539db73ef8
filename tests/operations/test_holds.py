"""Authorize now, capture later (issue 29): holds, captures and voids, against the sandbox.

An order asks for manual capture; its payment succeeds as a hold (provider status
``requires_capture``) and the order is Authorized. One capture, at most the hold, charges it
(Paid; then refundable up to the capture); a void releases it (Voided); never both, never a
void after a capture; a hold nobody captures is warned about and, once lapsed, Voided.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from uuid import UUID

from paycore import holds
from paycore.domain import HOLD_STATUS, HoldStep, OperationKind, OperationRefusal, OperationState
from paycore.operations import Operation, Refused
from tests.support.recovery import RecoveryStack
from tests.support.stack import Stack

from .support import Stack as OperationsStack
from .support import effects_of, order_status, paid_order, sender

CAPTURE, CANCEL, REFUND = OperationKind.CAPTURE, OperationKind.CANCEL, OperationKind.REFUND
S = OperationState


async def held(stack: OperationsStack, amount: int = 5000) -> tuple[str, UUID]:
    order_id, attempt_id = await paid_order(stack, amount, capture="manual")
    status = await stack.pool.fetchval("SELECT provider_status FROM payment_attempts WHERE attempt_id = $1",
                                       attempt_id)
    assert status == HOLD_STATUS
    assert await order_status(stack.pool, order_id) == "Authorized"
    return order_id, attempt_id


async def test_a_partial_capture_charges_once_and_then_is_refundable_up_to_it(stack: Stack) -> None:
    order_id, attempt_id = await held(stack)
    async with sender(stack) as s:
        assert await s.request(attempt_id, REFUND, 100, requested_by="t") == Refused(
            OperationRefusal.NOT_CAPTURED)
        assert await s.request(attempt_id, CAPTURE, 5001, requested_by="t") == Refused(
            OperationRefusal.EXCEEDS_CAPTURABLE)
        captured = await s.request(attempt_id, CAPTURE, 3000, requested_by="t")
        assert isinstance(captured, Operation) and captured.state is S.SUCCEEDED, captured
        assert await order_status(stack.pool, order_id) == "Paid"
        assert await s.request(attempt_id, CAPTURE, 1000, requested_by="t") == Refused(
            OperationRefusal.NOT_CAPTURABLE)  # one capture; the rest of the hold is released
        assert await s.request(attempt_id, CANCEL, 5000, requested_by="t") == Refused(
            OperationRefusal.NOT_CANCELABLE)  # never a void after a capture
        assert await s.request(attempt_id, REFUND, 3001, requested_by="t") == Refused(
            OperationRefusal.EXCEEDS_REFUNDABLE)
        refunded = await s.request(attempt_id, REFUND, 3000, requested_by="t")
        assert isinstance(refunded, Operation) and refunded.state is S.SUCCEEDED
    assert await order_status(stack.pool, order_id) == "Refunded"
    effects = await effects_of(stack.pool, attempt_id)
    assert effects == ["order-confirmation", "fulfillment-request", "captured", "refund-succeeded"]


async def test_a_void_releases_the_hold_and_nothing_can_be_captured_after(stack: Stack) -> None:
    order_id, attempt_id = await held(stack)
    async with sender(stack) as s:
        assert await s.request(attempt_id, CANCEL, 4000, requested_by="t") == Refused(
            OperationRefusal.NOT_CANCELABLE)  # a void releases the whole hold
        voided = await s.request(attempt_id, CANCEL, 5000, requested_by="t")
        assert isinstance(voided, Operation) and voided.state is S.SUCCEEDED, voided
        assert await s.request(attempt_id, CAPTURE, 5000, requested_by="t") == Refused(
            OperationRefusal.NOT_CAPTURABLE)
    assert await order_status(stack.pool, order_id) == "Voided"
    assert (await effects_of(stack.pool, attempt_id))[-1] == "voided"


async def test_a_capture_and_a_void_racing_record_one(stack: Stack) -> None:
    _, attempt_id = await held(stack)
    async with sender(stack) as s:
        results = await asyncio.gather(s.request(attempt_id, CAPTURE, 5000, requested_by="a"),
                                       s.request(attempt_id, CANCEL, 5000, requested_by="b"))
    assert sorted(type(r).__name__ for r in results) == ["Operation", "Refused"]
    posts = [r for r in await stack.sandbox.requests()
             if r["method"] == "POST" and r["path"].endswith(("/captures", "/cancel"))]
    assert len(posts) == 1


async def test_a_hold_nobody_captures_is_warned_about_then_voided_once(rec: RecoveryStack) -> None:
    order_id, attempt_id = await held(rec.hooks)
    worker = rec.worker()
    assert await worker.holds.run_pass() == [HoldStep.WAIT]
    rec.clock.advance(timedelta(days=6, seconds=1).total_seconds())
    assert await worker.holds.run_pass() == [HoldStep.WARN]
    assert await worker.holds.run_pass() == [HoldStep.WARN]  # one episode, however many passes
    assert await rec.open_escalations() == [f"attempt:{attempt_id}:authorization-lapsing"]
    rec.clock.advance(timedelta(days=1).total_seconds())
    assert await worker.holds.run_pass() == [HoldStep.LAPSED]
    assert await worker.holds.run_pass() == []  # Voided: held no more
    assert await order_status(rec.pool, order_id) == "Voided"
    assert (await effects_of(rec.pool, attempt_id)).count("authorization-lapsed") == 1


async def test_a_lapse_read_before_a_capture_ended_records_nothing(stack: Stack) -> None:
    order_id, attempt_id = await held(stack)
    [seen] = await holds.held_payments(stack.pool, 10)  # the hold task read it held ...
    async with sender(stack) as s:  # ... and a capture ended before it wrote the lapse
        captured = await s.request(attempt_id, CAPTURE, 5000, requested_by="t")
    assert isinstance(captured, Operation) and captured.state is S.SUCCEEDED
    assert not await holds.record_lapse(stack.pool, seen, now=stack.clock.now())
    assert await order_status(stack.pool, order_id) == "Paid"
    assert "authorization-lapsed" not in await effects_of(stack.pool, attempt_id)
