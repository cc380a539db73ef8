"""``POST /webhooks/cardco``: verify, parse, handle, and acknowledge only after commit.

- Unverifiable (missing headers 400; bad or stale signature 401):
  problem+json, nothing stored. A replay of a verified delivery inside the
  signature tolerance (same webhook-id and timestamp) answers ``duplicate``.
- Body over 256 KiB: 413.
- A verified body that is not a Cardco event we understand (not JSON, an unknown
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
from paycore.config import ConfigError, ProviderAccountConfig, Settings, load_settings
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
from paycore.notifications import Notification
from paycore.providers.cardco_events import InvalidEvent, parse_event
from paycore.webhook_replays import SignedDelivery
from paycore.webhook_signatures import VerificationFailed, Verifier
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
    verifier: Verifier[ProviderAccountConfig]
    deliveries: Counter
    outage: DatabaseOutage
    _next_purge_at: datetime | None = None

    async def purge_replay_window(self) -> None:
        now = self.clock.now()
        if self._next_purge_at is None or now >= self._next_purge_at:
            self._next_purge_at = now + timedelta(seconds=REPLAY_PURGE_EVERY_S)
            await webhook_replays.purge_expired(self.pool, now)


def verifier_for(settings: Settings) -> Verifier[ProviderAccountConfig]:
    secrets = [(a, a.webhook_secret.reveal()) for a in settings.accounts if a.webhook_secret is not None]
    if not secrets:
        raise ConfigError("PAYCORE_CARDCO_WEBHOOK_SECRET", "is required to receive webhooks")
    return Verifier(secrets)


async def receive_cardco(request: Request) -> Response:
    intake: Intake = request.app.state.intake
    body = await read_limited(request, MAX_BODY)
    try:
        account = intake.verifier.verify(request.headers, body, now=intake.clock.now())
    except VerificationFailed as exc:
        intake.deliveries.labels("rejected-signature").inc()
        log.warning("webhook rejected: %s", exc.reason)
        status = 400 if exc.reason == "missing-headers" else 401
        return problem_response(status, "webhook-unverified", "Webhook not verified", exc.reason)
    header_id = request.headers.get("webhook-id", "").strip()
    # A verified delivery that is not a Cardco event we understand, or one PostgreSQL
    # cannot store as parsed: refusing it would make the provider retry for days and
    # then drop it. Keep the bytes, acknowledge, and tell a person.
    notification: Notification | None = None
    try:
        notification = parse_event(body)
        if notification.event_id is not None and notification.event_id != header_id:
            raise InvalidEvent("id-differs-from-webhook-id")
        if first_duplicate_key(body) is not None:
            raise InvalidEvent("duplicate-key")  # parsers disagree on which value wins: never guess
        unstorable = storage_problem(notification)
    except InvalidEvent as exc:
        intake.deliveries.labels("invalid").inc()
        log.warning("webhook %s for %s is not a Cardco event (%s): recording it raw",
                    header_id[:64], account.provider_account, exc)
        unstorable = f"not-a-cardco-event:{exc}"
    delivery = SignedDelivery(request.headers["webhook-id"].strip(),
                              int(request.headers["webhook-timestamp"].strip()))
    try:
        await intake.purge_replay_window()
        if unstorable is not None or notification is None:
            log.warning("webhook %s for %s cannot be handled as parsed (%s): recording it raw",
                        header_id[:64], account.provider_account, unstorable)
            result = await record_unparseable(intake.pool, account=account, webhook_id=header_id,
                                              body=body, why=unstorable or "unparseable",
                                              now=intake.clock.now(),
                                              reminder_interval=intake.settings.reminder_interval,
                                              delivery=delivery)
        else:
            result = await handle_notification(intake.pool, account=account, n=notification,
                                               now=intake.clock.now(), delivery=delivery,
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
    verifier = verifier_for(settings)
    outage = DatabaseOutage(log)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        db = pool or await create_pool(settings.database_url or "", max_size=20)
        await register_provider_accounts(db, settings.accounts, clock.now())
        app.state.intake = Intake(settings, clock, db, verifier, deliveries, outage)
        outage.start(db)
        try:
            yield
        finally:
            await outage.aclose()
            if pool is None:
                await db.close()

    app = Starlette(
        routes=[
            Route("/webhooks/cardco", receive_cardco, methods=["POST"]),
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
