"""The settlement gauges of the recovery worker's metrics, on rows written as reconciliation writes
them: open exceptions by account and kind, the age of each account's newest batch, unbalanced batches."""

from __future__ import annotations

from datetime import timedelta

import asyncpg

from paycore import escalations
from paycore.clock import FakeClock
from tests.console.settlement_rows import batch, exception
from tests.matrix.helpers import seed_account
from tests.observability.test_recovery_gauges import refreshed, value


async def test_open_exceptions_newest_batch_age_and_unbalanced_batches(
    pool: asyncpg.Pool, clock: FakeClock,
) -> None:
    account = (await seed_account(pool, clock)).provider_account
    registry = await refreshed(pool, clock)
    assert value(registry, "paycore_settlement_last_batch_age_seconds", provider_account=account) is None
    now = clock.now()  # 12:00 UTC
    yesterday = now.date() - timedelta(days=1)
    await batch(pool, account, "stl_old", yesterday - timedelta(days=3), now, state="unbalanced")
    newest = await batch(pool, account, "stl_new", yesterday, now)
    await exception(pool, account, "unknown-payment", now, batch_id=newest, line_no=1)
    _, resolved = await exception(pool, account, "unknown-payment", now, batch_id=newest, line_no=2)
    await exception(pool, account, "missing-payment", now)
    await escalations.resolve(pool, resolved, operator="ops", reason="explained", now=now)

    registry = await refreshed(pool, clock)
    gauge = "paycore_settlement_exceptions_open"
    assert value(registry, gauge, provider_account=account, kind="unknown-payment") == 1
    assert value(registry, gauge, provider_account=account, kind="missing-payment") == 1
    # Yesterday's batch covers up to today's midnight: 12 hours ago.
    assert value(registry, "paycore_settlement_last_batch_age_seconds", provider_account=account) == 12 * 3600
    assert value(registry, "paycore_settlement_batches_unbalanced", provider_account=account) == 1

    clock.advance(24 * 3600)
    registry = await refreshed(pool, clock)
    assert value(registry, "paycore_settlement_last_batch_age_seconds", provider_account=account) == 36 * 3600
