"""``paycore serve checkout|webhooks --workers N``: N worker processes on one port, one admin port.

uvicorn's supervisor starts N worker processes with multiprocessing's *spawn*:
each is a fresh interpreter, so logging, tracing (an OpenTelemetry exporter thread
per worker) and the app with its own database pool are built in the worker, never
inherited across a fork. The supervisor replaces a worker that dies and passes
SIGTERM on to all of them. Each worker listens on a socket of its own on the one
port (``SO_REUSEPORT``, :func:`listening_sockets`), so the kernel spreads
connections over the workers instead of the first awake taking a whole burst.

Metrics: N processes cannot all bind one admin port, and each has its own
counters. So every worker writes its samples to files in a directory private to
this run (prometheus_client's multiprocess mode: ``PROMETHEUS_MULTIPROC_DIR``,
set before any worker starts), and the supervisor alone serves the admin port:
``/metrics`` aggregates the files (counters and histograms summed over the
workers, a dead worker's included so totals never go backwards) and
``/healthz`` is 200 while at least one worker lives, naming how many of N.
The directory is removed when the supervisor stops.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import re
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Gauge
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

if TYPE_CHECKING:
    from uvicorn.supervisors.multiprocess import Multiprocess

log = logging.getLogger("paycore.cli")
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
STARTED_WITHIN_S = 10.0
# A worker's sample files end in _<pid>.db (prometheus_client's naming).
_PID_FILE = re.compile(r"_(\d+)\.db$")


class WorkerRequests:
    """Counts the requests each worker answers, by pid: how the kernel spreads load over workers."""

    def __init__(self, app: ASGIApp, gauge: Gauge) -> None:
        self.app = app
        self.gauge = gauge

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.gauge.inc()
        await self.app(scope, receive, send)


def _worker_app(service: str) -> Starlette:
    """One worker's app: what ``serve SERVICE`` runs alone, plus the per-worker gauges."""
    from paycore.tracing import configure_tracing
    from paycore_cli.common import configure_logging
    from paycore_cli.serve import APP_FACTORIES, _load_factory

    configure_logging(service=service)  # a spawned worker starts with no logging set up
    configure_tracing(service)  # its own tracer provider and exporter thread
    app: Starlette = _load_factory(APP_FACTORIES[service])()
    # Not in any registry: in multiprocess mode the value lives in this worker's file,
    # which the supervisor's collector reads. "all" keeps the pid label; "livesum"
    # drops the worker once the supervisor has seen its process gone.
    Gauge("paycore_http_workers", "Live worker processes of this service", ["service"],
          multiprocess_mode="livesum", registry=None).labels(service).set(1)
    requests = Gauge("paycore_http_worker_requests", "Requests answered, by worker process (pid label)",
                     ["service"], multiprocess_mode="all", registry=None).labels(service)
    app.add_middleware(WorkerRequests, gauge=requests)
    return app


def checkout_app() -> Starlette:
    """Factory each ``serve checkout --workers N`` worker builds (uvicorn needs an import path)."""
    return _worker_app("checkout")


def webhooks_app() -> Starlette:
    """Factory each ``serve webhooks --workers N`` worker builds."""
    return _worker_app("webhooks")


WORKER_FACTORIES = {"checkout": "paycore_cli.workers:checkout_app",
                    "webhooks": "paycore_cli.workers:webhooks_app"}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process reusing the pid: not our worker
        return False
    return True


class WorkerFiles:
    """The workers as their sample files show them; forgets the live gauges of dead ones."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def live_workers(self) -> int:
        from prometheus_client import multiprocess

        pids = set()
        for path in glob.glob(os.path.join(self.directory, "*.db")):
            match = _PID_FILE.search(path)
            if match:
                pids.add(int(match.group(1)))
        live = 0
        for pid in pids:
            if _alive(pid):
                live += 1 if glob.glob(os.path.join(self.directory, f"gauge_livesum_{pid}.db")) else 0
            else:
                multiprocess.mark_process_dead(pid, self.directory)  # type: ignore[no-untyped-call]  # its counters stay: totals only grow
        return live


def admin_app(directory: str, workers: int) -> Starlette:
    from prometheus_client import generate_latest, multiprocess
    from prometheus_client.exposition import CONTENT_TYPE_LATEST

    files = WorkerFiles(directory)

    async def metrics(request: Request) -> PlainTextResponse:
        files.live_workers()  # drop dead workers' live gauges before collecting
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
        return PlainTextResponse(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    async def healthz(request: Request) -> PlainTextResponse:
        live = files.live_workers()
        if live == 0:
            return PlainTextResponse(f"no live worker (0 of {workers})", status_code=503)
        return PlainTextResponse(f"ok: {live} of {workers} workers")

    return Starlette(routes=[Route("/metrics", metrics), Route("/healthz", healthz)])


@contextlib.contextmanager
def multiprocess_metrics() -> Iterator[str]:
    """A fresh sample directory for this run's workers, in their environment; removed afterwards."""
    directory = tempfile.mkdtemp(prefix="paycore-metrics-")
    previous = os.environ.get(MULTIPROC_ENV)
    os.environ[MULTIPROC_ENV] = directory  # spawned workers inherit it before importing prometheus_client
    try:
        yield directory
    finally:
        if previous is None:
            os.environ.pop(MULTIPROC_ENV, None)
        else:
            os.environ[MULTIPROC_ENV] = previous
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def admin_server(directory: str, workers: int, host: str, port: int | None, *,
                 service: str) -> Iterator[None]:
    """The supervisor's admin port, served from a thread while the supervisor runs in the main one."""
    if port is None:
        yield
        return
    import uvicorn

    from paycore.http.health_server import _Server, bind_admin_socket
    from paycore.http.protocol import AdminHttpToolsProtocol

    sock = bind_admin_socket(host, port, service)
    # log_level None: uvicorn would set the process-wide uvicorn loggers' level (see health_server).
    server = _Server(uvicorn.Config(admin_app(directory, workers), host=host, port=port,
                                    http=AdminHttpToolsProtocol, log_config=None, log_level=None,
                                    lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=f"{service}-admin",
                              daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTED_WITHIN_S
    while not server.started:  # uvicorn offers no started event to wait on
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"{service} admin server on {host}:{port} did not start")
        time.sleep(0.01)
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(timeout=5)


def listening_sockets(host: str, port: int, count: int, backlog: int) -> list[socket.socket]:
    """``count`` listening sockets on one ``host:port`` (``SO_REUSEPORT``): one per worker.

    A shared socket lets whichever worker wakes first accept every connection that is
    waiting (libuv accepts until the queue is empty), so a burst of keep-alive connections,
    such as a load balancer's pool or the bench's four clients, lands on one worker while
    the others idle (docs/performance.md, "Fourth pass"). With a socket each,
    the kernel spreads new connections over the workers by a hash of their addresses.

    A plain bind is tried first and closed: it fails while anything holds the port, so a
    second supervisor started on the same port is refused as before instead of silently
    joining this one's group (``SO_REUSEPORT`` admits only the same user's sockets).

    :raises OSError: the port is in use or cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            sock.listen(backlog)
            sock.set_inheritable(True)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def serve_workers(service: str, workers: int, *, host: str, port: int, admin_host: str,
                  admin_port: int | None, uvicorn_options: dict[str, Any]) -> int:
    """Run ``service`` in ``workers`` processes until SIGTERM or Ctrl-C; the exit code."""
    import uvicorn
    from uvicorn.config import STARTUP_FAILURE

    with multiprocess_metrics() as directory, admin_server(directory, workers, admin_host, admin_port,
                                                            service=service):
        config = uvicorn.Config(WORKER_FACTORIES[service], factory=True, host=host, port=port,
                                workers=workers, **uvicorn_options)
        try:
            sockets = listening_sockets(host, port, workers, config.backlog)
        except OSError as exc:
            log.error("serve %s --workers %d: cannot listen on %s:%d: %s", service, workers, host, port, exc)
            return STARTUP_FAILURE
        supervisor = _supervisor_class()(config, sockets)
        try:
            supervisor.run()
        finally:
            for sock in sockets:
                sock.close()
        # uvicorn.run(workers=N) without its exit status: a worker that fails to start
        # stops the supervisor, and that must not look like a clean stop.
        if any(p.exitcode == STARTUP_FAILURE for p in supervisor.processes):
            return STARTUP_FAILURE
    return 0


def _supervisor_class() -> type[Multiprocess]:
    """uvicorn's supervisor, each worker slot with its own listening socket.

    uvicorn hands every worker all of its sockets; here worker ``i`` gets ``sockets[i]``,
    and the replacement of a dead worker gets the dead one's socket, which the supervisor
    kept open meanwhile: connections the kernel queued on it wait for the replacement
    (its start-up, a second or two) instead of being refused. The worker count is fixed
    (SIGTTIN/SIGTTOU would need a socket more or less: they are ignored with a line in the log).
    """
    from uvicorn.config import STARTUP_FAILURE
    from uvicorn.supervisors.multiprocess import Multiprocess, Process

    class SocketPerWorker(Multiprocess):
        def _start(self, idx: int) -> Process:
            process = Process(self.config, [self.sockets[idx]])
            process.start()
            return process

        def init_processes(self) -> None:
            self.processes = [self._start(idx) for idx in range(len(self.sockets))]

        def keep_subprocess_alive(self) -> None:  # uvicorn's, slot by slot
            if self.should_exit.is_set():
                return
            for idx, process in enumerate(self.processes):
                if process.is_alive(timeout=self.config.timeout_worker_healthcheck):
                    continue
                process.kill()  # hung, or already gone
                process.join()
                if process.exitcode == STARTUP_FAILURE:  # it would fail the same way again
                    log.error("worker [%s] failed to start; stopping", process.pid)
                    self.should_exit.set()
                    return
                if self.should_exit.is_set():
                    return
                log.warning("worker [%s] died; starting its replacement on the same socket", process.pid)
                self.processes[idx] = self._start(idx)

        def restart_all(self) -> None:  # SIGHUP: replace each worker, its socket kept
            for idx, old in enumerate(self.processes):
                if self.should_exit.is_set():
                    return
                new = self._start(idx)
                if not new.wait_until_ready(self.config.timeout_worker_healthcheck, self.should_exit):
                    new.kill()
                    new.join()
                    log.error("worker [%s] was not ready in time; keeping [%s]", new.pid, old.pid)
                    return
                old.terminate()
                old.join()
                self.processes[idx] = new

        def handle_ttin(self) -> None:
            log.warning("SIGTTIN ignored: --workers is fixed at %d (one socket each)", len(self.sockets))

        def handle_ttou(self) -> None:
            log.warning("SIGTTOU ignored: --workers is fixed at %d (one socket each)", len(self.sockets))

    return SocketPerWorker
