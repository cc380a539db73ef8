"""The consumer inbox is kept as long as a record can come again, and no longer.

An inbox row is what makes a redelivered record a no-op. A record can be redelivered while
it is still in its topic, so the horizon must be above the topics' retention (the settings
refuse one that is not), and the dispatcher's hourly retention deletes what is older.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

import asyncpg
import pytest

from harness.servers import free_port
from paycore import consumer
from paycore.clock import FakeClock
from paycore.config import ConfigError, load_settings
from paycore.kafka import KafkaSettings
from paycore_dispatcher.settings import load_dispatcher_settings
from paycore_dispatcher.worker import run_dispatcher
from tests.support.stack import checkout_settings

NOWHERE = "http://127.0.0.1:1"
INBOX = """
INSERT INTO consumer_inbox (consumer_group, dedup_key, topic, kafka_partition, kafka_offset, processed_at)
VALUES ($1, $2, 'payments.effects', 0, $3, $4)
"""
ACCOUNT = {"PAYCORE_CARDCO_BASE_URL": NOWHERE, "PAYCORE_CARDCO_ACCOUNT": "acct_store",
           "PAYCORE_CARDCO_API_KEY": "sk_test_acct_store_local"}


async def seed(pool: asyncpg.Pool, clock: FakeClock, *, old: int, recent: int) -> None:
    for n in range(old):
        # past the 40-day default horizon
        await pool.execute(INBOX, "fulfillment", f"old-{n}", n, clock.now() - timedelta(days=50))
    for n in range(recent):
        await pool.execute(INBOX, "email", f"recent-{n}", n, clock.now() - timedelta(days=2))


async def keys(pool: asyncpg.Pool) -> set[str]:
    return {r["dedup_key"] for r in await pool.fetch("SELECT dedup_key FROM consumer_inbox")}


async def test_rows_past_the_horizon_go_in_batches_and_recent_ones_stay(pool: asyncpg.Pool,
                                                                        clock: FakeClock) -> None:
    await seed(pool, clock, old=5, recent=3)

    deleted = await consumer.purge_inbox(pool, now=clock.now(), older_than=timedelta(days=14), batch_size=2)

    assert deleted == 5
    assert await keys(pool) == {"recent-0", "recent-1", "recent-2"}


async def test_a_row_held_by_a_consumer_in_flight_is_left_for_the_next_run(pool: asyncpg.Pool,
                                                                           clock: FakeClock) -> None:
    await seed(pool, clock, old=2, recent=0)
    async with pool.acquire() as holder, holder.transaction():
        await holder.execute("SELECT 1 FROM consumer_inbox WHERE dedup_key = 'old-0' FOR UPDATE")
        assert await consumer.purge_inbox(pool, now=clock.now(), older_than=timedelta(days=14)) == 1
    assert await keys(pool) == {"old-0"}
    assert await consumer.purge_inbox(pool, now=clock.now(), older_than=timedelta(days=14)) == 1
    assert await keys(pool) == set()


def test_a_horizon_not_above_the_topics_retention_is_refused() -> None:
    app = load_settings(ACCOUNT)
    assert load_dispatcher_settings(app, ACCOUNT).consumer_inbox_retention_s > app.kafka_retention_s
    # The outbox's horizon is a week too, so only the inbox's horizon breaks the chain.
    week = {**ACCOUNT, "PAYCORE_OUTBOX_RETENTION_S": "604800", "PAYCORE_KAFKA_RETENTION_S": "604800",
            "PAYCORE_CONSUMER_INBOX_RETENTION_S": "604800"}
    with pytest.raises(ConfigError, match="PAYCORE_CONSUMER_INBOX_RETENTION_S"):
        load_dispatcher_settings(load_settings(week), week)


def test_the_topics_keep_their_records_at_least_as_long_as_the_outbox_remembers_them() -> None:
    """outbox horizon <= topics' retention < inbox retention: the defaults keep the chain, and a
    retention below the outbox's horizon is refused (a consumer that fell behind by less than the
    horizon would find effects the outbox holds as dispatched already gone from Kafka)."""
    def horizons(env: dict[str, str]) -> tuple[float, float, float]:
        app = load_settings(env)
        dispatcher = load_dispatcher_settings(app, env)
        return dispatcher.outbox_retention_s, app.kafka_retention_s, dispatcher.consumer_inbox_retention_s

    outbox, topics, inbox = horizons(ACCOUNT)
    assert outbox <= topics < inbox
    assert (outbox, topics, inbox) == (30 * 86_400, 35 * 86_400, 40 * 86_400)
    with pytest.raises(ConfigError, match=r"PAYCORE_KAFKA_RETENTION_S.*below PAYCORE_OUTBOX_RETENTION_S"):
        horizons({**ACCOUNT, "PAYCORE_KAFKA_RETENTION_S": str(7 * 86_400),
                  "PAYCORE_CONSUMER_INBOX_RETENTION_S": str(14 * 86_400)})
    outbox, topics, _ = horizons({**ACCOUNT, "PAYCORE_KAFKA_RETENTION_S": str(30 * 86_400)})
    assert topics == outbox
    _, topics, _ = horizons({**ACCOUNT, "PAYCORE_OUTBOX_RETENTION_S": str(7 * 86_400),
                             "PAYCORE_KAFKA_RETENTION_S": str(7 * 86_400),
                             "PAYCORE_CONSUMER_INBOX_RETENTION_S": str(14 * 86_400)})
    assert topics == 7 * 86_400


async def test_the_dispatchers_retention_pass_purges_the_inbox(pool: asyncpg.Pool, db_dsn: str,
                                                               clock: FakeClock, ks: KafkaSettings) -> None:
    await seed(pool, clock, old=3, recent=1)
    stop = asyncio.Event()
    task = asyncio.create_task(run_dispatcher(checkout_settings(NOWHERE, db_dsn), ks, stop, clock=clock,
                                              pool=pool, metrics_port=free_port(), retention_every_s=0.05))
    try:
        async with asyncio.timeout(30):
            while await keys(pool) != {"recent-0"}:  # noqa: ASYNC110 -- polls the table the pass writes
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(task, 20)
