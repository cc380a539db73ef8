"""``paycore migrate``, ``paycore serve SERVICE`` and ``paycore run WORKER``.

Each service package is imported only by the command that runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import ipaddress
import logging
from collections.abc import Callable
from typing import Any

from paycore.config import load_settings
from paycore.tracing import configure_tracing
from paycore_cli.common import (
    DEFAULT_PORTS,
    CommandError,
    admin_host,
    admin_port,
    paycore_home,
    redact_dsn,
    serve_host,
    sigterm_raises_interrupt,
)
from paycore_cli.database import migrate_database, preflight_accounts
from paycore_cli.development import devstack
from paycore_cli.sandbox import sandbox_app, sandbox_settings

log = logging.getLogger("paycore.cli")
# App factories by import path, resolved only when the service is started.
APP_FACTORIES = {
    "checkout": "paycore_checkout.app:create_app_from_env",
    "sandbox": "paycore_cli.sandbox:sandbox_app",
    "webhooks": "paycore_webhooks.app:create_app_from_env",
    "console": "paycore_console.app:create_app_from_env",
}


def server_options() -> dict[str, Any]:
    """What every ``serve`` runs uvicorn with: libuv's event loop (in the runtime lock), less CPU per
    request than asyncio's (docs/operations.md, "Scale"); httptools' C parser, its refusals answered
    as problem+json (paycore.http.protocol, imported here: importing the CLI loads no uvicorn); and
    no proxy headers believed by default."""
    from paycore.http.protocol import ProblemHttpToolsProtocol

    # No X-Forwarded-* from anyone by uvicorn's default trust of 127.0.0.1: a service that sits
    # behind a proxy says which ones it trusts (PAYCORE_CONSOLE_TRUSTED_PROXIES).
    return {"http": ProblemHttpToolsProtocol, "loop": "uvloop", "proxy_headers": False}


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _load_factory(path: str) -> Callable[[], Any]:
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise CommandError(f"cannot import {module_name}: the service package is not installed") from exc
        raise
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise CommandError(f"{path} is not an application factory")
    return factory  # type: ignore[no-any-return]


def _with_admin(factory: Callable[[], Any], name: str, args: argparse.Namespace) -> Callable[[], Any]:
    """``factory``'s app with its admin port (/metrics, /healthz) served beside it."""
    from paycore.http.health_server import with_admin_server

    host, port = admin_host(args.metrics_host), admin_port(name, args.metrics_port)
    if port is not None:  # taken: say so now, before uvicorn starts (and fails inside its start-up)
        from paycore.http.health_server import bind_admin_socket

        bind_admin_socket(host, port, name).close()

    def build() -> Any:
        return with_admin_server(factory(), host, port, service=name)

    return build


def cmd_migrate(args: argparse.Namespace) -> int:
    settings = load_settings(require_account=False)
    with contextlib.ExitStack() as stack:
        stack.enter_context(sigterm_raises_interrupt())
        # A role of its own may hold the DDL rights the services' role lacks (docs/operations.md).
        dsn = settings.migration_database_url or settings.database_url
        if dsn is None:
            # Embedded PostgreSQL is a development convenience: the production image has none.
            embedded = devstack("embedded", "without PAYCORE_DATABASE_URL, migrate runs on embedded "
                                            "PostgreSQL, a development feature: set it, or")
            dsn = stack.enter_context(embedded.start_embedded_postgres(paycore_home(create=True) / "pg")).dsn
        applied = migrate_database(dsn)
    for version in applied:
        print(f"applied {version}")
    if not applied:
        print(f"nothing to apply: {redact_dsn(dsn)} is up to date")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    name: str = args.service
    host = serve_host(name, args.host)
    port: int = args.port if args.port is not None else DEFAULT_PORTS[name]
    if name == "sandbox" and not _is_loopback(host) and not args.allow_network:
        raise CommandError(
            f"serve sandbox: refusing to bind {host!r}: the sandbox accepts built-in development keys "
            "and listens on loopback only (127.0.0.1, ::1 or localhost); --allow-network opts in to a "
            "private development network such as docker compose's",
            code=2,
        )
    # Validate every setting before importing the app: a clear error, not a traceback.
    if name in ("checkout", "webhooks"):
        settings = load_settings()
        if name == "webhooks":
            from paycore.clock import SystemClock
            from paycore_webhooks.app import receivers_for

            try:  # opens nothing: only checks the webhook secrets
                receivers_for(settings, SystemClock())
            except ValueError as exc:  # a secret of the wrong form: a configuration error, not a traceback
                raise CommandError(f"configuration error: {exc}", code=2) from None
        if settings.database_url is not None:
            preflight_accounts(settings.database_url, settings)
    elif name == "sandbox":
        sandbox_settings()
    elif name == "console":
        import os

        try:
            from paycore_console.settings import ConsoleSettings
        except ModuleNotFoundError as exc:
            raise CommandError("cannot import paycore_console: the service package is not installed") from exc
        ConsoleSettings.from_env(os.environ)  # the secret, the database, the token settings: checked now
    level = logging.getLevelName(logging.getLogger().getEffectiveLevel()).lower()
    options: dict[str, Any] = {"log_config": None, "log_level": level, "timeout_graceful_shutdown": 5,
                               **server_options()}
    workers: int = getattr(args, "workers", 1)
    if workers > 1:
        from paycore_cli.workers import serve_workers

        # Each worker sets up its own tracing and app; the supervisor serves the admin port.
        log.info("serving %s on http://%s:%d with %d worker processes", name, host, port, workers)
        return serve_workers(name, workers, host=host, port=port, admin_host=admin_host(args.metrics_host),
                             admin_port=admin_port(name, args.metrics_port), uvicorn_options=options)
    configure_tracing(name)  # before the app is built: its factory adds the server spans
    factory = sandbox_app if name == "sandbox" else _with_admin(_load_factory(APP_FACTORIES[name]), name,
                                                                 args)

    import uvicorn

    log.info("serving %s on http://%s:%d", name, host, port)
    try:
        uvicorn.run(factory, factory=True, host=host, port=port, **options)
    except SystemExit as exc:  # uvicorn exits on start-up failures (e.g. port in use)
        code = exc.code
        return code if isinstance(code, int) else 1
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    configure_tracing(args.worker)  # OTEL_* turns it on; off, nothing is set up
    process = f"consumer-{args.consumer}" if args.worker == "consumer" else args.worker
    if args.worker != "incidents":  # faust runs its own loop (mode)
        # The servers' loop for the workers too: asyncio's own cost a recovery worker a fifth of its
        # CPU in socket writes alone (docs/performance.md, "Recovery").
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    metrics_host, metrics_port = admin_host(args.metrics_host), admin_port(process, args.metrics_port)
    if args.worker == "recovery":
        from paycore_recovery.main import run as run_recovery

        return asyncio.run(run_recovery(metrics_host=metrics_host, metrics_port=metrics_port,
                                        owner=args.owner))
    if args.worker == "dispatcher":
        from paycore_dispatcher.commands import run_dispatcher_command

        return run_dispatcher_command(relays=args.relays, metrics_host=metrics_host,
                                      metrics_port=metrics_port,
                                      retention_every_s=None if args.no_retention else args.retention_every)
    if args.worker == "consumer":
        from paycore_dispatcher.commands import run_consumer_command

        return run_consumer_command(args.consumer, instance_id=args.instance_id,
                                    metrics_host=metrics_host, metrics_port=metrics_port)
    if args.worker == "alerts":
        from paycore_dispatcher.commands import run_alerts_command

        return run_alerts_command(instance_id=args.instance_id, metrics_host=metrics_host,
                                  metrics_port=metrics_port)
    # -- incident grouping (issue 14): faust lives in its own package --
    if args.worker == "incidents":
        from paycore_incidents.commands import run_incidents_command

        return run_incidents_command(metrics_host=metrics_host, metrics_port=metrics_port)
    # -- end incident grouping --
    raise CommandError(f"unknown worker {args.worker!r}", code=2)  # argparse admits none
