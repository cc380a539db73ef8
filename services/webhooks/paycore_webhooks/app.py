"""``POST /webhooks/<provider>``: verify, parse, handle, and acknowledge only after commit.

Each configured provider (:class:`paycore.providers.base.NotificationReceiver`) gets its
route, verifies and parses; this module names none. A delivery may carry several
notifications (Adyen's batches): each is recorded in its own transaction, and the delivery
is acknowledged, in the provider's expected form (``[accepted]``), once all are.

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
from collections.abc import AsyncIterator, Awaitable, Callable
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

from paycore import operations, webhook_replays
from paycore.accounts import register_provider_accounts
from paycore.clock import Clock, SystemClock
from paycore.config import ConfigError, ProviderAccountConfig, Settings, load_settings
from paycore.db import create_pool
from paycore.http.bodies import first_duplicate_key, read_limited
from paycore.http.inputs import UnstorableTextRefused
from paycore.http.openapi import openapi_route
from paycore.http.outage import DatabaseOutage, is_database_unavailable, not_ready
from paycore.http.problems import (
    Problem,
    http_exception_handler,
    problem_handler,
    problem_response,
)
from paycore.http.request_id import RequestIdMiddleware
from paycore.http.request_metrics import instrument
from paycore.http.unhandled import UnhandledErrorMiddleware
from paycore.pgtext import json_problem
from paycore.providers.base import (
    InvalidNotification,
    NotificationReceiver,
    NotificationUnverified,
    OperationNotification,
    Provider,
    VerifiedDelivery,
)
from paycore.providers.registry import adapters_for
from paycore.tracing import instrument_app
from paycore_webhooks.handler import DeliveryResult, handle_notification, record_unparseable, storage_problem
from paycore_webhooks.openapi import document
from paycore_webhooks.operation_handler import handle_operation_notification

log = logging.getLogger("paycore.webhooks")
MAX_BODY = 256 * 1024


# How often this process forgets deliveries whose signatures can no longer be replayed.
REPLAY_PURGE_EVERY_S = 60.0


@dataclass
class Intake:
    settings: Settings
    clock: Clock
    pool: asyncpg.Pool
    deliveries: Counter
    outage: DatabaseOutage
    # Notifications an account's previous webhook secret verified (a rotation not yet finished).
    previous_secret: Counter
    _next_purge_at: datetime | None = None

    async def purge_replay_window(self) -> None:
        now = self.clock.now()
        if self._next_purge_at is None or now >= self._next_purge_at:
            self._next_purge_at = now + timedelta(seconds=REPLAY_PURGE_EVERY_S)
            await webhook_replays.purge_expired(self.pool, now)


def receivers_for(settings: Settings, clock: Clock) -> dict[str, Provider]:
    """The providers whose webhooks this intake verifies, by name; refuses to start while any of
    them has no account that can verify a notification (its deliveries would all be refused)."""
    adapters = adapters_for(settings.accounts, clock,
                            max_call_duration_s=settings.budgets.max_call_duration_s)
    for adapter in adapters.values():
        adapter.check_notification_secrets()
    return adapters


def notification_route(receiver: NotificationReceiver) -> Callable[[Request], Awaitable[Response]]:
    """``POST /webhooks/<receiver.name>``."""

    async def receive(request: Request) -> Response:
        return await receive_notification(request, receiver)

    return receive


async def receive_notification(request: Request, receiver: NotificationReceiver) -> Response:
    """Verify every notification of the delivery, record each in its own transaction, then acknowledge.

    A batch (Adyen) is acknowledged only when all its notifications are recorded; one that
    fails leaves the batch unacknowledged, and the provider's redelivery finds the others
    already recorded under their keys.
    """
    intake: Intake = request.app.state.intake
    body = await read_limited(request, MAX_BODY)
    try:
        deliveries = receiver.verify_deliveries(request.headers, body, now=intake.clock.now())
    except NotificationUnverified as exc:
        intake.deliveries.labels("rejected-signature").inc()
        log.warning("%s webhook rejected: %s", receiver.name, exc.reason)
        status = 400 if exc.malformed else 401
        return problem_response(status, "webhook-unverified", "Webhook not verified", exc.reason)
    for delivery in deliveries:
        if delivery.previous_secret:
            intake.previous_secret.labels(delivery.account.provider_account).inc()
    results = []
    for delivery in deliveries:
        try:
            results.append(await _record(intake, receiver, delivery, body))
        except Exception as exc:
            # Nothing more is acknowledged: the provider redelivers, and the redelivery is handled normally.
            if is_database_unavailable(exc):
                intake.deliveries.labels("unavailable").inc()
                raise  # 503 + Retry-After, said once per outage (paycore.http.outage)
            intake.deliveries.labels("error").inc()
            log.exception("webhook for %s failed before commit", delivery.account.provider_account)
            return problem_response(500, "internal", "Notification not recorded", "Redeliver later.")
    for result in results:
        intake.deliveries.labels(result.value).inc()
    if receiver.acknowledgement is not None:
        content, media_type = receiver.acknowledgement
        return Response(content, media_type=media_type)
    return Response(orjson.dumps({"result": results[0].value if len(results) == 1
                                  else [r.value for r in results]}), media_type="application/json")


async def _record(intake: Intake, receiver: NotificationReceiver, delivery: VerifiedDelivery,
                  body: bytes) -> DeliveryResult:
    """Record one verified notification (or, if it cannot be handled as parsed, its raw body)."""
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
                    header_id[:64], account.provider_account, receiver.name, parsed)
        unstorable: str | None = f"not-a-{receiver.name}-event:{parsed}"
    elif isinstance(parsed, OperationNotification):
        unstorable = json_problem(parsed.event)
    else:
        unstorable = storage_problem(parsed)
    await intake.purge_replay_window()
    if unstorable is not None or isinstance(parsed, InvalidNotification):
        log.warning("webhook %s for %s cannot be handled as parsed (%s): recording it raw",
                    header_id[:64], account.provider_account, unstorable)
        return await record_unparseable(intake.pool, account=account, webhook_id=header_id,
                                        body=body, why=unstorable or "unparseable",
                                        now=intake.clock.now(),
                                        reminder_interval=intake.settings.reminder_interval,
                                        delivery=delivery.replay)
    if delivery.operation is not None and await _names_an_operation(intake, account, delivery.operation):
        parsed = delivery.operation  # a refund or cancel of paycore's, not the payment's own news
    if isinstance(parsed, OperationNotification):  # a capture's, cancel's or refund's
        return await handle_operation_notification(
            intake.pool, account=account, n=parsed, key=delivery.key, now=intake.clock.now(),
            delivery=delivery.replay, reminder_interval=intake.settings.reminder_interval,
            recheck_after_s=intake.settings.recheck_after_s)
    return await handle_notification(intake.pool, account=account, n=parsed, key=delivery.key,
                                     now=intake.clock.now(), delivery=delivery.replay,
                                     reminder_interval=intake.settings.reminder_interval,
                                     recheck_after_s=intake.settings.recheck_after_s)


async def _names_an_operation(intake: Intake, account: ProviderAccountConfig,
                              n: OperationNotification) -> bool:
    """Whether a notification that reads as a payment's too names one of paycore's operations (by
    the provider's id or the operation's reference). Read before the handler's transaction: an
    operation exists before the provider can tell of it, so no later writer can change this."""
    by_id, by_reference = await operations.find_for_notification(
        intake.pool, account.provider_account, provider_operation_id=n.outcome.provider_operation_id,
        reference=n.outcome.claim.reference if n.outcome.claim else None, kind=n.outcome.operation,
        provider_payment_id=n.outcome.provider_payment_id)
    return by_id is not None or by_reference is not None


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
    previous_secret = Counter(
        "paycore_webhook_previous_secret", "Notifications verified by an account's previous webhook secret",
        ["provider_account"], registry=registry)
    receivers = receivers_for(settings, clock)
    outage = DatabaseOutage(log)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # The intake changes no session state (its locks and settings are transaction-scoped):
        # no reset round trip on each release, which is half of a redelivery's database work.
        db = pool or await create_pool(settings.database_url or "", max_size=20, session_free=True)
        await register_provider_accounts(db, settings.accounts, clock.now())
        app.state.intake = Intake(settings, clock, db, deliveries, outage, previous_secret)
        outage.start(db)
        try:
            yield
        finally:
            await outage.aclose()
            for receiver in receivers.values():
                await receiver.aclose()
            if pool is None:
                await db.close()

    app = Starlette(
        routes=[
            *(Route(f"/webhooks/{name}", notification_route(receiver), methods=["POST"])
              for name, receiver in receivers.items()),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            openapi_route(document(receivers)),
        ],
        lifespan=lifespan,
        exception_handlers={Problem: problem_handler, HTTPException: http_exception_handler},
    )
    # The database unreachable: 503 with Retry-After, said once; any other error: one 500, logged once.
    app.add_middleware(UnhandledErrorMiddleware, logger=log, outage=outage)
    instrument(app, "webhooks", registry)  # request durations; /metrics is on the admin port
    app.add_middleware(UnstorableTextRefused)  # a NUL in the path or query: 400, not a 500
    app.add_middleware(RequestIdMiddleware)  # every answer carries X-Request-Id
    instrument_app(app)  # outermost: server spans around all of it (nothing when tracing is off)
    return app


def create_app_from_env() -> Starlette:
    """The app ``paycore serve webhooks`` runs, configured from ``PAYCORE_*``."""
    settings = load_settings()
    if settings.database_url is None:
        raise ConfigError("PAYCORE_DATABASE_URL", "is required")
    return create_app(settings)
