"""Decision 0008: a payment charged after its order was cancelled is refunded by paycore, once.

The customer cancels while the payment's answer is lost; the charge stands (recovery finds it
Succeeded, ``succeeded-after-cancel`` is raised), and in the same sweep recovery refunds it whole
as its own operation (``requested_by = 'paycore'``). A second sweep, a second worker, or a
second notification refunds nothing more. ``PAYCORE_SUCCEEDED_AFTER_CANCEL=escalate`` only asks
a person, as before the decision.
"""

from __future__ import annotations

import dataclasses

from paycore import orders
from paycore.attempts import Attempt
from paycore.domain import OperationKind, OperationState
from paycore.operations import operations_of
from tests.support.recovery import RecoveryStack

from .support import effects_of, refund_posts


async def charged_after_cancel(rec: RecoveryStack) -> Attempt:
    attempt = await rec.unknown_via_checkout("lose_response")
    cancelled = await orders.cancel_order(rec.pool, attempt.order_id, attempt.customer_id, rec.clock.now())
    assert cancelled.cancel_requested_at is not None
    await rec.make_due(attempt)
    return attempt


async def test_a_charge_after_cancel_is_refunded_whole_once(rec: RecoveryStack) -> None:
    attempt = await charged_after_cancel(rec)
    await rec.worker().run_pass()
    assert await rec.state(attempt) == "Succeeded"
    [refund] = await operations_of(rec.pool, attempt.attempt_id)
    assert (refund.kind, refund.state, refund.requested_by, refund.amount_minor) == (
        OperationKind.REFUND, OperationState.SUCCEEDED, "paycore", attempt.amount_minor)
    assert (await effects_of(rec.pool, attempt.attempt_id))[-1] == "refund-succeeded"
    # A person still sees what happened: the episode stays, naming the order.
    assert f"attempt:{attempt.attempt_id}:succeeded-after-cancel" in await rec.open_escalations()
    for owner in ("w1", "w2"):
        await rec.worker(owner).run_pass()
    assert len(await operations_of(rec.pool, attempt.attempt_id)) == 1
    assert len(await refund_posts(rec.hooks)) == 1


async def test_with_escalate_a_person_decides(rec: RecoveryStack) -> None:
    attempt = await charged_after_cancel(rec)
    await rec.worker(recovery=dataclasses.replace(rec.recovery, succeeded_after_cancel="escalate")).run_pass()
    assert await rec.state(attempt) == "Succeeded"
    assert await operations_of(rec.pool, attempt.attempt_id) == []
    assert f"attempt:{attempt.attempt_id}:succeeded-after-cancel" in await rec.open_escalations()
