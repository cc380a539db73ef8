"""The workers' health and metrics server: ``/healthz`` from their loops' liveness, ``/metrics``.

Every worker process (recovery, dispatcher, consumers, alerts) serves this on
``--metrics-host:--metrics-port`` so a container healthcheck or a Kubernetes
liveness probe can restart a wedged worker. ``/healthz`` is 200 ``ok`` while
every loop of the process beats within its bound, else 503 naming the stale
loops. It says nothing about the database or the broker: see paycore.liveness.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator, Sequence

import uvicorn
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from paycore.http.metrics import metrics_endpoint
from paycore.liveness import Liveness

log = logging.getLogger("paycore.health")

STOP_WITHIN_S = 5.0


def health_app(registry: CollectorRegistry, loops: Sequence[Liveness]) -> Starlette:
    async def healthz(request: Request) -> PlainTextResponse:
        stale = [f"{lv.name} (no beat for {lv.age_s():.0f} s, bound {lv.bound_s:.0f} s)"
                 for lv in loops if not lv.alive()]
        if stale:
            return PlainTextResponse("stale: " + ", ".join(stale), status_code=503)
        return PlainTextResponse("ok")

    return Starlette(routes=[Route("/metrics", metrics_endpoint(registry)), Route("/healthz", healthz)])


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the worker's stop event owns SIGTERM/Ctrl-C."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serve_health(
    registry: CollectorRegistry, loops: Sequence[Liveness], host: str, port: int | None, *, worker: str,
) -> AsyncIterator[None]:
    """Serve ``/healthz`` and ``/metrics`` on ``host:port`` while inside; nothing when ``port`` is None."""
    if port is None:
        yield
        return
    server = _Server(uvicorn.Config(health_app(registry, loops), host=host, port=port,
                                    log_config=None, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError(f"{worker} health server on {host}:{port} did not start")
            await asyncio.sleep(0.01)  # uvicorn offers no started event to await
        log.info("%s health and metrics on http://%s:%d/healthz and /metrics", worker, host, port)
        yield
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(task, STOP_WITHIN_S)
