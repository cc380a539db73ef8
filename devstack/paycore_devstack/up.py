"""``paycore up``: everything locally, on embedded PostgreSQL and Tansu unless configured otherwise.

Each service runs as a child process of the supervisor, started through the
``paycore`` command exactly as it runs in production.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Mapping

from paycore.config import ConfigError, load_settings
from paycore.providers.registry import PACKAGES, PROVIDER_PACKAGES
from paycore_cli.common import (
    LOG_FORMAT,
    LOOPBACK,
    UP_ADMIN,
    UP_SERVICES,
    WORKERS,
    CommandError,
    configure_logging,
    forget_local_database,
    local_console_secret,
    local_jwt_secret,
    paycore_home,
    redact_dsn,
    remember_local_database,
    sigterm_raises_interrupt,
)
from paycore_cli.database import migrate_database, preflight_accounts
from paycore_cli.sandbox import SANDBOX_ACCOUNT, SANDBOX_ENVIRONMENT

log = logging.getLogger("paycore.cli")

READY_WITHIN_S = 60.0
# What "ready" means for each service: the sandbox answers anything; the others /healthz.
READINESS = {"sandbox": ("/", True), "checkout": ("/healthz", False), "webhooks": ("/healthz", False),
             "recovery": ("/metrics", False), "dispatcher": ("/metrics", False),
             "console": ("/healthz", False)}


def cmd_up(args: argparse.Namespace) -> int:
    from paycore_devstack._process import port_is_free

    base = load_settings(require_account=False)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # readiness polls are not news
    home = paycore_home(create=True)
    ports: dict[str, int] = {name: getattr(args, f"{name}_port") for name in UP_SERVICES}
    # The HTTP services' admin ports (/metrics, /healthz); a worker's --NAME-port already is its own.
    admin: dict[str, int] = {name: getattr(args, f"{name}_metrics_port") for name in UP_ADMIN}
    flags = {**{f"--{n}-port": p for n, p in ports.items()},
             **{f"--{n}-metrics-port": p for n, p in admin.items()}}
    if len(set(flags.values())) != len(flags):
        raise CommandError("the --*-port options must all differ", code=2)
    for flag, port in flags.items():
        if not port_is_free(LOOPBACK, port):
            raise CommandError(f"{LOOPBACK}:{port} is already in use; pass {flag} to choose another")

    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env["PAYCORE_HOME"] = str(home)
    if LOG_FORMAT.get(env) is None:  # `make run` is read by people: text, unless asked for json
        env[LOG_FORMAT.name] = "text"
        configure_logging(env)
    urls = {name: f"http://{LOOPBACK}:{port}" for name, port in ports.items()}
    local = _use_local_sandbox(env, urls)
    if base.jwt_secret is None and base.jwks_url is None:
        env["PAYCORE_JWT_SECRET"] = local_jwt_secret(home, create=True) or ""
    from paycore_console.credentials import CONSOLE_SECRET
    from paycore_console.settings import INSECURE_COOKIES

    if CONSOLE_SECRET.get(env) is None:
        env[CONSOLE_SECRET.name] = local_console_secret(home, create=True) or ""
    if INSECURE_COOKIES.get(env) is None:
        # The console is served on plain http on loopback here: a Secure cookie would never come back.
        env[INSECURE_COOKIES.name] = "true"
    settings = load_settings(env)  # what the services will see: fail now, before starting anything
    services = list(UP_SERVICES)
    try:
        from paycore.clock import SystemClock
        from paycore_webhooks.app import receivers_for

        receivers_for(settings, SystemClock())  # opens nothing: only checks the webhook secrets
    except ConfigError as exc:
        log.warning("not starting the webhook intake: %s", exc)
        services.remove("webhooks")

    with contextlib.ExitStack() as stack:
        stack.enter_context(sigterm_raises_interrupt())
        pg_note = "external"
        if settings.database_url is None:
            from paycore_devstack.embedded import start_embedded_postgres

            pg = stack.enter_context(start_embedded_postgres(home / "pg"))
            env["PAYCORE_DATABASE_URL"] = pg.dsn
            pg_note = f"embedded, data in {pg.data_dir}"
            # While it runs, the project's other commands (paycore operators, escalations, …) find it.
            remember_local_database(home, pg.dsn)
            stack.callback(forget_local_database, home)
        kafka_note = "external"
        if settings.kafka_bootstrap is None:
            from paycore_devstack.embedded import start_tansu

            broker = stack.enter_context(start_tansu(log_path=home / "tansu.log"))
            env["PAYCORE_KAFKA_BOOTSTRAP"] = broker.bootstrap
            # Tansu rejects the idempotent producer's InitProducerId: off unless set explicitly.
            env.setdefault("PAYCORE_KAFKA_IDEMPOTENT", "false")
            kafka_note = f"embedded Tansu, in memory; log {home / 'tansu.log'}"
        dsn = env["PAYCORE_DATABASE_URL"]
        applied = migrate_database(dsn)
        log.info("migrations: %s", ", ".join(applied) if applied else "schema up to date")
        # Fail here, with the configuration error, rather than as five services exiting.
        preflight_accounts(dsn, settings, local_sandbox_url=urls["sandbox"] if local else None,
                            local_providers=local)

        banner = [
            "",
            "paycore is up -- Ctrl-C stops everything",
            f"  checkout  {urls['checkout']}",
            f"  sandbox   {urls['sandbox']}"
            + (f"  (account {SANDBOX_ACCOUNT}, test mode, speaking {', '.join(local)})" if local else ""),
            f"  orders    on {settings.default_account.provider_account} unless they name another",
        ]
        if "webhooks" in services:
            names = dict.fromkeys(a.provider for a in settings.accounts)
            banner += [f"  webhooks  {urls['webhooks']}/webhooks/{name}" for name in names]
        banner += [f"  {name:<9} metrics http://{LOOPBACK}:{port}/metrics" for name, port in admin.items()
                   if name in services]
        banner.append(f"  recovery  worker; metrics {urls['recovery']}/metrics")
        banner.append(f"  dispatcher worker; metrics {urls['dispatcher']}/metrics")
        banner.append(f"  console   {urls['console']}  (an account first: paycore operators add NAME "
                      "--role operator --operator YOU)")
        banner += [
            f"  postgres  {redact_dsn(dsn)}  ({pg_note})",
            f"  kafka     {env['PAYCORE_KAFKA_BOOTSTRAP']}  ({kafka_note})",
            "  token     paycore token <customer-id>   then: Authorization: Bearer <token>",
            "",
        ]
        code = asyncio.run(_supervise(env, services, ports, admin, urls, banner))
        # The event loop's handlers are gone; keep SIGTERM unwinding through the cleanup.
        stack.enter_context(sigterm_raises_interrupt())
    return code


def _serve_argv(name: str, port: int, admin: int | None) -> list[str]:
    if name in WORKERS:  # a worker: its port serves only its metrics
        return [sys.executable, "-m", "paycore_cli", "run", name, "--metrics-port", str(port)]
    argv = [sys.executable, "-m", "paycore_cli", "serve", name, "--host", LOOPBACK, "--port", str(port)]
    return argv if admin is None else [*argv, "--metrics-host", LOOPBACK, "--metrics-port", str(admin)]


def _http_probe(url: str, *, any_status: bool) -> Callable[[], Awaitable[bool]]:
    import httpx

    async def probe() -> bool:
        try:
            async with httpx.AsyncClient(timeout=2.0) as client:
                response = await client.get(url)
        except httpx.HTTPError:
            return False
        return any_status or response.is_success

    return probe


def sandbox_provider_env(name: str, sandbox_url: str, checkout_url: str) -> dict[str, str]:
    """``PAYCORE_<PROVIDER>_*`` for the local sandbox's test account, in ``name``'s dialect.

    The sandbox speaks each provider's wire with built-in development credentials (its dialect's);
    ``checkout_url`` is where a redirected customer comes back (a provider may require one).
    """
    from paycore_sandbox.dialects import dialect_named
    from paycore_sandbox.settings import SandboxSettings

    [acct] = [a for a in SandboxSettings.default().accounts
              if a.account == SANDBOX_ACCOUNT and a.environment == SANDBOX_ENVIRONMENT]
    return PACKAGES[name].sandbox_env(sandbox_url, acct.account, acct.environment,
                                      dialect_named(name).credentials(acct), checkout_url + "/")


def sandbox_webhook_endpoint(name: str, intake_url: str) -> str:
    """The ``PAYCORE_SANDBOX_WEBHOOK_URLS`` entry sending ``name``'s webhooks to the intake's route."""
    from paycore_sandbox.dialects import Endpoint

    return Endpoint(f"{intake_url}/webhooks/{name}", name).spec


def _use_local_sandbox(env: dict[str, str], urls: Mapping[str, str]) -> list[str]:
    """Point every provider that is not configured at the local sandbox, which speaks each one's
    wire (its dialects) with built-in development credentials, and have the sandbox deliver each
    provider's webhooks to the local intake's route for it. Returns the providers so pointed."""
    chosen = [p.name for p in PROVIDER_PACKAGES if p.marker.get(env) is None]
    for name in chosen:
        env.update(sandbox_provider_env(name, urls["sandbox"], urls["checkout"]))
    if chosen:
        env.setdefault("PAYCORE_SANDBOX_WEBHOOK_URLS",
                       ",".join(sandbox_webhook_endpoint(name, urls["webhooks"]) for name in chosen))
    return chosen


async def _supervise(
    env: dict[str, str], services: list[str], ports: dict[str, int], admin: dict[str, int],
    urls: dict[str, str], banner: list[str],
) -> int:
    from paycore_devstack.supervisor import ServiceSpec, StopRequested, Supervisor, SupervisorError

    async with Supervisor() as sup:
        try:
            for name in services:
                path, any_status = READINESS[name]
                await sup.start(ServiceSpec(name, _serve_argv(name, ports[name], admin.get(name)), env))
                await sup.wait_ready(name, _http_probe(urls[name] + path, any_status=any_status),
                                     within=READY_WITHIN_S)
        except StopRequested:
            return 0
        except SupervisorError as exc:
            _tell(f"paycore: {exc}; stopping everything")
            return 1
        sup.write("\n".join(banner) + "\n")
        code = await sup.wait()
        if code != 0:
            _tell(f"paycore: {sup.stop_reason}")
        return code


def _tell(message: str) -> None:
    """A line on stderr that cannot fail: stopping must not depend on anyone reading."""
    with contextlib.suppress(OSError, ValueError):
        print(message, file=sys.stderr, flush=True)
