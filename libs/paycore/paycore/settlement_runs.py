"""The daily settlement runs: one per account and day, whichever recovery instance claims it.

Recovery's settlement task claims the day's run of each account before reconciling it, so
that several instances reconcile each account once; a run whose instance died mid-way is taken
over once its lease expires (reconciling is idempotent, so the second run records only what
the first did not).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any

import asyncpg

from paycore import queries

RUNS = queries.load("settlement_runs")


async def claim(pool: asyncpg.Pool, *, run_date: date, provider_account: str, owner: str, now: datetime,
                lease: timedelta) -> bool:
    """Take the account's run of ``run_date``; False when it is finished or another has it."""
    row = await RUNS.claim.fetchrow(pool, run_date=run_date, provider_account=provider_account, owner=owner,
                                    now=now, lease_expires_at=now + lease)
    return row is not None


async def finish(pool: asyncpg.Pool, *, run_date: date, provider_account: str, owner: str, now: datetime,
                 result: dict[str, Any]) -> bool:
    """Mark the run done with what it found; False when this instance no longer owns it."""
    status = await RUNS.finish.execute(pool, run_date=run_date, provider_account=provider_account,
                                       owner=owner, now=now, result=result)
    return status.endswith(" 1")


async def last_finished(pool: asyncpg.Pool) -> dict[str, datetime]:
    """When each account's daily run last finished."""
    return {r["provider_account"]: r["finished_at"] for r in await RUNS.last_finished.fetch(pool)}
