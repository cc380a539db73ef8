"""Storefront clients (CONTRACT; to implement)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from paycore.runtime.chaos.model import ChaosOptions, Endpoints, RunRecord


@dataclass
class Progress:
    """How far the load is: orders done out of ``total``; ``finished`` once the load ends."""

    total: int
    done: int = 0
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0

    async def advance(self) -> None:
        async with self._changed:
            self.done += 1
            self._changed.notify_all()

    async def reached(self, fraction: float) -> bool:
        """Wait until ``fraction`` of the orders are done; ``False`` if the load ended first."""
        async with self._changed:
            while self.fraction < fraction and not self.finished.is_set():
                waiter = asyncio.ensure_future(self._changed.wait())
                finished = asyncio.ensure_future(self.finished.wait())
                try:
                    self._changed.release()
                    try:
                        await asyncio.wait({waiter, finished}, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        await self._changed.acquire()
                finally:
                    for task in (waiter, finished):
                        task.cancel()
            return self.fraction >= fraction


async def run(endpoints: Endpoints, options: ChaosOptions, record: RunRecord, progress: Progress) -> None:
    raise NotImplementedError
