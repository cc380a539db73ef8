"""The sandbox clock: real UTC time plus an offset that ``/_sandbox/clock`` advances.

Key retention, action expiry and every ``created`` timestamp read this clock,
so tests can jump a day ahead without waiting. Rate limiting and fault delays
deliberately use real time: they model wall-clock behaviour of the network.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# A timer may fire a hair early relative to the wall clock; sweeps run from a timer
# add this margin so they always see their change as due.
TIMER_MARGIN_S = 0.05


class SandboxClock:
    def __init__(self, real: Callable[[], float] = time.time) -> None:
        self._real = real
        self._offset = 0.0

    def now(self) -> float:
        """Seconds since the Unix epoch, sandbox time."""
        return self._real() + self._offset

    def unix(self) -> int:
        """Whole seconds, as the wire format's ``created``/``expires_at`` use."""
        return int(self.now())

    @property
    def offset_s(self) -> float:
        return self._offset

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            # Time never runs backwards: retention and expiry assume monotonicity.
            raise ValueError("the sandbox clock only moves forward")
        self._offset += seconds

    def reset(self) -> None:
        self._offset = 0.0
