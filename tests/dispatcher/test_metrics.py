"""The dispatcher's backlog gauges read 0, not "no data", when nothing waits (an alert sees 0)."""

from __future__ import annotations

import asyncpg
from prometheus_client import generate_latest

from paycore import contracts
from paycore.clock import FakeClock
from paycore_dispatcher.metrics import DispatcherMetrics

from .support import queue_bare


def samples(metrics: DispatcherMetrics, name: str) -> dict[str, float]:
    prefix = name + '{kind="'
    found = {}
    for line in generate_latest(metrics.registry).decode().splitlines():
        if line.startswith(prefix):
            kind, _, value = line[len(prefix):].partition('"} ')
            found[kind] = float(value)
    return found


async def test_the_backlog_gauges_export_zero_for_every_kind_when_the_outbox_is_empty(
    pool: asyncpg.Pool, clock: FakeClock,
) -> None:
    metrics = DispatcherMetrics.create()
    await metrics.refresh(pool, clock)
    for name in ("paycore_outbox_backlog", "paycore_outbox_dead_lettered"):
        assert samples(metrics, name) == dict.fromkeys(contracts.kinds(), 0.0), name
    await queue_bare(pool, clock, "attempt:a1", "order-confirmation")
    await metrics.refresh(pool, clock)
    backlog = samples(metrics, "paycore_outbox_backlog")
    assert backlog["order-confirmation"] == 1.0 and backlog["fulfillment-request"] == 0.0
