"""The one clock.

Every deadline, lease, schedule and budget is computed from a :class:`Clock` and
passed into SQL as a parameter (``:now``), never mixed with the database's
``now()``. Tests use :class:`FakeClock`, which moves every deadline together and
fires budgets when it is advanced.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """What every component reads time from."""

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...

    def budget(self, seconds: float) -> contextlib.AbstractAsyncContextManager[object]:
        """Cancel the enclosed block after ``seconds`` on this clock, raising ``TimeoutError``."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` on this clock."""
        ...


class SystemClock:
    """Wall-clock UTC time; budgets are ``asyncio.timeout``."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def budget(self, seconds: float) -> contextlib.AbstractAsyncContextManager[object]:
        return asyncio.timeout(seconds)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


@dataclass(eq=False)
class _Timer:
    deadline: datetime
    fire: asyncio.Timeout | asyncio.Future[None]


@dataclass
class FakeClock:
    """A clock that moves only when a test calls :meth:`advance`.

    Budgets opened on it expire when the clock is advanced past their deadline,
    so a test can fire the start, call and record budgets, and the client's
    maximum call duration, without waiting.
    """

    current: datetime = field(default_factory=lambda: datetime(2026, 11, 29, 12, 0, tzinfo=UTC))
    _timers: list[_Timer] = field(default_factory=list)

    def now(self) -> datetime:
        return self.current

    @contextlib.asynccontextmanager
    async def budget(self, seconds: float) -> AsyncIterator[None]:
        async with asyncio.timeout(None) as timeout:
            timer = _Timer(self.current + timedelta(seconds=seconds), timeout)
            self._timers.append(timer)
            try:
                if seconds <= 0:
                    timeout.reschedule(asyncio.get_running_loop().time())
                yield
            finally:
                if timer in self._timers:
                    self._timers.remove(timer)

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer = _Timer(self.current + timedelta(seconds=seconds), future)
        self._timers.append(timer)
        try:
            await future
        finally:
            if timer in self._timers:
                self._timers.remove(timer)

    def advance(self, seconds: float) -> None:
        """Move time forward and fire every budget and sleep that is now due."""
        self.current += timedelta(seconds=seconds)
        for timer in [t for t in self._timers if t.deadline <= self.current]:
            if isinstance(timer.fire, asyncio.Timeout):
                timer.fire.reschedule(asyncio.get_running_loop().time())
            elif not timer.fire.done():
                timer.fire.set_result(None)
            self._timers.remove(timer)

    @property
    def pending_timers(self) -> int:
        """How many budgets and sleeps are waiting on this clock (tests poll this)."""
        return len(self._timers)
