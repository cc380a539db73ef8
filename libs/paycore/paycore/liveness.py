"""Liveness of a worker's main loop: the loop beats, ``/healthz`` asks whether it still does.

Liveness is not readiness. It answers one question for an orchestrator: is this
process's loop still going round, or is it wedged and worth a restart? A loop
that keeps failing -- the database refuses connections, a send is rejected --
still goes round, logs, and beats; restarting it would not help, so it stays
live. Only a loop that stops coming back (a call that never returns, a deadlock)
goes stale.

Each worker derives its bound from its own settings: the longest a healthy loop
may go between two beats, plus ``SLACK_S``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# Room for what sits between two beats with no deadline of its own: a few
# database statements, one consumer handler call, event-loop scheduling.
SLACK_S = 30.0


class Liveness:
    """One loop's heartbeat. ``beat()`` on every pass; stale once ``bound_s`` passes without one."""

    def __init__(self, name: str, bound_s: float, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        if bound_s <= 0:
            raise ValueError("bound_s must be positive")
        self.name = name
        self.bound_s = bound_s
        self._monotonic = monotonic
        self._last = monotonic()  # starting counts as a beat: start-up gets one bound

    def beat(self) -> None:
        self._last = self._monotonic()

    def age_s(self) -> float:
        """Seconds since the last beat."""
        return self._monotonic() - self._last

    def alive(self) -> bool:
        return self.age_s() <= self.bound_s


def beat(liveness: Liveness | None) -> None:
    """Beat ``liveness`` if the loop has one (loops run without a health server too)."""
    if liveness is not None:
        liveness.beat()
