"""PostgreSQL and the broker in containers for one test run, started with testcontainers.

Under ``PAYCORE_TEST_CONTAINERS=true`` the pytest session (``tests/conftest.py``) enters
:func:`started` once, in the process that runs the session (xdist's controller when there are
workers), and exports the servers' addresses as ``PAYCORE_TEST_DATABASE_URL`` and
``PAYCORE_TEST_KAFKA_BOOTSTRAP`` before any worker starts: every worker inherits them, so the
run shares one PostgreSQL (each worker still migrates its own template, as against a local
server) and one broker (each test creates its own topics), and the setting wins over whatever
those variables said and over a local server on 5432.

The engine is the one ``DOCKER_HOST`` names; unset, podman's Docker-compatible service is
started for the run on a private socket, with the project's ``deploy/containers.conf`` (runc,
the host's ulimits), and stopped after it. The engine maps every port (nothing fixed on the
host); testcontainers' Ryuk reaper is off unless ``TESTCONTAINERS_RYUK_DISABLED`` says otherwise
(its image comes from a registry), so the containers are removed here, on the way out of
:func:`started` whatever happened, and a run killed before that has its containers removed by
the next one (each carries its owner's host and pid in :data:`OWNER_LABEL`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import asyncpg
import httpx

from harness import settings

if TYPE_CHECKING:
    from testcontainers.core.container import DockerContainer

ROOT = Path(__file__).resolve().parents[1]
OWNER_LABEL = "paycore.test-containers.owner"  # "<hostname>:<pid>" of the run that started it
ROLE_LABEL = "paycore.test-containers.role"  # "postgres" or "broker"


def enabled(env: Mapping[str, str] = os.environ) -> bool:
    """Whether this run's PostgreSQL and broker are containers (``PAYCORE_TEST_CONTAINERS``)."""
    return settings.CONTAINERS.read(env)


@dataclass(frozen=True)
class Services:
    database_url: str  # an admin DSN: the superuser, database ``postgres``
    kafka_bootstrap: str  # host:port
    docker_host: str
    postgres_id: str
    broker_id: str

    def exported(self) -> dict[str, str]:
        """The variables that point a test process (and its subprocesses) at these servers."""
        values = (self.database_url, self.kafka_bootstrap, self.docker_host)
        return dict(zip(EXPORTED, values, strict=True))


EXPORTED = (settings.DATABASE_URL.name, settings.KAFKA_BOOTSTRAP.name, "DOCKER_HOST")


@contextlib.contextmanager
def started(env: Mapping[str, str] = os.environ) -> Iterator[Services]:
    """PostgreSQL and Tansu running in containers; both removed (and the engine service this
    started, stopped) when the block ends, however it ends."""
    postgres_image = settings.POSTGRES_IMAGE.read(env)
    tansu_image = settings.TANSU_IMAGE.read(env)
    with contextlib.ExitStack() as stack:
        stack.callback(_restore_docker_host, os.environ.get("DOCKER_HOST"))
        docker_host = env.get("DOCKER_HOST") or stack.enter_context(podman_service(env))
        _configure_testcontainers(docker_host, env)
        _remove_orphans()
        postgres, dsn = stack.enter_context(_postgres(postgres_image))
        broker, bootstrap = stack.enter_context(_tansu(tansu_image))
        yield Services(dsn, bootstrap, docker_host, postgres.get_container_id(), broker.get_container_id())


def _restore_docker_host(previous: str | None) -> None:
    if previous is None:
        os.environ.pop("DOCKER_HOST", None)
    else:
        os.environ["DOCKER_HOST"] = previous


# --------------------------------------------------------------------------- the engine


def _die_with_parent() -> None:  # pragma: no cover -- runs in the child between fork and exec
    """Linux: SIGTERM this child when the process that started it dies (a killed test run)."""
    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


@contextlib.contextmanager
def podman_service(env: Mapping[str, str] = os.environ) -> Iterator[str]:
    """``podman system service`` on a private socket for the block; yields its ``DOCKER_HOST``."""
    podman = shutil.which("podman")
    if podman is None:
        raise RuntimeError("PAYCORE_TEST_CONTAINERS needs a container engine: set DOCKER_HOST, or install "
                           "podman (make test-containers installs it as root)")
    _remove_stale_service_directories()
    directory = Path(tempfile.mkdtemp(prefix=f"{_SERVICE_PREFIX}{os.getpid()}-"))
    sock = directory / "podman.sock"
    conf = env.get("CONTAINERS_CONF") or str(ROOT / "deploy" / "containers.conf")
    log = (directory / "service.log").open("wb")
    proc = subprocess.Popen(
        [podman, "system", "service", "--time=0", f"unix://{sock}"],
        env={**env, "CONTAINERS_CONF": conf}, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        preexec_fn=_die_with_parent)
    try:
        _wait_for_engine(sock, proc, directory / "service.log")
        yield f"unix://{sock}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
        shutil.rmtree(directory, ignore_errors=True)


_SERVICE_PREFIX = "paycore-podman-"


def _remove_stale_service_directories() -> None:
    """The sockets' directories of runs killed before they could remove theirs (pid in the name)."""
    for path in Path(tempfile.gettempdir()).glob(f"{_SERVICE_PREFIX}*-*"):
        pid = path.name.removeprefix(_SERVICE_PREFIX).partition("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _wait_for_engine(sock: Path, proc: subprocess.Popen[bytes], log: Path, within_s: float = 30) -> None:
    deadline = time.monotonic() + within_s
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), timeout=2) as engine:
        while True:
            if proc.poll() is not None:
                detail = log.read_text()[-2000:]
                raise RuntimeError(f"podman system service exited {proc.returncode}: {detail}")
            with contextlib.suppress(httpx.TransportError):
                if engine.get("http://engine/_ping").status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"podman system service did not answer on {sock} within {within_s:.0f} s")
            time.sleep(0.05)


def _configure_testcontainers(docker_host: str, env: Mapping[str, str]) -> None:
    """Point testcontainers at ``docker_host`` and at the host's loopback for the mapped ports.

    This machine may itself be a container (``/.dockerenv``): testcontainers would then dial the
    default gateway, but the engine publishes the ports right here. ``TESTCONTAINERS_*`` set by
    whoever runs the tests still win.
    """
    os.environ["DOCKER_HOST"] = docker_host  # the Docker SDK reads it (testcontainers has no other way)
    from testcontainers.core.config import ConnectionMode
    from testcontainers.core.config import testcontainers_config as config

    if "TESTCONTAINERS_RYUK_DISABLED" not in env:
        config.ryuk_disabled = True
    if not (env.get("TESTCONTAINERS_HOST_OVERRIDE") or env.get("TC_HOST")):
        config.tc_host_override = "127.0.0.1"
    if "TESTCONTAINERS_CONNECTION_MODE" not in env:
        config.connection_mode_override = ConnectionMode.docker_host


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _labels(role: str) -> dict[str, str]:
    return {OWNER_LABEL: _owner(), ROLE_LABEL: role}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_orphans() -> None:
    """Remove the containers of earlier runs on this host that died before removing their own."""
    from testcontainers.core.docker_client import DockerClient

    client = DockerClient().client
    try:
        for container in client.containers.list(all=True, filters={"label": OWNER_LABEL}):
            host, _, pid = str(container.labels.get(OWNER_LABEL, "")).rpartition(":")
            if host == socket.gethostname() and pid.isdigit() and not _alive(int(pid)):
                with contextlib.suppress(Exception):  # another run removing it at the same time
                    container.remove(force=True, v=True)
    finally:
        client.close()


# --------------------------------------------------------------------------- the servers


def _start(container: DockerContainer, image: str) -> None:
    from docker.errors import ImageNotFound

    try:
        container.start()
    except ImageNotFound as exc:
        built_here = " (`make standins` builds it)" if image.startswith("localhost/") else ""
        raise RuntimeError(f"no image {image} here{built_here}: {exc}") from exc


@contextlib.contextmanager
def _removed_after(container: DockerContainer) -> Iterator[None]:
    try:
        yield
    finally:
        with contextlib.suppress(Exception):  # never started, or already gone
            container.stop()


@contextlib.contextmanager
def _postgres(image: str) -> Iterator[tuple[DockerContainer, str]]:
    """A PostgreSQL container; yields it and its superuser's DSN (database ``postgres``).

    fsync and synchronous commits are off, as a throwaway test server's may be: a test database is
    made from a template per test, and that copy is what they would make slow.
    """
    from testcontainers.community.postgres import PostgresContainer

    container = PostgresContainer(image, username="postgres", password=secrets.token_hex(12),
                                  dbname="postgres", driver=None)
    container.with_command("postgres -c fsync=off -c synchronous_commit=off -c full_page_writes=off")
    container.with_kwargs(labels=_labels("postgres"))
    with _removed_after(container):
        _start(container, image)  # waits until psql inside answers on 127.0.0.1
        dsn = container.get_connection_url()
        asyncio.run(_wait_for_postgres(dsn))  # and then through the published port
        yield container, dsn


async def _wait_for_postgres(dsn: str, within_s: float = 30) -> None:
    deadline = time.monotonic() + within_s
    while True:
        try:
            conn = await asyncpg.connect(dsn, timeout=3)
        except (OSError, asyncpg.PostgresError, TimeoutError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
        else:
            await conn.close()
            return


# The broker must advertise the address clients dial: the host's port, which the engine picks
# only once the container exists. So the container waits for that address in a file, written
# in once it is known (as testcontainers' own Kafka module does), then execs Tansu with it.
_TANSU = ('while [ ! -s /tmp/advertised ]; do sleep 0.05; done; '
          'exec /usr/local/bin/tansu broker --listener-url tcp://0.0.0.0:9092 '
          '--advertised-listener-url "$(cat /tmp/advertised)" --storage-engine memory://tansu/')


@contextlib.contextmanager
def _tansu(image: str) -> Iterator[tuple[DockerContainer, str]]:
    """A Tansu container (memory storage); yields it and its bootstrap address."""
    from testcontainers.core.container import DockerContainer

    container = DockerContainer(image).with_exposed_ports(9092)
    container.with_kwargs(entrypoint=["/bin/sh", "-c"], labels=_labels("broker"))
    container.with_command([_TANSU])
    with _removed_after(container):
        _start(container, image)
        host, port = container.get_container_host_ip(), container.get_exposed_port(9092)
        advertised = f"tcp://{host}:{port}"
        written = container.exec(["/bin/sh", "-c", f"printf %s '{advertised}' > /tmp/advertised"])
        if written.exit_code != 0:
            raise RuntimeError(f"could not tell Tansu its address: {written.output!r}")
        bootstrap = f"{host}:{port}"
        asyncio.run(_wait_for_broker(bootstrap))
        yield container, bootstrap


async def _wait_for_broker(bootstrap: str, within_s: float = 30) -> None:
    """Until the broker answers a metadata request at ``bootstrap`` (the port accepting is not enough)."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaError

    deadline = time.monotonic() + within_s
    host, _, port = bootstrap.rpartition(":")
    while True:  # first the port, quietly (aiokafka logs every refused connection as an error)
        try:
            _, writer = await asyncio.open_connection(host, int(port))
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)
        else:
            writer.close()
            break
    while True:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=2000)
        try:
            await admin.start()
            await admin.list_topics()
            return
        except (KafkaError, OSError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
        finally:
            with contextlib.suppress(Exception):  # never started
                await admin.close()
