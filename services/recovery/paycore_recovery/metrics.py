"""Recovery metrics, exposed on the worker's metrics port.

"Open attempts older than N minutes" is the alert the references recommend:
``paycore_recovery_oldest_unknown_age_seconds`` and the per-state gauge feed it.
"""

from __future__ import annotations

from datetime import datetime

import asyncpg
from prometheus_client import CollectorRegistry, Counter, Gauge

OPEN_BY_STATE = """
SELECT state, count(*) AS n, min(created_at) AS oldest
FROM payment_attempts
WHERE state IN ('NotStarted', 'Started', 'Unknown')
GROUP BY state
"""


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
        self.resends = Counter("paycore_recovery_resends", "Same-key resends sent", registry=r)
        self.resolved = Counter("paycore_recovery_resolved", "Attempts resolved by recovery", ["state"],
                                registry=r)
        self.escalations = Counter("paycore_recovery_escalations", "Episodes opened by reason", ["reason"],
                                   registry=r)
        self.pauses = Counter("paycore_recovery_rate_limit_pauses", "429 pauses by scope", ["scope"],
                              registry=r)
        self.closed_never_sent = Counter("paycore_recovery_closed_never_sent",
                                         "Stale NotStarted attempts closed", registry=r)
        self.failures = Counter("paycore_recovery_pass_failures", "Passes that raised (see logs)", registry=r)
        self.ambiguous_boundaries = Counter("paycore_recovery_ambiguous_send_boundaries",
                                            "Send intents found without a result", registry=r)

    async def refresh(self, pool: asyncpg.Pool, now: datetime) -> None:
        rows = await pool.fetch(OPEN_BY_STATE)
        oldest_open = 0.0
        self.oldest_unknown.set(0)
        for state in ("NotStarted", "Started", "Unknown"):
            self.open_attempts.labels(state).set(0)
        for row in rows:
            age = (now - row["oldest"]).total_seconds()
            self.open_attempts.labels(row["state"]).set(row["n"])
            oldest_open = max(oldest_open, age)
            if row["state"] == "Unknown":
                self.oldest_unknown.set(age)
        self.oldest_open.set(oldest_open)
