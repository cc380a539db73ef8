"""Webhook events: built on every payment status change and kept in memory.

Today this module only *records* events (``GET /_sandbox/events`` shows them).
HTTP delivery — Standard Webhooks signing with the account's ``whsec_``
secret, at-least-once redelivery with backoff, and the webhook faults
(``webhook_duplicate``, ``webhook_delay``, ``webhook_drop_first``,
``webhook_unstable_ids``, already accepted and stored by
:class:`paycore_sandbox.faults.FaultBook`) — lands with the webhooks issue.

The seam for it: register :class:`WebhookEndpoint` objects in
:attr:`WebhookEmitter.endpoints` and override :meth:`WebhookEmitter.deliver`
(or pass a ``deliver`` callable). ``emit`` schedules ``deliver`` once per event
and endpoint, in the background, so a slow endpoint never slows the API.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from paycore_sandbox.clock import SandboxClock
from paycore_sandbox.ledger import Payment

Spawn = Callable[[Coroutine[Any, Any, None]], object]


@dataclass(frozen=True)
class WebhookEndpoint:
    url: str
    account: str
    environment: str


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

    @property
    def payment_id(self) -> str:
        return str(self.payment["id"])

    def to_json(self) -> dict[str, Any]:
        """The contract's event body."""
        return {"id": self.id, "type": self.type, "created": self.created,
                "account": self.account, "livemode": self.livemode,
                "sequence": self.sequence, "data": {"object": dict(self.payment)}}


DeliverHook = Callable[[Event, WebhookEndpoint], Awaitable[None]]


class WebhookEmitter:
    def __init__(self, clock: SandboxClock, spawn: Spawn,
                 deliver: DeliverHook | None = None) -> None:
        self._clock = clock
        self._spawn = spawn
        self._deliver_hook = deliver
        self._events: list[Event] = []
        self._sequences: dict[str, int] = {}
        self.endpoints: list[WebhookEndpoint] = []

    def emit(self, payment: Payment, type_: str) -> Event:
        sequence = self._sequences.get(payment.id, 0) + 1
        self._sequences[payment.id] = sequence
        event = Event(id="evt_" + secrets.token_hex(12), type=type_,
                      created=self._clock.unix(), account=payment.account,
                      livemode=payment.livemode, environment=payment.environment,
                      sequence=sequence, payment=payment.to_public())
        self._events.append(event)
        for endpoint in self.endpoints:
            if endpoint.account == event.account and endpoint.environment == event.environment:
                self._spawn(self.deliver(event, endpoint))
        return event

    async def deliver(self, event: Event, endpoint: WebhookEndpoint) -> None:
        """Send one event to one endpoint. A no-op until HTTP delivery lands."""
        if self._deliver_hook is not None:
            await self._deliver_hook(event, endpoint)

    def events(self, payment_id: str | None = None) -> list[Event]:
        return [e for e in self._events if payment_id is None or e.payment_id == payment_id]
