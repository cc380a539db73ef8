"""Wiring: settings, pool, templates and routes into one Starlette app.

``create_app_from_env()`` is what ``paycore serve console`` runs; tests call :func:`create_app`
with a fake clock and their own database.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import jinja2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from paycore.clock import Clock, SystemClock
from paycore.currencies import format_amount
from paycore.db import create_pool
from paycore.http.inputs import UnstorableTextRefused
from paycore.http.outage import DatabaseOutage, not_ready
from paycore.http.request_id import RequestIdMiddleware
from paycore.http.request_metrics import instrument
from paycore.http.unhandled import UnhandledErrorMiddleware
from paycore.operation_sends import OperationSender
from paycore.providers.base import PaymentCalls
from paycore.providers.registry import for_accounts
from paycore.tracing import instrument_app
from paycore_console import api, errors, pages
from paycore_console.context import Console, console_of
from paycore_console.credentials import ConsoleAuth
from paycore_console.settings import ConsoleSettings

log = logging.getLogger("paycore.console")
HERE = Path(__file__).parent

# Pages load only our own files; nothing may frame them (clickjacking an action form).
SECURITY_HEADERS = {
    b"content-security-policy": b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
                                b"form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    b"x-frame-options": b"DENY",
    b"x-content-type-options": b"nosniff",
    b"referrer-policy": b"no-referrer",
}


class SecurityHeaders:
    """Adds :data:`SECURITY_HEADERS`, ``no-store`` to everything but the static files, and
    ``Strict-Transport-Security`` to an answer to https (``hsts_max_age_s``; 0: never)."""

    def __init__(self, app: ASGIApp, hsts_max_age_s: int = 0) -> None:
        self.app = app
        self.hsts = f"max-age={hsts_max_age_s}".encode() if hsts_max_age_s > 0 else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        static = path.startswith("/static/") or path == "/favicon.ico"
        # The scheme as the client used it: a trusted proxy's X-Forwarded-Proto is applied first.
        hsts = self.hsts if scope.get("scheme") == "https" else None

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += list(SECURITY_HEADERS.items())
                if hsts is not None:
                    headers.append((b"strict-transport-security", hsts))
                if not static:
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


async def healthz(request: Request) -> Response:
    """The process answers (``paycore up`` waits for it); needs no sign-in and says nothing else."""
    return JSONResponse({"status": "ok"})


async def favicon(request: Request) -> Response:
    """Where a browser looks first, whatever the page says: the icon, not a 404."""
    return FileResponse(HERE / "static" / "favicon.ico", media_type="image/x-icon")


async def readyz(request: Request) -> Response:
    """Ready while the database answers; 503 problem+json with Retry-After while it does not."""
    c = console_of(request)
    problem = await not_ready(c.outage, c.pool, request.url.path)
    return problem or JSONResponse({"status": "ready"})


def templates() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True)
    env.filters["money"] = format_amount  # {{ amount_minor|money(currency) }}: "25.00 EUR"
    return env


def create_app(settings: ConsoleSettings, *, clock: Clock | None = None,
               pool: asyncpg.Pool | None = None, client: PaymentCalls | None = None) -> Starlette:
    """``client``: the providers refunds are sent to (tests pass theirs); by default one for the
    provider accounts configured, and none -- refunds refused -- when no account is."""
    clock = clock or SystemClock()
    auth = ConsoleAuth(settings.auth)
    env = templates()
    outage = DatabaseOutage(log)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        own_pool = pool is None
        if pool is None and settings.database_url is None:
            raise RuntimeError("PAYCORE_DATABASE_URL is not set")
        db = pool or await create_pool(settings.database_url or "", max_size=10)
        core = settings.core
        own_client = client is None and bool(core.accounts)
        provider = client or (for_accounts(core.accounts, clock,
                                           max_call_duration_s=core.budgets.max_call_duration_s)
                              if core.accounts else None)
        sender = (OperationSender(pool=db, client=provider, clock=clock, settings=core)
                  if provider is not None else None)
        console = Console(settings, clock, db, auth, env, outage, sender)
        app.state.console = console
        outage.start(db)
        accounts = ", ".join(a.provider_account for a in core.accounts)
        log.info("console ready; refunds %s", f"sent for {accounts}" if sender is not None
                 else "refused: no provider account is configured")
        try:
            yield
        finally:
            await console.drain(core.budgets.call_s + core.budgets.record_s)
            await outage.aclose()
            if own_client and provider is not None:
                await provider.aclose()
            if own_pool:
                await db.close()

    app = Starlette(
        routes=[*pages.routes(), *api.routes(), Route("/healthz", healthz, methods=["GET"]),
                Route("/readyz", readyz, methods=["GET"]), Route("/favicon.ico", favicon, methods=["GET"]),
                Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static")],
        lifespan=lifespan,
        exception_handlers={HTTPException: errors.http_exception, **errors.HANDLERS},
    )
    # The database unreachable: a 503 with Retry-After (a page, or problem+json under /api/), said
    # once in the log, instead of a 500 and a traceback per request; any other error: one 500
    # problem, logged once.
    app.add_middleware(UnhandledErrorMiddleware, logger=log, outage=outage, answer=errors.outage_answer(env))
    app.add_middleware(SecurityHeaders, hsts_max_age_s=settings.hsts_max_age_s)
    instrument(app, "console")  # request durations; /metrics is on the admin port
    app.add_middleware(UnstorableTextRefused)  # a NUL in the path or query: 400, not a 500
    app.add_middleware(RequestIdMiddleware)  # every answer carries X-Request-Id
    instrument_app(app)  # server spans around all of it (nothing when tracing is off)
    if settings.trusted_proxies:
        # Outermost: the client's address and scheme as a trusted proxy saw them, before anything reads
        # them (the sign-in throttle, the request log, HSTS). From any other peer the headers are ignored.
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=list(settings.trusted_proxies))
    return app


def create_app_from_env() -> Starlette:
    return create_app(ConsoleSettings.from_env(os.environ))

