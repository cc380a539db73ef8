"""Payments and the ledger: every payment ever created, in creation order."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from paycore_sandbox.settings import Environment, SandboxAccount

PaymentStatus = Literal["processing", "requires_action", "requires_capture", "succeeded",
                        "declined", "failed", "canceled"]
CaptureMode = Literal["automatic", "manual"]
FINAL_STATUSES: frozenset[str] = frozenset({"succeeded", "declined", "failed", "canceled"})


def new_payment_id(prefix: str = "pay_") -> str:
    return prefix + secrets.token_hex(12)


@dataclass
class Payment:
    id: str
    account: str
    environment: Environment
    amount: int
    currency: str
    reference: str
    payment_method: str
    idempotency_key: str
    created: int
    status: PaymentStatus
    decline_code: str | None = None
    amount_refunded: int = 0
    next_action: dict[str, Any] | None = None
    description: str | None = None
    return_url: str | None = None
    # Sandbox clock time at which a tok_async payment succeeds.
    completes_at: float | None = None
    capture: CaptureMode = "automatic"
    amount_capturable: int = 0  # held, not yet captured; 0 while a capture is pending
    amount_captured: int = 0
    capture_before: int | None = None  # an uncaptured hold lapses then (requires_capture only)
    cancel_reference: str | None = None  # the merchant's reference of its cancel, if any
    # The wire dialect that created it (``paycore_sandbox.dialects``): its
    # lookups, webhook events and endpoints are that dialect's only.
    dialect: str = "cardco"
    # What the dialect's request said beyond the core fields (Stripe metadata, ...).
    dialect_data: dict[str, Any] = field(default_factory=dict)

    @property
    def livemode(self) -> bool:
        return self.environment == "live"

    def visible_to(self, account: SandboxAccount, dialect: str = "cardco") -> bool:
        # A payment is seen only through the wire that created it: a Cardco
        # lookup never finds an Adyen or Stripe payment of the same account.
        return self.account == account.account and self.environment == account.environment \
            and self.dialect == dialect

    def to_public(self) -> dict[str, Any]:
        """The wire payment object, exactly the contract's fields."""
        return {
            "id": self.id, "object": "payment", "account": self.account,
            "livemode": self.livemode, "amount": self.amount, "currency": self.currency,
            "reference": self.reference, "status": self.status,
            "decline_code": self.decline_code, "capture": self.capture,
            "amount_capturable": self.amount_capturable,
            "amount_captured": self.amount_captured, "amount_refunded": self.amount_refunded,
            "capture_before": self.capture_before,
            "next_action": dict(self.next_action) if self.next_action else None,
            "created": self.created,
        }

    def to_ledger(self) -> dict[str, Any]:
        """The control-plane view: the wire object plus who asked and how."""
        entry = self.to_public()
        entry.update({
            "environment": self.environment,
            "dialect": self.dialect,
            "provider_account": f"{self.dialect}:{self.account}:{self.environment}",
            "idempotency_key": self.idempotency_key,
            "payment_method": self.payment_method,
            "description": self.description,
            "return_url": self.return_url,
            "cancel_reference": self.cancel_reference,
        })
        return entry


class Ledger:
    def __init__(self) -> None:
        self._payments: dict[str, Payment] = {}  # insertion order == creation order
        # Payments by reference, in creation order: a lookup by reference is an index
        # read, as at a real provider, not a scan of every payment ever made (which
        # made the sandbox, not the caller, the bound of any lookup-heavy benchmark).
        # A payment's reference is set when it is created and never changes.
        self._by_reference: dict[str, list[Payment]] = {}
        # Payments not yet final, in creation order. Every lookup first sweeps these for
        # due transitions; a scan of the whole ledger there cost ~2.5 ms per lookup at
        # 10,000 payments and made the sandbox the bound of the recovery bench. A final
        # status is never left, so a payment found final is dropped for good.
        self._pending: dict[str, Payment] = {}

    def add(self, payment: Payment) -> None:
        self._payments[payment.id] = payment
        self._by_reference.setdefault(payment.reference, []).append(payment)
        if payment.status not in FINAL_STATUSES:
            self._pending[payment.id] = payment

    def get(self, payment_id: str) -> Payment | None:
        return self._payments.get(payment_id)

    def find_for(self, account: SandboxAccount, payment_id: str,
                 dialect: str = "cardco") -> Payment | None:
        payment = self._payments.get(payment_id)
        return payment if payment is not None and payment.visible_to(account, dialect) \
            else None

    def by_reference(self, account: SandboxAccount, reference: str,
                     dialect: str = "cardco") -> list[Payment]:
        return [p for p in self._by_reference.get(reference, ())
                if p.visible_to(account, dialect) and p.reference == reference]

    def visible(self, account: SandboxAccount, dialect: str) -> list[Payment]:
        """Every payment ``account`` created through ``dialect``, in creation order."""
        return [p for p in self._payments.values() if p.visible_to(account, dialect)]

    def pending(self) -> list[Payment]:
        """The payments not yet final, in creation order."""
        still = [p for p in self._pending.values() if p.status not in FINAL_STATUSES]
        if len(still) != len(self._pending):
            self._pending = {p.id: p for p in still}
        return still

    def __iter__(self) -> Iterator[Payment]:
        return iter(list(self._payments.values()))

    def __len__(self) -> int:
        return len(self._payments)
