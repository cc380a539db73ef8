"""Cross-check a docker-compose file against paycore itself, with no container engine.

What ``docker compose up`` would only reveal by crash-looping is checked here from the
file: every paycore command parses with the real CLI parser; every host in a
``PAYCORE_*`` URL, bootstrap list or DSN is a service that listens there; every
long-running service has a healthcheck; images are pinned; secrets come from ``.env``;
and each container's environment (``${VAR}`` resolved from ``.env.example``) passes the
same settings validation its service runs at start-up.

    python -m tools.deploy_check.compose [docker-compose.yml] [--env-file .env.example]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from paycore.config import ConfigError
from tools.deploy_check.compose_cross import (
    check_alert_grouping,
    check_kafka_topics,
    check_monitoring,
    check_proxies,
    check_sandbox_webhooks,
    check_settings,
)
from tools.deploy_check.compose_file import (
    INTERPOLATION,
    PAYCORE_IMAGE,
    ROOT,
    Problem,
    Service,
    addresses,
    command_of,
    depends_on,
    environment,
    health_probe,
    is_loopback,
    load_services,
    parse_command,
    read_env_file,
    strings,
)

__all__ = ["Problem", "check_compose"]

# Ports of the third-party images paycore talks to, when their configuration does not say.
WELL_KNOWN_PORTS = {"postgres": 5432}
# Where each stateful image keeps its data: it must be a volume, or a restart loses it.
DATA_DIRS = {"postgres": "/var/lib/postgresql/data"}
KAFKA_DEFAULT_LOG_DIRS = "/tmp/kraft-combined-logs"  # apache/kafka's default
CREDENTIAL = re.compile(r"SECRET|PASSWORD|API_KEY|HMAC_KEY|ROUTING_KEY|TOKEN")
# A credential value that is only an interpolation with no literal fallback.
FROM_ENV = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::?\?[^}]*|:?-)?\}")
# Workers that need something outside the system (an alert endpoint): optional, under a profile.
OPTIONAL_WORKERS = frozenset({"alerts", "incidents"})


def _listens(target: Service) -> dict[int, str] | None:
    """Ports the target answers on (host bound), or None when this checker cannot tell."""
    if target.is_paycore:
        return target.api
    image = target.image.split("/")[-1].split(":")[0]
    if image == "kafka":
        out: dict[int, str] = {}
        for listener in target.env.get("KAFKA_ADVERTISED_LISTENERS", "").split(","):
            parts = urlsplit(listener.strip())
            if parts.hostname == target.name and parts.port:
                out[parts.port] = "0.0.0.0"
        return out
    if image in WELL_KNOWN_PORTS:
        return {WELL_KNOWN_PORTS[image]: "0.0.0.0"}
    return None


def check_commands(services: dict[str, Service]) -> list[Problem]:
    """Each paycore command parses, the sandbox may bind its host, workers serve their metrics."""
    problems: list[Problem] = []
    for svc in services.values():
        if svc.argv is None:
            continue
        _, complaint = parse_command(svc.argv)
        if svc.args is None:
            problems.append(Problem(svc.name, "command",
                                    f"`paycore {' '.join(svc.argv)}` does not parse: {complaint}"))
            continue
        if svc.runs("serve", "sandbox") and not is_loopback(svc.args.host) \
                and not getattr(svc.args, "allow_network", False):
            problems.append(Problem(svc.name, "command",
                                    f"`serve sandbox --host {svc.args.host}` is refused without "
                                    "--allow-network (exits 2)"))
        if (svc.runs("run") or (svc.runs("serve") and not svc.runs("serve", "sandbox"))) and not svc.one_shot:
            if not svc.metrics:
                problems.append(Problem(svc.name, "metrics",
                                        "--metrics-port 0: it serves no /metrics or /healthz"))
            elif all(is_loopback(h) for h in svc.metrics.values()):
                problems.append(Problem(svc.name, "metrics",
                                        "metrics bound to loopback: Prometheus in another container cannot "
                                        "scrape them (--metrics-host 0.0.0.0)"))
    return problems


def check_addresses(services: dict[str, Service]) -> list[Problem]:
    """Every host a paycore setting names is a service listening on that port, off loopback."""
    problems: list[Problem] = []
    for svc in services.values():
        for var, value in svc.env.items():
            for host, port in addresses(var, value):
                if "." in host and not is_loopback(host):
                    continue  # a real DNS name outside compose (e.g. an alert endpoint)
                target = services.get(host)
                if target is None:
                    problems.append(Problem(svc.name, "address",
                                            f"{var} names host {host!r}, which is no service of this file"))
                    continue
                mode = str(target.raw.get("network_mode") or "")
                if mode.startswith(("service:", "container:")):
                    problems.append(Problem(svc.name, "address",
                                            f"{var} names {host!r}, which shares another container's network "
                                            f"({mode}) and has no address of its own"))
                listens = _listens(target)
                if listens is None or port is None:
                    continue
                if port not in listens:
                    bound = ", ".join(map(str, sorted(listens))) or "nothing"
                    problems.append(Problem(svc.name, "address",
                                            f"{var} says {host}:{port}, but {host} listens on {bound}"))
                elif is_loopback(listens[port]):
                    problems.append(Problem(svc.name, "address",
                                            f"{var} says {host}:{port}, but {host} binds {listens[port]} "
                                            "there: unreachable from other containers"))
    return problems


def check_network_modes(services: dict[str, Service]) -> list[Problem]:
    return [Problem(s.name, "network", f"network_mode {s.raw['network_mode']!r}: the service has no name "
                                       "of its own on the network; give it its own and bind 0.0.0.0")
            for s in services.values()
            if str(s.raw.get("network_mode") or "").startswith(("service:", "container:"))]


def check_healthchecks(services: dict[str, Service]) -> list[Problem]:
    """Long-running services have a healthcheck; `paycore health` parses and probes the bound port."""
    problems: list[Problem] = []
    for svc in services.values():
        check = svc.raw.get("healthcheck")
        disabled = isinstance(check, dict) and (check.get("disable") or check.get("test") == ["NONE"])
        if not svc.one_shot and (not check or disabled):
            problems.append(Problem(svc.name, "healthcheck",
                                    "a long-running service without a healthcheck: compose cannot tell "
                                    "it is serving, and nothing can wait for it"))
        for target, cond in depends_on(svc.raw).items():
            target_check = services[target].raw.get("healthcheck") if target in services else None
            if cond == "service_healthy" and not target_check:
                problems.append(Problem(svc.name, "healthcheck",
                                        f"waits for {target} to be healthy, which has no healthcheck"))
        test = check.get("test") if isinstance(check, dict) else None
        if isinstance(test, list) and test[:2] == ["CMD", PAYCORE_IMAGE]:
            _, complaint = parse_command([str(t) for t in test[2:]])
            if complaint:
                problems.append(Problem(svc.name, "healthcheck", f"`{' '.join(test[1:])}`: {complaint}"))
            try:
                probe = health_probe([str(t) for t in test[2:]], svc.env)
            except ConfigError as exc:
                problems.append(Problem(svc.name, "healthcheck", str(exc)))
                continue
            if probe is not None and (probe[1] not in svc.listens or not is_loopback(probe[0])):
                bound = ", ".join(map(str, sorted(svc.listens))) or "none"
                problems.append(Problem(svc.name, "healthcheck",
                                        f"`paycore health` probes {probe[0]}:{probe[1]} "
                                        f"(PAYCORE_HEALTH_PORT or --url), not a port the service binds "
                                        f"({bound}) in its own container"))
    return problems


def check_images(services: dict[str, Service]) -> list[Problem]:
    problems: list[Problem] = []
    for svc in services.values():
        image = svc.image
        if not image or "@sha256:" in image:
            continue
        repo, _, tag = image.rpartition(":") if ":" in image.split("/")[-1] else (image, "", "")
        if not tag or tag == "latest":
            problems.append(Problem(svc.name, "image", f"{image!r} floats: name an exact tag"))
        elif "build" not in svc.raw and len(re.findall(r"\d+", tag.split("-")[0])) < 2:
            problems.append(Problem(svc.name, "image",
                                    f"{image!r} floats across releases: pin the exact version "
                                    f"(e.g. {repo}:{tag}.x-...)"))
    return problems


def check_volumes(services: dict[str, Service]) -> list[Problem]:
    """Stateful images keep their data on a volume."""
    problems: list[Problem] = []
    for svc in services.values():
        image = svc.image.split("/")[-1].split(":")[0]
        data_dir = DATA_DIRS.get(image)
        if image == "kafka" and not svc.one_shot and command_of(svc.raw) is None:
            data_dir = svc.env.get("KAFKA_LOG_DIRS", KAFKA_DEFAULT_LOG_DIRS).split(",")[0]
        if data_dir is None:
            continue
        targets = {_mount_target(v) for v in svc.raw.get("volumes") or []}
        if data_dir not in targets:
            problems.append(Problem(svc.name, "volume", f"{data_dir} is not on a volume: a restart loses it"))
    return problems


def _mount_target(volume: Any) -> str:
    """Where a volume (short `source:target[:mode]` or long syntax) is mounted."""
    if isinstance(volume, dict):
        return str(volume.get("target"))
    parts = str(volume).split(":")
    return parts[1] if len(parts) > 1 else parts[0]


def check_interpolation(services: dict[str, Service]) -> list[Problem]:
    """`:?` (required) only for variables a default service needs; never for optional services."""
    users: dict[str, set[str]] = {}
    for svc in services.values():
        for text in strings(svc.raw):
            for m in INTERPOLATION.finditer(text):
                if m.group("op") in ("?", ":?"):
                    users.setdefault(m.group("name"), set()).add(svc.name)
    problems: list[Problem] = []
    for var, names in sorted(users.items()):
        if all(_optional(services[n]) for n in names):
            problems.append(Problem(", ".join(sorted(names)), "required-var",
                                    f"${{{var}:?...}} is needed only by optional services; compose "
                                    f"interpolates the whole file, so nothing starts without it: use "
                                    f"${{{var}:-}}"))
    for svc in services.values():
        worker = _optional_worker(svc)
        if worker and not svc.profiles:
            problems.append(Problem(svc.name, "profile",
                                    f"`run {worker}` needs an external endpoint: put it under a "
                                    "profile so the system starts without one"))
    return problems


def _optional_worker(svc: Service) -> str | None:
    return next((w for w in OPTIONAL_WORKERS if svc.runs("run", w)), None)


def _optional(svc: Service) -> bool:
    return bool(svc.profiles) or _optional_worker(svc) is not None


def check_credentials(services: dict[str, Service]) -> list[Problem]:
    """Secrets come from `.env` by interpolation, never as literals (nor literal defaults)."""
    problems: list[Problem] = []
    for svc in services.values():
        for var, raw in environment(svc.raw).items():
            if var.startswith("PAYCORE_") and var.endswith("DATABASE_URL"):
                m = re.search(r"://[^:/@]*:([^@]*)@", raw)
                if m and not FROM_ENV.fullmatch(m.group(1)):
                    problems.append(Problem(svc.name, "credential",
                                            f"{var} carries a literal password: interpolate it from .env"))
            elif (var.startswith("PAYCORE_") or var == "POSTGRES_PASSWORD") and CREDENTIAL.search(var) \
                    and raw and not FROM_ENV.fullmatch(raw):
                problems.append(Problem(svc.name, "credential",
                                        f"{var} is a literal (or has a literal default): take it from .env "
                                        f"as ${{{var}}}"))
    return problems


def check_compose(compose: Path, env_file: Path | None = None, *, root: Path | None = None) -> list[Problem]:
    """Every problem in ``compose``, with ``${VAR}`` resolved from ``env_file`` (default: the
    ``.env.example`` beside it)."""
    root = compose.parent if root is None else root
    env_file = root / ".env.example" if env_file is None else env_file
    variables = read_env_file(env_file) if env_file.is_file() else {}
    data = yaml.safe_load(compose.read_text(encoding="utf-8")) or {}
    services, problems = load_services(data, variables, root)
    for check in (check_commands, check_network_modes, check_addresses, check_healthchecks, check_images,
                  check_volumes, check_interpolation, check_credentials, check_sandbox_webhooks,
                  check_settings, check_kafka_topics, check_alert_grouping):
        problems += check(services)
    problems += check_monitoring(services, root) + check_proxies(services, root)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.deploy_check.compose", description=__doc__)
    parser.add_argument("compose", nargs="?", type=Path, default=ROOT / "docker-compose.yml")
    parser.add_argument("--env-file", type=Path, default=None, help="default: .env.example beside it")
    args = parser.parse_args(argv)
    problems = check_compose(args.compose, args.env_file)
    for problem in problems:
        print(problem)
    print(f"{len(problems)} problem(s) in {args.compose}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
