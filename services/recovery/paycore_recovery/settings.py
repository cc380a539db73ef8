"""Recovery timings: policy, not physics. ``PAYCORE_RECOVERY_*`` variables, validated at start-up."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from paycore.config import ConfigError, Settings


@dataclass(frozen=True)
class RecoverySettings:
    backoff_s: tuple[float, ...] = (60.0, 120.0, 300.0, 900.0)  # 1, 2, 5, 15 minutes
    slow_cadence_s: float = 3600.0  # read-only cadence after the backoff, and after escalating
    lease_s: float = 90.0  # longer than one worst-case pass
    interval_s: float = 5.0  # how often a worker looks for due attempts
    batch: int = 200
    concurrency: int = 8
    action_poll_s: float = 300.0  # status checks while a customer action is pending
    payment_token_ttl_s: float = 86_400.0  # a stored token older than this is not resent
    # Reminder intervals are the library's (paycore.config.Settings): every service
    # that raises an escalation schedules its first reminder from the same setting.

    def backoff(self, step: int) -> float:
        """The delay after ``step`` earlier lookups: 1, 2, 5, 15 minutes, then the slow cadence."""
        return self.backoff_s[step] if step < len(self.backoff_s) else self.slow_cadence_s

    def validate(self, app: Settings) -> RecoverySettings:
        # The lease must outlive a lookup, a send and recording its result.
        worst_pass = 2 * app.budgets.call_s + app.budgets.record_s
        if self.lease_s <= worst_pass:
            raise ConfigError("PAYCORE_RECOVERY_LEASE_S",
                              f"must be longer than one worst-case pass ({worst_pass:.0f} s)")
        return self


def _number(env: Mapping[str, str], name: str, default: float, *, integer: bool = False) -> float:
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(name, f"must be a number, got {raw!r}") from None
    if not math.isfinite(value) or value <= 0 or (integer and value != int(value)):
        raise ConfigError(name, f"must be a positive {'integer' if integer else 'number'}, got {raw!r}")
    return value


def load_recovery_settings(app: Settings, env: Mapping[str, str] | None = None) -> RecoverySettings:
    env = os.environ if env is None else env
    raw_backoff = (env.get("PAYCORE_RECOVERY_BACKOFF_S") or "").strip()
    backoff = RecoverySettings.backoff_s
    if raw_backoff:
        try:
            backoff = tuple(float(part) for part in raw_backoff.split(","))
        except ValueError:
            raise ConfigError("PAYCORE_RECOVERY_BACKOFF_S", "must be comma-separated seconds") from None
        if not backoff or any(not math.isfinite(b) or b <= 0 for b in backoff):
            raise ConfigError("PAYCORE_RECOVERY_BACKOFF_S", "every step must be positive")
    return RecoverySettings(
        backoff_s=backoff,
        slow_cadence_s=_number(env, "PAYCORE_RECOVERY_SLOW_CADENCE_S", 3600.0),
        lease_s=_number(env, "PAYCORE_RECOVERY_LEASE_S", 90.0),
        interval_s=_number(env, "PAYCORE_RECOVERY_INTERVAL_S", 5.0),
        batch=int(_number(env, "PAYCORE_RECOVERY_BATCH", 200, integer=True)),
        concurrency=int(_number(env, "PAYCORE_RECOVERY_CONCURRENCY", 8, integer=True)),
        action_poll_s=_number(env, "PAYCORE_RECOVERY_ACTION_POLL_S", 300.0),
        payment_token_ttl_s=_number(env, "PAYCORE_PAYMENT_TOKEN_TTL_S", 86_400.0),
    ).validate(app)
