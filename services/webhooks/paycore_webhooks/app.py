"""``POST /webhooks/<provider>``: verify, parse, handle, and acknowledge only after commit.

The provider (:class:`paycore.providers.base.Provider`) verifies and parses; this
module names none.

- Unverifiable (missing headers 400; bad or stale signature 401):
  problem+json, nothing stored. A replay of a verified delivery inside the
  signature tolerance (same webhook-id and timestamp) answers ``duplicate``.
- Body over 256 KiB: 413.
- A verified body that is not an event of the provider we understand (not JSON, an unknown
  type, a key repeated in one object, an id that differs from webhook-id), or one
  PostgreSQL cannot store as parsed (NUL, lone surrogates, an id too long to
  index): recorded raw, escalated ``unparseable-notification`` (one episode per
  body), 200 ``unparseable``. The provider signed it: refusing would only make it
  retry for days and then drop it.
- The database unreachable: 503 + Retry-After (logged once per outage), so the provider redelivers.
- Any other failure before the handler's commit: 500, so the provider redelivers.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg
import orjson
from prometheus_client import CollectorRegistry, Counter
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from paycore import webhook_replays
from paycore.accounts import register_provider_accounts
from paycore.clock import Clock, SystemClock
from paycore.config import ConfigError, Settings, load_settings
from paycore.db import create_pool
from paycore.http.bodies import first_duplicate_key, read_limited
from paycore.http.metrics import metrics_endpoint
from paycore.http.outage import DatabaseOutage, DatabaseOutageMiddleware, is_database_unavailable, not_ready
from paycore.http.problems import (
    InternalErrorMiddleware,
    Problem,
    http_exception_handler,
    problem_handler,
    problem_response,
)
from paycore.providers.base import InvalidNotification, NotificationUnverified, Provider
from paycore.providers.registry import for_accounts
from paycore_webhooks.handler import handle_notification, record_unparseable, storage_problem

log = logging.getLogger("paycore.webhooks")
MAX_BODY = 256 * 1024


# How often this process forgets deliveries whose signatures can no longer be replayed.
REPLAY_PURGE_EVERY_S = 60.0


@dataclass
class Intake:
    settings: Settings
    clock: Clock
    pool: asyncpg.Pool
    provider: Provider
    deliveries: Counter
    outage: DatabaseOutage
    _next_purge_at: datetime | None = None

    async def purge_replay_window(self) -> None:
        now = self.clock.now()
        if self._next_purge_at is None or now >= self._next_purge_at:
            self._next_purge_at = now + timedelta(seconds=REPLAY_PURGE_EVERY_S)
            await webhook_replays.purge_expired(self.pool, now)


def provider_for(settings: Settings, clock: Clock) -> Provider:
    """The provider whose webhooks this intake verifies; refuses to start when no account has a secret."""
    provider = for_accounts(settings.accounts, clock,
                            max_call_duration_s=settings.budgets.max_call_duration_s)
    provider.check_notification_secrets()
    return provider


async def receive_notification(request: Request) -> Response:
    intake: Intake = request.app.state.intake
    provider = intake.provider
    body = await read_limited(request, MAX_BODY)
    try:
        delivery = provider.verify_notification(request.headers, body, now=intake.clock.now())
    except NotificationUnverified as exc:
        intake.deliveries.labels("rejected-signature").inc()
        log.warning("webhook rejected: %s", exc.reason)
        status = 400 if exc.malformed else 401
        return problem_response(status, "webhook-unverified", "Webhook not verified", exc.reason)
    account, header_id = delivery.account, delivery.delivery_id
    # A verified delivery that is not an event we understand, or one PostgreSQL cannot
    # store as parsed: refusing it would make the provider retry for days and then
    # drop it. Keep the bytes, acknowledge, and tell a person.
    parsed = delivery.parsed
    if not isinstance(parsed, InvalidNotification) and first_duplicate_key(body) is not None:
        parsed = InvalidNotification("duplicate-key")  # parsers disagree on which value wins: never guess
    if isinstance(parsed, InvalidNotification):
        intake.deliveries.labels("invalid").inc()
        log.warning("webhook %s for %s is not a %s event (%s): recording it raw",
                    header_id[:64], account.provider_account, provider.name, parsed)
        unstorable: str | None = f"not-a-{provider.name}-event:{parsed}"
    else:
        unstorable = storage_problem(parsed)
    try:
        await intake.purge_replay_window()
        if unstorable is not None or isinstance(parsed, InvalidNotification):
            log.warning("webhook %s for %s cannot be handled as parsed (%s): recording it raw",
                        header_id[:64], account.provider_account, unstorable)
            result = await record_unparseable(intake.pool, account=account, webhook_id=header_id,
                                              body=body, why=unstorable or "unparseable",
                                              now=intake.clock.now(),
                                              reminder_interval=intake.settings.reminder_interval,
                                              delivery=delivery.replay)
        else:
            result = await handle_notification(intake.pool, account=account, n=parsed, key=delivery.key,
                                               now=intake.clock.now(), delivery=delivery.replay,
                                               reminder_interval=intake.settings.reminder_interval,
                                               recheck_after_s=intake.settings.recheck_after_s)
    except Exception as exc:
        # Nothing was acknowledged: the provider redelivers, and the redelivery is handled normally.
        if is_database_unavailable(exc):
            intake.deliveries.labels("unavailable").inc()
            raise  # 503 + Retry-After, said once per outage (paycore.http.outage)
        intake.deliveries.labels("error").inc()
        log.exception("webhook for %s failed before commit", account.provider_account)
        return problem_response(500, "internal", "Notification not recorded", "Redeliver later.")
    intake.deliveries.labels(result.value).inc()
    return Response(orjson.dumps({"result": result.value}), media_type="application/json")


async def healthz(request: Request) -> Response:
    return Response(b'{"status":"ok"}', media_type="application/json")


async def readyz(request: Request) -> Response:
    intake: Intake = request.app.state.intake
    problem = await not_ready(intake.outage, intake.pool, request.url.path)
    return problem or Response(b'{"status":"ready"}', media_type="application/json")


def create_app(
    settings: Settings, *, clock: Clock | None = None, pool: asyncpg.Pool | None = None
) -> Starlette:
    clock = clock or SystemClock()
    registry = CollectorRegistry()
    deliveries = Counter("paycore_webhook_deliveries", "Webhook deliveries by result", ["result"],
                         registry=registry)
    provider = provider_for(settings, clock)
    outage = DatabaseOutage(log)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        db = pool or await create_pool(settings.database_url or "", max_size=20)
        await register_provider_accounts(db, settings.accounts, clock.now())
        app.state.intake = Intake(settings, clock, db, provider, deliveries, outage)
        outage.start(db)
        try:
            yield
        finally:
            await outage.aclose()
            await provider.aclose()
            if pool is None:
                await db.close()

    app = Starlette(
        routes=[
            Route(f"/webhooks/{provider.name}", receive_notification, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics_endpoint(registry), methods=["GET"]),
        ],
        lifespan=lifespan,
        exception_handlers={Problem: problem_handler, HTTPException: http_exception_handler},
    )
    app.add_middleware(DatabaseOutageMiddleware, outage=outage)
    app.add_middleware(InternalErrorMiddleware, logger=log)  # any other error: one 500, logged once
    return app


def create_app_from_env() -> Starlette:
    """The app ``paycore serve webhooks`` runs, configured from ``PAYCORE_*``."""
    settings = load_settings()
    if settings.database_url is None:
        raise ConfigError("PAYCORE_DATABASE_URL", "is required")
    return create_app(settings)
