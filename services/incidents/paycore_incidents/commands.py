"""What ``paycore run incidents`` runs (called from paycore_cli.serve)."""

from __future__ import annotations

import asyncio
import logging

from aiokafka.admin import NewTopic

from paycore import kafka
from paycore.config import ConfigError, Settings, load_settings
from paycore.kafka import KafkaSettings
from paycore_incidents import settings as incident_settings
from paycore_incidents.app import Topics, build, changelog_topic, internal_topic, run

log = logging.getLogger("paycore.incidents")


def topics_for(settings: Settings) -> Topics:
    return Topics(alerts=settings.kafka_alerts_topic, pages=settings.kafka_pages_topic,
                  partitions=settings.kafka_alerts_partitions)


async def ensure_topics(ks: KafkaSettings, topics: Topics, app_id: str) -> None:
    """Create ops.alerts, the pages topic, the internal topic and the changelog up front.

    faust would declare its own internal topics, but a broker that auto-creates a missing
    topic (the local one does, with 4 partitions) must not race it: every topic the table
    depends on needs the alerts topic's partition count. The changelog is compacted.
    """
    await kafka.ensure_topics(ks)
    configs = {"min.insync.replicas": str(ks.min_insync_replicas),
               "retention.ms": str(round(ks.retention_s * 1000))}
    wanted = {
        topics.pages: NewTopic(topics.pages, topics.partitions, ks.replication_factor, topic_configs=configs),
        internal_topic(app_id): NewTopic(internal_topic(app_id), topics.partitions, ks.replication_factor,
                                         topic_configs=configs),
        changelog_topic(app_id): NewTopic(
            changelog_topic(app_id), topics.partitions, ks.replication_factor,
            topic_configs={"cleanup.policy": "compact", "min.insync.replicas": str(ks.min_insync_replicas)}),
    }
    client = kafka.admin(ks)
    await client.start()
    try:
        existing = set(await client.list_topics())
        missing = [topic for name, topic in wanted.items() if name not in existing]
        if missing:
            response = await client.create_topics(missing)
            for entry in response.topic_errors:
                name, code = entry[0], entry[1]
                if code not in (0, kafka.TOPIC_ALREADY_EXISTS):
                    raise RuntimeError(f"cannot create Kafka topic {name}: error {code}")
                if code == 0:
                    log.info("created Kafka topic %s with %d partitions", name, topics.partitions)
    finally:
        await client.close()


def run_incidents_command(*, metrics_host: str = "127.0.0.1",
                          metrics_port: int | None = None) -> int:
    settings = load_settings(require_account=False)
    if settings.kafka_bootstrap is None:
        raise ConfigError("PAYCORE_KAFKA_BOOTSTRAP", "is required (host:port of a Kafka broker)")
    ks = kafka.kafka_settings(settings)
    chosen = incident_settings.load()
    topics = topics_for(settings)
    asyncio.run(ensure_topics(ks, topics, chosen.app_id))
    log.info("incident grouping: %s -> %s, %d alerts in %.0f s open an incident, %.0f s quiet close it",
             topics.alerts, topics.pages, chosen.threshold, chosen.window_s, chosen.quiet_s)
    run(build(ks, topics, chosen, admin_host=metrics_host, admin_port=metrics_port))
    return 0
