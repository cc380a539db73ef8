"""A docker-compose file as the checker sees it: services, their resolved environment, their
paycore command parsed by the real CLI parser, and the ports they bind.

``${VAR}`` is resolved the way compose does, from an env file (``.env.example``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import ipaddress
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# The one place the checker imports the CLI.
from paycore.providers.registry import PROVIDER_PACKAGES
from paycore_cli.common import DEFAULT_PORTS, HEALTH_PORT, admin_host, admin_port
from paycore_cli.parser import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAYCORE_IMAGE = "paycore"
SCHEME_PORTS = {"http": 80, "https": 443, "postgresql": 5432, "postgres": 5432}
# Settings whose value names a host (and port) another service must answer on.
ADDRESS_SUFFIXES = ("_URL", "_URLS", "_BASE", "_BOOTSTRAP")
# URLs that are links for people (in pages, on redirects), never connected to by a container:
# the console's, and every shipped provider's return URL (where a customer comes back).
LINKS = frozenset({"PAYCORE_CONSOLE_URL"} | {
    s.name for p in PROVIDER_PACKAGES for s in p.settings.settings if s.name.endswith("_RETURN_URL")})
INTERPOLATION = re.compile(
    r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}|\$(?P<bare>[A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the file: which service, which check, and what to do."""

    service: str
    check: str
    message: str

    def __str__(self) -> str:
        return f"{self.service or '<file>'}: [{self.check}] {self.message}"


@dataclass
class Service:
    """A compose service: its raw definition, its resolved environment, and what it runs."""

    name: str
    raw: dict[str, Any]
    env: dict[str, str]
    argv: list[str] | None = None  # the paycore command line, for a paycore service
    args: argparse.Namespace | None = None  # argv parsed by the real CLI parser
    one_shot: bool = False
    listens: dict[int, str] = field(default_factory=dict)  # port -> bound host (the public one first)
    metrics: dict[int, str] = field(default_factory=dict)  # its admin port (/metrics) -> bound host

    @property
    def profiles(self) -> list[str]:
        return list(self.raw.get("profiles") or [])

    @property
    def image(self) -> str:
        return str(self.raw.get("image") or "")

    @property
    def is_paycore(self) -> bool:
        return "build" in self.raw or self.image.split(":")[0] == PAYCORE_IMAGE

    @property
    def api(self) -> dict[int, str]:
        """What it listens on apart from its admin port: where URLs, proxies and webhooks may point."""
        return {port: host for port, host in self.listens.items() if port not in self.metrics}

    def runs(self, *words: str) -> bool:
        """The paycore command starts with these words, e.g. ``runs("serve", "sandbox")``."""
        return self.argv is not None and self.argv[: len(words)] == list(words)


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines as compose reads ``.env``: comments and blanks skipped, quotes removed."""
    out: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key.strip()] = value
    return out


def interpolate(text: str, variables: Mapping[str, str], missing: list[str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}``, ``${VAR:?error}``, ``${VAR:+alt}``, ``$$``.

    The name of a required variable that is unset is appended to ``missing`` (compose would
    stop there, printing the text after ``:?``).
    """

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group("name") or m.group("bare")
        op, arg = m.group("op"), m.group("arg") or ""
        value = variables.get(name)
        unset = value is None or (op is not None and op.startswith(":") and value == "")
        if op in ("-", ":-"):
            return arg if unset else str(value)
        if op in ("?", ":?"):
            if unset:
                missing.append(name)
                return ""
            return str(value)
        if op in ("+", ":+"):
            return "" if unset else arg
        return "" if value is None else value

    return INTERPOLATION.sub(one, text)


def environment(raw: dict[str, Any]) -> dict[str, str]:
    env = raw.get("environment") or {}
    if isinstance(env, list):
        pairs = (str(item).partition("=") for item in env)
        return {k: v for k, _, v in pairs}
    return {str(k): "" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in env.items()}


def command_of(raw: dict[str, Any]) -> list[str] | None:
    command = raw.get("command")
    if command is None:
        return None
    return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]


def parse_command(argv: list[str]) -> tuple[argparse.Namespace | None, str]:
    """``argv`` parsed by the real ``paycore`` parser, or None and argparse's complaint."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return build_parser().parse_args(argv), ""
    except SystemExit:
        lines = err.getvalue().strip().splitlines()
        return None, lines[-1] if lines else "refused"


def load_services(data: Mapping[str, Any], variables: Mapping[str, str],
                  root: Path) -> tuple[dict[str, Service], list[Problem]]:
    problems: list[Problem] = []
    services: dict[str, Service] = {}
    for name, raw in (data.get("services") or {}).items():
        raw = dict(raw or {})
        env: dict[str, str] = {}
        for entry in _env_files(raw):
            path = root / entry
            if path.is_file():
                env.update(read_env_file(path))
        missing: list[str] = []
        env.update({k: interpolate(v, variables, missing) for k, v in environment(raw).items()})
        for var in missing:
            problems.append(Problem(name, "env", f"{var} is required (`:?`); the env file does not set it"))
        services[name] = Service(name, raw, env)
    for svc in services.values():
        for target, cond in depends_on(svc.raw).items():
            if cond == "service_completed_successfully" and target in services:
                services[target].one_shot = True
        if svc.is_paycore:
            svc.argv = command_of(svc.raw) or []
            svc.args, _ = parse_command(svc.argv)
            svc.metrics = _paycore_metrics(svc.args, svc.env)
            svc.listens = {**_paycore_listens(svc.args), **svc.metrics}
    return services, problems


def _env_files(raw: dict[str, Any]) -> list[str]:
    files = raw.get("env_file") or []
    if isinstance(files, str | dict):
        files = [files]
    return [f["path"] if isinstance(f, dict) else str(f) for f in files]


def depends_on(raw: dict[str, Any]) -> dict[str, str]:
    deps = raw.get("depends_on") or {}
    if isinstance(deps, list):
        return {str(d): "service_started" for d in deps}
    return {str(k): str((v or {}).get("condition", "service_started")) for k, v in deps.items()}


def _paycore_listens(args: argparse.Namespace | None) -> dict[int, str]:
    """The ports a parsed paycore command binds, with the host it binds them on."""
    if args is None:
        return {}
    if args.command == "serve":
        return {args.port if args.port is not None else DEFAULT_PORTS[args.service]: args.host}
    return {}


def _paycore_metrics(args: argparse.Namespace | None, env: Mapping[str, str]) -> dict[int, str]:
    """The admin port (/metrics, /healthz) a parsed command binds in ``env``, worked out as the CLI does."""
    if args is None or args.command not in ("serve", "run") or not hasattr(args, "metrics_port"):
        return {}  # a one-shot command, or the sandbox (no admin port)
    process = args.service if args.command == "serve" else (
        f"consumer-{args.consumer}" if args.worker == "consumer" else args.worker)
    port = admin_port(process, args.metrics_port, env)
    return {} if port is None else {port: admin_host(args.metrics_host, env)}


def health_probe(argv: list[str], env: Mapping[str, str]) -> tuple[str, int | None] | None:
    """The (host, port) ``paycore health`` with these arguments probes in this environment."""
    args, _ = parse_command(argv)
    if args is None or args.command != "health":
        return None
    url = args.url or f"http://127.0.0.1:{HEALTH_PORT.read(env)}/healthz"
    parts = urlsplit(url)
    return parts.hostname or "", parts.port


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield str(k)
            yield from strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from strings(v)


def addresses(name: str, value: str) -> list[tuple[str, int | None]]:
    """The (host, port) pairs in a ``PAYCORE_*`` address setting's value."""
    if not name.startswith("PAYCORE_") or not name.endswith(ADDRESS_SUFFIXES) or name in LINKS:
        return []
    out: list[tuple[str, int | None]] = []
    for entry in (e.strip() for e in value.split(",")):
        if not entry:
            continue
        if "://" not in entry and "=" in entry.split("/")[0]:
            entry = entry.split("=", 1)[1]  # `<dialect>=<url>` in the sandbox's webhook list
        parts = urlsplit(entry if "://" in entry else f"tcp://{entry}")
        try:
            port = parts.port or SCHEME_PORTS.get(parts.scheme)
        except ValueError:
            port = None
        if parts.hostname:
            out.append((parts.hostname, port))
    return out
