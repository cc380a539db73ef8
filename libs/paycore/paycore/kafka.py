"""Kafka settings, client factories and topic creation.

Two topics (docs/architecture.md, "Kafka"): ``payments.effects`` carries business
effects keyed ``attempt:<id>`` so one attempt's effects share a partition in
outbox order; ``ops.alerts`` carries operator alerts keyed by escalation.

Production defaults (docs/operations.md, "Kafka"): the producer sends with
``acks=all`` and is idempotent; topics the dispatcher creates get replication
factor 3, ``min.insync.replicas=2`` and a retention, so an acknowledged record
survives the loss of one broker. Producer idempotence is a setting: Apache Kafka
supports it; the local Tansu broker rejects aiokafka's ``InitProducerId`` v0, so
it is off when paycore started that broker itself (``paycore up`` and the tests
set ``PAYCORE_KAFKA_IDEMPOTENT=false``) or when the variable says so.

Every client made here (producer, consumer, admin) connects as
``PAYCORE_KAFKA_SECURITY_PROTOCOL`` says: TLS verifying the brokers against
``PAYCORE_KAFKA_SSL_CA_FILE`` or the system's CAs, SASL with its username and password
(:func:`security_options`); the incident agent's faust app gets the same. A worker that
cannot reach a broker at start-up stops with :class:`BrokerUnreachable`, which says
what it tried and what to check.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass, field, replace
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError

from paycore.config import (
    KAFKA_ALERTS_PARTITIONS,
    KAFKA_ALERTS_TOPIC,
    KAFKA_BOOTSTRAP,
    KAFKA_EFFECTS_PARTITIONS,
    KAFKA_EFFECTS_TOPIC,
    KAFKA_MAX_REQUEST_SIZE,
    KAFKA_MIN_INSYNC_REPLICAS,
    KAFKA_REPLICATION_FACTOR,
    KAFKA_RETENTION,
    KAFKA_SASL_MECHANISM,
    KAFKA_SASL_PASSWORD,
    KAFKA_SASL_USERNAME,
    KAFKA_SECURITY_PROTOCOL,
    KAFKA_SSL_CA_FILE,
    ConfigError,
    KafkaSecurity,
    Settings,
)
from paycore.errors import PaycoreError

log = logging.getLogger("paycore.kafka")

EFFECTS_TOPIC = KAFKA_EFFECTS_TOPIC.default  # "payments.effects"
ALERTS_TOPIC = KAFKA_ALERTS_TOPIC.default  # "ops.alerts"
TOPIC_ALREADY_EXISTS = 36  # Kafka error code


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap: str
    idempotent: bool = True
    effects_topic: str = EFFECTS_TOPIC
    alerts_topic: str = ALERTS_TOPIC
    effects_partitions: int = KAFKA_EFFECTS_PARTITIONS.default
    alerts_partitions: int = KAFKA_ALERTS_PARTITIONS.default
    replication_factor: int = KAFKA_REPLICATION_FACTOR.default
    min_insync_replicas: int = KAFKA_MIN_INSYNC_REPLICAS.default
    retention_s: float = KAFKA_RETENTION.default
    max_request_size: int = KAFKA_MAX_REQUEST_SIZE.default
    request_timeout_ms: int = 30_000
    client_id: str = "paycore"
    security: KafkaSecurity = field(default_factory=KafkaSecurity)

    def with_topics(self, effects: str, alerts: str) -> KafkaSettings:
        return replace(self, effects_topic=effects, alerts_topic=alerts)


def kafka_settings(settings: Settings, *, local_broker: bool = False) -> KafkaSettings:
    """Kafka settings from ``PAYCORE_*``; ``local_broker`` says paycore started the broker."""
    if settings.kafka_bootstrap is None:
        raise ConfigError(KAFKA_BOOTSTRAP.name, "is required (host:port of a Kafka broker)")
    idempotent = settings.kafka_idempotent
    if idempotent is None:
        idempotent = not local_broker
    return KafkaSettings(
        bootstrap=settings.kafka_bootstrap,
        idempotent=idempotent,
        effects_topic=settings.kafka_effects_topic,
        alerts_topic=settings.kafka_alerts_topic,
        effects_partitions=settings.kafka_effects_partitions,
        alerts_partitions=settings.kafka_alerts_partitions,
        max_request_size=settings.kafka_max_request_size,
        replication_factor=settings.kafka_replication_factor,
        min_insync_replicas=settings.kafka_min_insync_replicas,
        retention_s=settings.kafka_retention_s,
        security=checked_security(settings.kafka_security),
    )


def checked_security(security: KafkaSecurity) -> KafkaSecurity:
    """The security settings' rules: what a protocol needs is there, and what it would ignore is
    not set (a username with PLAINTEXT is a mistake to report, not to drop)."""
    protocol = f"{KAFKA_SECURITY_PROTOCOL.name}={security.protocol}"
    if security.sasl:
        if security.sasl_username is None:
            raise ConfigError(KAFKA_SASL_USERNAME.name, f"is required with {protocol}")
        if security.sasl_password is None:
            raise ConfigError(KAFKA_SASL_PASSWORD.name, f"is required with {protocol}")
        if security.protocol == "SASL_PLAINTEXT" and security.mechanism == "PLAIN":
            raise ConfigError(KAFKA_SASL_MECHANISM.name,
                              "PLAIN over SASL_PLAINTEXT would send the Kafka password unencrypted: "
                              "use SASL_SSL, or a SCRAM mechanism")
    else:
        for setting, value in ((KAFKA_SASL_USERNAME, security.sasl_username),
                               (KAFKA_SASL_PASSWORD, security.sasl_password),
                               (KAFKA_SASL_MECHANISM, security.sasl_mechanism)):
            if value is not None:
                raise ConfigError(setting.name, f"is set, but {protocol} uses no SASL (SASL_SSL does)")
    if not security.tls and security.ssl_ca_file is not None:
        raise ConfigError(KAFKA_SSL_CA_FILE.name, f"is set, but {protocol} uses no TLS (SSL or SASL_SSL do)")
    return security


class BrokerUnreachable(PaycoreError, ConnectionError):
    """No broker answered at start-up; the message says what was tried and what to check."""


def ssl_context(security: KafkaSecurity) -> ssl.SSLContext | None:
    """The TLS context of ``SSL``/``SASL_SSL``: certificates and host names verified, against
    ``PAYCORE_KAFKA_SSL_CA_FILE`` or the system's CAs; None without TLS."""
    if not security.tls:
        return None
    try:
        return ssl.create_default_context(
            cafile=None if security.ssl_ca_file is None else str(security.ssl_ca_file))
    except (OSError, ssl.SSLError) as exc:  # missing, unreadable, or no certificate in it
        raise ConfigError(KAFKA_SSL_CA_FILE.name,
                          f"cannot be loaded from {security.ssl_ca_file}: {exc}") from None


def security_options(security: KafkaSecurity) -> dict[str, Any]:
    """aiokafka's connection options for ``security``: every client paycore makes passes them."""
    options: dict[str, Any] = {"security_protocol": security.protocol}
    context = ssl_context(security)
    if context is not None:
        options["ssl_context"] = context
    if security.sasl:
        assert security.sasl_username is not None and security.sasl_password is not None  # the settings
        options.update(sasl_mechanism=security.mechanism, sasl_plain_username=security.sasl_username,
                       sasl_plain_password=security.sasl_password.reveal())
    return options


def unreachable(ks: KafkaSettings, exc: BaseException) -> BrokerUnreachable:
    """What a client that could not bootstrap reports: the address, the protocol, what to check."""
    hint = {
        "PLAINTEXT": "a broker that expects TLS or SASL drops a PLAINTEXT client: set "
                     "PAYCORE_KAFKA_SECURITY_PROTOCOL as its listener says",
        "SSL": "a listener without TLS never completes the handshake; a certificate the CAs do not "
               "verify is refused (PAYCORE_KAFKA_SSL_CA_FILE)",
        "SASL_PLAINTEXT": "the username, password and PAYCORE_KAFKA_SASL_MECHANISM must be the broker's",
        "SASL_SSL": "the listener must speak TLS (its certificate verified against "
                    "PAYCORE_KAFKA_SSL_CA_FILE or the system's CAs); the username, password and "
                    "PAYCORE_KAFKA_SASL_MECHANISM must be the broker's",
    }[ks.security.protocol]
    return BrokerUnreachable(f"cannot connect to Kafka at {ks.bootstrap} with "
                             f"{KAFKA_SECURITY_PROTOCOL.name}={ks.security.protocol} ({exc}): is a broker "
                             f"listening there? {hint}")


def new_topics(ks: KafkaSettings, names: list[str] | None = None) -> list[NewTopic]:
    """The topics the dispatcher creates when missing (all, or those in ``names``): partitions,
    replication, ``min.insync.replicas`` and retention from the settings."""
    wanted = {ks.effects_topic: ks.effects_partitions, ks.alerts_topic: ks.alerts_partitions}
    configs = {"min.insync.replicas": str(ks.min_insync_replicas),
               "retention.ms": str(round(ks.retention_s * 1000))}
    return [NewTopic(name, partitions, ks.replication_factor, topic_configs=dict(configs))
            for name, partitions in wanted.items() if names is None or name in names]


def producer(ks: KafkaSettings, **overrides: Any) -> AIOKafkaProducer:
    """A producer with ``acks=all``; idempotent when the settings say so. Not started."""
    return AIOKafkaProducer(**producer_options(ks, **overrides))


def producer_options(ks: KafkaSettings, **overrides: Any) -> dict[str, Any]:
    """:func:`producer`'s options. ``acks=all`` whether or not the producer is idempotent: an
    acknowledged record is then on every in-sync replica, and the outbox row is marked
    dispatched only on that acknowledgement."""
    options: dict[str, Any] = {
        "bootstrap_servers": ks.bootstrap,
        "client_id": ks.client_id,
        "acks": "all",
        "enable_idempotence": ks.idempotent,
        "max_request_size": ks.max_request_size,
        "request_timeout_ms": ks.request_timeout_ms,
        "linger_ms": 2,
        **security_options(ks.security),
    }
    options.update(overrides)
    return options


def consumer(ks: KafkaSettings, *topics: str, group_id: str | None, **overrides: Any) -> AIOKafkaConsumer:
    """A consumer with manual offset commits (``enable_auto_commit=False``). Not started."""
    options: dict[str, Any] = {
        "bootstrap_servers": ks.bootstrap,
        "client_id": ks.client_id,
        "group_id": group_id,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        **security_options(ks.security),
    }
    options.update(overrides)
    return AIOKafkaConsumer(*topics, **options)


def admin(ks: KafkaSettings) -> AIOKafkaAdminClient:
    return AIOKafkaAdminClient(bootstrap_servers=ks.bootstrap, client_id=ks.client_id,
                               request_timeout_ms=ks.request_timeout_ms, **security_options(ks.security))


async def ensure_topics(ks: KafkaSettings) -> list[str]:
    """Create the effects and alerts topics if missing; returns the names created.

    An existing topic with another partition count is left alone and logged: its
    partition count is an operations decision (changing it remaps keys).
    """
    wanted = {ks.effects_topic: ks.effects_partitions, ks.alerts_topic: ks.alerts_partitions}
    client = admin(ks)
    try:
        await client.start()  # every worker's first connection: a wrong address or protocol stops it here
    except KafkaConnectionError as exc:
        await client.close()
        raise unreachable(ks, exc) from exc
    try:
        existing = set(await client.list_topics())
        missing = new_topics(ks, [name for name in wanted if name not in existing])
        created: list[str] = []
        if missing:
            response = await client.create_topics(missing)
            for topic, code, message in _topic_errors(response):
                if code == 0:
                    created.append(topic)
                elif code != TOPIC_ALREADY_EXISTS:  # a concurrent creator is fine
                    raise RuntimeError(f"cannot create Kafka topic {topic}: error {code} {message}")
        for described in await client.describe_topics(list(wanted)):
            name = described.get("topic")
            count = len(described.get("partitions") or [])
            if name in wanted and count and count != wanted[name]:
                log.warning("topic %s has %d partitions, configuration says %d; leaving it as it is",
                            name, count, wanted[name])
            replicas = min((len(p.get("replicas") or []) for p in described.get("partitions") or []),
                           default=0)
            if name in wanted and replicas and replicas < ks.replication_factor:
                log.warning("topic %s has %d replicas, configuration says %d: one broker's loss can lose "
                            "acknowledged records; raise its replication factor", name, replicas,
                            ks.replication_factor)
        for name in created:
            log.info("created Kafka topic %s with %d partitions", name, wanted[name])
        return created
    finally:
        await client.close()


def _topic_errors(response: Any) -> list[tuple[str, int, str | None]]:
    out: list[tuple[str, int, str | None]] = []
    for entry in response.topic_errors:
        topic, code = entry[0], entry[1]
        message = entry[2] if len(entry) > 2 else None
        out.append((str(topic), int(code), message))
    return out
