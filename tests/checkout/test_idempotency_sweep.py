"""Expired ``Idempotency-Key`` records do not pile up: each checkout instance sweeps them.

``claim`` replaces an expired record when its key comes again; a key that never comes again
would stay forever without the sweep (docs/decisions/0005-history-retention.md, the other
tables that grow).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import asyncpg

from harness.servers import serve_asgi
from paycore.clock import FakeClock
from paycore_checkout import inbound_idempotency
from paycore_checkout.app import create_app
from tests.support.stack import checkout_settings

RECORD = """
INSERT INTO idempotency_records (idempotency_key, endpoint, customer_id, request_fingerprint, state,
                                 created_at, expires_at)
VALUES ($1, 'POST /orders', 'cus_alice', repeat('a', 64), 'in_progress', $2, $3)
"""


async def record(pool: asyncpg.Pool, clock: FakeClock, key: str, *, expired: bool) -> None:
    created = clock.now() - timedelta(hours=25 if expired else 1)
    await pool.execute(RECORD, key, created, created + timedelta(hours=24))


async def keys(pool: asyncpg.Pool) -> set[str]:
    return {r["idempotency_key"] for r in await pool.fetch("SELECT idempotency_key FROM idempotency_records")}


async def test_the_sweep_deletes_expired_records_in_batches_and_keeps_live_ones(pool: asyncpg.Pool,
                                                                                clock: FakeClock) -> None:
    for n in range(5):
        await record(pool, clock, f"old-{n}", expired=True)
    await record(pool, clock, "live", expired=False)

    assert await inbound_idempotency.sweep_expired(pool, now=clock.now(), batch_size=2) == 5
    assert await keys(pool) == {"live"}


async def test_a_record_a_request_holds_is_left_for_the_next_sweep(pool: asyncpg.Pool,
                                                                   clock: FakeClock) -> None:
    await record(pool, clock, "held", expired=True)
    await record(pool, clock, "free", expired=True)
    async with pool.acquire() as holder, holder.transaction():
        await holder.execute("SELECT 1 FROM idempotency_records WHERE idempotency_key = 'held' FOR UPDATE")
        assert await inbound_idempotency.sweep_expired(pool, now=clock.now()) == 1
    assert await keys(pool) == {"held"}


async def test_a_running_checkout_sweeps_on_its_own(pool: asyncpg.Pool, db_dsn: str,
                                                     clock: FakeClock) -> None:
    await record(pool, clock, "expired-before-start", expired=True)
    await record(pool, clock, "live", expired=False)
    settings = checkout_settings("http://127.0.0.1:1", db_dsn)
    app = create_app(settings, clock=clock, pool=pool, sweep_every_s=0.05)
    async with serve_asgi(app):
        async with asyncio.timeout(20):
            while await keys(pool) != {"live"}:  # noqa: ASYNC110 -- polls the table the sweep writes
                await asyncio.sleep(0.05)
            await record(pool, clock, "expired-while-running", expired=True)  # and again, not only at start
            while await keys(pool) != {"live"}:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
