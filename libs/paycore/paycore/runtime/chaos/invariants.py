"""Sampling, settling and the money invariants (CONTRACT; to implement)."""

from __future__ import annotations

import asyncio

from paycore.runtime.chaos.model import ChaosOptions, Endpoints, InvariantResult, RunRecord


async def sample_loop(endpoints: Endpoints, record: RunRecord, stop: asyncio.Event) -> None:
    raise NotImplementedError


async def settle(endpoints: Endpoints, options: ChaosOptions, record: RunRecord) -> None:
    raise NotImplementedError


async def check(endpoints: Endpoints, record: RunRecord) -> list[InvariantResult]:
    raise NotImplementedError
