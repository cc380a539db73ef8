"""The provider's faults during a run (CONTRACT; to implement)."""

from __future__ import annotations

from paycore.runtime.chaos.model import ChaosOptions, Endpoints, RunRecord


async def install(endpoints: Endpoints, options: ChaosOptions, record: RunRecord) -> None:
    raise NotImplementedError


async def clear(endpoints: Endpoints, record: RunRecord) -> None:
    raise NotImplementedError
