"""Per-account token buckets for lookups (real time: a rate is wall-clock)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable


class TokenBucket:
    def __init__(self, rate_per_s: float, burst: int,
                 now: Callable[[], float] = time.monotonic) -> None:
        self._rate = rate_per_s
        self._burst = float(burst)
        self._now = now
        self._tokens = float(burst)
        self._stamp = now()

    def take(self) -> int:
        """0 when a token was taken, else whole seconds to wait (Retry-After)."""
        now = self._now()
        self._tokens = min(self._burst, self._tokens + (now - self._stamp) * self._rate)
        self._stamp = now
        if self._tokens >= 1:
            self._tokens -= 1
            return 0
        return max(1, math.ceil((1 - self._tokens) / self._rate))
