"""The dispatcher's settings: the outbox relay, retention, alerts. Declared here, validated at start-up.

``PAYCORE_OUTBOX_*`` and ``PAYCORE_CONSUMER_INBOX_RETENTION_S`` govern ``paycore run
dispatcher`` (its relays and its hourly retention job; ``paycore outbox purge`` takes the
same horizon), ``PAYCORE_ALERT_*`` and ``PAYCORE_PAGERDUTY_ROUTING_KEY`` ``paycore run
alerts``. The Kafka settings stay in :mod:`paycore.config`: the library's consumer helper
and ``paycore run incidents`` read the topics too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from paycore.config import SECONDS, ConfigError, Secret, Settings
from paycore.settings_spec import Choice, Count, Flag, Group, Number, SecretText, Url

# A horizon of days, not an asyncio budget: the budget bound (~24.8 days) would refuse its default.
HORIZON = Number("seconds", maximum=None)

RELAY = Group("`paycore run dispatcher`: the outbox relay and retention (docs/dispatcher.md)")
OUTBOX_BATCH_SIZE = RELAY.declare(
    "PAYCORE_OUTBOX_BATCH_SIZE", Count(maximum=100_000), 500, "outbox rows a relay claims at a time")
OUTBOX_MAX_DELIVERY_ATTEMPTS = RELAY.declare(
    "PAYCORE_OUTBOX_MAX_DELIVERY_ATTEMPTS", Count(maximum=1_000), 10,
    "failed sends of one row before it is dead-lettered (and escalated)")
OUTBOX_SEND_TIMEOUT = RELAY.declare(
    "PAYCORE_OUTBOX_SEND_TIMEOUT_S", SECONDS, 10.0, "one send's deadline, on the application clock")
OUTBOX_BACKOFF_BASE = RELAY.declare(
    "PAYCORE_OUTBOX_BACKOFF_BASE_S", SECONDS, 1.0, "first retry delay after a failed send; doubles")
OUTBOX_BACKOFF_MAX = RELAY.declare(
    "PAYCORE_OUTBOX_BACKOFF_MAX_S", SECONDS, 300.0, "longest retry delay; not below the base")
OUTBOX_RETENTION = RELAY.declare(
    "PAYCORE_OUTBOX_RETENTION_S", HORIZON, 30 * 86_400.0,
    "`paycore outbox purge` deletes rows dispatched longer ago (the replay horizon)")
CONSUMER_INBOX_RETENTION = RELAY.declare(
    "PAYCORE_CONSUMER_INBOX_RETENTION_S", HORIZON, 40 * 86_400.0,
    "the dispatcher's hourly retention deletes consumer inbox rows processed longer ago; "
    "above PAYCORE_KAFKA_RETENTION_S, since a record still in its topic can be redelivered")

ALERTS = Group("`paycore run alerts`: operator-alert delivery (docs/dispatcher.md)")
ALERT_WEBHOOK_URL = ALERTS.declare(
    "PAYCORE_ALERT_WEBHOOK_URL", Url(), None, "where alerts are posted",
    shown_default="— (required by `paycore run alerts`)")
ALERT_FORMAT = ALERTS.declare(
    "PAYCORE_ALERT_FORMAT", Choice(("slack", "pagerduty"), case="lower"), "slack",
    "Slack-compatible incoming webhook, or PagerDuty Events v2")
PAGERDUTY_ROUTING_KEY = ALERTS.declare(
    "PAYCORE_PAGERDUTY_ROUTING_KEY", SecretText(), None, "the PagerDuty integration key",
    shown_default="— (required with `pagerduty`)")
# Incident grouping (issue 14): `paycore run incidents` reads ops.alerts and writes the pages
# topic (PAYCORE_KAFKA_PAGES_TOPIC); with grouping on, alerts delivers that topic instead.
ALERT_INCIDENT_GROUPING = ALERTS.declare(
    "PAYCORE_ALERT_INCIDENT_GROUPING", Flag(), False,
    "`paycore run alerts` delivers the pages topic (grouped by `paycore run incidents`) "
    "instead of ops.alerts (docs/dispatcher.md, \"Incident grouping\")")


@dataclass(frozen=True)
class DispatcherSettings:
    """The relay's knobs and the retention horizons."""

    batch_size: int = OUTBOX_BATCH_SIZE.default
    max_delivery_attempts: int = OUTBOX_MAX_DELIVERY_ATTEMPTS.default
    send_timeout_s: float = OUTBOX_SEND_TIMEOUT.default
    backoff_base_s: float = OUTBOX_BACKOFF_BASE.default
    backoff_max_s: float = OUTBOX_BACKOFF_MAX.default
    outbox_retention_s: float = OUTBOX_RETENTION.default  # the replay horizon for dispatched rows
    consumer_inbox_retention_s: float = CONSUMER_INBOX_RETENTION.default  # outlives the topics' retention


def load_dispatcher_settings(app: Settings, env: Mapping[str, str] | None = None) -> DispatcherSettings:
    """``PAYCORE_OUTBOX_*`` and the inbox horizon, checked against the topics' retention in ``app``.

    The three horizons are one chain: outbox rows (the replay horizon) <= the topics' retention <
    consumer inbox rows. While the outbox remembers an effect as dispatched it is still in Kafka
    for a consumer that was down or rewinds, and a record still in Kafka still finds its inbox row.
    """
    env = os.environ if env is None else env
    base = OUTBOX_BACKOFF_BASE.read(env)
    ceiling = OUTBOX_BACKOFF_MAX.read(env)
    if ceiling < base:
        raise ConfigError(OUTBOX_BACKOFF_MAX.name, "must not be below PAYCORE_OUTBOX_BACKOFF_BASE_S")
    kafka_retention = app.kafka_retention_s
    inbox_retention = CONSUMER_INBOX_RETENTION.read(env)
    if inbox_retention <= kafka_retention:  # a redelivered record would find no inbox row: a repeated effect
        raise ConfigError(CONSUMER_INBOX_RETENTION.name,
                          f"is {inbox_retention:.0f} s, not above PAYCORE_KAFKA_RETENTION_S "
                          f"({kafka_retention:.0f} s): a record still in its topic could be redelivered "
                          "after its inbox row is gone and its effect repeated")
    outbox_retention = OUTBOX_RETENTION.read(env)
    if kafka_retention < outbox_retention:  # a consumer behind by less than the horizon would miss effects
        raise ConfigError("PAYCORE_KAFKA_RETENTION_S",
                          f"is {kafka_retention:.0f} s, below PAYCORE_OUTBOX_RETENTION_S "
                          f"({outbox_retention:.0f} s): "
                          "an effect the outbox still holds as dispatched would be gone from Kafka for a "
                          "consumer that fell behind; raise it (and retention.ms of topics you created), or "
                          "lower the outbox's horizon")
    return DispatcherSettings(
        batch_size=OUTBOX_BATCH_SIZE.read(env),
        max_delivery_attempts=OUTBOX_MAX_DELIVERY_ATTEMPTS.read(env),
        send_timeout_s=OUTBOX_SEND_TIMEOUT.read(env),
        backoff_base_s=base,
        backoff_max_s=ceiling,
        outbox_retention_s=outbox_retention,
        consumer_inbox_retention_s=inbox_retention,
    )


@dataclass(frozen=True)
class AlertSettings:
    webhook_url: str | None = None  # required by `paycore run alerts`
    format: str = ALERT_FORMAT.default  # or "pagerduty"
    pagerduty_routing_key: Secret | None = None
    incident_grouping: bool = ALERT_INCIDENT_GROUPING.default


def load_alert_settings(env: Mapping[str, str] | None = None) -> AlertSettings:
    """``PAYCORE_ALERT_*``; a PagerDuty destination needs its routing key."""
    env = os.environ if env is None else env
    url = ALERT_WEBHOOK_URL.get(env)
    alert_format = ALERT_FORMAT.read(env)
    routing_key = PAGERDUTY_ROUTING_KEY.get(env)
    if alert_format == "pagerduty" and url is not None and routing_key is None:
        raise ConfigError(PAGERDUTY_ROUTING_KEY.name, "is required when PAYCORE_ALERT_FORMAT=pagerduty")
    return AlertSettings(webhook_url=url, format=alert_format, pagerduty_routing_key=routing_key,
                         incident_grouping=ALERT_INCIDENT_GROUPING.read(env))
