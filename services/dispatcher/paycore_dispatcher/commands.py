"""What ``paycore run dispatcher|alerts|consumer NAME`` runs (called from paycore_cli.serve).

Each worker validates its settings, installs SIGTERM/Ctrl-C handlers that set a
stop event, and returns 0 after a clean shutdown (the current pass or message
finishes and commits; consumers commit their processed offsets and leave).
With ``metrics_port`` set, each serves ``/healthz`` and ``/metrics`` on
``metrics_host`` (paycore.http.health_server).
"""

from __future__ import annotations

import asyncio
import logging

import httpx

from paycore import kafka
from paycore.clock import SystemClock
from paycore.config import ConfigError, Settings, load_settings
from paycore.consumer_health import run_with_health
from paycore.db import create_pool
from paycore.kafka import KafkaSettings
from paycore_dispatcher.alerts import AlertSender, alert_consumer
from paycore_dispatcher.demo_consumers import demo_consumer
from paycore_dispatcher.settings import ALERT_WEBHOOK_URL, load_alert_settings, load_dispatcher_settings
from paycore_dispatcher.worker import install_stop_signals, run_dispatcher

log = logging.getLogger("paycore.dispatcher")


def _settings() -> tuple[Settings, KafkaSettings]:
    settings = load_settings(require_account=False)
    if settings.database_url is None:
        raise ConfigError("PAYCORE_DATABASE_URL", "is required")
    return settings, kafka.kafka_settings(settings)


def run_dispatcher_command(*, relays: int, metrics_host: str, metrics_port: int | None,
                           retention_every_s: float | None) -> int:
    settings, ks = _settings()
    dispatcher = load_dispatcher_settings(settings)

    async def main() -> None:
        stop = asyncio.Event()
        install_stop_signals(stop)
        await run_dispatcher(settings, ks, stop, dispatcher=dispatcher, relays=relays,
                             metrics_host=metrics_host, metrics_port=metrics_port,
                             retention_every_s=retention_every_s)

    asyncio.run(main())
    return 0


def run_consumer_command(name: str, *, instance_id: str | None, metrics_host: str = "127.0.0.1",
                         metrics_port: int | None = None) -> int:
    settings, ks = _settings()

    async def main() -> None:
        stop = asyncio.Event()
        install_stop_signals(stop)
        await kafka.ensure_topics(ks)
        pool = await create_pool(settings.database_url or "", max_size=2)
        try:
            consumer = demo_consumer(name, pool, ks, SystemClock(), instance_id=instance_id,
                                     reminder_interval=settings.reminder_interval)
            log.info("consumer %s running (group %s)", name, consumer.group_id)
            await run_with_health(consumer, stop, worker=f"consumer {name}", metrics_host=metrics_host,
                                  metrics_port=metrics_port)
        finally:
            await pool.close()

    asyncio.run(main())
    return 0


def run_alerts_command(*, instance_id: str | None, metrics_host: str = "127.0.0.1",
                       metrics_port: int | None = None) -> int:
    settings, ks = _settings()
    alerts = load_alert_settings()
    if alerts.webhook_url is None:
        raise ConfigError(ALERT_WEBHOOK_URL.name, "is required (where alerts are posted)")

    async def main() -> None:
        stop = asyncio.Event()
        install_stop_signals(stop)
        await kafka.ensure_topics(ks)
        pool = await create_pool(settings.database_url or "", max_size=2)
        try:
            async with httpx.AsyncClient(timeout=10.0) as http:
                key = alerts.pagerduty_routing_key.reveal() if alerts.pagerduty_routing_key else None
                sender = AlertSender(http, alerts.webhook_url or "", SystemClock(),
                                     format=alerts.format, routing_key=key)
                topic = settings.kafka_pages_topic if alerts.incident_grouping else ks.alerts_topic
                consumer = alert_consumer(pool, ks, sender, SystemClock(), topic=topic,
                                          instance_id=instance_id,
                                          reminder_interval=settings.reminder_interval)
                log.info("alert delivery running (%s format) from %s", alerts.format, topic)
                await run_with_health(consumer, stop, worker="alerts", metrics_host=metrics_host,
                                      metrics_port=metrics_port)
        finally:
            await pool.close()

    asyncio.run(main())
    return 0
