"""Dispatcher metrics: backlog by kind, oldest pending age, published, failures, dead letters."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import asyncpg
from prometheus_client import CollectorRegistry, Counter, Gauge

from paycore import contracts, queries
from paycore.clock import Clock
from paycore_dispatcher.relay import PassResult

OUTBOX_GAUGES = queries.load("metrics", directory=Path(__file__).with_name("queries"))  # the gauges' reads


@dataclass
class DispatcherMetrics:
    registry: CollectorRegistry
    published: Counter
    failures: Counter
    dead_letters: Counter
    backlog: Gauge
    dead_lettered: Gauge
    oldest_pending_age: Gauge

    @classmethod
    def create(cls) -> DispatcherMetrics:
        registry = CollectorRegistry()
        return cls(
            registry=registry,
            published=Counter("paycore_outbox_published", "Outbox rows published and marked dispatched",
                              ["kind"], registry=registry),
            failures=Counter("paycore_outbox_failures", "Failed publish attempts", registry=registry),
            dead_letters=Counter("paycore_outbox_dead_letters", "Rows dead-lettered by this process",
                                 registry=registry),
            backlog=Gauge("paycore_outbox_backlog", "Undispatched rows that are not dead-lettered",
                          ["kind"], registry=registry),
            dead_lettered=Gauge("paycore_outbox_dead_lettered", "Dead-lettered rows awaiting an operator",
                                ["kind"], registry=registry),
            oldest_pending_age=Gauge("paycore_outbox_oldest_pending_age_seconds",
                                     "Age of the oldest undispatched, non-dead-lettered row",
                                     registry=registry),
        )

    def observe(self, result: PassResult) -> None:
        for kind, n in result.published_by_kind.items():
            self.published.labels(kind=kind).inc(n)
        if result.failed:
            self.failures.inc(result.failed)
        if result.dead_lettered:
            self.dead_letters.inc(result.dead_lettered)

    async def refresh(self, pool: asyncpg.Pool, clock: Clock) -> None:
        """Re-read the backlog gauges from the database. Every kind the contracts know is exported,
        0 when none waits: an alert on them must see 0, not "no data", when the outbox is empty."""
        rows = await OUTBOX_GAUGES.backlog.fetch(pool)
        now = clock.now()
        self.backlog.clear()
        self.dead_lettered.clear()
        for kind in contracts.kinds():
            self.backlog.labels(kind=kind).set(0)
            self.dead_lettered.labels(kind=kind).set(0)
        oldest = None
        for r in rows:
            self.backlog.labels(kind=r["kind"]).set(r["pending"])
            self.dead_lettered.labels(kind=r["kind"]).set(r["dead"])
            if r["oldest"] is not None and (oldest is None or r["oldest"] < oldest):
                oldest = r["oldest"]
        self.oldest_pending_age.set(max(0.0, (now - oldest).total_seconds()) if oldest else 0.0)
