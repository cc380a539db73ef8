"""The effects the operations queue validate against their released contracts (tests/contracts)."""

from __future__ import annotations

from paycore import contracts
from paycore.domain import OperationKind
from paycore.operations import Operation
from tests.contracts.test_producers import released_validator
from tests.support.stack import Stack

from .support import paid_order, sender


async def test_a_refunds_effects_validate_against_the_released_schemas(stack: Stack) -> None:
    _, attempt_id = await paid_order(stack, 5000)
    async with sender(stack) as s:
        for amount in (1000, 4000):
            done = await s.request(attempt_id, OperationKind.REFUND, amount, requested_by="test")
            assert isinstance(done, Operation)
    rows = await stack.pool.fetch("SELECT kind, payload, dedup_key, ordering_key FROM outbox_messages "
                                  "WHERE attempt_id = $1 AND kind LIKE 'refund-%' ORDER BY message_id",
                                  attempt_id)
    assert [(r["kind"], r["payload"]["order_status"]) for r in rows] == [
        ("refund-succeeded", "PartiallyRefunded"), ("refund-succeeded", "Refunded")]
    for r in rows:
        assert r["ordering_key"] == f"attempt:{attempt_id}"  # after the payment's own effects
        assert r["dedup_key"] == f"operation:{r['payload']['operation_id']}:{r['kind']}"
        problems = [e.message for e in released_validator(r["kind"], 1).iter_errors(r["payload"])]
        assert problems == [] and contracts.validate(r["payload"]) == []
