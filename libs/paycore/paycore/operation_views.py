"""A capture, cancel or refund as the store's back office and ``paycore refunds show`` read it:
the operation, the order it is of, and its timeline (the payment's history events that name it).

Reads only. An order's payment is its Succeeded attempt
(:func:`paycore.attempt_row.succeeded_attempt_of_order`); operations exist on no other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from paycore.attempt_row import get_attempt, succeeded_attempt_of_order
from paycore.domain import Attempt, OperationKind, OperationRefusal
from paycore.events import operation_events
from paycore.operations import Operation, OperationNotFound, get_operation, operations_of
from paycore.orders import OrderNotFound, find_order

__all__ = ["NO_PAYMENT", "REFUSALS", "OperationView", "TimelineEntry", "payment_of_order", "view_operation",
           "views_of_payment"]

# A refusal in words (a title and a detail), for the back office's problem and the CLI's message.
REFUSALS: dict[OperationRefusal, tuple[str, str]] = {
    OperationRefusal.NOT_CAPTURED: (
        "Payment not captured",
        "The order's payment charged nothing that could be refunded: a hold not captured yet, or no "
        "payment that succeeded."),
    OperationRefusal.EXCEEDS_REFUNDABLE: (
        "Amount exceeds what is refundable",
        "More than what was captured less every refund that succeeded or is still in flight (an "
        "unanswered refund holds its amount until evidence settles it)."),
    OperationRefusal.NOT_CAPTURABLE: (
        "Payment not capturable",
        "Only a hold (an order created with capture: manual) not yet captured or voided is captured; "
        "a payment captured when it succeeded is not."),
    OperationRefusal.EXCEEDS_CAPTURABLE: (
        "Amount exceeds the hold", "More than the payment holds."),
    OperationRefusal.NOT_CANCELABLE: (
        "Payment not cancelable",
        "Only a hold not yet captured or voided is voided; a payment captured when it succeeded is "
        "refunded instead."),
    OperationRefusal.AMOUNT_NOT_POSITIVE: (
        "Amount not positive", "The amount must be a positive number of minor units."),
}
# An order without a payment that succeeded can give nothing: the refusal the rule gives a
# payment whose headroom is zero (paycore.operations.record_operation).
NO_PAYMENT: dict[OperationKind, OperationRefusal] = {
    OperationKind.REFUND: OperationRefusal.NOT_CAPTURED,
    OperationKind.CAPTURE: OperationRefusal.NOT_CAPTURABLE,
    OperationKind.CANCEL: OperationRefusal.NOT_CANCELABLE,
}


@dataclass(frozen=True)
class TimelineEntry:
    """One event of an operation's history: what happened, when, and the move it made (if one)."""

    kind: str  # send_intent, transition, notification, lookup, …
    occurred_at: datetime
    from_state: str | None
    to_state: str | None

    @classmethod
    def from_record(cls, r: Mapping[str, Any]) -> TimelineEntry:
        detail = r["detail"] if isinstance(r["detail"], Mapping) else {}
        moved = r["kind"] == "transition"
        return cls(r["kind"], r["occurred_at"], detail.get("from") if moved else None,
                   detail.get("to") if moved else None)

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "occurred_at": self.occurred_at.isoformat(), "from": self.from_state,
                "to": self.to_state}


@dataclass(frozen=True)
class OperationView:
    operation: Operation
    order_id: str
    timeline: tuple[TimelineEntry, ...]

    def as_json(self) -> dict[str, Any]:
        """What the store sees: never the stored request, its key or the lease."""
        op = self.operation
        return {"operation_id": str(op.operation_id), "kind": op.kind.value, "order_id": self.order_id,
                "attempt_id": str(op.attempt_id), "amount_minor": op.amount_minor, "currency": op.currency,
                "state": op.state.value, "provider_status": op.provider_status,
                "provider_operation_id": op.provider_operation_id, "outcome_reason": op.outcome_reason,
                "requested_by": op.requested_by, "created_at": op.created_at.isoformat(),
                "timeline": [e.as_json() for e in self.timeline]}


async def payment_of_order(conn: asyncpg.Connection | asyncpg.Pool, order_id: str) -> Attempt | None:
    """The order's payment (its Succeeded attempt), ``None`` while it has none.

    :raises OrderNotFound: no such order.
    """
    attempt = await succeeded_attempt_of_order(conn, order_id)
    if attempt is None and await find_order(conn, order_id) is None:
        raise OrderNotFound(f"order {order_id} not found")
    return attempt


async def view_operation(conn: asyncpg.Connection | asyncpg.Pool, operation_id: UUID,
                         kind: OperationKind | None = None) -> OperationView:
    """The operation ``operation_id`` with its order and timeline.

    :raises OperationNotFound: no such operation (of ``kind``, when given).
    """
    operation = await get_operation(conn, operation_id)
    if kind is not None and operation.kind is not kind:
        raise OperationNotFound(f"operation {operation_id} is not a {kind.value}")
    payment = await get_attempt(conn, operation.attempt_id)
    return (await _with_timelines(conn, [operation], payment.order_id))[0]


async def views_of_payment(conn: asyncpg.Connection | asyncpg.Pool, payment: Attempt,
                           kind: OperationKind | None = None) -> list[OperationView]:
    """The payment's operations (of ``kind``, when given), oldest first, with their timelines."""
    found = [op for op in await operations_of(conn, payment.attempt_id) if kind is None or op.kind is kind]
    return await _with_timelines(conn, found, payment.order_id)


async def _with_timelines(conn: asyncpg.Connection | asyncpg.Pool, found: list[Operation],
                          order_id: str) -> list[OperationView]:
    timelines: dict[UUID, list[TimelineEntry]] = {op.operation_id: [] for op in found}
    for row in await operation_events(conn, list(timelines)):
        timelines[row["operation_id"]].append(TimelineEntry.from_record(row))
    return [OperationView(op, order_id, tuple(timelines[op.operation_id])) for op in found]
