"""The test run's own settings: which PostgreSQL and broker the tests use.

Declared like the services' settings (``paycore.settings_spec``), so docs/testing.md's table is
generated from here (``make docs``) and cannot drift. None of them is read by a service.
"""

from __future__ import annotations

from paycore.settings_spec import Flag, Group, Text

TESTS = Group("`make test` and `make test-containers`: the servers the tests use")
DATABASE_URL = TESTS.declare(
    "PAYCORE_TEST_DATABASE_URL", Text(), None,
    "the PostgreSQL server the tests and `make bench` use, as a DSN whose user may CREATE DATABASE; "
    "unset: 127.0.0.1:5432 if a server answers there, else an embedded one under `.paycore/`")
KAFKA_BOOTSTRAP = TESTS.declare(
    "PAYCORE_TEST_KAFKA_BOOTSTRAP", Text(), None,
    "the Kafka-protocol broker the dispatcher's and the incident agent's tests use (`host:port`); "
    "unset: Tansu started on a free loopback port for the run")
CONTAINERS = TESTS.declare(
    "PAYCORE_TEST_CONTAINERS", Flag(), False,
    "`true`: the run starts PostgreSQL and Tansu in containers with testcontainers, on ports the "
    "engine picks, and uses them over the two above and any local server (`DOCKER_HOST` names the "
    "engine; unset, the run starts podman's Docker-compatible service for itself); removed at the end")
POSTGRES_IMAGE = TESTS.declare(
    "PAYCORE_TEST_POSTGRES_IMAGE", Text(printable=True), "localhost/paycore-postgres:15",
    "the PostgreSQL image under `PAYCORE_TEST_CONTAINERS`: any that honours the official image's "
    "`POSTGRES_*` (`postgres:15` where a registry answers; the default is `make standin-postgres`'s)")
TANSU_IMAGE = TESTS.declare(
    "PAYCORE_TEST_TANSU_IMAGE", Text(printable=True), "localhost/paycore-tansu:0.6",
    "the broker image under `PAYCORE_TEST_CONTAINERS`: Tansu at `/usr/local/bin/tansu` "
    "(`make standin-tansu`'s)")
