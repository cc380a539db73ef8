"""Checks of what a rendered variant exposes and what its pods must find on their disk:

- ``ingress``: an Ingress routes only to checkout's and the intake's public ports (never the
  console, never an admin port with ``/metrics``), the intake only under ``/webhooks/``, and
  every host it serves has TLS;
- ``tls-files``: a DSN with ``sslmode=verify-ca|verify-full`` names its CA (``sslrootcert``; the
  image's user has no home, so asyncpg's ``~/.postgresql/root.crt`` never exists), and that CA,
  like ``PAYCORE_KAFKA_SSL_CA_FILE``, lies on a volume the container mounts or in the image's own
  bundle;
- ``alert-grouping``: alert delivery reads the pages topic (``PAYCORE_ALERT_INCIDENT_GROUPING``)
  exactly when the incident agent runs to write it.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from urllib.parse import parse_qs, urlsplit

from paycore.config import KAFKA_SSL_CA_FILE
from paycore.settings_spec import ConfigError
from paycore_dispatcher.settings import ALERT_INCIDENT_GROUPING
from tools.deploy_check.kubernetes_model import (
    PUBLIC,
    Manifests,
    Obj,
    Problem,
    Workload,
    container_port,
    deployments,
    environment,
    selects,
    where,
    workloads,
)

DSN_SETTINGS = ("PAYCORE_DATABASE_URL", "PAYCORE_MIGRATION_DATABASE_URL")
VERIFYING = ("verify-ca", "verify-full")
IMAGE_CA_BUNDLE = PurePosixPath("/etc/ssl/certs")  # Debian's ca-certificates, in the base image
WEBHOOK_PATHS = "/webhooks/"


def _backends(ingress: Obj) -> list[tuple[str, Obj]]:
    """(path, backend) of every route, the default backend's path shown as ``*``."""
    spec = ingress.get("spec", {})
    found = [("*", spec["defaultBackend"])] if "defaultBackend" in spec else []
    for rule in spec.get("rules", []):
        for path in (rule.get("http") or {}).get("paths", []):
            found.append((str(path.get("path", "/")), path.get("backend", {})))
    return found


def _served_by(m: Manifests, service: Obj) -> list[Workload]:
    selector = service["spec"].get("selector", {})
    return [w for w in deployments(m) if selector and selects({"matchLabels": selector}, w.pod_labels)]


def _route_problems(m: Manifests, path: str, backend: Obj) -> list[str]:
    ref = backend.get("service")
    if ref is None:
        return [f"{path} routes to a resource backend, not a paycore Service"]
    service = next((s for s in m.of_kind("Service") if s["metadata"]["name"] == ref.get("name")), None)
    if service is None:
        return [f"{path} routes to Service {ref.get('name')!r}, which is not rendered"]
    wanted = ref.get("port", {})
    port = next((p for p in service["spec"].get("ports", [])
                 if p.get("port") == wanted.get("number") or p.get("name") == wanted.get("name")), None)
    if port is None:
        return [f"{path} routes to port {wanted} of {where(service)}, which it does not have"]
    problems = []
    for w in _served_by(m, service):
        if not w.roles or not w.roles <= PUBLIC:
            problems.append(f"{path} routes to {w.where} ({', '.join(sorted(w.roles)) or 'unknown'}): "
                            "only checkout and the webhook intake are public")
        for container, cmd in w.containers:
            target = container_port(container, port.get("targetPort", port.get("port")))
            if cmd.port is not None and target != cmd.port:
                problems.append(f"{path} reaches {w.where} on {target}, not its public port {cmd.port} "
                                "(an admin port serves /metrics)")
        under_webhooks = path.startswith(WEBHOOK_PATHS) or path == WEBHOOK_PATHS.rstrip("/")
        if "webhooks" in w.roles and not under_webhooks:
            problems.append(f"{path} routes to the webhook intake: only {WEBHOOK_PATHS}<provider> should")
    return problems


def check_ingress(m: Manifests) -> list[Problem]:
    problems = []
    for ingress in m.of_kind("Ingress"):
        for path, backend in _backends(ingress):
            problems += [Problem("ingress", where(ingress), p) for p in _route_problems(m, path, backend)]
        with_tls = {h for t in ingress["spec"].get("tls", []) for h in t.get("hosts", [])}
        for rule in ingress["spec"].get("rules", []):
            host = rule.get("host")
            if host is None or host not in with_tls:
                problems.append(Problem("ingress", where(ingress), f"serves {host or 'every host'} without "
                                        "TLS: list it under spec.tls with its certificate's Secret"))
    return problems


def _mounted(container: Obj, path: str) -> bool:
    target = PurePosixPath(path)
    if target.is_relative_to(IMAGE_CA_BUNDLE):
        return True
    mounts = [PurePosixPath(v["mountPath"]) for v in container.get("volumeMounts", [])]
    return any(target.is_relative_to(mount) for mount in mounts)


def _file_problems(container: Obj, env: dict[str, str]) -> list[str]:
    problems = []
    for name in DSN_SETTINGS:
        dsn = env.get(name)
        if not dsn:
            continue
        query = {k: v[-1] for k, v in parse_qs(urlsplit(dsn).query).items()}
        root = query.get("sslrootcert") or env.get("PGSSLROOTCERT")
        if query.get("sslmode") in VERIFYING and not root:
            problems.append(f"{name} has sslmode={query['sslmode']} without sslrootcert: asyncpg would look "
                            "for ~/.postgresql/root.crt, and the image's user has no home; name the CA "
                            "(components/postgres-ca mounts it)")
        elif root and not _mounted(container, root):
            problems.append(f"{name} names sslrootcert={root}, which no volume of the container holds "
                            "(components/postgres-ca mounts /etc/paycore/pg-ca)")
    ca = env.get(KAFKA_SSL_CA_FILE.name)
    if ca and not _mounted(container, ca):
        problems.append(f"{KAFKA_SSL_CA_FILE.name}={ca} lies on no volume of the container "
                        "(components/kafka-ca mounts /etc/paycore/kafka-ca)")
    return problems


def check_tls_files(m: Manifests) -> list[Problem]:
    return [Problem("tls-files", f"{w.where} container {c.get('name')}", p)
            for w in workloads(m) for c, _ in w.containers
            for p in _file_problems(c, environment(m, c).values)]


def _grouping(env: dict[str, str]) -> bool:
    try:
        return ALERT_INCIDENT_GROUPING.read(env)
    except ConfigError:
        return False  # settings reports it


def check_alert_grouping(m: Manifests) -> list[Problem]:
    agents = [w for w in deployments(m) if "incidents" in w.roles and w.obj["spec"].get("replicas", 1) > 0]
    problems = []
    for w in deployments(m):
        for container, cmd in w.containers:
            if cmd.role != "alerts":
                continue
            grouped = _grouping(environment(m, container).values)
            name = f"{w.where} container {container.get('name')}"
            if grouped and not agents:
                problems.append(Problem("alert-grouping", name, "delivers the pages topic "
                                        "(PAYCORE_ALERT_INCIDENT_GROUPING=true) but no incident agent runs "
                                        "to write it: no alert would be delivered (components/incidents "
                                        "adds both)"))
            if agents and not grouped:
                problems.append(Problem("alert-grouping", name, "delivers ops.alerts although the incident "
                                        "agent runs: every alert paged one by one, the agent's pages never "
                                        "(set PAYCORE_ALERT_INCIDENT_GROUPING=true)"))
    return problems
