"""The rendered dev overlay, made playable by ``podman kube play`` on one machine (issue 31).

tests/deploy_podman/test_kube_play.py plays what this returns against stand-ins of PostgreSQL and
Kafka; tests/deploy/test_kube_play_rewrite.py checks, without a container engine, that the
rewrite below changes nothing else. The rewrite, and why each part is needed:

- ``image`` -> the image built here (no registry serves ``registry.example.com/paycore``), and
  ``imagePullPolicy: Never`` (nothing is pulled: the test runs what was just built);
- ``PAYCORE_DATABASE_URL`` in the Secret -> the PostgreSQL stand-in, ``PAYCORE_KAFKA_BOOTSTRAP`` in
  ``paycore-config`` -> the Tansu stand-in (the overlay names the operator's hosts), and
  ``PAYCORE_KAFKA_IDEMPOTENT`` -> ``false``: Tansu refuses aiokafka's ``InitProducerId``
  (paycore/kafka.py), so the dispatcher's idempotent producer could not start against it (Apache
  Kafka accepts it: the overlay's ``true`` stays what a cluster runs);
- every object's name, and the Secret's name in each ``secretKeyRef``, get a per-run suffix:
  podman's pods, containers and secrets share one machine-wide namespace (another run, or another
  engineer's, must not collide), where Kubernetes has a namespace per overlay;
- container ``ports`` are dropped and the probes' named ports replaced by their numbers: podman
  4.3 publishes every ``containerPort`` on the host at the same number (a fixed host port, taken by
  the first pod that claims it); the probes reach the pod's own address, as a kubelet does;
- each ``emptyDir`` volume is named after its pod (``tmp`` -> ``paycore-checkout-<suffix>-tmp``,
  in ``volumes`` and ``volumeMounts``): podman 4.3 makes an emptyDir a volume of the name the pod
  spec gives it, machine-wide, so every pod (of every run) mounting ``tmp`` would share one
  directory, where Kubernetes gives each pod its own;
- the migration Job's pod template becomes a Pod (``restartPolicy: Never``, as in the Job): kube
  play runs no Job.

Everything else (arguments, ``envFrom``, ``env`` and its ``secretKeyRef`` keys, probes, security
contexts, resources, volumes, labels) is played as rendered. What kube play does not run is in
``NOT_PLAYED``, each with the static checks of tools/deploy_check/kubernetes.py that keep it honest.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tools.deploy_check.kubernetes_model import SECRET_NAME, Manifests, container_port

Obj = dict[str, Any]

OVERLAY = "dev"  # every process of paycore, one pod each, plaintext Kafka, HS256 tokens (README)
PLAYED = frozenset({"Deployment", "ConfigMap"})  # and the Secret, and the Job (as a Pod)
MIGRATION = "Job"
# Kinds podman kube play (4.3) does not run, and the checks of tools/deploy_check/kubernetes.py
# (``CHECKS``) that keep each of them checked instead.
NOT_PLAYED: dict[str, tuple[str, ...]] = {
    "Service": ("schema", "services"),
    "NetworkPolicy": ("schema", "network"),
    "PodDisruptionBudget": ("schema", "disruption"),
    "HorizontalPodAutoscaler": ("schema", "autoscaling"),
    "Ingress": ("schema", "ingress"),
    "ServiceAccount": ("schema", "security"),
}
# paycore-config's values for the Tansu stand-in on the test's network (alias `tansu`).
STANDIN_KAFKA = {"PAYCORE_KAFKA_BOOTSTRAP": "tansu:9092", "PAYCORE_KAFKA_IDEMPOTENT": "false"}
PROBES = ("startupProbe", "livenessProbe", "readinessProbe")


@dataclass(frozen=True)
class Stage:
    """What this machine provides in place of the operator's registry, database and brokers."""

    image: str
    database_url: str
    config: dict[str, str]  # ConfigMap values replaced (only keys the overlay sets)
    suffix: str  # unique per run


@dataclass(frozen=True)
class Play:
    deployments: list[Obj]  # the Deployments and their ConfigMaps: one `podman kube play`
    migration: list[Obj]  # the Job's pod template as a Pod, and the ConfigMaps
    secret_name: str
    secret: dict[str, str]  # the overlay's secret example, the DSN rewritten


def _containers(obj: Obj) -> Iterator[Obj]:
    spec = obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]
    yield from spec.get("initContainers", [])
    yield from spec.get("containers", [])


def _rename(obj: Obj, suffix: str) -> Obj:
    obj = copy.deepcopy(obj)
    obj["metadata"]["name"] = f"{obj['metadata']['name']}-{suffix}"
    return obj


def _container(container: Obj, stage: Stage, secret_name: str) -> None:
    container["image"] = stage.image
    container["imagePullPolicy"] = "Never"
    for probe in PROBES:
        get = container.get(probe, {}).get("httpGet")
        if get is not None:
            port = container_port(container, get["port"])
            if port is None:
                raise ValueError(f"{container['name']}: {probe} names no declared port {get['port']!r}")
            get["port"] = port
    container.pop("ports", None)
    for var in container.get("env", []):
        ref = var.get("valueFrom", {}).get("secretKeyRef")
        if ref is not None and ref["name"] == SECRET_NAME:
            ref["name"] = secret_name


def _own_empty_dirs(obj: Obj) -> None:
    spec = obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]
    names = {}
    for volume in spec.get("volumes", []):
        if "emptyDir" in volume:
            names[volume["name"]] = volume["name"] = f"{obj['metadata']['name']}-{volume['name']}"
    for container in _containers(obj):
        for mount in container.get("volumeMounts", []):
            mount["name"] = names.get(mount["name"], mount["name"])


def _as_pod(job: Obj) -> Obj:
    template = job["spec"]["template"]
    metadata = {**template.get("metadata", {}), "name": job["metadata"]["name"]}
    if "namespace" in job["metadata"]:
        metadata["namespace"] = job["metadata"]["namespace"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": copy.deepcopy(template["spec"])}


def rewrite(m: Manifests, stage: Stage) -> Play:
    """The overlay as podman kube play takes it here (module docstring: what changes and why)."""
    unknown = {o["kind"] for o in m.objects} - PLAYED - set(NOT_PLAYED) - {MIGRATION}
    if unknown:
        raise ValueError(f"kinds neither played nor listed in NOT_PLAYED: {sorted(unknown)}")
    secret_name = f"{SECRET_NAME}-{stage.suffix}"
    maps = []
    for obj in m.of_kind("ConfigMap"):
        obj = copy.deepcopy(obj)
        data = obj.get("data", {})
        data.update({k: v for k, v in stage.config.items() if k in data})
        maps.append(obj)
    unset = set(stage.config) - {k for o in maps for k in o.get("data", {})}
    if unset:
        raise ValueError(f"no ConfigMap sets {sorted(unset)}: the rewrite replaces, it adds nothing")
    deployments = [_rename(o, stage.suffix) for o in m.of_kind("Deployment")]
    jobs = [_rename(_as_pod(o), stage.suffix) for o in m.of_kind(MIGRATION)]
    for obj in deployments + jobs:
        _own_empty_dirs(obj)
        for container in _containers(obj):
            _container(container, stage, secret_name)
    secret = dict(m.secret_example.get("stringData") or {})
    secret["PAYCORE_DATABASE_URL"] = stage.database_url
    return Play(maps + deployments, maps + jobs, secret_name, secret)


def differences(before: Any, after: Any, path: str = "") -> list[str]:
    """The paths where two YAML trees differ ("spec.template....image"), for the static test."""
    if isinstance(before, dict) and isinstance(after, dict):
        return [d for key in sorted(set(before) | set(after), key=str)
                for d in differences(before.get(key), after.get(key), f"{path}.{key}" if path else str(key))]
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [d for i, (b, a) in enumerate(zip(before, after, strict=True))
                for d in differences(b, a, f"{path}[{i}]")]
    return [] if before == after else [path]
