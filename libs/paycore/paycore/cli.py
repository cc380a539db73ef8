"""``paycore`` -- the one command that starts and operates everything.

::

    paycore up                     # everything, on embedded defaults (make run)
    paycore migrate                # apply database migrations
    paycore serve checkout|sandbox|webhooks [--host H] [--port N]
    paycore run recovery|dispatcher|alerts [--metrics-host H] [--metrics-port N]
    paycore run consumer fulfillment|email [--metrics-host H] [--metrics-port N]
    paycore outbox requeue|skip MESSAGE_ID --operator NAME --reason TEXT
    paycore outbox purge [--older-than SECONDS]
    paycore escalations ack|resolve ESCALATION_ID --operator NAME [--reason TEXT]
    paycore token CUSTOMER_ID [--ttl SECONDS]
    paycore notifications attach EVENT_ID ATTEMPT_ID --operator NAME --reason TEXT
    paycore actions list [--attempt ID] [--escalation ID] [--operator NAME] [--limit N] [--json]

Configuration comes from ``PAYCORE_*`` variables (:mod:`paycore.config`). Local
state -- embedded PostgreSQL data, the generated JWT secret, the broker log --
lives in ``PAYCORE_HOME``, else in the nearest ``.paycore/`` of the current
directory or its parents (``up`` makes one in the current directory if none).

Service packages are imported only by the command that runs them, never when
this module is imported.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import ipaddress
import logging
import os
import secrets
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, Literal, TypeVar, overload
from urllib.parse import urlsplit, urlunsplit

from paycore.account_settings import MARKERS
from paycore.config import ConfigError, load_settings
from paycore.settings_spec import Choice, FilePath, Group

log = logging.getLogger("paycore.cli")
T = TypeVar("T")

LOOPBACK = "127.0.0.1"
STATE_DIR = ".paycore"
# What `paycore up` starts, in order; its help, ports and readiness checks follow this.
UP_SERVICES = {
    "sandbox": "the Cardco provider sandbox",
    "checkout": "the checkout API",
    "webhooks": "the Cardco webhook intake, when a webhook secret is configured",
    "recovery": "the recovery worker",
    "dispatcher": "the outbox dispatcher to Kafka",
}
DEFAULT_PORTS = {"checkout": 8000, "sandbox": 8100, "webhooks": 8200, "recovery": 8300, "dispatcher": 8400}
# App factories by import path, resolved only when the service is started.
APP_FACTORIES = {
    "checkout": "paycore_checkout.app:create_app_from_env",
    "sandbox": "paycore.cli:_sandbox_app",
    "webhooks": "paycore_webhooks.app:create_app_from_env",
}

# The local sandbox's built-in development account (not secrets).
SANDBOX_ACCOUNT = "acct_store"
SANDBOX_ENVIRONMENT = "test"
SANDBOX_API_KEY = "sk_test_acct_store_local"
WEBHOOK_PATH = "/webhooks/cardco"

JWT_SECRET_FILE = "jwt_secret"
JWT_SECRET_LENGTH = 48
READY_WITHIN_S = 60.0
LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


COMMANDS = Group("every `paycore` command")
HOME = COMMANDS.declare(
    "PAYCORE_HOME", FilePath(), None,
    "local state: the generated JWT secret, embedded PostgreSQL's data, the broker log",
    shown_default="the nearest `.paycore/` of the current directory or its parents")
LOG_LEVEL = COMMANDS.declare(
    "PAYCORE_LOG_LEVEL",
    Choice(("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", "WARN", "FATAL"), case="upper"), "INFO",
    "the log level of every process `paycore` starts")


class CommandError(Exception):
    """A command cannot proceed; printed as ``paycore: <message>``, exits with ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


# --------------------------------------------------------------------------- helpers


@overload
def paycore_home(env: Mapping[str, str] | None = None, *, create: Literal[True]) -> Path: ...
@overload
def paycore_home(env: Mapping[str, str] | None = None, *, create: bool = False) -> Path | None: ...
def paycore_home(env: Mapping[str, str] | None = None, *, create: bool = False) -> Path | None:
    """The project's local state directory, found the same way by every command.

    ``PAYCORE_HOME`` if set; else the nearest ``.paycore`` directory in the
    current directory or one of its parents (so a command run from a
    subdirectory finds what ``make run`` made at the top); else ``None`` -- or,
    with ``create``, a new ``.paycore`` in the current directory. With
    ``create`` the directory exists on return.
    """
    configured = HOME.get(os.environ if env is None else env)
    cwd = Path.cwd()
    home = configured.absolute() if configured is not None else next(
        (d / STATE_DIR for d in (cwd, *cwd.parents) if (d / STATE_DIR).is_dir()), None)
    if home is None and create:
        home = cwd / STATE_DIR
    if home is not None and create:
        home.mkdir(parents=True, exist_ok=True)
    return home


def redact_dsn(dsn: str) -> str:
    """``dsn`` without its password, for printing."""
    parts = urlsplit(dsn)
    if parts.password is None:
        return dsn
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def local_jwt_secret(home: Path, *, create: bool) -> str | None:
    """The development JWT secret kept in ``<home>/jwt_secret`` (mode 0600).

    With ``create``, a random 48-character secret is generated the first time,
    so tokens stay valid between runs.
    """
    path = home / JWT_SECRET_FILE
    if create and not path.exists():
        home.mkdir(parents=True, exist_ok=True)
        secret = secrets.token_urlsafe(36)[:JWT_SECRET_LENGTH]
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # created concurrently; read it below
        else:
            with os.fdopen(fd, "w") as f:
                f.write(secret + "\n")
            log.info("generated a local JWT secret in %s", path)
    try:
        value = path.read_text().strip()
    except FileNotFoundError:
        return None
    if len(value) < 32:
        raise ConfigError("PAYCORE_JWT_SECRET",
                          f"{path} holds fewer than 32 characters; delete it to regenerate")
    return value


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _port(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {raw!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be between 1 and 65535, got {value}")
    return value


def _positive_int(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {raw!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _operator(raw: str) -> str:
    from paycore.operator_actions import InvalidOperatorAction, validate_operator

    try:
        return validate_operator(raw)
    except InvalidOperatorAction as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _log_level(env: Mapping[str, str]) -> int:
    return logging.getLevelNamesMapping()[LOG_LEVEL.read(env)]


def configure_logging(env: Mapping[str, str] | None = None) -> int:
    level = _log_level(os.environ if env is None else env)
    logging.basicConfig(level=level, format=LOG_FORMAT, datefmt="%H:%M:%S")
    logging.getLogger().setLevel(level)
    return level


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


def _sandbox_settings() -> Any:
    try:
        module = importlib.import_module("paycore_sandbox.settings")
    except ModuleNotFoundError as exc:
        if exc.name and "paycore_sandbox".startswith(exc.name):
            raise CommandError("cannot import paycore_sandbox: the service package is not installed") from exc
        raise
    try:
        return module.SandboxSettings.from_env()
    except ConfigError:
        raise
    except ValueError as exc:  # the sandbox reports its settings errors as ValueError
        raise ConfigError("sandbox settings", str(exc)) from exc


def _sandbox_app() -> Any:
    """App factory for the sandbox: its settings from the environment."""
    return importlib.import_module("paycore_sandbox.app").create_app(_sandbox_settings())


def _migrate(dsn: str) -> list[str]:
    import asyncpg

    from paycore.clock import SystemClock
    from paycore.db import migrate

    try:
        return asyncio.run(migrate(dsn, now=SystemClock().now()))
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise CommandError(f"migrations failed on {redact_dsn(dsn)}: {exc}") from exc


def _preflight_accounts(dsn: str, settings: Any, *, local_sandbox_url: str | None = None,
                        local_providers: Sequence[str] = ()) -> None:
    """Register the configured provider accounts, or refuse a configuration that differs.

    The local sandbox's development accounts are the one exception: when ``paycore
    up`` runs it on another port than last time, the registered base URL follows,
    recorded as an operator action of ``paycore-up``.
    """
    from paycore import accounts
    from paycore.clock import SystemClock
    from paycore.db import create_pool

    async def check() -> None:
        pool = await create_pool(dsn, max_size=2)
        try:
            now = SystemClock().now()
            for account in settings.accounts:
                if local_sandbox_url is None or account.provider not in local_providers:
                    continue
                recorded = await accounts.apply_configuration(
                    pool, account, operator="paycore-up", now=now,
                    reason=f"the local sandbox listens at {local_sandbox_url}")
                if recorded is not None:
                    log.info("local sandbox account %s registered as configured (operator action %d)",
                             account.provider_account, recorded.action_id)
            await accounts.register_provider_accounts(pool, settings.accounts, now)
        finally:
            await pool.close()

    import asyncpg

    try:
        asyncio.run(check())
    except (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError) as exc:
        raise CommandError(f"cannot reach the database {redact_dsn(dsn)}: {type(exc).__name__}") from None


@contextlib.contextmanager
def _sigterm_raises_interrupt() -> Iterator[None]:
    """Outside the event loop, SIGTERM unwinds like Ctrl-C so cleanup still runs."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# --------------------------------------------------------------------------- commands


def cmd_migrate(args: argparse.Namespace) -> int:
    settings = load_settings(require_account=False)
    with contextlib.ExitStack() as stack:
        stack.enter_context(_sigterm_raises_interrupt())
        dsn = settings.database_url
        if dsn is None:
            from paycore.runtime.embedded import start_embedded_postgres

            dsn = stack.enter_context(start_embedded_postgres(paycore_home(create=True) / "pg")).dsn
        applied = _migrate(dsn)
    for version in applied:
        print(f"applied {version}")
    if not applied:
        print(f"nothing to apply: {redact_dsn(dsn)} is up to date")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    name: str = args.service
    host: str = args.host
    port: int = args.port if args.port is not None else DEFAULT_PORTS[name]
    if name == "sandbox" and not _is_loopback(host):
        raise CommandError(
            f"serve sandbox: refusing to bind {host!r}: the sandbox accepts built-in development keys "
            "and listens on loopback only (127.0.0.1, ::1 or localhost)",
            code=2,
        )
    # Validate every setting before importing the app: a clear error, not a traceback.
    if name in ("checkout", "webhooks"):
        settings = load_settings()
        if name == "webhooks":
            from paycore.clock import SystemClock
            from paycore_webhooks.app import receivers_for

            receivers_for(settings, SystemClock())  # opens nothing: only checks the webhook secrets
        if settings.database_url is not None:
            _preflight_accounts(settings.database_url, settings)
    elif name == "sandbox":
        _sandbox_settings()
    factory = _sandbox_app if name == "sandbox" else _load_factory(APP_FACTORIES[name])

    import uvicorn

    level = logging.getLevelName(logging.getLogger().getEffectiveLevel()).lower()
    log.info("serving %s on http://%s:%d", name, host, port)
    try:
        uvicorn.run(
            factory, factory=True, host=host, port=port,
            log_config=None, log_level=level, timeout_graceful_shutdown=5,
        )
    except SystemExit as exc:  # uvicorn exits on start-up failures (e.g. port in use)
        code = exc.code
        return code if isinstance(code, int) else 1
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    if args.worker == "recovery":
        from paycore_recovery.main import run as run_recovery

        return asyncio.run(run_recovery(metrics_host=args.metrics_host, metrics_port=args.metrics_port,
                                        owner=args.owner))
    if args.worker == "dispatcher":
        from paycore_dispatcher.commands import run_dispatcher_command

        return run_dispatcher_command(relays=args.relays, metrics_host=args.metrics_host,
                                      metrics_port=args.metrics_port,
                                      retention_every_s=None if args.no_retention else args.retention_every)
    if args.worker == "consumer":
        from paycore_dispatcher.commands import run_consumer_command

        return run_consumer_command(args.consumer, instance_id=args.instance_id,
                                    metrics_host=args.metrics_host, metrics_port=args.metrics_port)
    if args.worker == "alerts":
        from paycore_dispatcher.commands import run_alerts_command

        return run_alerts_command(instance_id=args.instance_id, metrics_host=args.metrics_host,
                                  metrics_port=args.metrics_port)
    raise CommandError(f"unknown worker {args.worker!r}", code=2)  # argparse admits none


def _with_operator_pool(action: Callable[[Any, Any], Awaitable[T]]) -> tuple[Any, T]:
    """Run an operator ``action(settings, pool)`` on a small pool over PAYCORE_DATABASE_URL."""
    from paycore.db import create_pool

    settings = load_settings(require_account=False)
    if settings.database_url is None:
        raise ConfigError("PAYCORE_DATABASE_URL", "is required")

    async def run() -> T:
        pool = await create_pool(settings.database_url or "", max_size=2)
        try:
            return await action(settings, pool)
        finally:
            await pool.close()

    return settings, asyncio.run(run())


def cmd_outbox(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from paycore import outbox_admin
    from paycore.clock import SystemClock
    from paycore.operator_actions import InvalidOperatorAction, describe

    async def act(settings: Any, pool: Any) -> str:
        now = SystemClock().now()
        if args.outbox_command == "purge":
            older = args.older_than if args.older_than is not None else settings.outbox_retention_s
            r = await outbox_admin.purge_dispatched(pool, now=now, older_than=timedelta(seconds=older))
            return f"deleted {r.deleted} dispatched rows; kept {r.archived} dedup keys"
        action = outbox_admin.requeue if args.outbox_command == "requeue" else outbox_admin.skip
        done = await action(pool, args.message_id, operator=args.operator, reason=args.reason, now=now)
        return "\n".join([*describe(done.recorded),
                          f"outbox message {done.message_id}: {done.action} done; resolved escalations "
                          f"{done.resolved_escalations or 'none'}"])

    try:
        _, message = _with_operator_pool(act)
    except outbox_admin.OutboxActionRefused as exc:
        raise CommandError(str(exc), code=1) from None
    except InvalidOperatorAction as exc:
        raise CommandError(str(exc), code=2) from None
    print(message)
    return 0


def cmd_escalations(args: argparse.Namespace) -> int:
    from paycore import escalations
    from paycore.clock import SystemClock
    from paycore.operator_actions import InvalidOperatorAction, OperatorAction, describe

    async def act(settings: Any, pool: Any) -> OperatorAction:
        now = SystemClock().now()
        if args.escalation_command == "ack":
            return await escalations.acknowledge(pool, args.escalation_id, operator=args.operator,
                                                 reason=args.reason, now=now,
                                                 reminder_interval=settings.reminder_ack_interval)
        return await escalations.resolve(pool, args.escalation_id, operator=args.operator,
                                         reason=args.reason, now=now)

    try:
        _, recorded = _with_operator_pool(act)
    except escalations.EscalationActionRefused as exc:
        raise CommandError(str(exc), code=1) from None
    except InvalidOperatorAction as exc:
        raise CommandError(str(exc), code=2) from None
    print("\n".join(describe(recorded)))
    print(f"escalation {args.escalation_id}: {args.escalation_command} done")
    return 0


def _fraction(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {raw!r}") from None
    if not 0.0 <= value <= 0.9:
        raise argparse.ArgumentTypeError(f"must be between 0 and 0.9, got {value}")
    return value


def _seconds_arg(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {raw!r}") from None
    if not 0 < value < 86_400:
        raise argparse.ArgumentTypeError(f"must be between 0 and 86400 seconds, got {value}")
    return value


def cmd_chaos(args: argparse.Namespace) -> int:
    from pathlib import Path

    from paycore.runtime.chaos.model import ChaosOptions
    from paycore.runtime.chaos.report import table
    from paycore.runtime.chaos.run import run_chaos

    out_dir = Path(args.out) if args.out else paycore_home(create=True) / "chaos"
    options = ChaosOptions(
        orders=args.orders, clients=args.clients, duration_s=args.duration, fault_rate=args.fault_rate,
        kills=args.kills, seed=args.seed, provider=args.provider, db_kill=not args.no_db_kill,
        settle_within_s=args.settle_within, out_dir=out_dir.absolute(),
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # every client request is not news
    with contextlib.ExitStack() as stack:
        stack.enter_context(_sigterm_raises_interrupt())
        record = asyncio.run(run_chaos(options))
    print(table(record))
    report_dir = record.extra.get("report_dir", str(out_dir))
    print(f"report: {report_dir}/chaos-table.txt, chaos-report.json, chaos-timeline.png")
    if not record.clean:
        print("paycore: chaos run found broken invariants (see the table); keep the seed "
              f"{options.seed} as a regression run", file=sys.stderr)
        return 1
    return 0


def cmd_actions(args: argparse.Namespace) -> int:
    import json
    import uuid

    from paycore.operator_actions import OperatorAction, list_actions, table

    attempt_id = None
    if args.attempt is not None:
        try:
            attempt_id = uuid.UUID(args.attempt)
        except ValueError:
            raise CommandError(f"{args.attempt!r} is not an attempt id (a UUID)", code=2) from None

    async def fetch(settings: Any, pool: Any) -> list[OperatorAction]:
        return await list_actions(pool, attempt_id=attempt_id, escalation_id=args.escalation,
                                  operator=args.operator, limit=args.limit)

    _, found = _with_operator_pool(fetch)
    if args.json:
        print(json.dumps([a.as_json() for a in found], indent=2, ensure_ascii=False))
    elif not found:
        print("no operator actions match")
    else:
        print("\n".join(table(found)))
    return 0


def cmd_accounts(args: argparse.Namespace) -> int:
    from paycore import accounts
    from paycore.clock import SystemClock
    from paycore.operator_actions import InvalidOperatorAction, OperatorAction, describe

    if args.accounts_command == "list":
        async def registered(settings: Any, pool: Any) -> list[Any]:
            rows: list[Any] = await pool.fetch(accounts.SELECT_REGISTERED)
            return rows

        _, rows = _with_operator_pool(registered)
        for row in rows:
            print(f"{row['provider_account']}  {row['base_url']}  api {row['api_version']}  "
                  f"key retention {row['key_retention']}  margin {row['escalation_margin']}  "
                  f"lookups {row['lookup_rate_per_s']}/s  updated {row['updated_at'].isoformat()}")
        if not rows:
            print("no provider account is registered yet")
        return 0

    configured = load_settings()  # the configuration to apply: PAYCORE_CARDCO_* and PAYCORE_ACCOUNTS_FILE
    chosen = [a for a in configured.accounts if args.account in (None, a.provider_account)]
    if not chosen:
        raise CommandError(f"{args.account} is not a configured provider account", code=2)

    async def apply(settings: Any, pool: Any) -> list[OperatorAction | None]:
        now = SystemClock().now()
        return [await accounts.apply_configuration(pool, acct, operator=args.operator, reason=args.reason,
                                                   now=now) for acct in chosen]

    try:
        _, done = _with_operator_pool(apply)
    except InvalidOperatorAction as exc:
        raise CommandError(str(exc), code=2) from None
    for acct, recorded in zip(chosen, done, strict=True):
        if recorded is None:
            print(f"{acct.provider_account}: already registered with these settings; nothing recorded")
        else:
            print("\n".join(describe(recorded)))
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    import jwt

    from paycore.clock import SystemClock

    settings = load_settings(require_account=False)
    if settings.jwt_secret is not None:
        secret = settings.jwt_secret.reveal()
    else:
        # Never a new secret here: one the running services do not know signs useless tokens.
        home = paycore_home()
        found = local_jwt_secret(home, create=False) if home is not None else None
        if found is None:
            where = f"{home / JWT_SECRET_FILE}" if home is not None else (
                f"no {STATE_DIR}/ in {Path.cwd()} or its parents")
            raise CommandError(f"no local JWT secret ({where}): "
                               "run `make run` (or `paycore up`) first, or set PAYCORE_JWT_SECRET")
        secret = found
    if settings.jwks_url is not None:
        print("paycore: warning: PAYCORE_JWKS_URL is set; services may not accept "
              "locally signed HS256 tokens", file=sys.stderr)
    now = int(SystemClock().now().timestamp())
    claims = {"sub": args.customer_id, "iat": now, "exp": now + args.ttl}
    print(jwt.encode(claims, secret, algorithm="HS256"))
    return 0


def _serve_argv(name: str, port: int) -> list[str]:
    if name in WORKERS:  # a worker: its port serves only its metrics
        return [sys.executable, "-m", "paycore.cli", "run", name, "--metrics-port", str(port)]
    return [sys.executable, "-m", "paycore.cli", "serve", name, "--host", LOOPBACK, "--port", str(port)]


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


def cmd_up(args: argparse.Namespace) -> int:
    from paycore.runtime._process import port_is_free

    base = load_settings(require_account=False)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # readiness polls are not news
    home = paycore_home(create=True)
    ports: dict[str, int] = {name: getattr(args, f"{name}_port") for name in UP_SERVICES}
    if len(set(ports.values())) != len(ports):
        raise CommandError("the --*-port options must all differ", code=2)
    for name, port in ports.items():
        if not port_is_free(LOOPBACK, port):
            raise CommandError(f"{LOOPBACK}:{port} is already in use; pass --{name}-port to choose another")

    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env["PAYCORE_HOME"] = str(home)
    urls = {name: f"http://{LOOPBACK}:{port}" for name, port in ports.items()}
    local = _use_local_sandbox(env, urls)
    if base.jwt_secret is None and base.jwks_url is None:
        env["PAYCORE_JWT_SECRET"] = local_jwt_secret(home, create=True) or ""
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
        stack.enter_context(_sigterm_raises_interrupt())
        pg_note = "external"
        if settings.database_url is None:
            from paycore.runtime.embedded import start_embedded_postgres

            pg = stack.enter_context(start_embedded_postgres(home / "pg"))
            env["PAYCORE_DATABASE_URL"] = pg.dsn
            pg_note = f"embedded, data in {pg.data_dir}"
        kafka_note = "external"
        if settings.kafka_bootstrap is None:
            from paycore.runtime.embedded import start_tansu

            broker = stack.enter_context(start_tansu(log_path=home / "tansu.log"))
            env["PAYCORE_KAFKA_BOOTSTRAP"] = broker.bootstrap
            # Tansu rejects the idempotent producer's InitProducerId: off unless set explicitly.
            env.setdefault("PAYCORE_KAFKA_IDEMPOTENT", "false")
            kafka_note = f"embedded Tansu, in memory; log {home / 'tansu.log'}"
        dsn = env["PAYCORE_DATABASE_URL"]
        applied = _migrate(dsn)
        log.info("migrations: %s", ", ".join(applied) if applied else "schema up to date")
        # Fail here, with the configuration error, rather than as five services exiting.
        _preflight_accounts(dsn, settings, local_sandbox_url=urls["sandbox"] if local else None,
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
        banner.append(f"  recovery  worker; metrics {urls['recovery']}/metrics")
        banner.append(f"  dispatcher worker; metrics {urls['dispatcher']}/metrics")
        banner += [
            f"  postgres  {redact_dsn(dsn)}  ({pg_note})",
            f"  kafka     {env['PAYCORE_KAFKA_BOOTSTRAP']}  ({kafka_note})",
            "  token     paycore token <customer-id>   then: Authorization: Bearer <token>",
            "",
        ]
        code = asyncio.run(_supervise(env, services, ports, urls, banner))
        # The event loop's handlers are gone; keep SIGTERM unwinding through the cleanup.
        stack.enter_context(_sigterm_raises_interrupt())
    return code


def _sandbox_webhook_secret() -> str:
    """The local sandbox's built-in webhook secret for acct_store (a development value)."""
    from paycore_sandbox.settings import SandboxSettings

    for acct in SandboxSettings.default().accounts:
        if acct.account == SANDBOX_ACCOUNT and acct.environment == SANDBOX_ENVIRONMENT:
            return acct.webhook_secret
    raise CommandError("the sandbox has no built-in acct_store test account")


def _use_local_sandbox(env: dict[str, str], urls: Mapping[str, str]) -> list[str]:
    """Point every provider that is not configured at the local sandbox, which speaks each one's
    wire (its dialects) with built-in development credentials, and have the sandbox deliver each
    provider's webhooks to the local intake's route for it. Returns the providers so pointed."""
    from paycore_sandbox.dialects import adyen_webhooks
    from paycore_sandbox.settings import SandboxSettings

    [acct] = [a for a in SandboxSettings.default().accounts
              if a.account == SANDBOX_ACCOUNT and a.environment == SANDBOX_ENVIRONMENT]
    sandbox, intake = urls["sandbox"], urls["webhooks"]
    local = {
        "cardco": {"PAYCORE_CARDCO_BASE_URL": sandbox, "PAYCORE_CARDCO_ACCOUNT": acct.account,
                   "PAYCORE_CARDCO_ENVIRONMENT": acct.environment, "PAYCORE_CARDCO_API_KEY": acct.api_key,
                   "PAYCORE_CARDCO_WEBHOOK_SECRET": acct.webhook_secret},
        "stripe": {"PAYCORE_STRIPE_API_BASE": sandbox, "PAYCORE_STRIPE_ACCOUNT": acct.account,
                   "PAYCORE_STRIPE_API_KEY": acct.api_key,
                   "PAYCORE_STRIPE_WEBHOOK_SECRET": acct.webhook_secret},
        "adyen": {"PAYCORE_ADYEN_BASE_URL": sandbox, "PAYCORE_ADYEN_MERCHANT_ACCOUNT": acct.account,
                  "PAYCORE_ADYEN_ENVIRONMENT": acct.environment, "PAYCORE_ADYEN_API_KEY": acct.api_key,
                  "PAYCORE_ADYEN_HMAC_KEY": adyen_webhooks.hmac_key(acct),
                  "PAYCORE_ADYEN_WEBHOOK_USERNAME": adyen_webhooks.WEBHOOK_USERNAME,
                  "PAYCORE_ADYEN_WEBHOOK_PASSWORD": adyen_webhooks.webhook_password(acct),
                  "PAYCORE_ADYEN_RETURN_URL": urls["checkout"] + "/"},
    }
    chosen = [name for name in local if MARKERS[name].get(env) is None]
    for name in chosen:
        env.update(local[name])
    if chosen:
        routes = [f"{intake}/webhooks/{name}" if name == "cardco" else f"{name}={intake}/webhooks/{name}"
                  for name in chosen]
        env.setdefault("PAYCORE_SANDBOX_WEBHOOK_URLS", ",".join(routes))
    return chosen


# What "ready" means for each service: the sandbox answers anything; the others /healthz.
READINESS = {"sandbox": ("/", True), "checkout": ("/healthz", False), "webhooks": ("/healthz", False),
             "recovery": ("/metrics", False), "dispatcher": ("/metrics", False)}
WORKERS = frozenset({"recovery", "dispatcher"})


async def _supervise(
    env: dict[str, str], services: list[str], ports: dict[str, int], urls: dict[str, str],
    banner: list[str],
) -> int:
    from paycore.runtime.supervisor import ServiceSpec, StopRequested, Supervisor, SupervisorError

    async with Supervisor() as sup:
        try:
            for name in services:
                path, any_status = READINESS[name]
                await sup.start(ServiceSpec(name, _serve_argv(name, ports[name]), env))
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


# --------------------------------------------------------------------------- parser


def _metrics_flags(worker: argparse.ArgumentParser) -> None:
    worker.add_argument("--metrics-port", type=_port, default=None,
                        help="serve /metrics and /healthz (the loop's liveness) on --metrics-host:PORT")
    worker.add_argument("--metrics-host", default=LOOPBACK, help="metrics address (default %(default)s)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="paycore",
        description="Start and operate paycore. Settings come from PAYCORE_* environment variables; "
                    "local state lives in PAYCORE_HOME, else in the nearest .paycore/ of the current "
                    "directory or its parents.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    started = "; ".join(f"{name} ({text})" for name, text in UP_SERVICES.items())
    up = commands.add_parser(
        "up", help="start everything locally (what `make run` runs); Ctrl-C stops it",
        description="Start embedded PostgreSQL and Tansu unless PAYCORE_DATABASE_URL / "
                    "PAYCORE_KAFKA_BOOTSTRAP are set, apply migrations, then run these "
                    f"{len(UP_SERVICES)} services as child processes until Ctrl-C: {started}. "
                    "Local state (the JWT secret, embedded PostgreSQL's data) goes to PAYCORE_HOME, "
                    "else the nearest .paycore/ of this directory or its parents, else a new "
                    ".paycore/ here. Should up be killed, a guard stops the embedded PostgreSQL.",
    )
    for name in UP_SERVICES:
        what = "port" if name not in WORKERS else "metrics port"
        up.add_argument(f"--{name}-port", type=_port, default=DEFAULT_PORTS[name],
                        help=f"the {what} of {name} on 127.0.0.1 (default %(default)s)")
    up.set_defaults(handler=cmd_up)

    mig = commands.add_parser(
        "migrate", help="apply database migrations",
        description="Apply missing migrations to PAYCORE_DATABASE_URL (or to embedded PostgreSQL "
                    "under .paycore/pg when it is unset). Safe to run concurrently and repeatedly.",
    )
    mig.set_defaults(handler=cmd_migrate)

    serve = commands.add_parser(
        "serve", help="run one HTTP service in the foreground",
        description="Run one service with uvicorn. The sandbox listens on loopback only.",
    )
    services = serve.add_subparsers(dest="service", required=True, metavar="SERVICE")
    for name, text in (
        ("checkout", "the checkout API"),
        ("sandbox", "the Cardco provider sandbox (loopback only)"),
        ("webhooks", "the Cardco webhook intake"),
    ):
        sub = services.add_parser(name, help=text, description=f"Serve {text}.")
        sub.add_argument("--host", default=LOOPBACK, help="address to bind (default %(default)s)")
        sub.add_argument("--port", type=_port, default=None,
                         help=f"port to bind (default {DEFAULT_PORTS[name]})")
        sub.set_defaults(handler=cmd_serve)

    run = commands.add_parser("run", help="run a background worker",
                              description="Run a background worker in the foreground.")
    workers = run.add_subparsers(dest="worker", required=True, metavar="WORKER")
    rec = workers.add_parser(
        "recovery", help="resolve stalled and Unknown payment attempts",
        description="Worker: the recovery loop (leases, lookups, same-key resends inside the key "
                    "window, escalations) and the reminder job. Any number may run at once. Timings "
                    "come from PAYCORE_RECOVERY_* variables.",
    )
    _metrics_flags(rec)
    rec.add_argument("--owner", default=None, help="this instance's name in leases (default host-pid-random)")
    rec.set_defaults(handler=cmd_run)
    disp = workers.add_parser(
        "dispatcher", help="relay outbox rows to Kafka in per-attempt order",
        description="Worker: the outbox relay (per-attempt order, backoff, dead letters and their "
                    "escalations) and the retention job. Any number may run at once. Needs "
                    "PAYCORE_DATABASE_URL and PAYCORE_KAFKA_BOOTSTRAP; see docs/dispatcher.md.",
    )
    disp.add_argument("--relays", type=_positive_int, default=1, help="relay loops in this process")
    _metrics_flags(disp)
    disp.add_argument("--retention-every", type=float, default=3600.0, metavar="SECONDS",
                      help="run the retention job this often (default %(default)s)")
    disp.add_argument("--no-retention", action="store_true", help="do not run the retention job")
    disp.set_defaults(handler=cmd_run)
    cons = workers.add_parser(
        "consumer", help="a demo downstream consumer of payments.effects",
        description="Worker: a reference consumer on the consumer helper (inbox deduplication, "
                    "offsets committed after the database transaction), writing demo_fulfillments or "
                    "demo_emails.",
    )
    cons.add_argument("consumer", choices=["fulfillment", "email"])
    cons.add_argument("--instance-id", default=None, help="static group membership id (group.instance.id)")
    _metrics_flags(cons)
    cons.set_defaults(handler=cmd_run)
    alerts = workers.add_parser(
        "alerts", help="deliver ops.alerts to PAYCORE_ALERT_WEBHOOK_URL",
        description="Worker: deliver each operator alert once to the configured HTTP endpoint "
                    "(PAYCORE_ALERT_FORMAT=slack or pagerduty), retrying with backoff.",
    )
    alerts.add_argument("--instance-id", default=None, help="static group membership id (group.instance.id)")
    _metrics_flags(alerts)
    alerts.set_defaults(handler=cmd_run)

    token = commands.add_parser(
        "token", help="print a local development JWT for a customer",
        description="Print an HS256 JWT (sub, iat, exp) signed with PAYCORE_JWT_SECRET, or with the "
                    "jwt_secret `paycore up` generated in PAYCORE_HOME or the nearest .paycore/ of "
                    "this directory or its parents. Never generates a secret: without one it fails.",
    )
    token.add_argument("customer_id", metavar="CUSTOMER_ID", help="the token's subject (sub)")
    token.add_argument("--ttl", type=_positive_int, default=3600,
                       help="lifetime in seconds (default %(default)s)")
    token.set_defaults(handler=cmd_token)

    esc = commands.add_parser(
        "escalations", help="acknowledge or resolve an escalation episode",
        description="Operator tools for escalation episodes. Needs PAYCORE_DATABASE_URL.")
    esc_cmds = esc.add_subparsers(dest="escalation_command", required=True, metavar="ACTION")
    for action, text in (("ack", "a person has seen it: reset the reminder schedule"),
                         ("resolve", "the condition has ended: close the episode (changes no attempt)")):
        sub = esc_cmds.add_parser(action, help=text, description=text)
        sub.add_argument("escalation_id", type=_positive_int, metavar="ESCALATION_ID")
        sub.add_argument("--operator", required=True, type=_operator, metavar="NAME",
                         help="who is acting: an operator handle (recorded in operator_actions)")
        sub.add_argument("--reason", required=action == "resolve", default=None, metavar="TEXT",
                         help="why (recorded)" + ("" if action == "resolve" else "; optional"))
        sub.set_defaults(handler=cmd_escalations)

    box = commands.add_parser(
        "outbox", help="operate on dead-lettered outbox rows; retention",
        description="Operator tools for the outbox (docs/dispatcher.md). Needs PAYCORE_DATABASE_URL.")
    box_cmds = box.add_subparsers(dest="outbox_command", required=True, metavar="ACTION")
    for action, text in (("requeue", "put a dead-lettered row back to pending; it is delivered before "
                                     "the rows after it"),
                         ("skip", "give up on a dead-lettered row so the rows after it are delivered")):
        sub = box_cmds.add_parser(action, help=text, description=text)
        sub.add_argument("message_id", type=_positive_int, metavar="MESSAGE_ID")
        sub.add_argument("--operator", required=True, type=_operator, metavar="NAME",
                         help="who is deciding: an operator handle (recorded in operator_actions)")
        sub.add_argument("--reason", required=True, metavar="TEXT", help="why (recorded)")
        sub.set_defaults(handler=cmd_outbox)
    purge = box_cmds.add_parser("purge", help="delete dispatched rows past the replay horizon, keeping "
                                              "their dedup keys")
    purge.add_argument("--older-than", type=float, default=None, metavar="SECONDS",
                       help="horizon (default PAYCORE_OUTBOX_RETENTION_S)")
    purge.set_defaults(handler=cmd_outbox)

    notes = commands.add_parser("notifications", help="operate on stored provider notifications",
                                description="Operator tools for stored provider notifications.")
    note_cmds = notes.add_subparsers(dest="notification_command", required=True, metavar="ACTION")
    attach = note_cmds.add_parser(
        "attach", help="apply a stored unmatched notification to its attempt",
        description="Authorised reconciliation: apply a stored unmatched notification (by its event id "
                    "in payment_attempt_events) to an attempt through the normal conditional transition, "
                    "and resolve its unmatched escalation. Needs PAYCORE_DATABASE_URL.",
    )
    attach.add_argument("event_id", type=_positive_int, metavar="EVENT_ID")
    attach.add_argument("attempt_id", metavar="ATTEMPT_ID")
    attach.add_argument("--operator", required=True, type=_operator, metavar="NAME",
                        help="who is attaching it: an operator handle (recorded in history and in "
                             "operator_actions)")
    attach.add_argument("--reason", required=True, metavar="TEXT",
                        help="why, e.g. the corrected reference (recorded)")
    attach.set_defaults(handler=cmd_notifications_attach)

    accts = commands.add_parser(
        "accounts", help="the registered provider-account settings every service must match",
        description="Operator tools for provider accounts. The database's row is the one source of truth "
                    "for an account's settings; a service configured otherwise refuses to start. "
                    "Needs PAYCORE_DATABASE_URL.")
    acct_cmds = accts.add_subparsers(dest="accounts_command", required=True, metavar="ACTION")
    acct_list = acct_cmds.add_parser("list", help="the registered accounts and their settings")
    acct_list.set_defaults(handler=cmd_accounts)
    acct_apply = acct_cmds.add_parser(
        "apply", help="make this configuration the registered one (recorded)",
        description="Register, or change, each configured provider account (PAYCORE_CARDCO_*, "
                    "PAYCORE_ACCOUNTS_FILE) to this configuration, as one recorded operator action per "
                    "changed account. Attempts already Started keep the deadline they were stamped with; "
                    "every service must then be restarted with the same settings.")
    acct_apply.add_argument("--account", default=None, metavar="PROVIDER_ACCOUNT",
                            help="only this one, e.g. cardco:acct_store:live (default: every configured one)")
    acct_apply.add_argument("--operator", required=True, type=_operator, metavar="NAME",
                            help="who is changing it (recorded)")
    acct_apply.add_argument("--reason", required=True, metavar="TEXT", help="why (recorded)")
    acct_apply.set_defaults(handler=cmd_accounts)

    chaos = commands.add_parser(
        "chaos", help="the whole system under load, faults, kills and a database crash; then the invariants",
        description="Start every service on embedded PostgreSQL and the local broker, drive storefront "
                    "clients through them while the sandbox injects faults and services and the database "
                    "are killed and restarted, let recovery settle, and check every money invariant against "
                    "the sandbox's ledger and the database. Prints the table and writes a JSON report and a "
                    "PNG timeline; exits 1 if any invariant is broken. Development only (docs/chaos.md).")
    chaos.add_argument("--orders", type=_positive_int, default=2000,
                       help="orders in all (default %(default)s)")
    chaos.add_argument("--clients", type=_positive_int, default=16,
                       help="concurrent storefront clients (default %(default)s)")
    chaos.add_argument("--duration", type=_seconds_arg, default=None, metavar="SECONDS",
                       help="end the load after this long even if orders remain (default: when all are done)")
    chaos.add_argument("--fault-rate", type=_fraction, default=0.3,
                       help="share of provider requests and webhook events a fault hits "
                            "(default %(default)s)")
    chaos.add_argument("--kills", type=int, default=3, choices=range(0, 21), metavar="N",
                       help="SIGKILL and restart each service kind N times (default %(default)s)")
    chaos.add_argument("--seed", type=int, default=1, help="the plan's seed (default %(default)s)")
    chaos.add_argument("--provider", choices=["cardco"], default="cardco", help="the provider to run against")
    chaos.add_argument("--no-db-kill", action="store_true", help="do not kill -9 the PostgreSQL postmaster")
    chaos.add_argument("--settle-within", type=_seconds_arg, default=240.0, metavar="SECONDS",
                       help="how long recovery may take to settle after the faults stop "
                            "(default %(default)s)")
    chaos.add_argument("--out", default=None, metavar="DIR",
                       help="where runs are written (default .paycore/chaos)")
    chaos.set_defaults(handler=cmd_chaos)

    acts = commands.add_parser(
        "actions", help="show the record of operator actions",
        description="Operator tools: the append-only record of who did what (operator_actions). "
                    "Needs PAYCORE_DATABASE_URL.")
    act_cmds = acts.add_subparsers(dest="actions_command", required=True, metavar="ACTION")
    listing = act_cmds.add_parser(
        "list", help="recorded operator actions, newest first",
        description="Recorded operator actions matching every given filter, newest first: id, time, "
                    "operator, action, target, reason (--json adds the state before and after).")
    listing.add_argument("--attempt", default=None, metavar="ATTEMPT_ID", help="actions on this attempt")
    listing.add_argument("--escalation", type=_positive_int, default=None, metavar="ESCALATION_ID",
                         help="actions on this escalation episode")
    listing.add_argument("--operator", type=_operator, default=None, metavar="NAME",
                         help="actions by this operator")
    listing.add_argument("--limit", type=_positive_int, default=50,
                         help="at most this many (default %(default)s)")
    listing.add_argument("--json", action="store_true", help="print JSON for machines")
    listing.set_defaults(handler=cmd_actions)
    return parser


def cmd_notifications_attach(args: argparse.Namespace) -> int:
    import uuid

    from paycore.clock import SystemClock
    from paycore.notifications import Attached, AttachRefused, attach_notification
    from paycore.operator_actions import InvalidOperatorAction, describe

    try:
        attempt_id = uuid.UUID(args.attempt_id)
    except ValueError:
        raise CommandError(f"{args.attempt_id!r} is not an attempt id (a UUID)", code=2) from None

    async def attach(settings: Any, pool: Any) -> Attached:
        return await attach_notification(pool, event_id=args.event_id, attempt_id=attempt_id,
                                         operator=args.operator, reason=args.reason, now=SystemClock().now(),
                                         reminder_interval=settings.reminder_interval,
                                         recheck_after_s=settings.recheck_after_s)

    try:
        _, done = _with_operator_pool(attach)
    except (AttachRefused, LookupError) as exc:
        raise CommandError(str(exc), code=1) from None
    except InvalidOperatorAction as exc:
        raise CommandError(str(exc), code=2) from None
    print("\n".join(describe(done.recorded)))
    print(f"attached notification {args.event_id} to attempt {attempt_id}: now {done.attempt.state.value}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        configure_logging()
        return handler(args)
    except ConfigError as exc:
        print(f"paycore: configuration error: {exc}", file=sys.stderr)
        return 2
    except CommandError as exc:
        print(f"paycore: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("paycore: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        from paycore.runtime.embedded import EmbeddedError

        if isinstance(exc, EmbeddedError):
            print(f"paycore: {exc}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    raise SystemExit(main())
