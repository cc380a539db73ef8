"""Webhook events: built on every payment, capture and refund status change and kept
in memory.

Each event is rendered, when emitted, in the dialect of its payment
(:mod:`paycore_sandbox.dialects`): its type and data object are that
provider's. ``GET /_sandbox/events`` shows them as recorded. Every event is also handed to
a listener — the :class:`paycore_sandbox.delivery.WebhookSender` of the
current state — which POSTs it to the configured endpoints, signed, with
retries and the webhook faults.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from paycore_sandbox.clock import SandboxClock
from paycore_sandbox.dialects import DEFAULT_DIALECT, dialect_named
from paycore_sandbox.ledger import Payment
from paycore_sandbox.movements import Movement


@dataclass(frozen=True)
class Event:
    id: str  # stable across redeliveries; a sender in unstable-id mode hides it
    type: str
    created: int
    account: str
    livemode: bool
    environment: str
    sequence: int
    payment: dict[str, Any]  # the dialect's data object, snapshot at emission time
    payment_id: str
    reference: str | None
    dialect: str = DEFAULT_DIALECT
    idempotency_key: str | None = None  # of the request that created the payment
    # What this event moved, when it is not the payment's amount (a refund's amount).
    amount: int | None = None
    # The capture or refund the event is about (its data object); None: the payment.
    object_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The event body in its dialect (Cardco: the contract's event body)."""
        return dialect_named(self.dialect).event_json(self)


EventListener = Callable[[Event], object]


class WebhookEmitter:
    def __init__(self, clock: SandboxClock, listener: EventListener | None = None) -> None:
        self._clock = clock
        self._listener = listener
        self._events: list[Event] = []
        self._by_id: dict[str, Event] = {}
        self._sequences: dict[str, int] = {}

    def emit(self, payment: Payment, type_: str, *, amount: int | None = None) -> Event:
        """Record the core event ``type_`` (``payment.<status>``) about ``payment``;
        ``amount``: what it moved when not the payment's amount (a refund's)."""
        wire_type, data = dialect_named(payment.dialect).render_event(payment, type_)
        return self._record(Event(
            id="", type=wire_type, created=0, account=payment.account,
            livemode=payment.livemode, environment=payment.environment, sequence=0,
            payment=data, payment_id=payment.id, reference=payment.reference or None,
            dialect=payment.dialect, idempotency_key=payment.idempotency_key or None,
            amount=amount))

    def emit_movement(self, movement: Movement, type_: str) -> Event:
        """Record ``capture.<status>`` / ``refund.<status>`` about ``movement``.

        The data object is Cardco's contract object (a dialect without one, Adyen, renders
        its notification from it); the event goes to the endpoints of its payment's dialect;
        ``sequence`` counts the events of the movement itself, and webhook faults match
        its own reference.
        """
        return self._record(Event(
            id="", type=type_, created=0, account=movement.account,
            livemode=movement.livemode, environment=movement.environment, sequence=0,
            payment=movement.to_public(), payment_id=movement.payment_id,
            reference=movement.reference, dialect=movement.dialect,
            idempotency_key=movement.idempotency_key, amount=movement.amount,
            object_id=movement.id))

    def _record(self, draft: Event) -> Event:
        """Stamp ``draft`` with its id, time and sequence (per data object), keep it
        and hand it to the listener."""
        object_id = draft.object_id or draft.payment_id
        sequence = self._sequences.get(object_id, 0) + 1
        self._sequences[object_id] = sequence
        event = replace(draft, id="evt_" + secrets.token_hex(12), created=self._clock.unix(),
                        sequence=sequence)
        self._events.append(event)
        self._by_id[event.id] = event
        if self._listener is not None:
            self._listener(event)
        return event

    def get(self, event_id: str) -> Event | None:
        return self._by_id.get(event_id)

    def events(self, payment_id: str | None = None) -> list[Event]:
        return [e for e in self._events if payment_id is None or e.payment_id == payment_id]
