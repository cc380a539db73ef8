"""The dispatcher's settings: the outbox relay, retention, alerts. Declared here, validated at start-up.

``PAYCORE_OUTBOX_*`` and ``PAYCORE_CONSUMER_INBOX_RETENTION_S`` govern ``paycore run
dispatcher`` (its relays and its hourly retention job; ``paycore outbox purge`` takes the
same horizon), ``PAYCORE_ALERT_*`` and ``PAYCORE_PAGERDUTY_ROUTING_KEY`` ``paycore run
alerts``. The Kafka settings stay in :mod:`paycore.config`: the library's consumer helper
and ``paycore run incidents`` read the topics too. Each setting is declared once, as the field
of the class that holds it (docs/decisions/0010-settings-declared-once.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from paycore.config import SECONDS, ConfigError, Secret, Settings
from paycore.settings_spec import (
    Choice,
    Count,
    Flag,
    Group,
    Number,
    SecretText,
    Setting,
    Url,
    load,
    setting_of,
)

# A horizon of days, not an asyncio budget: the budget bound (~24.8 days) would refuse its default.
HORIZON = Number("seconds", maximum=None)

RELAY = Group("`paycore run dispatcher`: the outbox relay and retention (docs/dispatcher.md)")
ALERTS = Group("`paycore run alerts`: operator-alert delivery (docs/dispatcher.md)")


@dataclass(frozen=True, kw_only=True)
class DispatcherSettings:
    """The relay's knobs and the retention horizons."""

    batch_size: int = RELAY.field(
        "PAYCORE_OUTBOX_BATCH_SIZE", Count(maximum=100_000), 500, "outbox rows a relay claims at a time")
    max_delivery_attempts: int = RELAY.field(
        "PAYCORE_OUTBOX_MAX_DELIVERY_ATTEMPTS", Count(maximum=1_000), 10,
        "failed sends of one row before it is dead-lettered (and escalated)")
    send_timeout_s: float = RELAY.field(
        "PAYCORE_OUTBOX_SEND_TIMEOUT_S", SECONDS, 10.0, "one send's deadline, on the application clock")
    backoff_base_s: float = RELAY.field(
        "PAYCORE_OUTBOX_BACKOFF_BASE_S", SECONDS, 1.0, "first retry delay after a failed send; doubles")
    backoff_max_s: float = RELAY.field(
        "PAYCORE_OUTBOX_BACKOFF_MAX_S", SECONDS, 300.0, "longest retry delay; not below the base")
    outbox_retention_s: float = RELAY.field(  # the replay horizon for dispatched rows
        "PAYCORE_OUTBOX_RETENTION_S", HORIZON, 30 * 86_400.0,
        "`paycore outbox purge` deletes rows dispatched longer ago (the replay horizon)")
    consumer_inbox_retention_s: float = RELAY.field(  # outlives the topics' retention
        "PAYCORE_CONSUMER_INBOX_RETENTION_S", HORIZON, 40 * 86_400.0,
        "the dispatcher's hourly retention deletes consumer inbox rows processed longer ago; "
        "above PAYCORE_KAFKA_RETENTION_S, since a record still in its topic can be redelivered")


@dataclass(frozen=True, kw_only=True)
class AlertSettings:
    webhook_url: str | None = ALERTS.field(  # required by `paycore run alerts`
        "PAYCORE_ALERT_WEBHOOK_URL", Url(), None, "where alerts are posted",
        shown_default="— (required by `paycore run alerts`)")
    format: str = ALERTS.field(  # or "pagerduty"
        "PAYCORE_ALERT_FORMAT", Choice(("slack", "pagerduty"), case="lower"), "slack",
        "Slack-compatible incoming webhook, or PagerDuty Events v2")
    pagerduty_routing_key: Secret | None = ALERTS.field(
        "PAYCORE_PAGERDUTY_ROUTING_KEY", SecretText(), None, "the PagerDuty integration key",
        shown_default="— (required with `pagerduty`)")
    # Incident grouping (issue 14): `paycore run incidents` reads ops.alerts and writes the pages
    # topic (PAYCORE_KAFKA_PAGES_TOPIC); with grouping on, alerts delivers that topic instead.
    incident_grouping: bool = ALERTS.field(
        "PAYCORE_ALERT_INCIDENT_GROUPING", Flag(), False,
        "`paycore run alerts` delivers the pages topic (grouped by `paycore run incidents`) "
        "instead of ops.alerts (docs/dispatcher.md, \"Incident grouping\")")


# Named by other modules (the CLI's purge, the deploy checks, the alerts command).
OUTBOX_RETENTION: Setting[float] = setting_of(DispatcherSettings, "outbox_retention_s")
ALERT_WEBHOOK_URL: Setting[str | None] = setting_of(AlertSettings, "webhook_url")
ALERT_INCIDENT_GROUPING: Setting[bool] = setting_of(AlertSettings, "incident_grouping")


def load_dispatcher_settings(app: Settings, env: Mapping[str, str] | None = None) -> DispatcherSettings:
    """``PAYCORE_OUTBOX_*`` and the inbox horizon, checked against the topics' retention in ``app``.

    The three horizons are one chain: outbox rows (the replay horizon) <= the topics' retention <
    consumer inbox rows. While the outbox remembers an effect as dispatched it is still in Kafka
    for a consumer that was down or rewinds, and a record still in Kafka still finds its inbox row.
    """
    settings = load(DispatcherSettings, os.environ if env is None else env)
    if settings.backoff_max_s < settings.backoff_base_s:
        raise ConfigError(setting_of(DispatcherSettings, "backoff_max_s").name,
                          "must not be below PAYCORE_OUTBOX_BACKOFF_BASE_S")
    kafka_retention = app.kafka_retention_s
    inbox_retention = settings.consumer_inbox_retention_s
    if inbox_retention <= kafka_retention:  # a redelivered record would find no inbox row: a repeated effect
        raise ConfigError(setting_of(DispatcherSettings, "consumer_inbox_retention_s").name,
                          f"is {inbox_retention:.0f} s, not above PAYCORE_KAFKA_RETENTION_S "
                          f"({kafka_retention:.0f} s): a record still in its topic could be redelivered "
                          "after its inbox row is gone and its effect repeated")
    outbox_retention = settings.outbox_retention_s
    if kafka_retention < outbox_retention:  # a consumer behind by less than the horizon would miss effects
        raise ConfigError("PAYCORE_KAFKA_RETENTION_S",
                          f"is {kafka_retention:.0f} s, below PAYCORE_OUTBOX_RETENTION_S "
                          f"({outbox_retention:.0f} s): "
                          "an effect the outbox still holds as dispatched would be gone from Kafka for a "
                          "consumer that fell behind; raise it (and retention.ms of topics you created), or "
                          "lower the outbox's horizon")
    return settings


def load_alert_settings(env: Mapping[str, str] | None = None) -> AlertSettings:
    """``PAYCORE_ALERT_*``; a PagerDuty destination needs its routing key."""
    settings = load(AlertSettings, os.environ if env is None else env)
    if settings.format == "pagerduty" and settings.webhook_url is not None \
            and settings.pagerduty_routing_key is None:
        raise ConfigError(setting_of(AlertSettings, "pagerduty_routing_key").name,
                          "is required when PAYCORE_ALERT_FORMAT=pagerduty")
    return settings
