"""The image, built and run for real with podman (issue 31): `make test-deploy`, not `make test`.

Builds the stand-in bases and the image (kept when their recipes are unchanged; the image's
layers cached), then runs the image as a platform would: read-only root, uid 10001, a private
network with the PostgreSQL stand-in. It migrates, pays an order through `serve checkout`
against `serve sandbox`, goes healthy by its own HEALTHCHECK with no PAYCORE_HEALTH_PORT set
(each service asked its own port), and stops on SIGTERM within seconds. Containers and the
network are removed even when a test fails. Skipped unless PAYCORE_TEST_DEPLOY=1 (the make
target sets it): image builds take minutes.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import jwt
import pytest

if os.environ.get("PAYCORE_TEST_DEPLOY") != "1":
    pytest.skip("podman tests: run `make test-deploy` (PAYCORE_TEST_DEPLOY=1)", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("PAYCORE_TEST_IMAGE", "localhost/paycore:test-deploy")
POSTGRES = "localhost/paycore-postgres:15"
ENV = {**os.environ,
       "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", str(ROOT / "deploy" / "containers.conf"))}
JWT_SECRET = "test-deploy-jwt-secret-0123456789abcdef-0123"
CARDCO = {"PAYCORE_CARDCO_BASE_URL": "http://sandbox:8100", "PAYCORE_CARDCO_ACCOUNT": "acct_store",
          "PAYCORE_CARDCO_ENVIRONMENT": "test", "PAYCORE_CARDCO_API_KEY": "sk_test_acct_store_local",
          "PAYCORE_CARDCO_WEBHOOK_SECRET": "whsec_+gpWCYxivYIgg2eOsIXlPTL1kka8PGnI"}


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, env=ENV)
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def eventually(check: object, timeout: float = 60, every: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if check():  # type: ignore[operator]
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {check}")
        time.sleep(every)


@pytest.fixture(scope="module")
def image() -> str:
    """The stand-ins and the image, built (or kept) by the same scripts as `make`."""
    for script, extra in ((["deploy/standins/build.sh", "postgres"], {}),
                          (["deploy/image.sh"], {"IMAGE": IMAGE, "PULL_TIMEOUT": "10"})):
        done = subprocess.run(script, cwd=ROOT, env={**ENV, **extra}, capture_output=True, text=True,
                              timeout=1800)
        assert done.returncode == 0, f"{script}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return IMAGE


class Run:
    """Containers on one private network, all removed at the end."""

    def __init__(self, image: str) -> None:
        self.image = image
        self.tag = secrets.token_hex(4)
        self.network = f"paycore-test-{self.tag}"
        self.names: list[str] = []
        podman("network", "create", self.network)

    def start(self, alias: str, *args: str, env: dict[str, str] | None = None, image: str | None = None,
              publish: str | None = None, read_only: bool = True) -> str:
        name = f"{alias}-{self.tag}"
        flags = ["--name", name, "--network", self.network, "--network-alias", alias]
        flags += ["--read-only"] if read_only else []
        flags += [f"--publish=127.0.0.1:{publish}"] if publish else []
        for key, value in (env or {}).items():
            flags += ["--env", f"{key}={value}"]
        self.names.append(name)
        podman("run", "--detach", *flags, image or self.image, *args)
        return name

    def once(self, *args: str, env: dict[str, str] | None = None, entrypoint: str | None = None,
             ) -> subprocess.CompletedProcess[str]:
        flags = ["--rm", "--read-only", "--network", self.network]
        flags += ["--entrypoint", entrypoint] if entrypoint else []
        for key, value in (env or {}).items():
            flags += ["--env", f"{key}={value}"]
        return podman("run", *flags, self.image, *args, check=False)

    def close(self) -> None:
        for name in reversed(self.names):
            podman("rm", "--force", "--time", "2", name, check=False)
        podman("network", "rm", "--force", self.network, check=False)


@pytest.fixture(scope="module")
def run(image: str) -> Iterator[Run]:
    containers = Run(image)
    try:
        yield containers
    finally:
        containers.close()


@pytest.fixture(scope="module")
def database(run: Run) -> str:
    """The PostgreSQL stand-in, as compose configures the official image; the DSN the services use."""
    name = run.start("postgres", env={"POSTGRES_USER": "paycore", "POSTGRES_PASSWORD": "test-password",
                                      "POSTGRES_DB": "paycore"}, image=POSTGRES, read_only=False)
    eventually(lambda: podman("exec", name, "pg_isready", "-h", "127.0.0.1", "-U", "paycore",
                              check=False).returncode == 0)
    dsn = "postgresql://paycore:test-password@postgres:5432/paycore"
    migrated = run.once("migrate", env={"PAYCORE_DATABASE_URL": dsn})
    assert migrated.returncode == 0 and "applied" in migrated.stdout, migrated.stdout + migrated.stderr
    return dsn


def test_runs_as_uid_10001_on_a_read_only_root(run: Run) -> None:
    done = run.once("-c", "import os; print(os.getuid(), os.getgid()); open('/opt/venv/x', 'w')",
                    entrypoint="python")
    assert done.stdout.split() == ["10001", "10001"] and "Read-only file system" in done.stderr, done


def test_the_image_records_the_digest_of_its_base(image: str) -> None:
    labels = json.loads(podman("image", "inspect", "--format", "{{json .Labels}}", image).stdout)
    base = labels["org.opencontainers.image.base.name"]
    digest = labels["org.opencontainers.image.base.digest"]
    assert digest == podman("image", "inspect", "--format", "{{.Digest}}", base).stdout.strip()
    assert digest.startswith("sha256:") and len(digest) == len("sha256:") + 64
    # A registry's base is built FROM its digest; only a local one (the stand-in) goes by name.
    assert base.startswith("localhost/") or base.endswith("@" + digest)


def test_paycore_help_is_the_default_command(run: Run) -> None:
    done = run.once()
    assert done.returncode == 0 and "usage: paycore" in done.stdout, done


def test_no_pip_or_setuptools_in_the_image(run: Run) -> None:
    found = "import importlib.util as u; print([m for m in ('pip', 'setuptools') if u.find_spec(m)])"
    done = run.once("-c", found, entrypoint="python")
    assert done.returncode == 0 and done.stdout.strip() == "[]", done
    assert run.once("install", "x", entrypoint="pip").returncode != 0


def test_migrate_is_idempotent(run: Run, database: str) -> None:
    again = run.once("migrate", env={"PAYCORE_DATABASE_URL": database})
    assert again.returncode == 0 and "nothing to apply" in again.stdout, again


def _healthy(name: str) -> bool:
    return podman("healthcheck", "run", name, check=False).returncode == 0


def test_an_order_is_paid_through_checkout_and_the_sandbox(run: Run, database: str) -> None:
    """No --host for checkout, no PAYCORE_HEALTH_PORT anywhere: the image makes checkout reachable
    through a published port and each container healthy by its own port."""
    sandbox = run.start("sandbox", "serve", "sandbox", "--host", "0.0.0.0", "--allow-network")
    port = free_port()
    checkout = run.start("checkout", "serve", "checkout", publish=f"{port}:8000",
                         env={"PAYCORE_DATABASE_URL": database, "PAYCORE_JWT_SECRET": JWT_SECRET, **CARDCO})
    eventually(lambda: _healthy(sandbox) and _healthy(checkout), timeout=90)
    status = podman("inspect", "--format", "{{.State.Health.Status}}", checkout).stdout.strip()
    assert status == "healthy"
    now = int(time.time())
    token = jwt.encode({"sub": "cus_deploy", "iat": now, "exp": now + 600}, JWT_SECRET, algorithm="HS256")
    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=auth, timeout=30) as http:
        created = http.post("/orders", json={"amount_minor": 1999, "currency": "EUR"})
        assert created.status_code == 201, created.text
        order = created.json()["order_id"]
        paid = http.post(f"/orders/{order}/payment", json={"payment_method": "tok_visa"})
    assert paid.status_code in (200, 202) and paid.json()["state"] == "Succeeded", paid.text


def test_sigterm_stops_a_service_within_seconds(run: Run, database: str) -> None:
    name = run.start("stopping", "run", "recovery", env={"PAYCORE_DATABASE_URL": database, **CARDCO})
    eventually(lambda: _healthy(name), timeout=60)  # its admin port 8300, found by `paycore health`
    started = time.monotonic()
    podman("stop", "--time", "20", name)
    took = time.monotonic() - started
    code = podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
    assert took < 5 and code in ("0", "130", "143"), (took, code)
