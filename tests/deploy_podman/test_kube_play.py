"""The Kubernetes manifests, played (issue 31): `podman kube play` runs the kustomize-rendered dev
overlay's Deployments, with their ConfigMaps and Secret, against stand-ins of PostgreSQL and
Kafka, and each pod becomes ready by its own probes. `make test-deploy`, not `make test`.

The dev overlay, rewritten only where this machine differs from a cluster
(tools/deploy_check/kube_play.py says what and why; tests/deploy/test_kube_play_rewrite.py
checks nothing else changes): the migration Job's pod runs to completion first, then every
Deployment's pod starts. podman 4.3 runs no readiness or startup probe (it turns a liveness
probe into a `curl` healthcheck, which this image lacks and which without systemd nobody
schedules), so the test is the kubelet: it runs each container's own startupProbe, then its
readinessProbe, from the rendered definitions (path, port, period, threshold, timeout), at the
pod's address on the podman network, and holds the container to the startup probe's allowance
(the kubelet would restart it after that). Then `podman kube down`, and nothing is left.
Services, NetworkPolicies, disruption budgets, autoscalers and the ServiceAccount are not
played; tests/deploy/test_kubernetes.py checks them (kube_play.NOT_PLAYED names the checks).
"""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.deploy_podman.test_image_podman import ENV, POSTGRES, ROOT, eventually, podman
from tests.deploy_podman.test_image_podman import image as image  # the fixture: stand-in and image built
from tools.deploy_check import kube_play
from tools.deploy_check import kubernetes as k8s

TANSU = "localhost/paycore-tansu:0.6"
DB_PASSWORD = "kube-play-password"


@dataclass(frozen=True)
class Pod:
    deployment: str  # as rendered: paycore-checkout
    name: str  # podman's: paycore-checkout-<tag>-pod-0
    container: dict[str, Any]  # the played container (probes with numeric ports)

    @property
    def container_name(self) -> str:
        return f"{self.name}-{self.container['name']}"


@dataclass
class Stack:
    tag: str
    network: str
    play: kube_play.Play
    files: dict[str, Path]  # "migration", "deployments": what was played, for kube down
    migration: str = ""  # the migration pod's container
    pods: list[Pod] | None = None

    @property
    def standins(self) -> list[str]:
        return [f"postgres-{self.tag}", f"tansu-{self.tag}"]

    @property
    def pod_names(self) -> list[str]:
        """podman's names for what kube play makes: NAME-pod-0 of a Deployment, NAME of a Pod."""
        return [f"{o['metadata']['name']}-pod-0" if o["kind"] == "Deployment" else o["metadata"]["name"]
                for o in self.play.deployments + self.play.migration if o["kind"] in ("Deployment", "Pod")]

    def kube_down(self) -> list[subprocess.CompletedProcess[str]]:
        return [podman("kube", "down", str(path), check=False, timeout=180) for path in self.files.values()]

    def close(self) -> None:
        # podman 4.3's kube down stops at the first pod it does not find (as after a failed
        # play): each pod is removed by name too.
        self.kube_down()
        for pod in self.pod_names:
            podman("pod", "rm", "--force", "--ignore", pod, check=False, timeout=120)
        for name in self.standins:
            podman("rm", "--force", "--ignore", "--time", "2", name, check=False)
        podman("secret", "rm", self.play.secret_name, check=False)
        podman("network", "rm", "--force", self.network, check=False)


def _inspect(name: str, template: str) -> str:
    return podman("inspect", "--format", template, name).stdout.strip()


def _pod_ip(pod: str, network: str) -> str:
    infra = json.loads(podman("pod", "inspect", pod).stdout)["InfraContainerID"]
    return _inspect(infra, f'{{{{(index .NetworkSettings.Networks "{network}").IPAddress}}}}')


def _play(path: Path, network: str) -> None:
    podman("kube", "play", "--network", network, str(path), timeout=300)


def _leftovers(tag: str) -> dict[str, list[str]]:
    """What of this run podman still holds: pods, containers, volumes, secrets, networks."""
    found = {}
    for what, cmd in {"pods": ["pod", "ps", "--format", "{{.Name}}"],
                      "containers": ["ps", "--all", "--format", "{{.Names}}"],
                      "volumes": ["volume", "ls", "--format", "{{.Name}}"],
                      "secrets": ["secret", "ls", "--format", "{{.Name}}"],
                      "networks": ["network", "ls", "--format", "{{.Name}}"]}.items():
        found[what] = [n for n in podman(*cmd).stdout.split() if tag in n]
    return found


@pytest.fixture(scope="module")
def stack(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    done = subprocess.run(["deploy/standins/build.sh", "tansu"], cwd=ROOT, capture_output=True, text=True,
                          env={**ENV, "VENV_PYTHON": sys.executable}, timeout=600)
    assert done.returncode == 0, f"build.sh tansu:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    tag = secrets.token_hex(4)
    network = f"paycore-kube-{tag}"
    stage = kube_play.Stage(image=image, suffix=tag, config=kube_play.STANDIN_KAFKA,
                            database_url=f"postgresql://paycore:{DB_PASSWORD}@postgres:5432/paycore")
    play = kube_play.rewrite(k8s.render(kube_play.OVERLAY), stage)
    tmp = tmp_path_factory.mktemp("kube-play")
    files = {"migration": tmp / "migration.yaml", "deployments": tmp / "deployments.yaml"}
    files["migration"].write_text(yaml.safe_dump_all(play.migration))
    files["deployments"].write_text(yaml.safe_dump_all(play.deployments))
    run = Stack(tag, network, play, files)
    podman("network", "create", network)
    try:
        podman("run", "--detach", "--name", run.standins[0], "--network", network,
               "--network-alias", "postgres", "--env", "POSTGRES_USER=paycore",
               "--env", f"POSTGRES_PASSWORD={DB_PASSWORD}", "--env", "POSTGRES_DB=paycore", POSTGRES)
        podman("run", "--detach", "--read-only", "--name", run.standins[1], "--network", network,
               "--network-alias", "tansu", TANSU)
        # The Secret, as podman's kube play reads a secretKeyRef: a podman secret holding the
        # JSON of the Secret's `data` (base64 values).
        data = {k: base64.b64encode(v.encode()).decode() for k, v in play.secret.items()}
        subprocess.run(["podman", "secret", "create", play.secret_name, "-"], input=json.dumps(data),
                       env=ENV, check=True, capture_output=True, text=True, timeout=60)
        eventually(lambda: podman("exec", run.standins[0], "pg_isready", "-h", "127.0.0.1", "-U", "paycore",
                                  check=False).returncode == 0)
        yield run
    finally:
        run.close()


def test_the_migration_job_runs_to_completion(stack: Stack) -> None:
    """The Job's pod (kube play runs no Job), its ConfigMap and Secret as rendered: `paycore
    migrate` exits 0, as the Job must complete before any Deployment rolls."""
    _play(stack.files["migration"], stack.network)
    (pod,) = [o for o in stack.play.migration if o["kind"] == "Pod"]
    stack.migration = f"{pod['metadata']['name']}-{pod['spec']['containers'][0]['name']}"
    eventually(lambda: _inspect(stack.migration, "{{.State.Status}}") == "exited", timeout=120)
    shown = podman("logs", stack.migration)
    logs = shown.stdout + shown.stderr
    assert _inspect(stack.migration, "{{.State.ExitCode}}") == "0", logs
    assert "applied" in logs, logs


@dataclass
class Readiness:
    pod: str
    started_s: float  # after the container started
    ready_s: float
    probes: int


def _get(ip: str, probe: dict[str, Any]) -> bool:
    """One httpGet probe as the kubelet runs it: 200-399 within timeoutSeconds (default 1), to
    the pod's address, through no proxy."""
    get = probe["httpGet"]
    url = f"{get.get('scheme', 'HTTP').lower()}://{ip}:{get['port']}{get.get('path', '/')}"
    try:
        answer = httpx.get(url, timeout=float(probe.get("timeoutSeconds", 1)), trust_env=False)
    except httpx.HTTPError:
        return False
    return 200 <= answer.status_code < 400


def _until(ip: str, probe: dict[str, Any], deadline: float, what: str) -> int:
    """Probe every periodSeconds until successThreshold successes in a row; the probes run."""
    period, needed = float(probe.get("periodSeconds", 10)), int(probe.get("successThreshold", 1))
    streak = runs = 0
    while True:
        runs += 1
        streak = streak + 1 if _get(ip, probe) else 0
        if streak >= needed:
            return runs
        if time.time() + period > deadline:
            raise AssertionError(f"{what}: {probe['httpGet']} not answered in time ({runs} probes)")
        time.sleep(period)  # the probe's own period: this is the kubelet's schedule, not a wait for state


def _becomes_ready(pod: Pod, network: str) -> Readiness:
    c = pod.container
    started = float(_inspect(pod.container_name, "{{.State.StartedAt.Unix}}"))
    ip = _pod_ip(pod.name, network)
    runs = 0
    startup = c.get("startupProbe")
    if startup is not None:
        # The kubelet restarts the container once failureThreshold probes failed.
        allowance = (startup.get("initialDelaySeconds", 0)
                     + startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3))
        time.sleep(max(0.0, started + startup.get("initialDelaySeconds", 0) - time.time()))
        runs += _until(ip, startup, started + allowance, f"{pod.name}: startupProbe")
    up = time.time() - started
    # Readiness is probed once the startup probe passed; the pod is ready at its first success
    # (successThreshold). Nothing restarts an unready pod: a minute, then it is reported.
    runs += _until(ip, c["readinessProbe"], time.time() + 60, f"{pod.name}: readinessProbe")
    return Readiness(pod.name, up, time.time() - started, runs)


def _ready_or_why(pod: Pod, network: str) -> Readiness | str:
    """Readiness, or why not with the container's last log lines (every pod is reported)."""
    try:
        return _becomes_ready(pod, network)
    except AssertionError as e:
        logs = podman("logs", "--tail", "25", pod.container_name, check=False)
        return f"{e}\n{logs.stdout}{logs.stderr}"


def test_every_deployment_plays_with_its_security_context(stack: Stack) -> None:
    """One pod per Deployment (kube play runs one replica), each container as the manifest says:
    uid/gid 10001, read-only root, every capability dropped, its memory limit."""
    assert stack.migration, "the migration ran first"
    _play(stack.files["deployments"], stack.network)
    stack.pods = [Pod(o["metadata"]["name"].removesuffix(f"-{stack.tag}"),
                      f"{o['metadata']['name']}-pod-0", c)
                  for o in stack.play.deployments if o["kind"] == "Deployment"
                  for c in o["spec"]["template"]["spec"]["containers"]]
    assert len(stack.pods) == 9, [p.deployment for p in stack.pods]  # every process of the dev overlay
    for pod in stack.pods:
        name = pod.container_name
        assert _inspect(name, "{{.Config.User}}") == "10001:10001", name
        assert _inspect(name, "{{.HostConfig.ReadonlyRootfs}}") == "true", name
        dropped = json.loads(_inspect(name, "{{json .HostConfig.CapDrop}}"))
        assert "CAP_NET_BIND_SERVICE" in dropped and "CAP_CHOWN" in dropped, (name, dropped)
        memory = pod.container["resources"]["limits"]["memory"]
        assert memory.endswith("Mi") and _inspect(name, "{{.HostConfig.Memory}}") == str(
            int(memory[:-2]) * 2**20), (name, memory)


def test_each_pod_becomes_ready_by_its_own_probes(stack: Stack) -> None:
    assert stack.pods, "the Deployments are played"
    with ThreadPoolExecutor(max_workers=len(stack.pods)) as pool:
        results = list(pool.map(lambda p: _ready_or_why(p, stack.network), stack.pods))
    failed = [r for r in results if isinstance(r, str)]
    assert not failed, "\n\n".join(failed)
    for pod, ready in zip(stack.pods, results, strict=True):
        assert isinstance(ready, Readiness)
        print(f"{pod.deployment}: started {ready.started_s:.1f} s, ready {ready.ready_s:.1f} s, "
              f"{ready.probes} probes")
        assert _inspect(pod.container_name, "{{.RestartCount}}") == "0", pod.container_name
        # And it stays alive by its own liveness probe.
        assert _get(_pod_ip(pod.name, stack.network), pod.container["livenessProbe"]), pod.container_name


def test_readiness_follows_the_database(stack: Stack) -> None:
    """The pods readiness-probed on /readyz (checkout, the intake) go unready while PostgreSQL is
    stopped, and ready again once it is back: their readiness is the database's, as documented."""
    assert stack.pods, "the Deployments are played"
    gated = [p for p in stack.pods if p.container["readinessProbe"]["httpGet"]["path"] == "/readyz"]
    assert sorted(p.deployment for p in gated) == ["paycore-checkout", "paycore-webhooks"]
    targets = [(_pod_ip(p.name, stack.network), p.container["readinessProbe"]) for p in gated]
    podman("stop", "--time", "10", stack.standins[0])
    try:
        eventually(lambda: not any(_get(ip, probe) for ip, probe in targets), timeout=60)
    finally:
        podman("start", stack.standins[0])
    eventually(lambda: all(_get(ip, probe) for ip, probe in targets), timeout=90)


def test_kube_down_leaves_nothing(stack: Stack) -> None:
    """kube down removes every pod it played (and their emptyDir volumes); with the stand-ins,
    the secret and the network gone too, nothing of the run is left."""
    downs = stack.kube_down()
    assert [d.returncode for d in downs] == [0, 0], downs
    left = _leftovers(stack.tag)
    assert left["pods"] == [] and left["volumes"] == [], left
    assert sorted(left["containers"]) == sorted(stack.standins), left
    stack.close()
    left = _leftovers(stack.tag)
    assert not any(left.values()), left
