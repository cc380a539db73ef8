"""The whole system as processes that a chaos run can kill and restart.

:class:`ChaosStack` starts, in a run directory ``<out_dir>/run-<UTC>-seed<seed>``:
embedded PostgreSQL (data in ``pg/``), the local Tansu broker, migrations, the
sandbox, two checkouts, the webhook intake, two recovery workers, the
dispatcher, and the fulfillment and email consumers; each a child process
started through the ``paycore`` CLI exactly as ``paycore up`` starts it, on a
free loopback port, its output in ``logs/<instance>.log``.

Two things are never killed:

- the **sandbox** is the provider: its ledger is the evidence the invariants are
  checked against, and a real provider does not lose its ledger when paycore
  has a bad day;
- the **broker** (Tansu) keeps its log in memory, so killing it would lose
  acknowledged messages no production broker loses: Apache Kafka with
  replication factor 3, ``min.insync.replicas=2`` and producers on ``acks=all``
  keeps every acknowledged record through the loss of a broker (and the outbox
  would redeliver what was not acknowledged in any case).

Everything else can be SIGKILLed (:meth:`ChaosStack.kill`) and the PostgreSQL
postmaster ``kill -9``-ed (:meth:`ChaosStack.kill_database`); both restart what
they killed on the same argv, environment, port and data. A process that exits
without the stack causing it is recorded (:meth:`ChaosStack.exited_on_own`)
and **not** restarted: such an exit is a defect the report shows, and hiding it
behind a restart would make the run look cleaner than the system is.

Waiting here is polling with deadlines on the real clock (the run is a
development tool on real processes, not a test); every wait is bounded and
logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO

import asyncpg
import httpx
import orjson

from paycore.providers.registry import PROVIDER_PACKAGES
from paycore.providers.sandbox import sandbox_contract
from paycore_cli.common import LOOPBACK
from paycore_cli.sandbox import SANDBOX_ACCOUNT, SANDBOX_ENVIRONMENT
from paycore_devstack._process import die_with_parent_preexec, free_port, port_is_free
from paycore_devstack.chaos.model import ChaosOptions, Endpoints, RunRecord
from paycore_devstack.chaos.providers import provider as chaos_provider
from paycore_devstack.embedded import (
    EmbeddedPostgres,
    TansuBroker,
    _embedded_postgres,
    _pid_alive,
    _postmaster_pid,
    _system_user,
    start_embedded_postgres,
    start_tansu,
    stop_unheld_server,
)
from paycore_devstack.up import sandbox_provider_env, sandbox_webhook_endpoint

log = logging.getLogger("paycore.chaos")



def _per_provider(setting: str, value: str) -> dict[str, str]:
    """``value`` for the variable of each shipped provider that sets an account's ``setting``."""
    return {variable.name: value for package in PROVIDER_PACKAGES
            if (variable := package.registered_by.get(setting)) is not None}


# Short timings, so that deadlines, escalations and reminders happen inside one run.
# Every name here is read by paycore.config, paycore_recovery.settings or
# paycore_sandbox.settings; docs/chaos.md states the same figures.
CHAOS_ENV: dict[str, str] = {
    # NotStarted -> Started must commit within this; a longer stall is an abandoned send.
    "PAYCORE_START_BUDGET_S": "2",
    # One provider call; the sandbox's delay faults (set by faults.py) go past it.
    "PAYCORE_CALL_BUDGET_S": "3",
    # Recording a call's outcome; past it the attempt is left Unknown for recovery.
    "PAYCORE_RECORD_BUDGET_S": "2",
    # The payment client's own ceiling on a call, above the budget.
    "PAYCORE_MAX_CALL_DURATION_S": "5",
    # A NotStarted attempt this old is closed as never sent by recovery (kills leave some).
    "PAYCORE_ABANDONMENT_THRESHOLD_S": "5",
    # The provider's processing time before recovery looks at an unanswered call.
    "PAYCORE_PROCESSING_ALLOWANCE_S": "2",
    # The key window paycore assumes, per provider (a run configures one): same-key
    # resends inside it are safe ...
    **_per_provider("key_retention_s", "120"),
    # ... until the deadline, first send + 120 - 30 = 90 s, where it escalates instead.
    **_per_provider("escalation_margin_s", "30"),
    # A search index lags a few seconds (each dialect's own, as its package's sandbox contract
    # says: chaos_env) ...
    **{name: value for package in PROVIDER_PACKAGES
       for name, value in sandbox_contract(package).chaos_env.items()},
    # ... and recovery takes a miss by reference as evidence only 5 s (plus the call
    # budget) after the send, not after the production default of 300 s.
    "PAYCORE_RECOVERY_SEARCH_LAG_S": "5",
    # An attempt checkout or the intake leaves unresolved is looked at again this soon ...
    "PAYCORE_RECHECK_AFTER_S": "2",
    # ... then lookups 1, 2, 3, 5 s after each other, then the slow cadence: many passes per attempt.
    "PAYCORE_RECOVERY_BACKOFF_S": "1,2,3,5",
    # Read-only cadence after the backoff and after escalating: several passes per run.
    "PAYCORE_RECOVERY_SLOW_CADENCE_S": "10",
    # Must exceed one worst-case pass, 2 x call + record = 8 s (checked at start-up);
    # short so a killed worker's leases pass to the other worker within the run.
    "PAYCORE_RECOVERY_LEASE_S": "15",
    # How often a worker looks for due attempts.
    "PAYCORE_RECOVERY_INTERVAL_S": "0.5",
    # Status checks while a 3-D Secure action is pending.
    "PAYCORE_RECOVERY_ACTION_POLL_S": "5",
    # Open escalations get reminders inside the run.
    "PAYCORE_REMINDER_INTERVAL_S": "30",
    # A relay failure (broker or database away) is retried quickly ...
    "PAYCORE_OUTBOX_BACKOFF_BASE_S": "0.2",
    # ... and never waits long, so the outbox drains within the settle bound.
    "PAYCORE_OUTBOX_BACKOFF_MAX_S": "2",
    # The readiness checks read the workers' "started" / "running" lines at INFO.
    "PAYCORE_LOG_LEVEL": "INFO",
    # Tansu rejects the idempotent producer's InitProducerId (as `paycore up` sets it).
    "PAYCORE_KAFKA_IDEMPOTENT": "false",
    # The provider keeps keys at least as long as paycore assumes, so every same-key
    # resend paycore makes before its deadline is inside the provider's window (the
    # sandbox's Adyen keeps its keys 31 days, as Adyen does, whatever this says).
    "PAYCORE_SANDBOX_KEY_RETENTION_S": "120",
    # Webhook retries and webhook_delay faults at 1/100 of their real delays.
    "PAYCORE_SANDBOX_WEBHOOK_TIME_SCALE": "0.01",
}
# The sandbox settings no variable reaches (PAYCORE_SANDBOX_CONFIG, a JSON file):
# an abandoned 3-D Secure action expires 60 s after the payment was created, before
# paycore's 90 s deadline, so it ends by evidence (canceled) inside the run instead
# of after the default 15 minutes.
CHAOS_SANDBOX_CONFIG: dict[str, object] = {"action_expiry_s": 60}

READY_WITHIN_S = 60.0  # a service's start, imports included, on a busy 2-core machine
STOP_WITHIN_S = 10.0  # SIGTERM -> SIGKILL at the end of the run
KILLED_GONE_WITHIN_S = 10.0  # a SIGKILLed process group is reaped
PORT_FREE_WITHIN_S = 10.0  # a killed service's port can be bound again
DB_UP_WITHIN_S = 120.0  # a restart waits this long for a database outage to end
DB_BACK_WITHIN_S = 60.0  # crash recovery and accepting connections after the db restart
DB_CHILDREN_GONE_WITHIN_S = 30.0  # backends notice their postmaster died and exit
RESTART_ATTEMPTS = 5  # starts of a killed service before its restart counts as failed
POLL_S = 0.2
LOG_TAIL_BYTES = 3000


class ChaosStackError(RuntimeError):
    """A service or the database could not be started (again)."""


@dataclass(eq=False)
class _Life:
    """One process of a service, from its start to its exit."""

    process: asyncio.subprocess.Process
    log_offset: int  # where this life's output starts in the service's log
    ending: bool = False  # the stack is ending it (kill or stop): its exit is not news
    ready: bool = False
    watcher: asyncio.Task[None] | None = None


@dataclass(eq=False)
class _Service:
    name: str
    kind: str
    argv: list[str]
    log_path: Path
    url: str | None = None  # http://127.0.0.1:PORT of the service or its metrics
    ready_path: str | None = None  # polled until it answers (2xx unless any_status)
    any_status: bool = False
    log_markers: tuple[str, ...] = ()  # what the process logs once it works (all of them)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one kill at a time
    life: _Life | None = None

    @property
    def port(self) -> int | None:
        return int(self.url.rsplit(":", 1)[1]) if self.url else None


class ChaosStack:
    """The system as child processes; ``async with`` starts it, leaving stops all of it."""

    def __init__(self, options: ChaosOptions, record: RunRecord) -> None:
        self.options = options
        self.record = record
        stamp = record.started_wall.strftime("%Y%m%dT%H%M%SZ")
        self.run_dir: Path = (options.out_dir / f"run-{stamp}-seed{options.seed}").absolute()
        self.log_dir = self.run_dir / "logs"
        self._pg: EmbeddedPostgres | None = None
        self._broker: TansuBroker | None = None
        self._services: dict[str, _Service] = {}
        self._env: dict[str, str] = {}
        self._endpoints: Endpoints | None = None
        self._http: httpx.AsyncClient | None = None
        self._exited: list[tuple[str, int]] = []
        self._closing = False
        self._db_up = asyncio.Event()
        self._db_lock = asyncio.Lock()

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> ChaosStack:
        try:
            await self._start()
        except BaseException:
            # Half started is still started: nothing may be left behind.
            await self._stop()
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._stop()

    async def _start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        # Loopback probes: never through a proxy from the environment.
        self._http = httpx.AsyncClient(timeout=2.0, trust_env=False)
        self._pg = await _start_postgres_owned(self.run_dir / "pg")
        self._db_up.set()
        # In this (the loop's) thread: the broker gets SIGTERM if this process dies,
        # which the kernel ties to the thread that forked it.
        self._broker = start_tansu(log_path=self.log_dir / "tansu.log")
        log.info("chaos stack in %s: PostgreSQL %s, Tansu %s", self.run_dir, self._pg.dsn,
                 self._broker.bootstrap)

        from paycore.clock import SystemClock
        from paycore.db import migrate

        applied = await migrate(self._pg.dsn, now=SystemClock().now())
        log.info("migrations applied: %s", ", ".join(applied) or "none")

        ports = _distinct_free_ports(7)
        urls = [f"http://{LOOPBACK}:{p}" for p in ports]
        sandbox_url, checkout_1, checkout_2, intake_url, recovery_1, recovery_2, dispatcher = urls
        jwt_secret = secrets.token_urlsafe(36)  # 48 characters; HS256 wants >= 32
        sandbox_config = self.run_dir / "sandbox.json"
        sandbox_config.write_bytes(orjson.dumps(CHAOS_SANDBOX_CONFIG))
        # The run's one provider, configured as `make run` configures it against the sandbox.
        provider = chaos_provider(self.options.provider)
        name = provider.name
        provider_env = sandbox_provider_env(name, sandbox_url, checkout_1)
        webhook_secret, webhook_auth = provider.webhook_credentials(provider_env)
        self._env = self._child_env({
            "PAYCORE_HOME": str(self.run_dir),
            "PAYCORE_DATABASE_URL": self._pg.dsn,
            "PAYCORE_KAFKA_BOOTSTRAP": self._broker.bootstrap,
            "PAYCORE_JWT_SECRET": jwt_secret,
            "PAYCORE_DEFAULT_PROVIDER": name,
            **provider_env,
            "PAYCORE_SANDBOX_WEBHOOK_URLS": sandbox_webhook_endpoint(name, intake_url),
            "PAYCORE_SANDBOX_CONFIG": str(sandbox_config),
        })
        await self._register_account()
        backoffice = await self._issue_backoffice_credential()
        self._endpoints = Endpoints(
            dsn=self._pg.dsn, sandbox_url=sandbox_url, checkout_urls=(checkout_1, checkout_2),
            intake_url=intake_url, jwt_secret=jwt_secret,
            provider_account=f"{name}:{SANDBOX_ACCOUNT}:{SANDBOX_ENVIRONMENT}",
            webhook_secret=webhook_secret, kafka_bootstrap=self._broker.bootstrap,
            provider=name, webhook_basic_auth=webhook_auth, backoffice_secret=backoffice,
        )

        cli = [sys.executable, "-m", "paycore_cli"]

        def serve(name: str, what: str, url: str, *, kind: str, path: str = "/healthz",
                  any_status: bool = False) -> _Service:
            port = url.rsplit(":", 1)[1]
            # Two checkouts share this host: no admin ports (0), the chaos run reads no metrics.
            admin = [] if what == "sandbox" else ["--metrics-port", "0"]
            return self._service(name, kind,
                                 [*cli, "serve", what, "--host", LOOPBACK, "--port", port, *admin],
                                 url=url, ready_path=path, any_status=any_status)

        def recovery(name: str, url: str) -> _Service:
            port = url.rsplit(":", 1)[1]
            # /metrics answers before the worker reaches the database; its "started"
            # line comes after it registered the accounts (the database answered).
            return self._service(name, "recovery", [*cli, "run", "recovery", "--metrics-port", port,
                                                     "--owner", name],
                                 url=url, ready_path="/metrics",
                                 log_markers=(f"recovery worker {name} started",))

        def consumer(name: str) -> _Service:
            # No admin port (0). Its "running" line comes once the topics exist and its pool
            # connected; it consumes once the group gave it partitions (aiokafka's
            # line). After a kill that takes up to the session timeout (10 s): the
            # group waits for the dead member before it rebalances.
            return self._service(f"consumer-{name}", "consumer",
                                 [*cli, "run", "consumer", name, "--metrics-port", "0"],
                                 log_markers=(f"consumer {name} running",
                                              "Setting newly assigned partitions"))

        # The sandbox first: the others only reach it when paying, but it is the provider.
        await self._start_all([serve("sandbox", "sandbox", sandbox_url, kind="sandbox", path="/",
                                     any_status=True)])
        await self._start_all([
            serve("webhooks", "webhooks", intake_url, kind="webhooks"),
            serve("checkout-1", "checkout", checkout_1, kind="checkout"),
            serve("checkout-2", "checkout", checkout_2, kind="checkout"),
            recovery("recovery-1", recovery_1),
            recovery("recovery-2", recovery_2),
            # Its /healthz is served after its pool connected and the topics exist.
            self._service("dispatcher", "dispatcher",
                          [*cli, "run", "dispatcher", "--metrics-port", dispatcher.rsplit(":", 1)[1]],
                          url=dispatcher, ready_path="/healthz"),
        ])
        # After the dispatcher: the topics exist, so the consumers do not race to create them.
        await self._start_all([consumer("fulfillment"), consumer("email")])
        log.info("chaos stack up: %s", ", ".join(self._services))

    def _child_env(self, settings: dict[str, str]) -> dict[str, str]:
        # Nothing PAYCORE_* from the caller's shell: the run's settings are the run's own.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PAYCORE_")}
        env["PYTHONUNBUFFERED"] = "1"  # a killed process's last lines are in its log
        for name in ("NO_PROXY", "no_proxy"):  # every service talks to the others on loopback
            env[name] = ",".join(p for p in (env.get(name), "127.0.0.1", "localhost") if p)
        env.update(CHAOS_ENV)
        env.update(settings)
        return env

    async def _issue_backoffice_credential(self) -> str:
        """The store's back office credential the clients ask for refunds, captures and voids with."""
        from paycore import service_credentials
        from paycore.clock import SystemClock
        from paycore.db import create_pool

        assert self._pg is not None
        pool = await create_pool(self._pg.dsn, max_size=1)
        try:
            issued = await service_credentials.issue(
                pool, "chaos-backoffice", ("refunds", "captures", "voids", "read"), issued_by="chaos",
                now=SystemClock().now())
        finally:
            await pool.close()
        return issued.secret

    async def _register_account(self) -> None:
        """Register the sandbox account once, here, rather than as racing services' first act."""
        from paycore import accounts
        from paycore.clock import SystemClock
        from paycore.config import load_settings
        from paycore.db import create_pool

        assert self._pg is not None
        settings = load_settings(self._env)  # what every service will see: fails here if wrong
        pool = await create_pool(self._pg.dsn, max_size=1)
        try:
            await accounts.register_provider_accounts(pool, settings.accounts, SystemClock().now())
        finally:
            await pool.close()

    def _service(self, name: str, kind: str, argv: list[str], *, url: str | None = None,
                 ready_path: str | None = None, any_status: bool = False,
                 log_markers: tuple[str, ...] = ()) -> _Service:
        service = _Service(name, kind, argv, self.log_dir / f"{name}.log", url=url, ready_path=ready_path,
                           any_status=any_status, log_markers=log_markers)
        self._services[name] = service
        return service

    async def _start_all(self, services: list[_Service]) -> None:
        results = await asyncio.gather(*(self._start_service(s) for s in services), return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        for failure in failures[1:]:
            log.error("also failed to start: %s", failure)
        if failures:
            raise failures[0]

    async def _stop(self) -> None:
        """Every child (SIGTERM, bounded wait, SIGKILL), then the broker, then PostgreSQL."""
        if self._closing:
            return  # stopped already (a failed start stops everything before it raises)
        self._closing = True
        running = [s.life for s in self._services.values()
                   if s.life is not None and s.life.process.returncode is None]
        for life in running:
            life.ending = True
            _signal_group(life.process, signal.SIGTERM)
        if running:
            waits = [asyncio.ensure_future(life.process.wait()) for life in running]
            _, late = await asyncio.wait(waits, timeout=STOP_WITHIN_S)
            for life, wait in zip(running, waits, strict=True):
                if wait in late:
                    log.warning("pid %d did not stop within %g s; killing it", life.process.pid,
                                STOP_WITHIN_S)
                    _signal_group(life.process, signal.SIGKILL)
            if late:
                await asyncio.wait(late)
        watchers = [s.life.watcher for s in self._services.values()
                    if s.life is not None and s.life.watcher is not None]
        if watchers:
            await asyncio.wait(watchers)
        if self._http is not None:
            await self._http.aclose()
        if self._broker is not None:
            await asyncio.to_thread(self._broker.stop)
        if self._pg is not None:
            pg = self._pg
            # A database kill under way finishes first (it restarts nothing once
            # closing), so no restarted server can come up after this stop.
            await self._db_lock.acquire()
            await asyncio.to_thread(pg.stop)
            # After a database kill the wheel's handle knows only the old postmaster
            # and leaves the restarted one to the guard; stop it here in any case.
            await asyncio.to_thread(stop_unheld_server, pg.data_dir)
            pid = _postmaster_pid(pg.data_dir)
            if pid is not None and _pid_alive(pid):
                log.error("PostgreSQL (pid %d) in %s is still running after the stop", pid, pg.data_dir)
        log.info("chaos stack stopped; logs in %s", self.log_dir)

    # ------------------------------------------------------------------ contract

    @property
    def endpoints(self) -> Endpoints:
        if self._endpoints is None:
            raise RuntimeError("the chaos stack is not started")
        return self._endpoints

    def kinds(self) -> dict[str, list[str]]:
        """Service kind -> its instances, for the kills (never the sandbox: see the module)."""
        kinds: dict[str, list[str]] = {}
        for service in self._services.values():
            if service.kind != "sandbox":
                kinds.setdefault(service.kind, []).append(service.name)
        return kinds

    def pids(self) -> dict[str, int]:
        """The current pid of every process of the run: services, ``tansu`` and ``postgres``.

        The tests check that none outlives the stack.
        """
        found = {name: s.life.process.pid for name, s in self._services.items() if s.life is not None}
        if self._broker is not None:
            found["tansu"] = self._broker.pid
        if self._pg is not None and (pid := _postmaster_pid(self._pg.data_dir)) is not None:
            found["postgres"] = pid
        return found

    async def kill(self, instance: str) -> None:
        """SIGKILL ``instance``, then start it again and wait until it is ready (both recorded).

        Safe to call concurrently: kills of one instance take turns; kills of others
        run at once. A restart during a database outage waits for the database, and
        a start that fails (the database went away meanwhile) is retried a few times.
        """
        service = self._services[instance]
        async with service.lock:
            if self._closing:
                return
            life = service.life
            assert life is not None
            if life.process.returncode is None:
                pid = life.process.pid
                life.ending = True
                _signal_group(life.process, signal.SIGKILL)
                self.record.incident("kill", instance, f"SIGKILL pid {pid}")
                log.info("killed %s (pid %d)", instance, pid)
                try:
                    async with asyncio.timeout(KILLED_GONE_WITHIN_S):
                        await life.process.wait()
                except TimeoutError:
                    raise ChaosStackError(f"{instance} (pid {pid}) still runs {KILLED_GONE_WITHIN_S:g} s "
                                          "after SIGKILL") from None
            else:
                # It already exited on its own (recorded then); the plan still restarts it.
                self.record.incident("kill", instance, f"had exited on its own ({life.process.returncode})")
            started = time.monotonic()
            try:
                failures = await self._restart(service)
            except ChaosStackError as exc:
                if self._closing:
                    raise
                # Not back: for the report, as good as a process that exited on its own.
                code = service.life.process.returncode if service.life is not None else None
                self._exited.append((instance, code if code is not None else -1))
                self.record.incident("exited", instance, f"did not come back after its kill: {exc}"[:500])
                raise
            assert service.life is not None
            took = time.monotonic() - started
            detail = f"pid {service.life.process.pid}, ready after {took:.1f} s"
            if failures:
                detail += f" ({len(failures)} failed start(s): {failures[-1]})"
            self.record.incident("restart", instance, detail)
            log.info("restarted %s: %s", instance, detail)

    async def _restart(self, service: _Service) -> list[str]:
        """Start a killed service again; returns why earlier tries failed (none: first try)."""
        failures: list[str] = []
        for attempt in range(RESTART_ATTEMPTS):
            if not self._db_up.is_set():
                log.info("%s waits for the database to be back before its restart", service.name)
                try:
                    async with asyncio.timeout(DB_UP_WITHIN_S):
                        await self._db_up.wait()
                except TimeoutError:
                    raise ChaosStackError(f"{service.name}: the database was not back within "
                                          f"{DB_UP_WITHIN_S:g} s for its restart") from None
            if self._closing:
                raise ChaosStackError(f"{service.name}: the stack is stopping; not restarted")
            try:
                await self._start_service(service)
                return failures
            except ChaosStackError as exc:
                failures.append(str(exc).splitlines()[0])
                log.warning("restart %d of %s failed: %s", attempt + 1, service.name, exc)
                await asyncio.sleep(min(2.0**attempt, 8.0))  # a crash-looping restart backs off
        raise ChaosStackError(f"{service.name} did not come back after {RESTART_ATTEMPTS} starts: "
                              + "; ".join(failures))

    async def kill_database(self, down_s: float) -> None:
        """``kill -9`` the postmaster; after ``down_s`` restart it on the same data and port.

        The same data directory, port and socket directory, so every service's DSN
        stays valid; the restart runs PostgreSQL's crash recovery. Recorded as
        ``db-kill`` and ``db-restart``; how long the checkouts take to answer
        ``/readyz`` again is logged.
        """
        async with self._db_lock:
            pg = self._pg
            assert pg is not None
            data_dir = pg.data_dir
            pid = _postmaster_pid(data_dir)
            if pid is None or not _pid_alive(pid):
                raise ChaosStackError(f"no running postmaster in {data_dir} to kill")
            children = _children_of(pid)  # backends and helpers: they must be gone before a restart
            self._db_up.clear()
            os.kill(pid, signal.SIGKILL)
            killed_at = time.monotonic()
            self.record.incident("db-kill", "postgres", f"kill -9 postmaster pid {pid}")
            log.info("killed the PostgreSQL postmaster (pid %d, %d children); down for %.1f s",
                     pid, len(children), down_s)
            await asyncio.sleep(down_s)  # the outage itself, as the plan drew it
            await self._gone([pid, *children], within=DB_CHILDREN_GONE_WITHIN_S)
            if self._closing:
                raise ChaosStackError("the stack is stopping; PostgreSQL not restarted")
            new_pid = await self._start_postgres_again(pg)
            self._db_up.set()
            down = time.monotonic() - killed_at
            self.record.incident("db-restart", "postgres", f"pid {new_pid}, down {down:.1f} s")
            log.info("PostgreSQL back (pid %d) after %.1f s; crash recovery done", new_pid, down)
        await self._log_checkouts_ready_again()

    async def _gone(self, pids: list[int], *, within: float) -> None:
        deadline = time.monotonic() + within
        while alive := [p for p in pids if _pid_alive(p)]:
            if time.monotonic() > deadline:
                # A new postmaster refuses to start while an old backend holds the
                # shared memory; past the bound the crash is finished by hand.
                log.warning("PostgreSQL processes %s outlived their postmaster by %g s; killing them",
                            alive, within)
                for p in alive:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(p, signal.SIGKILL)
                deadline = time.monotonic() + KILLED_GONE_WITHIN_S
                within = KILLED_GONE_WITHIN_S
            await asyncio.sleep(POLL_S)

    async def _start_postgres_again(self, pg: EmbeddedPostgres) -> int:
        """``pg_ctl start`` on the killed server's data directory, port and socket directory."""
        data_dir = pg.data_dir
        pid_file = data_dir / "postmaster.pid"
        stale = _postmaster_pid(data_dir)
        if stale is not None and _pid_alive(stale):
            # Our postmaster is gone (checked), so a living pid in its lock file was
            # reused by another process: PostgreSQL would refuse to start.
            log.warning("removing the stale %s (pid %d)", pid_file, stale)
            pid_file.unlink(missing_ok=True)
        socket_lock = pg.socket_dir / f".s.PGSQL.{pg.port}.lock"
        socket_pid = _postmaster_pid_in(socket_lock)
        if socket_pid is not None and _pid_alive(socket_pid):
            log.warning("removing the stale %s (pid %d)", socket_lock, socket_pid)
            socket_lock.unlink(missing_ok=True)
        # The options the wheel started it with: no TCP, the same socket directory and port.
        args = ["-w", "-t", str(int(DB_BACK_WITHIN_S)), "-o", '-h ""',
                "-o", f"-k {shlex.quote(str(pg.socket_dir))}", "-o", f"-p {pg.port}",
                "-l", str(data_dir / "log"), "start"]
        ep = _embedded_postgres()
        deadline = time.monotonic() + DB_BACK_WITHIN_S
        while True:
            try:
                await asyncio.to_thread(ep.pg_ctl, args, pgdata=data_dir, user=_system_user(),
                                        timeout=DB_BACK_WITHIN_S + 30)
                break
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
                if time.monotonic() > deadline:
                    raise ChaosStackError(f"PostgreSQL did not start again in {data_dir} ({exc}); "
                                          f"see {data_dir / 'log'}") from exc
                log.warning("pg_ctl start failed (%s); trying again", exc)
                await asyncio.sleep(1.0)
        while True:  # pg_ctl -w saw it ready; the proof is a connection that works
            try:
                conn = await asyncpg.connect(pg.dsn, timeout=2)
            # Any failure means "not yet": a connect timing out during crash recovery
            # can even end in asyncpg's InternalClientError.
            except Exception as exc:
                if time.monotonic() > deadline:
                    raise ChaosStackError(f"PostgreSQL restarted but refuses connections: {exc}") from exc
                await asyncio.sleep(POLL_S)
            else:
                await conn.close()
                break
        new_pid = _postmaster_pid(data_dir)
        if new_pid is None:
            raise ChaosStackError(f"PostgreSQL restarted without a {pid_file}")
        return new_pid

    async def _log_checkouts_ready_again(self, within: float = 30.0) -> None:
        """How long the checkouts take to see the database again (they must, by themselves)."""
        assert self._http is not None
        started = time.monotonic()
        for url in self.endpoints.checkout_urls:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if (await self._http.get(url + "/readyz")).status_code == 200:
                        log.info("%s ready again %.1f s after the database restart", url,
                                 time.monotonic() - started)
                        break
                if time.monotonic() - started > within:
                    log.warning("%s/readyz not 200 within %g s of the database restart", url, within)
                    break
                await asyncio.sleep(POLL_S)

    def exited_on_own(self) -> list[tuple[str, int]]:
        """Instances that exited without being killed by the run: (name, returncode).

        An instance that did not come back after a kill counts too (its last start's
        exit code, or -1 if it ran but never became ready).
        """
        return list(self._exited)

    # ------------------------------------------------------------------ one process

    async def _start_service(self, service: _Service) -> None:
        """Start ``service`` (again) on its argv, env and port; return once it is ready."""
        port = service.port
        if port is not None:
            await self._port_free(service.name, port)
        header = f"=== chaos: start {service.name} at {self.record.now():.2f} s: {' '.join(service.argv[1:])}"
        out, offset = _open_log(service.log_path, header)  # this life's output starts at offset
        with out:
            if self._closing:  # a restart racing the end of the run starts nothing
                raise ChaosStackError(f"{service.name}: the stack is stopping; not started")
            process = await asyncio.create_subprocess_exec(
                *service.argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=asyncio.subprocess.STDOUT,
                env=self._env,
                # Its own group, so a kill reaches anything it started; on Linux it also
                # gets SIGTERM should this process die without stopping it.
                process_group=0, preexec_fn=die_with_parent_preexec(),
            )
        life = _Life(process, offset)
        service.life = life
        life.watcher = asyncio.create_task(self._watch(service, life), name=f"watch-{service.name}")
        log.debug("started %s (pid %d)", service.name, process.pid)
        try:
            if self._closing:  # the stop began while it was being started: it may have missed it
                raise ChaosStackError(f"{service.name}: the stack is stopping; not started")
            await self._wait_ready(service, life)
        except BaseException:
            if process.returncode is None:
                life.ending = True
                _signal_group(process, signal.SIGKILL)
            raise
        life.ready = True

    async def _port_free(self, name: str, port: int) -> None:
        deadline = time.monotonic() + PORT_FREE_WITHIN_S
        while not port_is_free(LOOPBACK, port):
            if time.monotonic() > deadline:
                raise ChaosStackError(f"{name}: port {port} still taken {PORT_FREE_WITHIN_S:g} s on")
            await asyncio.sleep(POLL_S)

    async def _wait_ready(self, service: _Service, life: _Life) -> None:
        assert life.watcher is not None
        deadline = time.monotonic() + READY_WITHIN_S
        while True:
            if life.process.returncode is not None:
                raise ChaosStackError(f"{service.name} exited before it was ready "
                                      f"(exit code {life.process.returncode}); its log ends:\n"
                                      + self._tail(service, life))
            if await self._ready(service, life):
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChaosStackError(f"{service.name} not ready within {READY_WITHIN_S:g} s; its log ends:\n"
                                      + self._tail(service, life))
            # Poll interval; wakes at once if the process exits.
            await asyncio.wait([life.watcher], timeout=min(POLL_S, remaining))

    async def _ready(self, service: _Service, life: _Life) -> bool:
        if service.url is not None and service.ready_path is not None:
            assert self._http is not None
            try:
                response = await self._http.get(service.url + service.ready_path)
            except httpx.HTTPError:
                return False
            if not (service.any_status or response.is_success):
                return False
        if service.log_markers:
            output = _read_from(service.log_path, life.log_offset)
            return all(marker.encode() in output for marker in service.log_markers)
        return True

    async def _watch(self, service: _Service, life: _Life) -> None:
        """Notice an exit the stack did not cause: recorded, not restarted (see the module)."""
        code = await life.process.wait()
        if life.ending or not life.ready:
            return  # killed or stopped by the stack, or a failed start (reported by the starter)
        self._exited.append((service.name, code))
        self.record.incident("exited", service.name, f"exit code {code}")
        log.error("%s (pid %d) exited on its own with code %d; not restarted. Its log ends:\n%s",
                  service.name, life.process.pid, code, self._tail(service, life))

    @staticmethod
    def _tail(service: _Service, life: _Life) -> str:
        text = _read_from(service.log_path, life.log_offset).decode("utf-8", "replace")
        return text[-LOG_TAIL_BYTES:].strip() or "(no output)"


# --------------------------------------------------------------------------- helpers


async def _start_postgres_owned(data_dir: Path) -> EmbeddedPostgres:
    """``start_embedded_postgres`` in a thread (it blocks); a cancelled caller still stops it."""
    task = asyncio.ensure_future(asyncio.to_thread(start_embedded_postgres, data_dir))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            pg = await task
            await asyncio.to_thread(pg.stop)
        raise


def _distinct_free_ports(n: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < n:
        port = free_port(LOOPBACK)
        if port not in ports:
            ports.append(port)
    return ports


def _signal_group(process: asyncio.subprocess.Process, sig: signal.Signals) -> None:
    """Signal the process's group (it leads its own); only while it is not yet reaped.

    Before it is reaped its pid cannot have been reused, so the signal reaches nothing else.
    """
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def _open_log(path: Path, header: str) -> tuple[IO[bytes], int]:
    """The log opened for appending, after a header line; and where the new output starts."""
    path.parent.mkdir(parents=True, exist_ok=True)
    out = open(path, "ab")  # the caller closes it once the child has its own descriptor
    out.write(header.encode() + b"\n")
    out.flush()
    return out, out.tell()


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read()
    except OSError:
        return b""


def _postmaster_pid_in(lock_file: Path) -> int | None:
    try:
        return int(lock_file.read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def _children_of(pid: int) -> list[int]:
    """Pids whose parent is ``pid`` (Linux ``/proc``; elsewhere none are known)."""
    found: list[int] = []
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if len(fields) > 1 and fields[1] == str(pid):
            found.append(int(entry.name))
    return found
