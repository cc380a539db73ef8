"""What `make test-deploy` plays with podman kube play is the dev overlay as rendered, changed only
where tools/deploy_check/kube_play.py says; every kind it does not play stays checked here.

No container engine: the rewrite is pure (tests/deploy_podman/test_kube_play.py plays it).
"""

from __future__ import annotations

import functools
import re

import pytest

from tools.deploy_check import kube_play
from tools.deploy_check import kubernetes as k8s
from tools.deploy_check import kubernetes_model as model

STAGE = kube_play.Stage(image="localhost/paycore:test-deploy", suffix="abcd1234",
                        database_url="postgresql://paycore:pw@postgres:5432/paycore",
                        config=kube_play.STANDIN_KAFKA)
CONTAINER = r"spec(\.template\.spec)?\.containers\[\d+\]\."
# The paths the rewrite may change (kube_play's docstring says why each one).
ALLOWED = [re.compile(p) for p in (
    r"metadata\.name",
    CONTAINER + r"image", CONTAINER + r"imagePullPolicy", CONTAINER + r"ports",
    CONTAINER + r"(startupProbe|livenessProbe|readinessProbe)\.httpGet\.port",
    CONTAINER + r"env\[\d+\]\.valueFrom\.secretKeyRef\.name",
    CONTAINER + r"volumeMounts\[\d+\]\.name", r"spec(\.template\.spec)?\.volumes\[\d+\]\.name",
    r"data\.(PAYCORE_KAFKA_BOOTSTRAP|PAYCORE_KAFKA_IDEMPOTENT)",
)]


@functools.cache
def rendered() -> model.Manifests:
    return k8s.render(kube_play.OVERLAY)


@functools.cache
def played() -> kube_play.Play:
    return kube_play.rewrite(rendered(), STAGE)


def _key(obj: model.Obj) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"].removesuffix(f"-{STAGE.suffix}")


@pytest.mark.parametrize("overlay", k8s.OVERLAYS)
def test_every_kind_is_played_or_checked_without_a_cluster(overlay: str) -> None:
    """A kind the overlays gain must be played, or listed in NOT_PLAYED with the checks that
    cover it instead (each a check of tools/deploy_check/kubernetes.py)."""
    kinds = {o["kind"] for o in k8s.render(overlay).objects}
    assert kinds <= kube_play.PLAYED | set(kube_play.NOT_PLAYED) | {kube_play.MIGRATION}
    for kind, checks in kube_play.NOT_PLAYED.items():
        assert checks and set(checks) <= set(k8s.CHECKS), kind


def test_every_deployment_and_config_map_is_played() -> None:
    m, play = rendered(), played()
    assert sorted(map(_key, play.deployments)) == sorted(
        map(_key, m.of_kind("Deployment") + m.of_kind("ConfigMap")))
    (pod,) = [o for o in play.migration if o["kind"] == "Pod"]
    (job,) = m.of_kind("Job")
    assert pod["metadata"]["labels"] == job["spec"]["template"]["metadata"]["labels"]
    assert pod["spec"]["restartPolicy"] == "Never"


def test_the_rewrite_changes_only_what_this_machine_needs() -> None:
    m, play = rendered(), played()
    before = {_key(o): o for o in m.objects}
    # The Job's pod: what its controller would create from the template.
    before |= {("Pod", o["metadata"]["name"]): {
        "apiVersion": "v1", "kind": "Pod", "spec": o["spec"]["template"]["spec"],
        "metadata": {**o["spec"]["template"]["metadata"], "name": o["metadata"]["name"],
                     "namespace": o["metadata"]["namespace"]}} for o in m.of_kind("Job")}
    changed = set()
    for obj in play.deployments + play.migration:
        for path in kube_play.differences(before[_key(obj)], obj):
            assert any(p.fullmatch(path) for p in ALLOWED), f"{_key(obj)}: {path}"
            changed.add(re.sub(r"\[\d+\]", "[]", path))
    assert "metadata.name" in changed and not any("labels" in c or "selector" in c for c in changed)
    secret = m.secret_example["stringData"]
    assert kube_play.differences(secret, play.secret) == ["PAYCORE_DATABASE_URL"]
    assert play.secret_name == f"{model.SECRET_NAME}-{STAGE.suffix}"


def test_probes_keep_their_ports_by_number_and_nothing_is_published() -> None:
    m, play = rendered(), played()
    ours = {_key(o): o for o in play.deployments if o["kind"] == "Deployment"}
    for w in model.deployments(m):
        (container,) = ours[_key(w.obj)]["spec"]["template"]["spec"]["containers"]
        original = w.pod["containers"][0]
        assert "ports" not in container and container["imagePullPolicy"] == "Never"
        for probe in kube_play.PROBES:
            assert container[probe]["httpGet"]["port"] == model.container_port(
                original, original[probe]["httpGet"]["port"]), (w.where, probe)


def test_each_pod_gets_its_own_empty_dir() -> None:
    names = [v["name"] for o in played().deployments if o["kind"] == "Deployment"
             for v in o["spec"]["template"]["spec"].get("volumes", []) if "emptyDir" in v]
    assert len(names) == len(set(names)) and all(STAGE.suffix in n for n in names), names


def test_the_rewrite_adds_no_setting() -> None:
    """It replaces values the overlay sets; a key no ConfigMap has is an error, not a new setting."""
    stage = kube_play.Stage(STAGE.image, STAGE.database_url, {"PAYCORE_NOT_A_SETTING": "1"}, STAGE.suffix)
    with pytest.raises(ValueError, match="PAYCORE_NOT_A_SETTING"):
        kube_play.rewrite(rendered(), stage)
