"""Putting attempts where a test needs them, through the same repository checkout uses."""

from __future__ import annotations

import asyncpg

from paycore.attempts import Attempt, get_or_create_live_attempt, try_mark_started
from paycore.clock import Clock
from paycore.config import ProviderAccountConfig
from paycore.providers.cardco import build_request_body


async def recorded_attempt(pool: asyncpg.Pool, clock: Clock, account: ProviderAccountConfig, order_id: str,
                           customer_id: str, method: str = "tok_visa") -> Attempt:
    """The order's NotStarted attempt, as if a checkout had recorded it and then crashed."""
    return await get_or_create_live_attempt(
        pool, order_id=order_id, customer_id=customer_id, account=account,
        build_body=lambda ref, amt, cur: build_request_body(
            amount_minor=amt, currency=cur, payment_method=method, reference=ref),
        now=clock.now(), abandonment_threshold_s=60)


async def started_attempt(pool: asyncpg.Pool, clock: Clock, account: ProviderAccountConfig, order_id: str,
                          customer_id: str, method: str = "tok_visa") -> Attempt:
    """Recorded and moved to Started (its send intent committed), not yet sent."""
    attempt = await recorded_attempt(pool, clock, account, order_id, customer_id, method)
    _, started = await try_mark_started(pool, attempt,
                                        now=clock.now(), next_check_at=clock.now())
    assert started is not None
    return started


async def someone_waits_on_a_lock(pool: asyncpg.Pool) -> bool:
    """Whether any session of this database is waiting on a lock (to sequence races)."""
    waiting = await pool.fetchval(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE wait_event_type = 'Lock' AND datname = current_database()")
    return bool(waiting)
