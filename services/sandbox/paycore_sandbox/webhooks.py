"""Webhook events: built on every payment status change and kept in memory.

``GET /_sandbox/events`` shows them as recorded. Every event is also handed to
a listener — the :class:`paycore_sandbox.delivery.WebhookSender` of the
current state — which POSTs it to the configured endpoints, signed, with
retries and the webhook faults.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from paycore_sandbox.clock import SandboxClock
from paycore_sandbox.ledger import Payment


@dataclass(frozen=True)
class Event:
    id: str  # stable across redeliveries; a sender in unstable-id mode hides it
    type: str
    created: int
    account: str
    livemode: bool
    environment: str
    sequence: int
    payment: dict[str, Any]  # snapshot at emission time
    # The dialect of the payment: which endpoints get the event, and how it is rendered.
    dialect: str = "cardco"
    # What this event moved, when it is not the payment's amount (a refund's amount).
    amount: int | None = None

    @property
    def payment_id(self) -> str:
        return str(self.payment["id"])

    @property
    def reference(self) -> str | None:
        ref = self.payment.get("reference")
        return ref if isinstance(ref, str) else None

    def to_json(self) -> dict[str, Any]:
        """The contract's event body."""
        return {"id": self.id, "type": self.type, "created": self.created,
                "account": self.account, "livemode": self.livemode,
                "sequence": self.sequence, "data": {"object": dict(self.payment)}}


EventListener = Callable[[Event], object]


class WebhookEmitter:
    def __init__(self, clock: SandboxClock, listener: EventListener | None = None) -> None:
        self._clock = clock
        self._listener = listener
        self._events: list[Event] = []
        self._by_id: dict[str, Event] = {}
        self._sequences: dict[str, int] = {}

    def emit(self, payment: Payment, type_: str, *, amount: int | None = None) -> Event:
        sequence = self._sequences.get(payment.id, 0) + 1
        self._sequences[payment.id] = sequence
        event = Event(id="evt_" + secrets.token_hex(12), type=type_,
                      created=self._clock.unix(), account=payment.account,
                      livemode=payment.livemode, environment=payment.environment,
                      sequence=sequence, payment=payment.to_public(),
                      dialect=payment.dialect, amount=amount)
        self._events.append(event)
        self._by_id[event.id] = event
        if self._listener is not None:
            self._listener(event)
        return event

    def get(self, event_id: str) -> Event | None:
        return self._by_id.get(event_id)

    def events(self, payment_id: str | None = None) -> list[Event]:
        return [e for e in self._events if payment_id is None or e.payment_id == payment_id]
