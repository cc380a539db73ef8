"""Every loop that must outlive a database outage survives what asyncpg raises after a crash.

After the postmaster's ``kill -9`` in ``make chaos``, asyncpg raised ``InternalClientError``
("cannot switch to state 12; another operation is in progress") from a connection the
crash left unusable; the recovery loop did not catch it and a worker exited
(docs/chaos.md, "Regressions it found"). A crash cannot be timed to land inside one
call, so each loop's first round raises that error; the rounds after it run for real
on a real database, and the loop must still be there to run them.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg
import pytest

from paycore.clock import FakeClock
from paycore.db import run_every
from paycore.kafka import KafkaSettings
from paycore.providers.cardco import CardcoClient
from paycore_dispatcher.relay import Record, Relay
from paycore_recovery.loop import RecoveryWorker
from paycore_recovery.metrics import RecoveryMetrics
from paycore_recovery.settings import RecoverySettings
from tests.dispatcher.support import config_for
from tests.support.stack import checkout_settings

WITHIN_S = 20.0  # a loop that exited fails at once; this bounds one that hangs


def left_unusable_by_a_crash() -> asyncpg.InternalClientError:
    return asyncpg.InternalClientError("cannot switch to state 12; another operation (2) is in progress")


class CrashThenRun:
    """One round of a loop: the first call raises the crash's error, the second runs the
    real round and then asks the loop to stop."""

    def __init__(self, real: Callable[[], Awaitable[Any]], stop: asyncio.Event) -> None:
        self.real = real
        self.stop = stop
        self.calls = 0
        self.real_rounds: list[Any] = []

    async def __call__(self) -> Any:
        self.calls += 1
        if self.calls == 1:
            raise left_unusable_by_a_crash()
        try:
            result = await self.real()
            self.real_rounds.append(result)
            return result
        finally:
            self.stop.set()


class NoBroker:
    """The relay's publisher; nothing is due, so nothing may be published."""

    async def publish(self, records: Sequence[Record], acks: list[asyncio.Future[Any]]) -> None:
        raise AssertionError(f"nothing is due, yet {len(records)} records were published")


async def test_a_periodic_job_outlives_a_connection_a_crash_left_unusable(pool: asyncpg.Pool) -> None:
    """``paycore.db.run_every``: checkout's Idempotency-Key sweep, the dispatcher's retention
    and metrics refresh."""
    stop = asyncio.Event()
    step = CrashThenRun(lambda: pool.fetchval("SELECT count(*) FROM payment_attempts"), stop)
    async with asyncio.timeout(WITHIN_S):
        await run_every(0, stop, "test job", step)
    assert step.real_rounds == [0]


async def test_the_recovery_worker_outlives_a_connection_a_crash_left_unusable(
    pool: asyncpg.Pool, db_dsn: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = checkout_settings("http://127.0.0.1:9", db_dsn)  # nothing is due: no call is made
    clock = FakeClock()
    client = CardcoClient(settings.accounts, clock, max_call_duration_s=settings.budgets.max_call_duration_s)
    worker = RecoveryWorker(pool=pool, client=client, clock=clock, settings=settings,
                            recovery=dataclasses.replace(RecoverySettings(), interval_s=0),
                            metrics=RecoveryMetrics(), owner="w1")
    stop = asyncio.Event()
    sweep = CrashThenRun(worker.run_pass, stop)
    monkeypatch.setattr(worker, "run_pass", sweep)
    try:
        async with asyncio.timeout(WITHIN_S):
            await worker.run_forever(stop)
    finally:
        await client.aclose()
    assert sweep.real_rounds == [[]]  # the second sweep ran, and found nothing due


async def test_the_outbox_relay_outlives_a_connection_a_crash_left_unusable(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch,
) -> None:
    relay = Relay(pool, NoBroker(), FakeClock(), config_for(KafkaSettings(bootstrap="127.0.0.1:9")))
    stop = asyncio.Event()
    one_pass = CrashThenRun(relay.run_once, stop)
    monkeypatch.setattr(relay, "run_once", one_pass)
    async with asyncio.timeout(WITHIN_S):
        await relay.run(stop, idle_poll_s=0)
    assert [result.claimed for result in one_pass.real_rounds] == [0]
