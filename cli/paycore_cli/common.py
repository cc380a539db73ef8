"""What every ``paycore`` command shares: its settings, errors, local state, logging and signals."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Literal, overload
from urllib.parse import urlsplit, urlunsplit

from paycore.config import ConfigError
from paycore.logs import LOG_FORMATS, LogFormat
from paycore.logs import configure_logging as install_log_handler
from paycore.settings_spec import Choice, Count, FilePath, Group, Invalid, Text

log = logging.getLogger("paycore.cli")

LOOPBACK = "127.0.0.1"
STATE_DIR = ".paycore"
# What `paycore up` starts, in order; its help, ports and readiness checks follow this.
UP_SERVICES = {
    "sandbox": "the provider sandbox, speaking Cardco's, Stripe's and Adyen's wire",
    "checkout": "the checkout API, with an account of every provider not configured otherwise",
    "webhooks": "the webhook intake, one route per provider (/webhooks/cardco, /stripe, /adyen)",
    "recovery": "the recovery worker",
    "dispatcher": "the outbox dispatcher to Kafka",
    "console": "the operator console",
}
DEFAULT_PORTS = {"checkout": 8000, "sandbox": 8100, "webhooks": 8200, "recovery": 8300, "dispatcher": 8400,
                 "console": 8500}
# The services whose port serves only their metrics.
WORKERS = frozenset({"recovery", "dispatcher"})
# The services `paycore up` starts with an admin port beside their public one.
UP_ADMIN = ("checkout", "webhooks", "console")
# Each process's admin port (/metrics, /healthz), apart from any public API, distinct so that
# everything can run on one host; the workers' are the metrics ports they always had.
ADMIN_PORTS = {"checkout": 8001, "webhooks": 8201, "recovery": 8300, "dispatcher": 8400, "console": 8501,
               "consumer-fulfillment": 8600, "consumer-email": 8601, "alerts": 8602, "incidents": 8603}

JWT_SECRET_FILE = "jwt_secret"
JWT_SECRET_LENGTH = 48
CONSOLE_SECRET_FILE = "console_secret"  # signs the local console's sessions (paycore up)

COMMANDS = Group("every `paycore` command")
HOME = COMMANDS.declare(
    "PAYCORE_HOME", FilePath(), None,
    "local state: the generated JWT secret, embedded PostgreSQL's data, the broker log",
    shown_default="the nearest `.paycore/` of the current directory or its parents")
LOG_LEVEL = COMMANDS.declare(
    "PAYCORE_LOG_LEVEL",
    Choice(("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", "WARN", "FATAL"), case="upper"), "INFO",
    "the log level of every process `paycore` starts; unset, a one-shot command (`operators`, "
    "`escalations`, …) logs warnings only, keeping its own output plain")
LOG_FORMAT = COMMANDS.declare(
    "PAYCORE_LOG_FORMAT", Choice(LOG_FORMATS, case="lower"), "json",
    "how every process `paycore` starts writes its log lines to stderr: `json`, one object per line "
    "with UTC timestamps and the bound request/order/attempt ids (see docs/operations.md, Logs), or "
    "`text` for people; `paycore up` (`make run`) makes it `text` unless set")
HEALTH_PORT = COMMANDS.declare(
    "PAYCORE_HEALTH_PORT", Count(maximum=65_535), 8000,
    "the port `paycore health` probes on 127.0.0.1 (/healthz): an HTTP service's public or admin "
    "port, or a worker's metrics port; unset, the port of the `paycore serve`/`run` this container "
    "runs (its main process's command line), else 8000",
    shown_default="the port the container's `paycore serve`/`run` binds, else 8000")
HOST = COMMANDS.declare(
    "PAYCORE_HOST", Text(printable=True), LOOPBACK,
    "the address `paycore serve` binds (checkout, webhooks, console; the sandbox stays on loopback "
    "unless `--host` and `--allow-network`); the image sets `0.0.0.0`; `--host` overrides it")

METRICS_HOST = COMMANDS.declare(
    "PAYCORE_METRICS_HOST", Text(printable=True), LOOPBACK,
    "the address of every service's and worker's admin port (/metrics, /healthz); `0.0.0.0` in a "
    "container Prometheus scrapes; `--metrics-host` overrides it")


@dataclass(frozen=True)
class PortOrOff:
    """A TCP port, or 0: no such server."""

    def parse(self, raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise Invalid(f"must be a port number, got {raw!r}") from None
        if not 0 <= value <= 65_535:
            raise Invalid(f"must be between 0 and 65535, got {raw!r}")
        return value

    def accepts(self) -> str:
        return "port 0–65535 (0: off)"


METRICS_PORT = COMMANDS.declare(
    "PAYCORE_METRICS_PORT", PortOrOff(), None,
    "the admin port serving /metrics and /healthz, apart from the public API; 0 serves none; "
    "`--metrics-port` overrides it",
    shown_default="per process: " + ", ".join(f"{name} {port}" for name, port in ADMIN_PORTS.items()))


def admin_port(process: str, flag: int | None, env: Mapping[str, str] | None = None) -> int | None:
    """The admin port ``process`` serves: the flag, else PAYCORE_METRICS_PORT, else its own; None for 0."""
    port = flag if flag is not None else METRICS_PORT.get(os.environ if env is None else env)
    port = ADMIN_PORTS[process] if port is None else port
    return port or None


def admin_host(flag: str | None, env: Mapping[str, str] | None = None) -> str:
    return flag if flag is not None else METRICS_HOST.read(os.environ if env is None else env)


def serve_host(service: str, flag: str | None, env: Mapping[str, str] | None = None) -> str:
    """The address ``paycore serve SERVICE`` binds: ``--host``, else PAYCORE_HOST (never for the
    sandbox, a development fake that binds loopback unless told twice), else loopback."""
    if flag is not None:
        return flag
    return LOOPBACK if service == "sandbox" else HOST.read(os.environ if env is None else env)


class CommandError(Exception):
    """A command cannot proceed; printed as ``paycore: <message>``, exits with ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


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


LOCAL_DATABASE_FILE = "database_url"  # written by `paycore up` while its embedded PostgreSQL runs


def remember_local_database(home: Path, dsn: str) -> None:
    """Tell the other commands of this project where ``paycore up``'s database is (0600)."""
    path = home / LOCAL_DATABASE_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(dsn + "\n")


def forget_local_database(home: Path) -> None:
    (home / LOCAL_DATABASE_FILE).unlink(missing_ok=True)


def database_url(env: Mapping[str, str] | None = None) -> str:
    """The database a command works on: ``PAYCORE_DATABASE_URL``, else the one ``paycore up`` is
    running for this project (found through ``.paycore/`` as ``paycore token`` finds its secret)."""
    from paycore.config import DATABASE_URL

    env = os.environ if env is None else env
    configured = DATABASE_URL.get(env)
    if configured is not None:
        return configured
    home = paycore_home(env)
    if home is not None and (home / LOCAL_DATABASE_FILE).is_file():
        return (home / LOCAL_DATABASE_FILE).read_text().strip()
    where = f" (none is running for {home})" if home is not None else ""
    raise ConfigError("PAYCORE_DATABASE_URL",
                      "is required: export it (postgresql://USER@HOST:PORT/DATABASE), or start the local "
                      f"stack with `make run` in this project{where}")


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
    return _local_secret(home, JWT_SECRET_FILE, "PAYCORE_JWT_SECRET", "JWT", create=create)


def local_console_secret(home: Path, *, create: bool) -> str | None:
    """The development console secret in ``<home>/console_secret`` (0600): sessions survive a restart."""
    return _local_secret(home, CONSOLE_SECRET_FILE, "PAYCORE_CONSOLE_SECRET", "console", create=create)


def _local_secret(home: Path, filename: str, variable: str, what: str, *, create: bool) -> str | None:
    path = home / filename
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
            log.info("generated a local %s secret in %s", what, path)
    try:
        value = path.read_text().strip()
    except FileNotFoundError:
        return None
    if len(value) < 32:
        raise ConfigError(variable, f"{path} holds fewer than 32 characters; delete it to regenerate")
    return value


def _log_level(env: Mapping[str, str]) -> int:
    return logging.getLevelNamesMapping()[LOG_LEVEL.read(env)]


def configure_logging(env: Mapping[str, str] | None = None, *, service: str = "paycore",
                      one_shot: bool = False) -> int:
    """Log at PAYCORE_LOG_LEVEL in PAYCORE_LOG_FORMAT, every line stamped with ``service``; a
    ``one_shot`` command (it prints its answer and exits) at WARNING unless the level is set."""
    env = os.environ if env is None else env
    level = logging.WARNING if one_shot and LOG_LEVEL.get(env) is None else _log_level(env)
    fmt: LogFormat = "text" if LOG_FORMAT.read(env) == "text" else "json"
    install_log_handler(service, level, fmt)
    return level


@contextlib.contextmanager
def sigterm_raises_interrupt() -> Iterator[None]:
    """Outside the event loop, SIGTERM unwinds like Ctrl-C so cleanup still runs."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
