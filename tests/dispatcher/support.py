"""Helpers for the dispatcher tests: relays, fault injection of our own send path, topic read-back."""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import asyncpg
from aiokafka import TopicPartition

from paycore import contracts, kafka, outbox
from paycore.clock import Clock
from paycore.consumer import Message, decode
from paycore.kafka import KafkaSettings
from paycore_dispatcher.relay import KafkaPublisher, Publisher, Record, Relay, RelayConfig, failed

DEADLINE_S = 20.0


def config_for(ks: KafkaSettings, **overrides: Any) -> RelayConfig:
    options: dict[str, Any] = {"effects_topic": ks.effects_topic, "alerts_topic": ks.alerts_topic,
                               "reminder_interval": timedelta(seconds=900),
                               "batch_size": 200, "max_delivery_attempts": 3, "send_timeout_s": 10.0,
                               "backoff_base_s": 1.0, "backoff_max_s": 8.0}
    options.update(overrides)
    return RelayConfig(**options)


@contextlib.asynccontextmanager
async def kafka_publisher(ks: KafkaSettings) -> AsyncIterator[KafkaPublisher]:
    producer = kafka.producer(ks)
    await producer.start()
    try:
        yield KafkaPublisher(producer)
    finally:
        await producer.stop()


@dataclass
class FaultyPublisher:
    """Our own send path with injected faults: fails chosen sends *before* producing.

    ``fail_keys`` makes every send of those dedup keys fail; ``fail_rate`` fails a
    random fraction of all sends; ``gate`` (when set and closed) holds each send
    before producing, so a test can keep a relay's claim open.
    """

    inner: Publisher
    fail_keys: set[str] = field(default_factory=set)
    fail_rate: float = 0.0
    rng: random.Random = field(default_factory=lambda: random.Random(5))
    gate: asyncio.Event | None = None
    waiting: asyncio.Event = field(default_factory=asyncio.Event)
    attempts: list[str] = field(default_factory=list)
    acked: list[str] = field(default_factory=list)

    async def publish(self, records: Sequence[Record], acks: list[asyncio.Future[Any]]) -> None:
        for record in records:
            dedup_key = dict(record[3])["dedup_key"].decode()
            self.attempts.append(dedup_key)
            if self.gate is not None and not self.gate.is_set():
                self.waiting.set()
                await self.gate.wait()
            if dedup_key in self.fail_keys:
                acks.append(failed(ConnectionError(f"injected failure for {dedup_key}")))
            elif self.fail_rate and self.rng.random() < self.fail_rate:
                acks.append(failed(ConnectionError("injected random failure")))
            else:
                await self.inner.publish([record], acks)
                acks[-1].add_done_callback(self._acked(dedup_key))

    def _acked(self, dedup_key: str) -> Callable[[asyncio.Future[Any]], None]:
        def done(ack: asyncio.Future[Any]) -> None:
            if not ack.cancelled() and ack.exception() is None:
                self.acked.append(dedup_key)
        return done


async def read_topic(
    ks: KafkaSettings, topic: str, partitions: int, *, expect: int, deadline_s: float = DEADLINE_S,
) -> list[Message]:
    """Every record of ``topic`` from the beginning, once at least ``expect`` are there.

    Reads the end offsets first, so "nothing more" is a fact of the log, not a wait.
    """
    consumer = kafka.consumer(ks, group_id=None)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        out: list[Message] = []
        ends: dict[TopicPartition, int] = {}
        try:
            async with asyncio.timeout(deadline_s):
                # Read until both the expected count and the end offsets are reached.
                # Tansu v0.6.0's ListOffsets can report one record fewer than the log
                # holds right after a burst of produces (seen: 2999 of 3000, all 3000
                # readable), so the expected count, not the end offsets alone, decides.
                ends = await consumer.end_offsets(tps)
                target = max(expect, sum(ends.values()))
                while len(out) < target:
                    batch = await consumer.getmany(timeout_ms=200)
                    for records in batch.values():
                        out.extend(decode(r) for r in records)
        except TimeoutError:
            raise AssertionError(
                f"{topic}: {expect} records expected, read {len(out)}, end offsets {ends}") from None
        return out
    finally:
        await consumer.stop()


async def effects(ks: KafkaSettings, expect: int, **kw: Any) -> list[Message]:
    return await read_topic(ks, ks.effects_topic, ks.effects_partitions, expect=expect, **kw)


async def alerts(ks: KafkaSettings, expect: int, **kw: Any) -> list[Message]:
    return await read_topic(ks, ks.alerts_topic, ks.alerts_partitions, expect=expect, **kw)


ENVELOPE = ("schema_version", "kind", "dedup_key", "attempt_id")


def fields_of(effect: str, **payload: Any) -> dict[str, Any]:
    """A conforming business payload of ``effect`` (its contract's example), ``payload`` on top."""
    sample = {k: v for k, v in contracts.example(effect).items() if k not in ENVELOPE}
    return {**sample, **payload}


async def queue_effect(pool: asyncpg.Pool, clock: Clock, attempt_id: uuid.UUID, effect: str,
                       **payload: Any) -> int:
    async with pool.acquire() as conn, conn.transaction():
        mid = await outbox.enqueue_effect(conn, attempt_id=attempt_id, effect=effect,
                                          payload=fields_of(effect, **payload), now=clock.now())
    assert mid is not None
    return mid


async def queue_bare(pool: asyncpg.Pool, clock: Clock, key: str, effect: str, **payload: Any) -> int:
    """A business row with an ordering key but no attempt row (bulk tests)."""
    attempt_id = key.removeprefix("attempt:") if key.startswith("attempt:") else str(uuid.uuid4())
    async with pool.acquire() as conn:
        mid = await outbox.enqueue(conn, dedup_key=f"{key}:{effect}", kind=effect,
                                   payload=fields_of(effect, attempt_id=attempt_id, **payload),
                                   now=clock.now(), ordering=key)
    assert mid is not None
    return mid


def relay(pool: asyncpg.Pool, publisher: Publisher, clock: Clock, ks: KafkaSettings, name: str = "relay",
          **overrides: Any) -> Relay:
    return Relay(pool, publisher, clock, config_for(ks, **overrides), name=name)


def keys_of(messages: list[Message]) -> list[str]:
    return [m.dedup_key or "" for m in messages]


async def outbox_row(pool: asyncpg.Pool, message_id: int) -> asyncpg.Record:
    row = await pool.fetchrow("SELECT * FROM outbox_messages WHERE message_id = $1", message_id)
    assert row is not None
    return row
