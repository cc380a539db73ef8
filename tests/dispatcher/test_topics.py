"""The topics the dispatcher creates carry the production settings: partitions, replication
factor, ``min.insync.replicas`` and retention (docs/operations.md, "Kafka")."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from paycore import kafka
from paycore.config import ConfigError, load_settings
from paycore.kafka import KafkaSettings


async def test_a_created_topic_has_the_configured_replicas_min_insync_and_retention(
        ks: KafkaSettings) -> None:
    settings = dataclasses.replace(ks, effects_topic=f"payments.effects.r{uuid.uuid4().hex[:8]}",
                                   alerts_topic=f"ops.alerts.r{uuid.uuid4().hex[:8]}",
                                   replication_factor=3, min_insync_replicas=2, retention_s=3 * 86400.0)
    created = await kafka.ensure_topics(settings)
    assert sorted(created) == sorted([settings.effects_topic, settings.alerts_topic])
    client = kafka.admin(settings)
    await client.start()
    try:
        [described] = await client.describe_topics([settings.effects_topic])
        assert len(described["partitions"]) == settings.effects_partitions
        assert {len(p["replicas"]) for p in described["partitions"]} == {3}
        [response] = await client.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, settings.effects_topic)])
        [resource] = response.resources
        configs = {entry[0]: entry[1] for entry in resource[4]}
    finally:
        await client.close()
    assert configs["min.insync.replicas"] == "2"
    assert configs["retention.ms"] == str(3 * 86400 * 1000)


def test_the_production_defaults_are_three_replicas_two_in_sync_and_35_days() -> None:
    """35 days: longer than the outbox's 30-day replay horizon (docs/dispatcher.md, "Retention")."""
    ks = kafka.kafka_settings(load_settings({"PAYCORE_KAFKA_BOOTSTRAP": "kafka:9092"}, require_account=False))
    assert (ks.idempotent, ks.replication_factor, ks.min_insync_replicas, ks.retention_s) == (
        True, 3, 2, 35 * 86_400.0)
    assert {t.topic_configs["retention.ms"] for t in kafka.new_topics(ks)} == {str(35 * 86_400 * 1000)}
    assert {t.replication_factor for t in kafka.new_topics(ks)} == {3}


def test_more_in_sync_replicas_than_replicas_is_refused_at_start_up() -> None:
    """Every acks=all send would fail with NOT_ENOUGH_REPLICAS: refused before anything runs."""
    with pytest.raises(ConfigError) as refused:
        load_settings({"PAYCORE_KAFKA_REPLICATION_FACTOR": "1"}, require_account=False)
    assert refused.value.variable == "PAYCORE_KAFKA_MIN_INSYNC_REPLICAS"
    one = load_settings({"PAYCORE_KAFKA_REPLICATION_FACTOR": "1", "PAYCORE_KAFKA_MIN_INSYNC_REPLICAS": "1"},
                        require_account=False)
    assert (one.kafka_replication_factor, one.kafka_min_insync_replicas) == (1, 1)
