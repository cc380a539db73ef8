"""The incident agent's admin port, served from before faust starts until after it stops.

faust starts an ``app.task`` only once its table is recovered, so an admin server run as
one left a liveness probe nothing to talk to while the agent joined its group and read
its changelog -- a restart loop waiting to happen on a long changelog. This is a mode
service the worker starts before the app instead:

- ``/healthz`` (liveness): while faust joins, recovers or rebalances it has no beat to
  watch, and the process answering is all there is to say (:class:`TimerLiveness`); once
  ready, faust's timer must beat within its bound, so a wedged agent goes stale.
- ``/readyz`` (readiness): 503 until faust has recovered its table and its timer has run,
  and again while the group rebalances.
- ``/metrics``: the pages counter, from the start.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from mode import Service
from prometheus_client import CollectorRegistry

from paycore.http.health_server import serve_health
from paycore.liveness import Liveness

WaitingFor = Callable[[], str | None]  # None once faust is ready, else what it is doing


class TimerLiveness(Liveness):
    """The timer's heartbeat, held to its bound only while faust is ready.

    Readiness starts with the timer's first beat, so the bound never counts time spent
    starting up."""

    def __init__(self, bound_s: float, waiting_for: WaitingFor, *,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        super().__init__("incident timer", bound_s, monotonic=monotonic)
        self.waiting_for = waiting_for

    def alive(self) -> bool:
        return self.waiting_for() is not None or super().alive()


class AdminServer(Service):
    """``/healthz``, ``/readyz`` and ``/metrics`` while the worker runs."""

    def __init__(self, registry: CollectorRegistry, liveness: TimerLiveness, host: str, port: int) -> None:
        super().__init__()
        self.registry, self.liveness, self.host, self.port = registry, liveness, host, port

    async def on_start(self) -> None:
        await self.add_async_context(serve_health(self.registry, [self.liveness], self.host, self.port,
                                                  worker="incidents", ready=self.liveness.waiting_for))
