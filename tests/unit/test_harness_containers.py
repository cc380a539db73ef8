"""PAYCORE_TEST_CONTAINERS: the run's PostgreSQL and broker in containers (harness/containers.py).

The setting's reading runs everywhere. ``test_the_run_uses_the_containers`` runs where the setting
is on (``make test-containers``): it holds that the servers this run's tests reach are the
containers this run started, not a local server that answered too.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest

from harness import containers, settings
from paycore.config import ConfigError
from paycore.kafka import KafkaSettings
from tests.dispatcher.conftest import kafka_bootstrap, ks  # noqa: F401 -- the session's broker


@pytest.mark.parametrize(("raw", "on"), [("1", True), ("true", True), ("0", False), ("", False),
                                          ("off", False)])
def test_the_setting_is_a_flag_off_by_default(raw: str, on: bool) -> None:
    assert containers.enabled({"PAYCORE_TEST_CONTAINERS": raw}) is on
    assert containers.enabled({}) is False


def test_a_setting_that_is_not_a_flag_is_refused() -> None:
    with pytest.raises(ConfigError, match="PAYCORE_TEST_CONTAINERS"):
        containers.enabled({"PAYCORE_TEST_CONTAINERS": "podman"})


def test_the_images_default_to_the_stand_ins_built_here() -> None:
    assert settings.POSTGRES_IMAGE.read({}) == "localhost/paycore-postgres:15"
    assert settings.TANSU_IMAGE.read({}) == "localhost/paycore-tansu:0.6"
    assert settings.POSTGRES_IMAGE.read({"PAYCORE_TEST_POSTGRES_IMAGE": "postgres:15"}) == "postgres:15"


def test_the_run_exports_the_servers_under_the_variables_the_tests_read() -> None:
    services = containers.Services("postgresql://postgres:pw@127.0.0.1:40001/postgres", "127.0.0.1:40002",
                                   "unix:///tmp/paycore-podman-1-x/podman.sock", "pg-id", "broker-id")
    assert services.exported() == {
        "PAYCORE_TEST_DATABASE_URL": "postgresql://postgres:pw@127.0.0.1:40001/postgres",
        "PAYCORE_TEST_KAFKA_BOOTSTRAP": "127.0.0.1:40002",
        "DOCKER_HOST": "unix:///tmp/paycore-podman-1-x/podman.sock"}


in_containers = pytest.mark.skipif(not containers.enabled(), reason="PAYCORE_TEST_CONTAINERS is off "
                                   "(make test-containers turns it on)")


@pytest.fixture
def ours() -> Iterator[dict[str, dict[str, Any]]]:
    """This run's containers by role, as the engine lists them (its Docker-compatible API)."""
    import docker  # testcontainers' client; DOCKER_HOST is the run's engine

    client = docker.from_env()
    try:
        listed = client.api.containers(filters={"label": containers.OWNER_LABEL})
        yield {c["Labels"][containers.ROLE_LABEL]: c for c in listed if c["State"] == "running"
               and c["Labels"][containers.OWNER_LABEL].rpartition(":")[2] in _run_pids()}
    finally:
        client.close()


def _run_pids() -> set[str]:
    """The pids the run's containers may be labelled with: this process and, under xdist, its controller."""
    return {str(os.getpid()), str(os.getppid())}


def _published(container: dict[str, Any], port: int) -> set[int]:
    return {int(p["PublicPort"]) for p in container["Ports"]
            if p.get("PrivatePort") == port and p.get("PublicPort")}


@in_containers
async def test_the_run_uses_the_containers(db_dsn: str, ks: KafkaSettings,  # noqa: F811
                                           ours: dict[str, dict[str, Any]]) -> None:
    database = urlsplit(os.environ["PAYCORE_TEST_DATABASE_URL"])
    # An engine-mapped port, not the local server's.
    assert database.port is not None and database.port != 5432
    assert ours.keys() == {"postgres", "broker"}
    assert database.port in _published(ours["postgres"], 5432)
    assert ours["postgres"]["Image"].endswith(settings.POSTGRES_IMAGE.read(os.environ).rpartition("/")[2])
    # The test's own database lives on that server: inside the container it listens on 5432, with
    # the image's data directory (the local and embedded servers have others).
    conn = await asyncpg.connect(db_dsn)
    try:
        assert await conn.fetchval("SELECT inet_server_port()") == 5432
        assert await conn.fetchval("SHOW data_directory") == "/var/lib/postgresql/data"
    finally:
        await conn.close()
    broker_port = int(ks.bootstrap.rpartition(":")[2])
    assert broker_port in _published(ours["broker"], 9092)
    assert ks.idempotent is False  # Tansu, as the local broker: no idempotent producers
