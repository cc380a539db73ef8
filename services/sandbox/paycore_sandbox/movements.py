"""Captures and refunds: the money movements after a payment, and their book.

The objects are exactly the contract's (``cap_…`` / ``re_…``); the book keeps
every one ever made, in creation order, indexed like the payment ledger.

How the sandbox decides a movement's outcome (sandbox-only, deterministic, by
the last two digits of the amount in minor units, so a test picks it by the
amount it captures or refunds, as it picks a payment's by its token):

- ``…91``: ``pending``, then ``succeeded`` ``async_delay_s`` later (sandbox
  clock, like ``tok_async``), with webhooks;
- ``…92``: ``pending``, then ``failed`` (``failure_reason: declined``)
  ``async_delay_s`` later;
- ``…93``: ``pending`` until ``POST /_sandbox/{refunds|captures}/{id}/settle``;
- any other amount: ``succeeded`` at once.

A refund's amount is the one it moves (its default, all that is still
refundable, included).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from paycore_sandbox.ledger import Payment
from paycore_sandbox.settings import SandboxAccount

# Capture: pending, succeeded, failed. Refund: the same and canceled.
Settled = Literal["succeeded", "failed", "canceled"]
Settlement = Literal["now", "later_succeeded", "later_failed", "by_control"]

PENDING_SUCCEEDS, PENDING_FAILS, PENDING_UNTIL_SETTLED = 91, 92, 93
AUTO_FAILURE_REASON = "declined"


def outcome_for_amount(amount: int) -> Settlement:
    """How a capture or refund of ``amount`` settles in the sandbox (see the module doc)."""
    rules: dict[int, Settlement] = {PENDING_SUCCEEDS: "later_succeeded",
                                    PENDING_FAILS: "later_failed",
                                    PENDING_UNTIL_SETTLED: "by_control"}
    return rules.get(amount % 100, "now")


@dataclass
class Movement:
    """What captures and refunds share: the wire fields and the sandbox's bookkeeping."""

    id: str
    payment_id: str
    account: str
    environment: str
    livemode: bool
    amount: int
    currency: str
    reference: str
    idempotency_key: str
    created: int
    status: str
    failure_reason: str | None = None
    # Sandbox clock time at which a pending one settles by itself, and how.
    settles_at: float | None = None
    settles_to: Literal["succeeded", "failed"] | None = None
    # The wire dialect of its payment: its lookups and webhook events are that dialect's only.
    dialect: str = "cardco"

    object_name = "movement"

    @property
    def pending(self) -> bool:
        return self.status == "pending"

    def visible_to(self, account: SandboxAccount, dialect: str = "cardco") -> bool:
        # As a payment: seen only through the wire of the payment it moves money of.
        return self.account == account.account and self.environment == account.environment \
            and self.dialect == dialect

    def to_public(self) -> dict[str, Any]:
        """The wire object, exactly the contract's fields."""
        return {
            "id": self.id, "object": self.object_name, "payment": self.payment_id,
            "account": self.account, "livemode": self.livemode, "amount": self.amount,
            "currency": self.currency, "reference": self.reference, "status": self.status,
            "failure_reason": self.failure_reason, "created": self.created,
        }

    def to_ledger(self) -> dict[str, Any]:
        """The control-plane view: the wire object plus who asked."""
        return {**self.to_public(), "environment": self.environment,
                "idempotency_key": self.idempotency_key}


@dataclass
class Capture(Movement):
    object_name = "capture"


@dataclass
class Refund(Movement):
    reason: str | None = None  # kept for the control view; not a field of the wire object

    object_name = "refund"

    def to_ledger(self) -> dict[str, Any]:
        return {**super().to_ledger(), "reason": self.reason}


def new_movement(kind: type[Movement], prefix: str, payment: Payment, amount: int,
                 reference: str, idempotency_key: str, now: float) -> Movement:
    return kind(id=prefix + secrets.token_hex(12), payment_id=payment.id,
                account=payment.account, environment=payment.environment,
                livemode=payment.livemode, amount=amount, currency=payment.currency,
                reference=reference, idempotency_key=idempotency_key, created=int(now),
                status="pending", dialect=payment.dialect)


class MovementBook:
    """Every capture and refund ever made, in creation order; indexed by payment and
    by reference so lookups and the refundable check never scan the whole book."""

    def __init__(self) -> None:
        self._all: dict[str, Movement] = {}
        self._by_payment: dict[str, list[Movement]] = {}
        self._by_reference: dict[str, list[Movement]] = {}
        # Pending ones, swept for due settlements like the ledger's pending payments.
        self._pending: dict[str, Movement] = {}

    def add(self, movement: Movement) -> None:
        self._all[movement.id] = movement
        self._by_payment.setdefault(movement.payment_id, []).append(movement)
        self._by_reference.setdefault(movement.reference, []).append(movement)
        if movement.pending:
            self._pending[movement.id] = movement

    def get(self, movement_id: str) -> Movement | None:
        return self._all.get(movement_id)

    def of_payment(self, payment_id: str) -> list[Movement]:
        return list(self._by_payment.get(payment_id, ()))

    def by_reference(self, reference: str) -> list[Movement]:
        return list(self._by_reference.get(reference, ()))

    def pending(self) -> list[Movement]:
        """The pending ones, in creation order."""
        still = [m for m in self._pending.values() if m.pending]
        if len(still) != len(self._pending):
            self._pending = {m.id: m for m in still}
        return still

    def __iter__(self) -> Iterator[Movement]:
        return iter(list(self._all.values()))
