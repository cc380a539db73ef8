"""Wiring: settings, pool, provider client and routes into one Starlette app.

``create_app_from_env()`` is what ``paycore serve checkout`` runs; tests call
``create_app`` with a fake clock and their own database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import asyncpg
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.exceptions import HTTPException

from paycore.accounts import register_provider_accounts
from paycore.clock import Clock, SystemClock
from paycore.config import Settings, load_settings
from paycore.db import create_pool, run_every
from paycore.http.inputs import UnstorableTextRefused
from paycore.http.openapi import openapi_route
from paycore.http.outage import DatabaseOutage
from paycore.http.problems import (
    Problem,
    http_exception_handler,
    problem_handler,
)
from paycore.http.request_id import RequestIdMiddleware
from paycore.http.request_metrics import instrument
from paycore.http.unhandled import UnhandledErrorMiddleware
from paycore.operation_sends import OperationSender
from paycore.providers.base import PaymentCalls
from paycore.providers.registry import for_accounts
from paycore.tracing import instrument_app
from paycore_checkout import backoffice, inbound_idempotency
from paycore_checkout.auth import Authenticator
from paycore_checkout.openapi import document
from paycore_checkout.payments import CheckoutMetrics, CheckoutPayments
from paycore_checkout.routes import routes

log = logging.getLogger("paycore.checkout")
T = TypeVar("T")


@dataclass
class Services:
    settings: Settings
    clock: Clock
    pool: asyncpg.Pool
    auth: Authenticator
    payments: CheckoutPayments
    operations: OperationSender  # the back office's refunds, captures and voids
    outage: DatabaseOutage
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)

    def spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run work that must outlive the request (kept referenced until done)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def drain(self, timeout_s: float) -> None:
        """On shutdown, let in-flight payments finish recording (bounded)."""
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=timeout_s)


SWEEP_EVERY_S = 3600.0


async def _sweep_idempotency_records(pool: asyncpg.Pool, clock: Clock) -> None:
    """Every instance sweeps (SKIP LOCKED keeps them apart)."""
    deleted = await inbound_idempotency.sweep_expired(pool, now=clock.now())
    if deleted:
        log.info("deleted %d expired Idempotency-Key records", deleted)


def create_app(
    settings: Settings,
    *,
    clock: Clock | None = None,
    pool: asyncpg.Pool | None = None,
    client: PaymentCalls | None = None,
    sweep_every_s: float | None = SWEEP_EVERY_S,
) -> Starlette:
    """``sweep_every_s``: how often expired ``Idempotency-Key`` records are deleted (None: never)."""
    clock = clock or SystemClock()
    registry = CollectorRegistry()
    metrics = CheckoutMetrics(registry)
    auth = Authenticator(secret=settings.jwt_secret, jwks_url=settings.jwks_url,
                         jwks_refetch_cooldown_s=settings.jwks_refetch_cooldown_s,
                         claims=settings.jwt_claims)
    outage = DatabaseOutage(log)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        own_pool = pool is None
        if settings.database_url is None and pool is None:
            raise RuntimeError("PAYCORE_DATABASE_URL is not set")
        # Checkout's statements keep no session state (transactions only): no reset round
        # trip on each release, four fewer per payment (docs/operations.md, Scale).
        db = pool or await create_pool(settings.database_url or "", max_size=20, session_free=True)
        own_client = client is None
        provider = client or for_accounts(settings.accounts, clock,
                                          max_call_duration_s=settings.budgets.max_call_duration_s)
        await register_provider_accounts(db, settings.accounts, clock.now())
        services = Services(
            settings=settings, clock=clock, pool=db, auth=auth,
            payments=CheckoutPayments(pool=db, client=provider, clock=clock, settings=settings,
                                      metrics=metrics),
            operations=OperationSender(pool=db, client=provider, clock=clock, settings=settings),
            outage=outage,
        )
        outage.start(db)
        app.state.services = services
        stop_sweeping = asyncio.Event()
        sweeping = (asyncio.create_task(run_every(sweep_every_s, stop_sweeping, "Idempotency-Key sweep",
                                                  lambda: _sweep_idempotency_records(db, clock), log))
                    if sweep_every_s is not None else None)
        log.info("checkout ready: provider account %s", settings.default_account.provider_account)
        try:
            yield
        finally:
            stop_sweeping.set()
            if sweeping is not None:
                await sweeping
            await services.drain(settings.budgets.call_s + settings.budgets.record_s)
            await outage.aclose()
            if own_client:
                await provider.aclose()
            if own_pool:
                await db.close()

    app = Starlette(
        # /metrics: the admin port (health_server)
        routes=[*routes(), *backoffice.routes(), openapi_route(document())],
        lifespan=lifespan,
        exception_handlers={Problem: problem_handler, HTTPException: http_exception_handler},
    )
    # The database unreachable: 503 with Retry-After, said once; any other error: one 500, logged once.
    app.add_middleware(UnhandledErrorMiddleware, logger=log, outage=outage)
    # Outside it, so its 503s and 500s are counted (the 5xx alert).
    instrument(app, "checkout", registry)  # request durations; the registry the admin port serves
    app.add_middleware(UnstorableTextRefused)  # a NUL in the path or query: 400, not a 500
    app.add_middleware(RequestIdMiddleware)  # every answer carries X-Request-Id
    instrument_app(app)  # outermost: server spans around all of it (nothing when tracing is off)
    return app


def create_app_from_env() -> Starlette:
    """The app ``paycore serve checkout`` runs, configured from ``PAYCORE_*``."""
    settings = load_settings()
    if settings.jwt_secret is None and settings.jwks_url is None:
        from paycore.config import ConfigError

        raise ConfigError("PAYCORE_JWT_SECRET", "is required (or PAYCORE_JWKS_URL)")
    return create_app(settings)
