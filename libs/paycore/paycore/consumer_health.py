"""An InboxConsumer as a worker process runs it: liveness, ``/healthz`` and ``/metrics``.

The counters are read from the consumer's ``stats`` at scrape time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from paycore.consumer import InboxConsumer
from paycore.http.health_server import serve_health
from paycore.liveness import Liveness

COUNTERS = (
    ("handled", "Messages whose effect this process committed"),
    ("duplicates", "Messages skipped because their dedup key was already in the inbox"),
    ("skipped", "Messages without a dedup key, logged and skipped"),
    ("retries", "Handler failures retried after a backoff"),
    ("commits", "Offset commits"),
)


class ConsumerStatsCollector(Collector):
    def __init__(self, consumer: InboxConsumer) -> None:
        self.consumer = consumer

    def collect(self) -> Iterator[CounterMetricFamily]:
        stats = self.consumer.stats
        for name, text in COUNTERS:
            family = CounterMetricFamily(f"paycore_consumer_{name}", text, labels=["group"])
            family.add_metric([self.consumer.group_id], float(getattr(stats, name)))
            yield family


def consumer_registry(consumer: InboxConsumer) -> CollectorRegistry:
    """A registry exposing ``paycore_consumer_*_total{group=...}`` for ``consumer``."""
    registry = CollectorRegistry()
    registry.register(ConsumerStatsCollector(consumer))
    return registry


async def run_with_health(
    consumer: InboxConsumer, stop: asyncio.Event, *, worker: str, metrics_host: str,
    metrics_port: int | None, monotonic: Callable[[], float] = time.monotonic,
) -> None:
    """Run ``consumer`` until ``stop``, serving its health and metrics when ``metrics_port`` is set."""
    consumer.liveness = Liveness(worker, consumer.liveness_bound_s(), monotonic=monotonic)
    async with serve_health(consumer_registry(consumer), [consumer.liveness], metrics_host, metrics_port,
                            worker=worker):
        await consumer.run(stop)
