"""``paycore run dispatcher``: relays, a metrics port, retention, clean shutdown.

Creates the topics if missing, starts one producer and ``relays`` relay loops
(each pass in its own transaction; several processes may run this at once),
serves ``/metrics`` and ``/healthz`` (each relay's liveness) on ``metrics_port``
when given, runs the retention job every ``retention_every_s``, and stops on
SIGTERM or Ctrl-C after the current pass commits.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable
from datetime import timedelta

import asyncpg

from paycore import consumer, kafka, outbox_admin
from paycore.clock import Clock, SystemClock
from paycore.config import Settings
from paycore.db import create_pool, run_every
from paycore.http.health_server import serve_health
from paycore.kafka import KafkaSettings
from paycore.liveness import Liveness
from paycore_dispatcher.metrics import DispatcherMetrics
from paycore_dispatcher.relay import (
    PRODUCER_OPTIONS,
    KafkaPublisher,
    PassResult,
    Relay,
    RelayConfig,
    liveness_bound_s,
)
from paycore_dispatcher.settings import DispatcherSettings

log = logging.getLogger("paycore.dispatcher")

METRICS_REFRESH_S = 5.0


def relay_config(settings: Settings, ks: KafkaSettings,
                 dispatcher: DispatcherSettings | None = None) -> RelayConfig:
    """The relays' configuration: the topics, the library's reminder interval (a dead letter's
    escalation) and the dispatcher's own settings (their declared defaults when not given)."""
    dispatcher = dispatcher or DispatcherSettings()
    return RelayConfig(
        effects_topic=ks.effects_topic, alerts_topic=ks.alerts_topic,
        reminder_interval=settings.reminder_interval,
        batch_size=dispatcher.batch_size,
        max_delivery_attempts=dispatcher.max_delivery_attempts,
        send_timeout_s=dispatcher.send_timeout_s,
        backoff_base_s=dispatcher.backoff_base_s,
        backoff_max_s=dispatcher.backoff_max_s,
    )


async def run_dispatcher(
    settings: Settings, ks: KafkaSettings, stop: asyncio.Event, *,
    dispatcher: DispatcherSettings | None = None, clock: Clock | None = None, relays: int = 1,
    metrics_host: str = "127.0.0.1", metrics_port: int | None = None,
    retention_every_s: float | None = 3600.0, pool: asyncpg.Pool | None = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> None:
    """``dispatcher`` defaults to the declared defaults; ``monotonic`` times the relays' liveness
    (a test passes a fake one)."""
    dispatcher = dispatcher or DispatcherSettings()
    clock = clock or SystemClock()
    own_pool = pool is None
    if pool is None:
        if settings.database_url is None:
            raise RuntimeError("PAYCORE_DATABASE_URL is required")
        pool = await create_pool(settings.database_url, min_size=1, max_size=relays + 2, session_free=True)
    metrics = DispatcherMetrics.create()
    producer = kafka.producer(ks, **PRODUCER_OPTIONS)
    try:
        await kafka.ensure_topics(ks)
        await producer.start()
        publisher = KafkaPublisher(producer)
        config = relay_config(settings, ks, dispatcher)

        def observe(result: PassResult) -> None:
            metrics.observe(result)

        bound = liveness_bound_s(config)
        loops = [Liveness(f"relay-{i}", bound, monotonic=monotonic) for i in range(relays)]
        workers = [Relay(pool, publisher, clock, config, name=lv.name, on_pass=observe, liveness=lv)
                   for lv in loops]
        async with serve_health(metrics.registry, loops, metrics_host, metrics_port, worker="dispatcher"):
            tasks = [asyncio.create_task(w.run(stop)) for w in workers]
            assert pool is not None
            p: asyncpg.Pool = pool

            async def refresh() -> None:
                await metrics.refresh(p, clock)

            tasks.append(asyncio.create_task(
                run_every(METRICS_REFRESH_S, stop, "metrics refresh", refresh, log)))
            if retention_every_s is not None:
                async def purge() -> None:
                    r = await outbox_admin.purge_dispatched(
                        p, now=clock.now(), older_than=timedelta(seconds=dispatcher.outbox_retention_s))
                    if r.deleted:
                        log.info("retention: deleted %d dispatched rows, kept %d dedup keys",
                                 r.deleted, r.archived)
                    horizon = timedelta(seconds=dispatcher.consumer_inbox_retention_s)
                    inbox = await consumer.purge_inbox(p, now=clock.now(), older_than=horizon)
                    if inbox:
                        log.info("retention: deleted %d consumer inbox rows processed before the horizon",
                                 inbox)

                tasks.append(asyncio.create_task(run_every(retention_every_s, stop, "retention", purge, log)))
            log.info("dispatcher running: %d relay(s), topics %s and %s, idempotent producer %s",
                     relays, ks.effects_topic, ks.alerts_topic, "on" if ks.idempotent else "off")
            await asyncio.gather(*tasks)
    finally:
        await producer.stop()
        if own_pool:
            await pool.close()
        log.info("dispatcher stopped")


def install_stop_signals(stop: asyncio.Event) -> None:
    """SIGTERM and Ctrl-C set ``stop``; the loops finish their current pass."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
