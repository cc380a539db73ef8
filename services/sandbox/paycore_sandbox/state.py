"""The sandbox's runtime: settings, clock, background tasks and the resettable state.

Everything ``/_sandbox/reset`` forgets lives in one :class:`SandboxState`; a
reset swaps in a fresh one. Work still running against the old state (a
request mid-execution) finishes harmlessly into the discarded object instead
of leaking into the new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

import httpx

from paycore_sandbox.capture import RequestLog
from paycore_sandbox.clock import SandboxClock
from paycore_sandbox.delivery import WebhookSender
from paycore_sandbox.faults import FaultBook, HoldGate
from paycore_sandbox.idempotency import IdempotencyStore
from paycore_sandbox.ledger import Ledger
from paycore_sandbox.movements import MovementBook
from paycore_sandbox.ratelimit import TokenBucket
from paycore_sandbox.settings import SandboxAccount, SandboxSettings
from paycore_sandbox.settlements import SettlementBook
from paycore_sandbox.webhooks import Event, WebhookEmitter

log = logging.getLogger("paycore_sandbox")


class SandboxState:
    def __init__(self, sandbox: Sandbox) -> None:
        settings = sandbox.settings
        self.ledger = Ledger()
        self.movements = MovementBook()  # captures and refunds
        self.keys = IdempotencyStore(settings.key_retention_s)
        self.faults = FaultBook()
        self.requests = RequestLog()
        self.webhooks = WebhookSender(settings, self.faults, sandbox.spawn,
                                      sandbox.webhook_client)
        # Settlements are recorded from the events as money moves (see settlements.py).
        self.settlements = SettlementBook(self.ledger, self.movements)
        self.events = WebhookEmitter(sandbox.clock, self._on_event)
        self.gate = HoldGate()
        # Where late arrivals wait out their delay; POST /_sandbox/late-arrivals/release ends the
        # wait, so a test picks the moment the request lands instead of racing a timer.
        self.late_arrivals = HoldGate()
        self._buckets = {
            (a.account, a.environment): TokenBucket(a.lookup_rate_per_s, a.lookup_burst)
            for a in settings.accounts
        }

    def _on_event(self, event: Event) -> None:
        self.settlements.on_event(event)
        self.webhooks.on_event(event)

    def bucket(self, account: SandboxAccount) -> TokenBucket:
        return self._buckets[(account.account, account.environment)]


class Sandbox:
    def __init__(self, settings: SandboxSettings, clock: SandboxClock | None = None) -> None:
        self.settings = settings
        self.clock = clock or SandboxClock()
        self._client: httpx.AsyncClient | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._resettable: set[asyncio.Task[Any]] = set()
        self.state = SandboxState(self)

    def spawn(self, coro: Coroutine[Any, Any, Any], *,
              survives_reset: bool = False) -> asyncio.Task[Any]:
        """Run ``coro`` in the background, keeping a reference until it ends.

        Timers, late arrivals and deliveries are cancelled by a reset; request
        executions (``survives_reset``) are not, because a client is awaiting them.
        """
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        if not survives_reset:
            self._resettable.add(task)
        task.add_done_callback(self._forget)
        return task

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        self._resettable.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("sandbox background task failed", exc_info=task.exception())

    def webhook_client(self) -> httpx.AsyncClient:
        """The one HTTP client every webhook delivery shares (created on first use)."""
        if self._client is None or self._client.is_closed:
            self._client = httpx.AsyncClient(
                timeout=self.settings.webhook_timeout_s, follow_redirects=False,
                # No pool cap: a slow endpoint holding connections never queues others.
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=20),
                headers={"user-agent": "Cardco-Webhooks/1 (paycore-sandbox)"},
            )
        return self._client

    def reset(self) -> None:
        old = self.state
        old.webhooks.close()
        old.gate.release_all()
        for task in list(self._resettable):
            task.cancel()
        self.clock.reset()
        self.state = SandboxState(self)

    async def aclose(self) -> None:
        self.state.webhooks.close()
        self.state.gate.release_all()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()
