"""A database that cannot be reached, as every route answers it: 503, said once in the log.

Any route that fails because PostgreSQL is unreachable answers 503
``database-unavailable`` problem+json with ``Retry-After`` instead of a 500
with a traceback (:class:`paycore.http.unhandled.UnhandledErrorMiddleware`
answers it). The first such failure logs one warning; a probe then asks
the database every second and logs one info line when it answers again.

The 503 claims nothing about what happened: a pay request may fail after its
attempt was sent, so this is never the reference's ``payment-not-started``
(which promises nothing was sent). Retrying is safe where the route is: the
order lock and live attempt keep a payment single, and the webhook intake
answers only after its commit, so the provider redelivers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import asyncpg
import asyncpg.exceptions as pgerr
from starlette.responses import Response
from starlette.types import Scope

from paycore.http.problems import problem_response

RETRY_AFTER_S = 5
PROBE_INTERVAL_S = 1.0
PROBE_TIMEOUT_S = 2.0

# What PostgreSQL being unreachable looks like through asyncpg: the socket
# (refused, reset, timed out: OSError, TimeoutError included), a connection lost
# mid-statement (class 08), the server shutting down or starting (57P01-57P03),
# or refusing connections for now (53300). In these services nothing else
# reaches a route as an OSError: the provider client and the JWKS fetch turn
# their own transport errors into outcomes and problems.
UNREACHABLE: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.InternalClientError,  # a connection left unusable by a crash (these services never share one)
    asyncpg.PostgresConnectionError,
    pgerr.AdminShutdownError,
    pgerr.CrashShutdownError,
    pgerr.CannotConnectNowError,
    pgerr.TooManyConnectionsError,
)


def is_database_unavailable(exc: BaseException) -> bool:
    """Whether ``exc``, or what it was raised from or while handling, is the database unreachable.

    The chain matters: a transaction's exit on a connection that just died
    raises ``InterfaceError`` ("the underlying connection is closed") from the
    connection error, and a later statement on it raises that alone.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, UNREACHABLE):
            return True
        if isinstance(current, asyncpg.InterfaceError) and "connection is closed" in str(current):
            return True
        current = current.__cause__ or current.__context__
    return False


def unavailable_response(instance: str | None = None) -> Response:
    return problem_response(
        503, "database-unavailable", "Database unavailable",
        "The service cannot reach its database, so what this request did is not known here. "
        "Retry after the Retry-After interval.",
        instance=instance, headers={"Retry-After": str(RETRY_AFTER_S)},
    )


class DatabaseOutage:
    """One service's view of its database: up, or down since the first failure it saw."""

    def __init__(self, log: logging.Logger, *, probe_interval_s: float = PROBE_INTERVAL_S) -> None:
        self.log = log
        self.probe_interval_s = probe_interval_s
        self._pool: asyncpg.Pool | None = None
        self._down_since: float | None = None
        self._probe: asyncio.Task[None] | None = None
        self._pool_reports = _PoolReports(self)

    @property
    def down(self) -> bool:
        return self._down_since is not None

    def start(self, pool: asyncpg.Pool) -> None:
        """Watch ``pool`` (from the service's lifespan)."""
        self._pool = pool
        # asyncpg retries its pool's connection floor with a traceback per try (the
        # first often before any request fails): each is this outage, said once here.
        # The logger is shared: one pool per process is assumed.
        logging.getLogger("asyncpg.pool").addFilter(self._pool_reports)

    async def aclose(self) -> None:
        logging.getLogger("asyncpg.pool").removeFilter(self._pool_reports)
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe
            self._probe = None

    def seen(self, exc: BaseException) -> None:
        """A route failed because the database is unreachable: log only the first of an outage."""
        if self._down_since is not None:
            return
        self._down_since = time.monotonic()
        self.log.warning("database unreachable (%s: %s): answering 503 with Retry-After until it answers",
                         type(exc).__name__, exc)
        if self._pool is not None and (self._probe is None or self._probe.done()):
            self._probe = asyncio.get_running_loop().create_task(self._wait_for_database(self._pool))

    async def _wait_for_database(self, pool: asyncpg.Pool) -> None:
        while True:
            await asyncio.sleep(self.probe_interval_s)
            try:
                await pool.fetchval("SELECT 1", timeout=PROBE_TIMEOUT_S)
            except (*UNREACHABLE, asyncpg.PostgresError, asyncpg.InterfaceError):
                continue  # still away, or answering but not yet usable (e.g. starting up)
            down_since, self._down_since = self._down_since, None
            elapsed = time.monotonic() - down_since if down_since is not None else 0.0
            self.log.info("database answers again after %.1f s of outage", elapsed)
            return


class _PoolReports(logging.Filter):
    """asyncpg's own report of an unreachable database becomes this outage's one line."""

    def __init__(self, outage: DatabaseOutage) -> None:
        super().__init__()
        self.outage = outage

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and is_database_unavailable(exc):
            self.outage.seen(exc)
            return False
        return True


async def not_ready(outage: DatabaseOutage, pool: asyncpg.Pool, instance: str) -> Response | None:
    """``/readyz``: None when the database answers, else the 503 saying why (an outage is seen)."""
    try:
        await pool.fetchval("SELECT 1", timeout=PROBE_TIMEOUT_S)
    except (*UNREACHABLE, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        if is_database_unavailable(exc):
            outage.seen(exc)
            return unavailable_response(instance)
        return problem_response(503, "not-ready", "Database not ready", type(exc).__name__,
                                instance=instance, headers={"Retry-After": str(RETRY_AFTER_S)})
    return None


def problem_answer(scope: Scope) -> Response:
    """The 503 of an API: ``database-unavailable`` problem+json with Retry-After."""
    return unavailable_response(scope.get("path"))

