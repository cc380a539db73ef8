"""``paycore run recovery``: the worker process (any number may run against one database)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable

from paycore.accounts import register_provider_accounts
from paycore.clock import SystemClock
from paycore.config import ConfigError, load_settings
from paycore.db import create_pool
from paycore.http.health_server import serve_health
from paycore.liveness import Liveness
from paycore.providers.registry import for_accounts
from paycore_recovery.loop import RecoveryWorker, liveness_bound_s
from paycore_recovery.metrics import RecoveryMetrics
from paycore_recovery.settings import load_recovery_settings
from paycore_recovery.settlement_task import SettlementTask, readable_sources

log = logging.getLogger("paycore.recovery")


async def run(*, metrics_host: str = "127.0.0.1", metrics_port: int | None = None,
              owner: str | None = None, monotonic: Callable[[], float] = time.monotonic) -> int:
    """Run until SIGTERM/Ctrl-C; with ``metrics_port``, serve ``/healthz`` and ``/metrics``.

    ``monotonic`` times the loop's liveness (a test passes a fake one).
    """
    settings = load_settings()
    if settings.database_url is None:
        raise ConfigError("PAYCORE_DATABASE_URL", "is required")
    recovery = load_recovery_settings(settings)
    clock = SystemClock()
    metrics = RecoveryMetrics()
    pool = await create_pool(settings.database_url, max_size=recovery.concurrency + 4, session_free=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await register_provider_accounts(pool, settings.accounts, clock.now())
        client = for_accounts(settings.accounts, clock,
                              max_call_duration_s=settings.budgets.max_call_duration_s)
        try:
            liveness = Liveness("recovery", liveness_bound_s(recovery), monotonic=monotonic)
            worker = RecoveryWorker(pool=pool, client=client, clock=clock, settings=settings,
                                    recovery=recovery, metrics=metrics, owner=owner, liveness=liveness)
            settlements = SettlementTask(pool=pool, clock=clock, settings=settings, recovery=recovery,
                                         sources=readable_sources(settings), owner=worker.owner)
            async with serve_health(metrics.registry, [liveness], metrics_host, metrics_port,
                                    worker="recovery"), asyncio.TaskGroup() as tasks:
                if recovery.settlement_run_at is not None:
                    tasks.create_task(settlements.run_forever(stop))
                await worker.run_forever(stop)
        finally:
            await client.aclose()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
        await pool.close()
    return 0
