"""Recovery's settlement task: once a day, every account's settlement batches reconciled.

One task per kind of work, as the rescuers are: this one wakes every sweep interval and, from
``PAYCORE_SETTLEMENT_RUN_AT`` (UTC) on, claims each account's run of the day
(:mod:`paycore.settlement_runs`) and reconciles the batches dated in the last
``PAYCORE_SETTLEMENT_LOOKBACK_DAYS`` days (:func:`paycore.settlements.reconcile_account`). It
runs beside the sweeps, never inside one: a batch of a million lines takes minutes, and the
sweep's liveness must not wait for it. A run the provider could not serve is left unfinished:
another instance (or this one) takes it over when its lease expires.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import asyncpg

from paycore import settlement_runs
from paycore.clock import Clock
from paycore.config import ProviderAccountConfig, Settings
from paycore.errors import MAY_HAVE_COMMITTED
from paycore.settlement_lines import SettlementSource, SettlementSourceError
from paycore.settlements import AccountRun, reconcile_account
from paycore_recovery.settings import RecoverySettings

log = logging.getLogger("paycore.recovery.settlements")

SourceFor = Callable[[ProviderAccountConfig], SettlementSource | None]  # None: cannot be read


class SettlementTask:
    def __init__(self, *, pool: asyncpg.Pool, clock: Clock, settings: Settings,
                 recovery: RecoverySettings, sources: SourceFor, owner: str) -> None:
        self.pool, self.clock, self.settings, self.recovery = pool, clock, settings, recovery
        self.sources, self.owner = sources, owner

    def due(self, now: datetime) -> bool:
        """Whether today's run time (UTC) has come."""
        run_at = self.recovery.settlement_run_at
        return run_at is not None and now.astimezone(UTC).time() >= run_at

    async def run_due(self) -> list[AccountRun]:
        """Reconcile each account whose run of today is due and free; returns the runs made."""
        now = self.clock.now()
        if not self.due(now):
            return []
        today = now.date()
        runs: list[AccountRun] = []
        for account in self.settings.accounts:
            source = self.sources(account)
            if source is None:
                continue  # said once at start-up (paycore_recovery.main)
            lease = timedelta(seconds=self.recovery.settlement_run_lease_s)
            claimed = await settlement_runs.claim(self.pool, run_date=today, owner=self.owner, now=now,
                                                  provider_account=account.provider_account, lease=lease)
            if not claimed:
                continue
            try:
                run = await reconcile_account(
                    self.pool, source, account.provider_account,
                    today - timedelta(days=self.recovery.settlement_lookback_days),
                    today - timedelta(days=1),
                    now=self.clock.now(), grace=self.settings.settlement_grace,
                    reminder_interval=self.settings.reminder_interval)
            except SettlementSourceError as e:
                log.warning("settlement run of %s: the provider's batches could not be listed (%s); "
                            "tried again after the run's lease", account.provider_account, e)
                continue
            await settlement_runs.finish(self.pool, run_date=today, owner=self.owner, now=self.clock.now(),
                                         provider_account=account.provider_account, result=run.as_json())
            runs.append(run)
        return runs

    async def run_forever(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.run_due()
            except MAY_HAVE_COMMITTED:
                log.exception("settlement run failed; trying again after the interval")
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.recovery.interval_s)
            except TimeoutError:
                pass

