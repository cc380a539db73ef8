"""Webhook delivery: every recorded event POSTed to every endpoint, signed, retried.

Endpoints have a dialect (:mod:`paycore_sandbox.dialects`); an event goes only
to the endpoints of its payment's dialect, rendered and signed by that dialect
(below: Cardco's), and only if that dialect notifies it at all (Adyen sends
nothing for pending states). One *delivery* is one event — or, for a dialect
that batches (Adyen; ``POST /_sandbox/webhooks/batch``), several events in one
body — going to one endpoint URL. Each runs in its own background task (so
delivery is unordered and a slow endpoint never holds up another) and makes
attempts until one gets an answer the dialect accepts (Cardco, Stripe: any
2xx; Adyen: 2xx with the body exactly ``[accepted]``):

- the body is the event's JSON (orjson) exactly as recorded, the same bytes on
  every attempt;
- headers come from :func:`paycore.webhook_signatures.signed_headers` with the
  account's ``whsec_`` secret, ``webhook-id`` = the event id and
  ``webhook-timestamp`` = *real* wall-clock seconds at that attempt (never the
  sandbox clock: receivers check a 5-minute tolerance against their own clock);
- a failure (non-2xx, no answer within ``webhook_timeout_s``, transport error)
  is retried after 5 s, 5 min, 30 min, 2 h, 5 h, then every 10 h, while the
  next attempt still falls within 3 days of the first one; then the delivery
  gives up (recorded as ``result: "gave_up"``). Every delay is multiplied by
  ``webhook_time_scale`` and waited in real time (the schedule is nominal, so
  the number of attempts — 12 — does not depend on the scale).

Webhook faults are decided once per emitted event, from the state's
:class:`~paycore_sandbox.faults.FaultBook` (``match`` on the payment's
reference and account), and apply to all of that event's deliveries:

- ``webhook_unstable_ids``, ``webhook_delay``, ``webhook_drop_first``: one use
  of ``times`` per event the rule fires for, however many endpoints there are;
  an exhausted rule disappears like a request fault.
- ``webhook_duplicate``: ``times`` is the number of *extra* deliveries of each
  matched event (null: 1), as the contract says; it is never consumed, so the
  rule stays until ``DELETE /_sandbox/faults`` or a reset.
- ``probability`` is rolled once per rule and event.

Faults are consulted only when at least one endpoint is configured, so events
nobody receives never use up a rule.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from paycore_sandbox.dialects import Endpoint, dialect_named, parse_endpoint
from paycore_sandbox.faults import FaultBook, FaultContext
from paycore_sandbox.settings import SandboxAccount, SandboxSettings
from paycore_sandbox.webhooks import Event

log = logging.getLogger("paycore_sandbox")

# Delay after the n-th failed attempt (the last one repeats), nominal seconds.
RETRY_DELAYS_S: tuple[float, ...] = (5, 300, 1800, 7200, 18000, 36000)
GIVE_UP_AFTER_S = 3 * 86400

Spawn = Callable[[Coroutine[Any, Any, None]], "asyncio.Task[Any]"]
ClientFactory = Callable[[], httpx.AsyncClient]
Kind = Literal["original", "duplicate", "redeliver"]

_UNSTABLE = frozenset({"webhook_unstable_ids"})
_DELAY = frozenset({"webhook_delay"})
_DROP_FIRST = frozenset({"webhook_drop_first"})
_DUPLICATE = frozenset({"webhook_duplicate"})


def retry_delay(failed_attempts: int) -> float:
    """Nominal seconds to wait after attempt number ``failed_attempts`` failed."""
    return RETRY_DELAYS_S[min(failed_attempts, len(RETRY_DELAYS_S)) - 1]


def attempt_offsets() -> list[float]:
    """Nominal start of every attempt of a delivery that never succeeds."""
    offsets = [0.0]
    while offsets[-1] + retry_delay(len(offsets)) <= GIVE_UP_AFTER_S:
        offsets.append(offsets[-1] + retry_delay(len(offsets)))
    return offsets


@dataclass(frozen=True)
class EventPlan:
    """What every delivery of one event (or one batch of events) sends."""

    event: Event  # the event, or a batch's first one (the delivery log names it)
    account: SandboxAccount  # whose secret signs it
    unstable_ids: bool = False
    batch: tuple[Event, ...] = ()  # a batch delivery's events, in body order

    @property
    def events(self) -> tuple[Event, ...]:
        return self.batch or (self.event,)


@dataclass
class Delivery:
    id: str
    plan: EventPlan
    url: str
    kind: Kind
    first_delay_s: float = 0.0  # real seconds, already scaled
    drop_first: bool = False


class WebhookSender:
    """Deliveries of one :class:`~paycore_sandbox.state.SandboxState`.

    A reset closes it (no new deliveries) and cancels its tasks; the next state
    has a fresh sender with the configured endpoints.
    """

    def __init__(self, settings: SandboxSettings, faults: FaultBook, spawn: Spawn,
                 client: ClientFactory) -> None:
        self._settings = settings
        self._faults = faults
        self._spawn = spawn
        self._client = client
        self._plans: dict[str, EventPlan] = {}
        self._log: list[dict[str, Any]] = []
        self._pending: set[str] = set()
        self._ids = itertools.count(1)
        self._closed = False
        self.endpoints: list[Endpoint] = [parse_endpoint(spec)
                                          for spec in settings.webhook_endpoints]

    # -- endpoints and introspection ------------------------------------------

    def add_endpoint(self, endpoint: Endpoint) -> None:
        if endpoint not in self.endpoints:
            self.endpoints.append(endpoint)

    def endpoints_for(self, dialect: str) -> list[str]:
        """The URLs events of ``dialect`` go to, in the order they were added."""
        return [e.url for e in self.endpoints if e.dialect == dialect]

    def clear_endpoints(self) -> None:
        self.endpoints.clear()

    def pending(self) -> int:
        """Deliveries neither succeeded nor given up."""
        return len(self._pending)

    def attempts(self, *, event_id: str | None = None,
                 payment_id: str | None = None) -> list[dict[str, Any]]:
        """Every attempt so far, in the order they started (copies)."""
        return [dict(a) for a in self._log
                if (event_id is None or a["event_id"] == event_id)
                and (payment_id is None or a["payment_id"] == payment_id)]

    def close(self) -> None:
        self._closed = True

    # -- starting deliveries --------------------------------------------------

    def on_event(self, event: Event) -> None:
        """The emitter's listener: deliver ``event`` to every endpoint of its dialect."""
        urls = self.endpoints_for(event.dialect)
        if self._closed or not urls or not dialect_named(event.dialect).notifies(event):
            return
        ctx = FaultContext(event.account, "webhook", event.reference, event.dialect)
        unstable = self._faults.take(ctx, _UNSTABLE) is not None
        delay = self._faults.take(ctx, _DELAY)
        drop_first = self._faults.take(ctx, _DROP_FIRST) is not None
        duplicate = self._faults.take(ctx, _DUPLICATE, consume=False)
        plan = self._plan(event, unstable_ids=unstable)
        if plan is None:
            return
        self._plans[event.id] = plan
        first_delay_s = delay.delay_s * self._settings.webhook_time_scale if delay else 0.0
        extra = (duplicate.times or 1) if duplicate is not None else 0
        for url in urls:
            for copy in range(1 + extra):
                self._start(plan, url, "original" if copy == 0 else "duplicate",
                            first_delay_s=first_delay_s, drop_first=drop_first)

    def redeliver(self, event: Event) -> list[str]:
        """One more delivery of ``event`` (same bytes, same id mode) to every endpoint
        of its dialect."""
        if self._closed or not dialect_named(event.dialect).notifies(event):
            return []
        plan = self._plans.get(event.id) or self._plan(event, unstable_ids=False)
        if plan is None:
            return []
        self._plans[event.id] = plan
        return [self._start(plan, url, "redeliver")
                for url in self.endpoints_for(event.dialect)]

    def batch(self, events: list[Event]) -> list[str]:
        """One delivery of ``events`` together, in that order (a dialect that batches,
        one account) to every endpoint of their dialect: ``kind: redeliver``, its
        own retries; the events a dialect does not notify are left out.

        Raises ValueError when the dialect does not batch or the events mix
        dialects, accounts or environments.
        """
        first = events[0]
        dialect = dialect_named(first.dialect)
        if not dialect.batches:
            raise ValueError(f"the {first.dialect} dialect does not batch notifications")
        if any((e.dialect, e.account, e.environment)
               != (first.dialect, first.account, first.environment) for e in events):
            raise ValueError("a batch holds events of one dialect, account and environment")
        notified = tuple(e for e in events if dialect.notifies(e))
        plan = self._plan(notified[0], unstable_ids=False) if notified else None
        if self._closed or plan is None:
            return []
        plan = EventPlan(plan.event, plan.account, batch=notified)
        return [self._start(plan, url, "redeliver")
                for url in self.endpoints_for(first.dialect)]

    def _plan(self, event: Event, *, unstable_ids: bool) -> EventPlan | None:
        account = self._settings.account_for(event.account, event.environment)
        if account is None:  # events only come from configured accounts
            log.error("no webhook secret for %s/%s", event.account, event.environment)
            return None
        return EventPlan(event, account, unstable_ids)

    def _start(self, plan: EventPlan, url: str, kind: Kind, *, first_delay_s: float = 0.0,
               drop_first: bool = False) -> str:
        delivery = Delivery(f"whd_{next(self._ids)}", plan, url, kind, first_delay_s, drop_first)
        self._pending.add(delivery.id)
        task = self._spawn(self._run(delivery))
        task.add_done_callback(lambda _: self._pending.discard(delivery.id))
        return delivery.id

    # -- running one delivery -------------------------------------------------

    async def _run(self, delivery: Delivery) -> None:
        scale = self._settings.webhook_time_scale
        if delivery.first_delay_s > 0:
            await asyncio.sleep(delivery.first_delay_s)
        attempt, elapsed = 1, 0.0
        while True:
            entry = self._entry(delivery, attempt)
            if attempt == 1 and delivery.drop_first:
                entry["error"] = "dropped (webhook_drop_first)"
                ok = False
            else:
                ok = await self._send(delivery, entry)
            if ok:
                entry["result"] = "succeeded"
                return
            delay = retry_delay(attempt)
            if elapsed + delay > GIVE_UP_AFTER_S:
                entry["result"] = "gave_up"
                log.warning("webhook %s to %s: gave up after %d attempts",
                            delivery.plan.event.id, delivery.url, attempt)
                return
            elapsed += delay
            entry["result"] = "retry"
            entry["retry_in_s"] = delay * scale
            await asyncio.sleep(delay * scale)
            attempt += 1

    def _entry(self, delivery: Delivery, attempt: int) -> dict[str, Any]:
        event = delivery.plan.event
        msg_id = dialect_named(event.dialect).unstable_message_id() \
            if delivery.plan.unstable_ids else event.id
        entry: dict[str, Any] = {
            "delivery": delivery.id, "kind": delivery.kind, "event_id": event.id,
            "webhook_id": msg_id, "payment_id": event.payment_id, "type": event.type,
            "sequence": event.sequence, "url": delivery.url, "attempt": attempt,
            "time": time.time(), "status": None, "error": None, "result": "in_flight",
        }
        if delivery.plan.batch:
            entry["batch"] = [e.id for e in delivery.plan.batch]
        self._log.append(entry)
        return entry

    async def _send(self, delivery: Delivery, entry: dict[str, Any]) -> bool:
        plan = delivery.plan
        dialect = dialect_named(plan.event.dialect)
        message = dialect.webhook_message(
            plan.events, plan.account, message_id=entry["webhook_id"],
            unstable=plan.unstable_ids, timestamp=int(entry["time"]))
        timeout_s = self._settings.webhook_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                response = await self._client().post(delivery.url, content=message.body,
                                                     headers=message.headers)
        except (TimeoutError, httpx.TimeoutException):
            entry["error"] = f"timeout: no answer within {timeout_s:g} s"
            return False
        except Exception as exc:  # any transport problem is a failed attempt
            entry["error"] = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            return False
        entry["status"] = response.status_code
        if dialect.accepted(response.status_code, response.content):
            return True
        if 200 <= response.status_code < 300:  # a 2xx the dialect does not count
            entry["error"] = "answer not accepted by the dialect's rule"
        return False
