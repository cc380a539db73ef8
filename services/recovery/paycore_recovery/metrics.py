"""Recovery metrics, exposed on the worker's metrics port.

"Open attempts older than N minutes" is the alert the references recommend:
``paycore_recovery_oldest_unknown_age_seconds`` and the per-state gauge feed it.

The gauges are read from the database on each refresh, so every recovery
instance reports the same values: aggregate them with ``max()``, never ``sum()``.
The counters count what this instance did: ``sum()`` them.
"""

from __future__ import annotations

from datetime import UTC, datetime, time
from pathlib import Path

import asyncpg
from prometheus_client import CollectorRegistry, Counter, Gauge

from paycore import queries
from paycore.domain import LIVE_STATES, AttemptState

RECOVERY_GAUGES = queries.load("metrics", directory=Path(__file__).with_name("queries"))  # the gauges' reads


class RecoveryMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.open_attempts = Gauge("paycore_recovery_open_attempts", "Live attempts by state", ["state"],
                                   registry=r)
        self.oldest_unknown = Gauge("paycore_recovery_oldest_unknown_age_seconds",
                                    "Age of the oldest Unknown attempt", registry=r)
        self.oldest_open = Gauge("paycore_recovery_oldest_open_age_seconds",
                                 "Age of the oldest live attempt (alert: older than N minutes)", registry=r)
        self.claims = Counter("paycore_recovery_claims", "Attempts claimed", registry=r)
        self.lookups = Counter("paycore_recovery_lookups", "Provider lookups by result", ["result"],
                               registry=r)
        self.resends = Counter("paycore_recovery_resends", "Same-key resends sent, by what the answer was "
                               "(an outcome kind, rejected, or error when the call raised)", ["result"],
                               registry=r)
        self.resolved = Counter("paycore_recovery_resolved", "Attempts resolved by recovery", ["state"],
                                registry=r)
        self.escalations = Counter("paycore_recovery_escalations", "Episodes opened by reason", ["reason"],
                                   registry=r)
        self.pauses = Counter("paycore_recovery_rate_limit_pauses", "429 pauses by scope", ["scope"],
                              registry=r)
        self.closed_never_sent = Counter("paycore_recovery_closed_never_sent",
                                         "Stale NotStarted attempts closed", registry=r)
        self.failures = Counter("paycore_recovery_pass_failures", "Passes that raised (see logs)", registry=r)
        self.escalations_open = Gauge("paycore_escalations_open", "Open escalation episodes",
                                      ["reason", "acknowledged"], registry=r)
        self.oldest_unacknowledged = Gauge("paycore_escalations_unacknowledged_oldest_age_seconds",
                                           "Age of the oldest open episode nobody acknowledged", registry=r)
        self.past_deadline = Gauge("paycore_attempts_past_escalation_deadline",
                                   "Unknown attempts past their escalation deadline with no open episode",
                                   registry=r)
        self.scopes_paused = Gauge("paycore_provider_scopes_paused",
                                   "Provider scopes paused by a 429 right now", registry=r)
        self.settlement_exceptions_open = Gauge(
            "paycore_settlement_exceptions_open", "Settlement exceptions whose escalation is open",
            ["provider_account", "kind"], registry=r)
        self.settlement_last_batch_age = Gauge(
            "paycore_settlement_last_batch_age_seconds",
            "Seconds since the end of the newest settlement batch's date, per account", ["provider_account"],
            registry=r)
        self.settlement_unbalanced = Gauge(
            "paycore_settlement_batches_unbalanced",
            "Settlement batches whose lines do not add up to the provider's totals", ["provider_account"],
            registry=r)
        self.ambiguous_boundaries = Counter("paycore_recovery_ambiguous_send_boundaries",
                                            "Send intents found without a result", registry=r)

    async def refresh(self, pool: asyncpg.Pool, now: datetime) -> None:
        rows = await RECOVERY_GAUGES.open_by_state.fetch(pool)
        oldest_open = 0.0
        self.oldest_unknown.set(0)
        for state in LIVE_STATES:
            self.open_attempts.labels(state.value).set(0)
        for row in rows:
            age = (now - row["oldest"]).total_seconds()
            self.open_attempts.labels(row["state"]).set(row["n"])
            oldest_open = max(oldest_open, age)
            if row["state"] == AttemptState.UNKNOWN:
                self.oldest_unknown.set(age)
        self.oldest_open.set(oldest_open)
        await self._refresh_escalations(pool, now)
        self.past_deadline.set(await RECOVERY_GAUGES.past_escalation_deadline.fetchval(pool, now=now))
        self.scopes_paused.set(await RECOVERY_GAUGES.paused_scopes.fetchval(pool, now=now))
        await self._refresh_settlements(pool, now)

    async def _refresh_escalations(self, pool: asyncpg.Pool, now: datetime) -> None:
        rows = await RECOVERY_GAUGES.open_escalations.fetch(pool)
        oldest: datetime | None = await RECOVERY_GAUGES.oldest_unacknowledged.fetchval(pool)
        # No await between clear and set: a scrape never sees the gauge half filled.
        self.escalations_open.clear()
        for row in rows:
            acknowledged = "true" if row["acknowledged"] else "false"
            self.escalations_open.labels(row["reason"], acknowledged).set(row["n"])
        self.oldest_unacknowledged.set(0 if oldest is None else max(0.0, (now - oldest).total_seconds()))

    async def _refresh_settlements(self, pool: asyncpg.Pool, now: datetime) -> None:
        """Open exceptions by account and kind; per account, how long since its newest batch's day
        ended (an account with no batch yet has no series) and its unbalanced batches."""
        exceptions = await RECOVERY_GAUGES.settlement_exceptions_open.fetch(pool)
        batches = await RECOVERY_GAUGES.settlement_newest_batches.fetch(pool)
        self.settlement_exceptions_open.clear()
        self.settlement_last_batch_age.clear()
        self.settlement_unbalanced.clear()
        for row in exceptions:
            self.settlement_exceptions_open.labels(row["provider_account"], row["kind"]).set(row["n"])
        for row in batches:
            covered = datetime.combine(row["covered_until"], time(), tzinfo=UTC)
            age = (now - covered).total_seconds()
            self.settlement_last_batch_age.labels(row["provider_account"]).set(age)
            self.settlement_unbalanced.labels(row["provider_account"]).set(row["unbalanced"])
