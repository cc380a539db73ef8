"""Recovery metrics, exposed on the worker's metrics port.

"Open attempts older than N minutes" is the alert the references recommend:
``paycore_recovery_oldest_unknown_age_seconds`` and the per-state gauge feed it.

The gauges are read from the database on each refresh, so every recovery
instance reports the same values: aggregate them with ``max()``, never ``sum()``.
The counters count what this instance did: ``sum()`` them.
"""

from __future__ import annotations

from datetime import datetime

import asyncpg
from prometheus_client import CollectorRegistry, Counter, Gauge

from paycore.domain import LIVE_STATE_PREDICATE, LIVE_STATES, AttemptState

OPEN_BY_STATE = """
SELECT state, count(*) AS n, min(created_at) AS oldest
FROM payment_attempts
WHERE """ + LIVE_STATE_PREDICATE + """
GROUP BY state
"""


# Open episodes by reason (its prefix before ':', a bounded set) and whether a person acknowledged them.
OPEN_ESCALATIONS = """
SELECT split_part(reason, ':', 1) AS reason, acknowledged_at IS NOT NULL AS acknowledged, count(*) AS n
FROM payment_escalations
WHERE resolved_at IS NULL
GROUP BY 1, 2
"""

OLDEST_UNACKNOWLEDGED = """
SELECT min(raised_at) FROM payment_escalations WHERE resolved_at IS NULL AND acknowledged_at IS NULL
"""

# Unknown attempts whose escalation deadline has passed while no episode is open
# for them: recovery should have escalated them and has not -- it is behind.
PAST_ESCALATION_DEADLINE = """
SELECT count(*)
FROM payment_attempts a
WHERE a.state = 'Unknown' AND a.escalation_deadline <= $1
  AND NOT EXISTS (SELECT 1 FROM payment_escalations e
                  WHERE e.attempt_id = a.attempt_id AND e.resolved_at IS NULL)
"""

# Provider scopes a 429 paused (paycore.rate_limits) that are still paused at $1.
PAUSED_SCOPES = """
SELECT count(*) FROM provider_rate_limit_pauses WHERE paused_until > $1
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
        self.ambiguous_boundaries = Counter("paycore_recovery_ambiguous_send_boundaries",
                                            "Send intents found without a result", registry=r)

    async def refresh(self, pool: asyncpg.Pool, now: datetime) -> None:
        rows = await pool.fetch(OPEN_BY_STATE)
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
        self.past_deadline.set(await pool.fetchval(PAST_ESCALATION_DEADLINE, now))
        self.scopes_paused.set(await pool.fetchval(PAUSED_SCOPES, now))

    async def _refresh_escalations(self, pool: asyncpg.Pool, now: datetime) -> None:
        rows = await pool.fetch(OPEN_ESCALATIONS)
        oldest: datetime | None = await pool.fetchval(OLDEST_UNACKNOWLEDGED)
        # No await between clear and set: a scrape never sees the gauge half filled.
        self.escalations_open.clear()
        for row in rows:
            acknowledged = "true" if row["acknowledged"] else "false"
            self.escalations_open.labels(row["reason"], acknowledged).set(row["n"])
        self.oldest_unacknowledged.set(0 if oldest is None else max(0.0, (now - oldest).total_seconds()))
