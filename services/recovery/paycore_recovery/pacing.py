"""Client-side pacing of lookups, so a sweep stays inside the provider's rate limit.

This is throughput shaping on real time (the provider's limit is in real
seconds), not coordination: correctness never depends on it. A 429 still
pauses the whole scope through the database (see ``paycore.rate_limits.pause``).
"""

from __future__ import annotations

import asyncio
import time


class Pacer:
    """At most ``rate`` starts per second, spread evenly."""

    def __init__(self, rate_per_s: float) -> None:
        self._spacing = 1.0 / rate_per_s
        self._next = 0.0
        self._lock = asyncio.Lock()

    async def wait(self) -> None:
        async with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + self._spacing
        if start > now:
            await asyncio.sleep(start - now)
