"""The admin server every paycore process runs beside its work: ``/healthz`` and ``/metrics``.

Workers (recovery, dispatcher, consumers, alerts) serve it on their metrics port
so a container healthcheck or a Kubernetes liveness probe can restart a wedged
worker; the HTTP services (checkout, webhooks, console) serve it on an admin port
of their own (:func:`with_admin_server`), so metrics never share the public API's
port. ``/healthz`` is 200 ``ok`` while every loop of the process beats within its
bound (an HTTP service has no loops: the process answers), else 503 naming the
stale loops. It says nothing about the database or the broker: see paycore.liveness.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import uvicorn
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from paycore.errors import AdminPortInUse
from paycore.http.metrics import metrics_endpoint
from paycore.http.protocol import AdminHttpToolsProtocol
from paycore.liveness import Liveness

log = logging.getLogger("paycore.health")

STOP_WITHIN_S = 5.0


# None when ready, else what the worker still waits for.
Readiness = Callable[[], str | None]


def health_app(registry: CollectorRegistry, loops: Sequence[Liveness], ready: Readiness | None = None
               ) -> Starlette:
    async def healthz(request: Request) -> PlainTextResponse:
        stale = [f"{lv.name} (no beat for {lv.age_s():.0f} s, bound {lv.bound_s:.0f} s)"
                 for lv in loops if not lv.alive()]
        if stale:
            return PlainTextResponse("stale: " + ", ".join(stale), status_code=503)
        return PlainTextResponse("ok")

    async def readyz(request: Request) -> PlainTextResponse:
        waiting = ready() if ready is not None else None
        if waiting:
            return PlainTextResponse(f"not ready: {waiting}", status_code=503)
        return PlainTextResponse("ok")

    routes = [Route("/metrics", metrics_endpoint(registry)), Route("/healthz", healthz)]
    if ready is not None:
        routes.append(Route("/readyz", readyz))
    return Starlette(routes=routes)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the worker's stop event owns SIGTERM/Ctrl-C."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serve_health(
    registry: CollectorRegistry, loops: Sequence[Liveness], host: str, port: int | None, *, worker: str,
    ready: Readiness | None = None,
) -> AsyncIterator[None]:
    """Serve ``/healthz`` and ``/metrics`` (and ``/readyz`` with ``ready``) on ``host:port`` while
    inside; nothing when ``port`` is None."""
    if port is None:
        yield
        return
    sock = bind_admin_socket(host, port, worker)
    # log_level None: uvicorn would otherwise set the process-wide uvicorn.error and uvicorn.access
    # loggers to it, silencing the service's own request lines; its protocol logs no requests.
    server = _Server(uvicorn.Config(health_app(registry, loops, ready), host=host, port=port,
                                    http=AdminHttpToolsProtocol, log_config=None, log_level=None,
                                    lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
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


def bind_admin_socket(host: str, port: int, process: str) -> socket.socket:
    """A listening socket for ``process``'s admin server, or :class:`AdminPortInUse` saying what to do."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise AdminPortInUse(
            f"{process}: cannot serve /metrics and /healthz on {host}:{port} ({exc.strerror}); another "
            f"process has it (a second instance on this host?): give this one another admin port with "
            f"--metrics-port or PAYCORE_METRICS_PORT, or 0 for none") from None
    sock.set_inheritable(True)
    return sock


def with_admin_server(app: Starlette, host: str, port: int | None, *, service: str) -> Starlette:
    """``app``, serving its ``app.state.metrics_registry`` on ``host:port`` for as long as it runs.

    The admin server starts before the app's own start-up (so a slow database
    start still answers ``/healthz``) and stops after its shutdown; ``port`` None
    leaves ``app`` alone. The registry is the one :func:`paycore.http.request_metrics.instrument` kept.
    """
    if port is None:
        return app
    registry: CollectorRegistry = app.state.metrics_registry
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(a: Starlette) -> AsyncIterator[Any]:
        async with serve_health(registry, [], host, port, worker=service), inner(a) as state:
            yield state

    app.router.lifespan_context = lifespan
    return app
