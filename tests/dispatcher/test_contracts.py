"""Message contracts at both ends, on real PostgreSQL and the real broker.

The relay never publishes a row that breaks its contract: it dead-letters it at once
(one attempt, whatever the attempt limit) and escalates it like any dead letter, and
the later rows of its attempt wait behind it. The consumer helper treats a record
that breaks its contract as poison: escalated, skipped, never retried -- while a
record with unknown extra fields, or one written before contracts, is handled.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import asyncpg
import orjson

from paycore import contracts, kafka, outbox
from paycore.clock import FakeClock, SystemClock
from paycore.consumer import InboxConsumer
from paycore.kafka import KafkaSettings
from paycore_dispatcher.demo_consumers import demo_consumer

from .support import alerts, effects, kafka_publisher, keys_of, outbox_row, queue_bare, relay

FAST_GROUP = {"session_timeout_ms": 2_000, "heartbeat_interval_ms": 300, "retry_base_s": 0.05,
              "retry_max_s": 0.2}
LEAK = "card 4242424242424242"  # a payload value: it must not reach last_error, logs or escalations


async def until(check: Callable[[], Awaitable[bool]], deadline_s: float = 20.0) -> None:
    async with asyncio.timeout(deadline_s):
        while not await check():  # noqa: ASYNC110 -- the check is the condition
            await asyncio.sleep(0.05)


async def test_the_relay_dead_letters_a_row_that_breaks_its_contract_at_once_and_never_publishes_it(
    pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings
) -> None:
    good, bad, unknown = (f"attempt:{uuid.uuid4()}" for _ in range(3))
    sent = await queue_bare(pool, clock, good, "order-confirmation")
    malformed = await queue_bare(pool, clock, bad, "order-confirmation", amount_minor=LEAK)
    behind = await queue_bare(pool, clock, bad, "refund-request")  # valid, but after the dead letter
    async with pool.acquire() as conn:
        stranger = await outbox.enqueue(conn, dedup_key=f"{unknown}:loyalty-points", kind="loyalty-points",
                                        payload={"points": 3}, now=clock.now(), ordering=unknown)
    async with kafka_publisher(ks) as pub:
        r = relay(pool, pub, clock, ks, max_delivery_attempts=10)
        first = await r.run_once()
        assert (first.published, first.failed, first.dead_lettered) == (1, 2, 2)
        for mid, where in ((malformed, "$.amount_minor: violates type"), (stranger, "no schema for kind")):
            row = await outbox_row(pool, mid)
            assert row["dead_lettered_at"] == clock.now() and row["delivery_attempts"] == 1
            assert row["last_error"].startswith("ContractViolation: ") and where in row["last_error"]
            assert "4242" not in row["last_error"]
        episodes = await pool.fetch("SELECT * FROM payment_escalations ORDER BY escalation_id")
        assert sorted(e["escalation_key"] for e in episodes) == sorted(
            f"outbox:{m}:dead-letter" for m in (malformed, stranger))
        assert all(e["reason"] == "outbox-dead-letter" and "4242" not in str(e["detail"]) for e in episodes)
        clock.advance(3600)
        later = await r.run_once()  # the two alerts go out; the row behind the dead letter waits
        assert later.published_by_kind == {"operator-alert": 2}
        assert (await outbox_row(pool, behind))["dispatched_at"] is None
    got = await effects(ks, 1)  # reads to the log's end: a published malformed row would show up
    assert keys_of(got) == [f"{good}:order-confirmation"]
    assert got[0].headers["schema_version"] == "1" and got[0].payload["schema_version"] == 1
    assert got[0].headers["message_id"] == str(sent)
    assert sorted(m.payload["escalation_key"] for m in await alerts(ks, 2)) == sorted(
        f"outbox:{m}:dead-letter" for m in (malformed, stranger))


async def test_the_consumer_helper_escalates_and_skips_poison_and_handles_compatible_records(
    pool: asyncpg.Pool, ks: KafkaSettings
) -> None:
    key = f"attempt:{uuid.uuid4()}"
    aid = key.removeprefix("attempt:")

    def record(effect: str, **changes: object) -> dict[str, object]:
        return contracts.example(effect, attempt_id=aid, **{"dedup_key": f"{key}:{effect}", **changes})

    missing = record("fulfillment-request")
    del missing["order_id"]
    legacy = record("refund-request")
    del legacy["schema_version"]  # written before contracts: read as v1
    values = [
        missing,  # poison: a required field missing
        record("fulfillment-request", schema_version=2, dedup_key=f"{key}:v2"),  # poison: an unknown version
        record("fulfillment-request", dedup_key=f"{key}:ok", added_later={"x": 1}),  # extra fields are fine
        legacy,
    ]
    producer = kafka.producer(ks)
    await producer.start()
    try:
        for value in values:  # one key: one partition, in this order
            await producer.send_and_wait(ks.effects_topic, key=key.encode(), value=orjson.dumps(value),
                                         headers=[("kind", str(value["kind"]).encode())])
    finally:
        await producer.stop()
    consumer: InboxConsumer = demo_consumer("fulfillment", pool, ks, SystemClock(),
                                            group_id=f"p-{uuid.uuid4().hex[:6]}", **FAST_GROUP)
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    try:
        await until(lambda: _settled(consumer))
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    assert (consumer.stats.handled, consumer.stats.skipped, consumer.stats.retries) == (2, 2, 0)
    handled = {r["dedup_key"] for r in await pool.fetch("SELECT dedup_key FROM demo_fulfillments")}
    assert handled == {f"{key}:ok", f"{key}:refund-request"}
    episodes = await pool.fetch("SELECT * FROM payment_escalations ORDER BY escalation_id")
    assert [e["reason"] for e in episodes] == ["consumer-poison-message"] * 2
    assert [e["detail"]["offset"] for e in episodes] == [0, 1]
    assert episodes[0]["detail"]["problems"] == [
        "fulfillment-request v1: $: required property 'order_id' missing"]
    assert episodes[1]["detail"]["problems"] == ["$.kind: no schema for kind 'fulfillment-request' version 2"]
    where = f"consumer:{consumer.group_id}:poison:{ks.effects_topic}/"
    assert episodes[0]["escalation_key"].startswith(where)
    alert_rows = await pool.fetchval("SELECT count(*) FROM outbox_messages WHERE kind = 'operator-alert'")
    assert alert_rows == 2  # each reaches an operator through ops.alerts
    # Nothing poison entered the inbox: a corrected record with the same dedup_key is still handled.
    assert await pool.fetchval("SELECT count(*) FROM consumer_inbox") == 2


async def _settled(consumer: InboxConsumer) -> bool:
    return consumer.stats.handled + consumer.stats.skipped >= 4
