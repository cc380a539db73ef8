"""Refunds sent by paycore (issue 29), against the sandbox over HTTP on real PostgreSQL.

Recorded before sent, one send of the stored bytes under the stored key, every unanswered
ending Unknown, never more back than was taken, and the effects and order status that follow.
"""

from __future__ import annotations

import asyncio

from paycore.domain import OperationKind, OperationRefusal, OperationState
from paycore.operations import Operation, Refused, operations_of
from tests.support.stack import Stack

from .support import effects_of, eventually, order_status, paid_order, refund_posts, sender

REFUND = OperationKind.REFUND
S = OperationState


async def test_a_full_refund_succeeds_once_and_the_order_is_refunded(stack: Stack) -> None:
    order_id, attempt_id = await paid_order(stack, 5000)
    async with sender(stack) as s:
        done = await s.request(attempt_id, REFUND, 5000, requested_by="test")
    assert isinstance(done, Operation) and done.state is S.SUCCEEDED, done
    assert done.provider_operation_id is not None
    assert await order_status(stack.pool, order_id) == "Refunded"
    assert (await effects_of(stack.pool, attempt_id))[-1] == "refund-succeeded"
    refunds = await refund_posts(stack)
    assert len(refunds) == 1
    assert refunds[0]["headers"]["idempotency-key"] == f'"{done.idempotency_key}"'


async def test_partial_refunds_add_up_to_the_capture_and_no_further(stack: Stack) -> None:
    order_id, attempt_id = await paid_order(stack, 5000)
    async with sender(stack) as s:
        first = await s.request(attempt_id, REFUND, 2000, requested_by="test")
        assert isinstance(first, Operation) and first.state is S.SUCCEEDED
        assert await order_status(stack.pool, order_id) == "PartiallyRefunded"
        over = await s.request(attempt_id, REFUND, 3001, requested_by="test")
        assert over == Refused(OperationRefusal.EXCEEDS_REFUNDABLE)
        rest = await s.request(attempt_id, REFUND, 3000, requested_by="test")
        assert isinstance(rest, Operation) and rest.state is S.SUCCEEDED
    assert await order_status(stack.pool, order_id) == "Refunded"
    assert sorted(op.amount_minor for op in await operations_of(stack.pool, attempt_id)) == [2000, 3000]


async def test_two_concurrent_partial_refunds_cannot_both_pass(stack: Stack) -> None:
    # Hyperswitch#13182: two $60 refunds of a $100 payment both succeeded.
    _, attempt_id = await paid_order(stack, 10000)
    async with sender(stack) as s:
        results = await asyncio.gather(*(s.request(attempt_id, REFUND, 6000, requested_by=f"test{i}")
                                         for i in range(2)))
    assert sorted(type(r).__name__ for r in results) == ["Operation", "Refused"]
    assert len(await refund_posts(stack)) == 1


async def test_a_lost_response_is_unknown_and_holds_its_amount(stack: Stack) -> None:
    _, attempt_id = await paid_order(stack, 5000)
    await stack.sandbox.fault("lose_response", match={"operation": "refund"}, times=1)
    async with sender(stack) as s:
        sending = asyncio.create_task(s.request(attempt_id, REFUND, 5000, requested_by="test"))
        await eventually(lambda: refund_posts(stack), what="the refund's POST")
        stack.clock.advance(stack.settings.budgets.call_s)  # the call budget fires: no answer
        lost = await sending
        assert isinstance(lost, Operation) and lost.state is S.UNKNOWN, lost
        # The provider may have paid it: nothing more can be refunded until evidence frees it.
        again = await s.request(attempt_id, REFUND, 1, requested_by="test")
    assert again == Refused(OperationRefusal.EXCEEDS_REFUNDABLE)
    assert "refund-succeeded" not in await effects_of(stack.pool, attempt_id)


async def test_a_refund_refused_before_execution_is_not_applied_and_frees_its_amount(stack: Stack) -> None:
    _, attempt_id = await paid_order(stack, 5000)
    await stack.sandbox.fault("not_processed_503", match={"operation": "refund"}, times=1)
    async with sender(stack) as s:
        first = await s.request(attempt_id, REFUND, 5000, requested_by="test")
        # A 503 before processing proves nothing was done only where the contract says so;
        # whichever it is, the refund is not Succeeded and no effect says it was.
        assert isinstance(first, Operation) and first.state in (S.NOT_APPLIED, S.UNKNOWN), first
    assert "refund-succeeded" not in await effects_of(stack.pool, attempt_id)


async def test_a_pending_refund_stays_started_until_evidence(stack: Stack) -> None:
    _, attempt_id = await paid_order(stack, 5000)
    async with sender(stack) as s:
        pending = await s.request(attempt_id, REFUND, 1093, requested_by="test")  # 93: pending until settled
    assert isinstance(pending, Operation) and pending.state is S.STARTED
    assert pending.provider_status == "pending"
    assert "refund-succeeded" not in await effects_of(stack.pool, attempt_id)
