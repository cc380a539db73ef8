"""Outbox relay throughput beside a same-run baseline of a bare aiokafka producer.

Workload: ``PAYCORE_BENCH_RELAY_ROWS`` outbox rows (default 100,000) over
``PAYCORE_BENCH_RELAY_ATTEMPTS`` ordering keys (default 10,000), payloads of
~200 bytes, relayed to a fresh topic by 1 and then 3 relays in one process
(each with its own producer and database connection), until every row is
published *and* marked dispatched. Baseline: one bare aiokafka producer sending
the same payloads with the same keys and ``acks=all``, all in flight at once
(no per-key acknowledgement wait, no database).

The broker is ``PAYCORE_BENCH_KAFKA_BOOTSTRAP`` (or ``PAYCORE_KAFKA_BOOTSTRAP``),
else a local Tansu started for the run. Run: ``make bench``. Prints the rates; after each
relay run it reads the topic back and fails if a row is missing or a key is out of order.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

import asyncpg
import orjson
from aiokafka import TopicPartition

from bench.common import bench_database
from bench.results import Ratio, Stage
from paycore import contracts, kafka
from paycore.clock import SystemClock
from paycore.db import create_pool
from paycore.kafka import KafkaSettings
from paycore_dispatcher.relay import PRODUCER_OPTIONS, KafkaPublisher, Relay, RelayConfig

ROWS = int(os.environ.get("PAYCORE_BENCH_RELAY_ROWS", "100000"))
ATTEMPTS = int(os.environ.get("PAYCORE_BENCH_RELAY_ATTEMPTS", "10000"))
BATCH = int(os.environ.get("PAYCORE_BENCH_RELAY_BATCH", "1000"))
KINDS = ["order-confirmation", "fulfillment-request", "refund-request"]


@contextlib.contextmanager
def broker() -> Iterator[tuple[str, bool]]:
    configured = os.environ.get("PAYCORE_BENCH_KAFKA_BOOTSTRAP") or os.environ.get("PAYCORE_KAFKA_BOOTSTRAP")
    if configured:
        yield configured, False
        return
    from paycore_devstack.embedded import start_tansu

    with start_tansu() as b:
        yield b.bootstrap, True


def workload_rows() -> list[tuple[str, str, str, dict[str, object]]]:
    keys = [f"attempt:{uuid.uuid4()}" for _ in range(ATTEMPTS)]
    rows = []
    for i in range(ROWS):
        key = keys[i % ATTEMPTS]
        kind = KINDS[(i // ATTEMPTS) % len(KINDS)]
        dedup = f"{key}:{kind}-{i // ATTEMPTS}"
        # Conforming payloads (the relay dead-letters any other): the kind's example, ~200 bytes.
        payload = contracts.example(kind, dedup_key=dedup, attempt_id=key.removeprefix("attempt:"))
        rows.append((dedup, key, kind, payload))
    return rows


async def seed(dsn: str, rows: list[tuple[str, str, str, dict[str, object]]]) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        now = SystemClock().now()
        await conn.copy_records_to_table(
            "outbox_messages", columns=["dedup_key", "ordering_key", "kind", "payload", "created_at",
                                        "next_attempt_at"],
            records=[(d, k, kind, orjson.dumps(p).decode(), now, now) for d, k, kind, p in rows])
    finally:
        await conn.close()


async def run_relays(ks: KafkaSettings, dsn: str, relays: int) -> float:
    pool = await create_pool(dsn, min_size=relays, max_size=relays + 1)
    producers = [kafka.producer(ks, **PRODUCER_OPTIONS) for _ in range(relays)]
    for p in producers:
        await p.start()
    try:
        config = RelayConfig(effects_topic=ks.effects_topic, alerts_topic=ks.alerts_topic,
                             reminder_interval=timedelta(seconds=900), batch_size=BATCH)
        workers = [Relay(pool, KafkaPublisher(p), SystemClock(), config, name=f"relay-{i}")
                   for i, p in enumerate(producers)]
        started = time.perf_counter()
        done = 0

        async def loop(r: Relay) -> None:
            nonlocal done
            idle = 0
            while done < ROWS and idle < 50:
                result = await r.run_once()
                done += result.published
                idle = idle + 1 if result.claimed == 0 else 0
                if result.claimed == 0:
                    await asyncio.sleep(0.01)

        await asyncio.gather(*(loop(w) for w in workers))
        elapsed = time.perf_counter() - started
        left = await pool.fetchval("SELECT count(*) FROM outbox_messages WHERE dispatched_at IS NULL")
        if left:
            print(f"  warning: {left} rows left undispatched")
        return elapsed
    finally:
        for p in producers:
            await p.stop()
        await pool.close()


async def check_order(ks: KafkaSettings, expect: int) -> str:
    """Reads the topic back: every row there, and per key in ``message_id`` order.

    Delivery is at least once, so a row may appear twice (a send that timed out but
    landed, then its retry); the order that matters is that of first appearances."""
    consumer = kafka.consumer(ks, group_id=None)
    await consumer.start()
    try:
        tps = [TopicPartition(ks.effects_topic, p) for p in range(ks.effects_partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        seen: dict[bytes, list[int]] = {}
        total = 0
        async with asyncio.timeout(120):
            while total < expect:
                for records in (await consumer.getmany(timeout_ms=500, max_records=10_000)).values():
                    for r in records:
                        total += 1
                        seen.setdefault(r.key, []).append(int(dict(r.headers)["message_id"]))
    finally:
        await consumer.stop()
    firsts = {k: list(dict.fromkeys(ids)) for k, ids in seen.items()}
    out_of_order = [k for k, ids in firsts.items() if ids != sorted(ids)]
    distinct = sum(len(ids) for ids in firsts.values())
    if out_of_order or distinct != expect:
        raise AssertionError(f"order check failed: {len(out_of_order)} keys out of order, "
                             f"{distinct} of {expect} rows on the topic")
    return f"order ok: {distinct} rows, {len(firsts)} keys in order, {total - distinct} duplicates"


async def run_baseline(ks: KafkaSettings, rows: list[tuple[str, str, str, dict[str, object]]]) -> float:
    producer = kafka.producer(ks)
    await producer.start()
    try:
        records = [(k.encode(), orjson.dumps(p), [("kind", kind.encode()), ("dedup_key", d.encode())])
                   for d, k, kind, p in rows]
        started = time.perf_counter()
        futures = [await producer.send(ks.effects_topic, value=v, key=k, headers=h) for k, v, h in records]
        await asyncio.gather(*futures)
        return time.perf_counter() - started
    finally:
        await producer.stop()


TARGET = 0.5  # issue 15: one relay, of the bare producer


async def run() -> Stage:
    workload = f"{ROWS} rows over {ATTEMPTS} attempts, batch {BATCH}"
    print(f"relay bench: {workload}")
    stage = Stage("relay", workload)
    rows = workload_rows()
    with broker() as (bootstrap, local):
        base = KafkaSettings(bootstrap=bootstrap, idempotent=not local, effects_partitions=12,
                             alerts_partitions=3)
        run_id = uuid.uuid4().hex[:6]
        ks = base.with_topics(f"bench.baseline.{run_id}", f"bench.alerts.{run_id}")
        await kafka.ensure_topics(ks)
        baseline = ROWS / await run_baseline(ks, rows)
        stage.measures["baseline records/s"] = baseline
        print(f"  baseline : {baseline:9.0f} records/s  bare aiokafka producer, acks=all, all in flight")
        for relays in (1, 3):
            ks = base.with_topics(f"bench.effects.{uuid.uuid4().hex[:6]}", ks.alerts_topic)
            await kafka.ensure_topics(ks)
            async with bench_database() as dsn:
                await seed(dsn, rows)
                rate = ROWS / await run_relays(ks, dsn, relays)
            order = await check_order(ks, ROWS)
            stage.measures[f"{relays} relay(s) rows/s"] = rate
            stage.details[f"{relays} relay(s) order check"] = order
            stage.ratios.append(Ratio(f"{relays} relay(s) ÷ bare producer", rate / baseline,
                                      TARGET if relays == 1 else None))
            print(f"  {relays} relay{'s' if relays > 1 else ' '} : {rate:9.0f} rows/s published and marked"
                  f"   ratio {rate / baseline:6.3f} of baseline   {order}")
    return stage


def main() -> Stage:
    return asyncio.run(run())


if __name__ == "__main__":
    main()
