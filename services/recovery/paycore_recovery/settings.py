"""Recovery timings: policy, not physics. ``PAYCORE_RECOVERY_*``, declared here, validated at start-up.

Each setting is declared once, as a field of :class:`RecoverySettings`
(docs/decisions/0010-settings-declared-once.md); :func:`load_recovery_settings` reads them all.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import time

from paycore.config import ConfigError, Settings
from paycore.settings_spec import Choice, Count, Group, Invalid, Items, Number, load, setting_of

# Recovery's durations have no upper bound of their own: a day-long cadence is policy.
SECONDS = Number("seconds", maximum=None)

RECOVERY = Group("`paycore run recovery`: the recovery loop and its reminders job")
SETTLEMENT = Group("`paycore run recovery`: the daily settlement reconciliation (docs/settlement.md)")


class TimeOfDayOrOff:
    """``HH:MM`` in UTC, or ``off``."""

    _HH_MM = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])")

    def parse(self, raw: str) -> str:
        if raw.strip().lower() == "off":
            return "off"
        if self._HH_MM.fullmatch(raw.strip()) is None:
            raise Invalid(f"must be a UTC time of day as HH:MM (e.g. 06:00) or off, got {raw!r}")
        return raw.strip()

    def accepts(self) -> str:
        return "HH:MM (UTC) or off"


def _time_or_none(value: str) -> time | None:
    return None if value == "off" else time.fromisoformat(value)


@dataclass(frozen=True, kw_only=True)
class RecoverySettings:
    backoff_s: tuple[float, ...] = RECOVERY.field(
        "PAYCORE_RECOVERY_BACKOFF_S", Items(SECONDS), (60.0, 120.0, 300.0, 900.0),
        "delays after the 1st, 2nd, … lookup (1, 2, 5, 15 minutes)")
    slow_cadence_s: float = RECOVERY.field(
        "PAYCORE_RECOVERY_SLOW_CADENCE_S", SECONDS, 3600.0,
        "read-only cadence after the backoff, and for escalated attempts")
    lease_s: float = RECOVERY.field(
        "PAYCORE_RECOVERY_LEASE_S", SECONDS, 90.0,
        "an attempt's lease; must exceed one worst-case pass (2 × call + record budgets)")
    interval_s: float = RECOVERY.field(
        "PAYCORE_RECOVERY_INTERVAL_S", SECONDS, 5.0, "how often an instance looks for due work")
    batch: int = RECOVERY.field("PAYCORE_RECOVERY_BATCH", Count(), 200, "attempts claimed per sweep")
    concurrency: int = RECOVERY.field(
        "PAYCORE_RECOVERY_CONCURRENCY", Count(), 8, "lanes of one sweep, working in parallel")
    action_poll_s: float = RECOVERY.field(
        "PAYCORE_RECOVERY_ACTION_POLL_S", SECONDS, 300.0, "status checks while a customer action is pending")
    # A miss by an eventually consistent reference lookup this soon after a send ended may be
    # indexing lag (Stripe: usually under a minute, longer during incidents): it proves nothing.
    search_lag_s: float = RECOVERY.field(
        "PAYCORE_RECOVERY_SEARCH_LAG_S", SECONDS, 300.0,
        "how long after a send ends a miss by an eventually consistent reference lookup "
        "(Stripe's Search) proves nothing")
    payment_token_ttl_s: float = RECOVERY.field(
        "PAYCORE_PAYMENT_TOKEN_TTL_S", SECONDS, 86_400.0,
        "a stored payment-method token older than this is not resent")
    succeeded_after_cancel: str = RECOVERY.field(
        "PAYCORE_SUCCEEDED_AFTER_CANCEL", Choice(("refund", "escalate"), case="lower"), "refund",
        "a payment charged after its order was cancelled: `refund` it automatically (its "
        "succeeded-after-cancel episode stays for a person to see) or only `escalate` "
        "(docs/decisions/0008-succeeded-after-cancel.md)")
    hold_lapse_warning_s: float = RECOVERY.field(
        "PAYCORE_HOLD_LAPSE_WARNING_S", SECONDS, 86_400.0,
        "a payment held for manual capture: how long before its hold lapses a person is asked to "
        "capture or void it (`authorization-lapsing`)")
    settlement_run_at: time | None = SETTLEMENT.field(  # None: no daily run
        "PAYCORE_SETTLEMENT_RUN_AT", TimeOfDayOrOff(), "06:00",
        "when each day (UTC) recovery reconciles every account's settlement batches; `off`: only "
        "`paycore reconcile settlements` does", convert=_time_or_none)
    settlement_lookback_days: int = SETTLEMENT.field(
        "PAYCORE_SETTLEMENT_LOOKBACK_DAYS", Count(maximum=366), 7,
        "the daily run reads the batches of this many days before today (a batch still open on one day "
        "is read again, closed, on a later one)")
    settlement_run_lease_s: float = SETTLEMENT.field(
        "PAYCORE_SETTLEMENT_RUN_LEASE_S", SECONDS, 3600.0,
        "an account's daily run is another instance's to take over after this long without finishing "
        "(its instance died, or the provider could not be read)")
    # Reminder intervals are the library's (paycore.config.Settings): every service
    # that raises an escalation schedules its first reminder from the same setting.

    def backoff(self, step: int) -> float:
        """The delay after ``step`` earlier lookups: 1, 2, 5, 15 minutes, then the slow cadence."""
        return self.backoff_s[step] if step < len(self.backoff_s) else self.slow_cadence_s

    def validate(self, app: Settings) -> RecoverySettings:
        # The lease must outlive a lookup, a send and recording its result.
        worst_pass = 2 * app.budgets.call_s + app.budgets.record_s
        if self.lease_s <= worst_pass:
            raise ConfigError(setting_of(RecoverySettings, "lease_s").name,
                              f"must be longer than one worst-case pass ({worst_pass:.0f} s)")
        return self


def load_recovery_settings(app: Settings, env: Mapping[str, str] | None = None) -> RecoverySettings:
    return load(RecoverySettings, os.environ if env is None else env).validate(app)
