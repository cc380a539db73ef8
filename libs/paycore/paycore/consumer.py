"""A Kafka consumer helper for downstream systems: effects once, despite redelivery.

Delivery from the outbox to Kafka is at least once, and so is Kafka to a
consumer. The helper turns that into "each effect once" for a consumer whose
side effects live in PostgreSQL:

- Each message is handled in one database transaction that first inserts
  ``(consumer_group, dedup_key)`` into ``consumer_inbox`` with
  ``ON CONFLICT DO NOTHING``. A key already there means the effect was done: the
  handler is not called. Otherwise the handler writes its side effect on the same
  connection, and both commit together. A concurrent duplicate (two members
  during a rebalance) waits on the first one's uncommitted inbox row.
- Offsets are committed manually, only after the message's transaction
  committed: a crash in between redelivers the message, and the inbox turns the
  redelivery into a no-op.
- A handler failure rolls the transaction back and retries the same message
  after a backoff (on the application clock); later messages of that partition
  wait, so per-key order holds.
- Poison: a message that breaks its contract (``paycore.contracts``: no schema
  for its kind or version, a missing or mistyped field, no ``dedup_key``) is
  never handed to the handler and never retried: it is logged, counted as
  skipped, and recorded as an escalation ``consumer:<group>:poison:<topic>/<partition>@<offset>``
  (one per record; a redelivery finds it open) in its own transaction, before its
  offset moves on. Unknown extra fields are fine.
- Static membership: pass ``instance_id`` (``group.instance.id``) so a quick
  restart keeps its partitions without a rebalance. Kafka allows the whole
  session timeout for that; the local Tansu broker holds a static join for
  max(3 s, session/2) + 3 s and counts it against the session, so there it needs
  a long session and a short heartbeat (measurements in docs/dispatcher.md).
- Rebalance: when partitions are revoked the helper commits the offsets it has
  processed for them before giving them up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import orjson
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError

from paycore import contracts, escalations, kafka, pgtext, queries, tracing
from paycore.clock import Clock
from paycore.config import REMINDER_INTERVAL
from paycore.db import delete_in_batches
from paycore.domain import EscalationReason
from paycore.errors import PaycoreError
from paycore.kafka import KafkaSettings
from paycore.liveness import SLACK_S, Liveness, beat
from paycore.logs import bind_log_context

log = logging.getLogger("paycore.consumer")

POLL_MS = 200  # getmany returns within this when nothing arrives

INBOX = queries.load("consumer_inbox")


@dataclass(frozen=True)
class Message:
    """One Kafka record, decoded: the JSON payload and the headers paycore sets."""

    topic: str
    partition: int
    offset: int
    key: str | None
    headers: dict[str, str]
    payload: dict[str, Any]

    @property
    def dedup_key(self) -> str | None:
        value = self.payload.get("dedup_key") or self.headers.get("dedup_key")
        return str(value) if value else None

    @property
    def kind(self) -> str | None:
        value = self.headers.get("kind") or self.payload.get("kind")
        return str(value) if value else None

    @property
    def message_id(self) -> int | None:
        raw = self.headers.get("message_id")
        return int(raw) if raw and raw.isdigit() else None


Handler = Callable[[asyncpg.Connection, Message], Awaitable[None]]
Hook = Callable[[Message], Awaitable[None]]


class RetryLater(PaycoreError):
    """Raised by a handler: roll back and retry this message after a backoff."""


_SANE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def correlation(message: Message) -> dict[str, str]:
    """The attempt and order a message is about, for the log context; only well-formed ids
    (any producer may write to a topic: its bytes are not logged raw)."""
    found = {"attempt_id": message.headers.get("attempt_id"), "order_id": message.payload.get("order_id")}
    return {k: v for k, v in found.items() if isinstance(v, str) and _SANE_ID.fullmatch(v)}


def decode(record: Any) -> Message:
    headers = {k: (v.decode("utf-8", "replace") if v is not None else "") for k, v in record.headers or ()}
    try:
        payload = orjson.loads(record.value) if record.value is not None else {}
    except orjson.JSONDecodeError:
        payload = {}
    if not isinstance(payload, dict):
        payload = {}
    key = record.key.decode("utf-8", "replace") if record.key is not None else None
    return Message(record.topic, record.partition, record.offset, key, headers, payload)


@dataclass
class ConsumerStats:
    handled: int = 0
    duplicates: int = 0
    skipped: int = 0
    retries: int = 0
    commits: int = 0
    commit_failures: int = 0  # refused by a rebalance; see InboxConsumer._commit_or_carry_on


@dataclass
class InboxConsumer:
    """Consume ``topics`` as ``group_id``, running ``handler`` once per dedup key.

    ``after_transaction`` runs after each message's transaction commits and before
    its offset is committed -- an observation point (and, in tests, the place to
    simulate a crash between the two).
    """

    pool: asyncpg.Pool
    kafka_settings: KafkaSettings
    topics: tuple[str, ...]
    group_id: str
    handler: Handler
    clock: Clock
    instance_id: str | None = None
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 3_000
    max_records: int = 200
    retry_base_s: float = 0.5
    retry_max_s: float = 30.0
    after_transaction: Hook | None = None
    liveness: Liveness | None = None  # beaten each poll and each try of a message
    reminder_interval: timedelta = timedelta(seconds=REMINDER_INTERVAL.default)  # of poison escalations
    stats: ConsumerStats = field(default_factory=ConsumerStats)
    _consumer: AIOKafkaConsumer | None = field(default=None, init=False, repr=False)
    _processed: dict[TopicPartition, int] = field(default_factory=dict, init=False, repr=False)
    _committed: dict[TopicPartition, int] = field(default_factory=dict, init=False, repr=False)
    _assigned: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)

    def liveness_bound_s(self) -> float:
        """The longest a healthy consumer goes between beats.

        It beats after every poll (at most ``POLL_MS`` apart when idle) and before
        every try of a message, so the longest gap is one retry backoff (at most
        ``retry_max_s``) plus one handler call and commit, which ``SLACK_S`` covers.
        A handler that keeps failing -- the database is down -- still beats.
        """
        return max(self.retry_max_s, POLL_MS / 1000) + SLACK_S

    async def wait_assigned(self) -> None:
        """Returns once the group has assigned this member at least one partition."""
        await self._assigned.wait()

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set; commits what it processed, then leaves."""
        options: dict[str, Any] = {
            "session_timeout_ms": self.session_timeout_ms,
            "heartbeat_interval_ms": self.heartbeat_interval_ms,
        }
        if self.instance_id is not None:
            options["group_instance_id"] = self.instance_id
        consumer = kafka.consumer(self.kafka_settings, group_id=self.group_id, **options)
        consumer.subscribe(list(self.topics), listener=_Listener(self))
        self._consumer = consumer
        await consumer.start()
        try:
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=POLL_MS, max_records=self.max_records)
                beat(self.liveness)
                for tp, records in batch.items():
                    for record in records:
                        if stop.is_set():
                            break
                        if not await self._handle_with_retry(consumer, tp, record, stop):
                            break  # stopping, or the partition was revoked meanwhile
                await self._commit_or_carry_on()
            # A clean stop hands over what was processed; a crash (an exception
            # out of this loop) commits nothing more, like a killed process.
            with contextlib.suppress(KafkaError, CommitFailedError):
                await self.commit()
        finally:
            self._consumer = None
            await consumer.stop()

    async def commit(self, partitions: set[TopicPartition] | None = None) -> None:
        """Commit processed offsets (all, or only ``partitions``) not yet committed."""
        consumer = self._consumer
        if consumer is None:
            return
        offsets = {tp: off for tp, off in self._processed.items()
                   if self._committed.get(tp) != off and (partitions is None or tp in partitions)}
        if not offsets:
            return
        await consumer.commit(offsets)
        self._committed.update(offsets)
        self.stats.commits += 1

    async def _commit_or_carry_on(self) -> None:
        """Commit after a batch; a commit refused by a rebalance in progress is not fatal.

        The group coordinator refuses a commit while the group rebalances or after it has
        dropped this member (a missed session on a loaded host: ``UnknownMemberIdError``,
        surfaced as ``CommitFailedError``). The offsets stay uncommitted here and go with the
        next commit, or, if the partition moves, its next owner redelivers them and the inbox
        deduplicates; the loop rejoins on its next poll instead of the worker crashing.
        """
        try:
            await self.commit()
        except (KafkaError, CommitFailedError) as exc:
            self.stats.commit_failures += 1
            log.warning("%s: commit refused (%s: %s); rejoining, the offsets go with a later commit "
                        "or are redelivered and deduplicated", self.group_id, type(exc).__name__, exc)

    async def _handle_with_retry(
        self, consumer: AIOKafkaConsumer, tp: TopicPartition, record: Any, stop: asyncio.Event
    ) -> bool:
        message = decode(record)
        with bind_log_context(**correlation(message)):  # the handler's lines name the attempt
            return await self._retrying(consumer, tp, message, stop)

    async def _retrying(
        self, consumer: AIOKafkaConsumer, tp: TopicPartition, message: Message, stop: asyncio.Event
    ) -> bool:
        failures = 0
        while True:
            if tp not in consumer.assignment():
                return False
            beat(self.liveness)
            try:
                # Each try is a span, a child of the relay's send (the record's traceparent header).
                with tracing.consumer_span(message.topic, message.headers, {
                        "messaging.consumer.group.name": self.group_id,
                        "messaging.destination.partition.id": str(message.partition),
                        "messaging.kafka.offset": message.offset}):
                    await self._handle(message)
            except Exception as exc:
                failures += 1
                self.stats.retries += 1
                delay = min(self.retry_max_s, self.retry_base_s * 2 ** (failures - 1))
                delay *= 0.5 + random.random() / 2  # jitter
                level = logging.WARNING if isinstance(exc, RetryLater) else logging.ERROR
                log.log(level, "%s: message %s/%d@%d failed (%s: %s); retrying in %.2f s", self.group_id,
                        message.topic, message.partition, message.offset, type(exc).__name__, exc, delay,
                        exc_info=level == logging.ERROR)
                if stop.is_set():
                    return False
                await self.clock.sleep(delay)
                continue
            self._processed[tp] = message.offset + 1
            if self.after_transaction is not None:
                await self.after_transaction(message)
            return True

    async def _handle(self, message: Message) -> None:
        dedup_key = message.dedup_key
        problems = contracts.validate(contracts.with_version(message.payload))
        if dedup_key is None or problems:
            await self._poison(message, problems or ["$.dedup_key: missing; it cannot be deduplicated"])
            return
        async with self.pool.acquire() as conn, conn.transaction():
            fresh = await INBOX.insert.fetchval(
                conn, consumer_group=self.group_id, dedup_key=dedup_key, topic=message.topic,
                kafka_partition=message.partition, kafka_offset=message.offset, now=self.clock.now())
            if fresh is None:
                self.stats.duplicates += 1
                return
            await self.handler(conn, message)
        self.stats.handled += 1

    async def _poison(self, message: Message, problems: list[str]) -> None:
        """Record a message that can never be handled; a failure here retries, so none is lost."""
        where = f"{message.topic}/{message.partition}@{message.offset}"
        names = {"kind": message.kind, "dedup_key": message.dedup_key}
        if pgtext.json_problem(names) is not None:  # text jsonb refuses would make this retry forever
            names = {"kind": None, "dedup_key": None}
        async with self.pool.acquire() as conn, conn.transaction():
            await escalations.raise_escalation(
                conn, key=escalations.consumer_poison_key(self.group_id, message.topic, message.partition,
                                                          message.offset),
                reason=EscalationReason.CONSUMER_POISON_MESSAGE,
                now=self.clock.now(), reminder_interval=self.reminder_interval,
                detail={"consumer_group": self.group_id, "topic": message.topic,
                        "partition": message.partition, "offset": message.offset, **names,
                        "message_id": message.message_id, "problems": problems},
            )
        self.stats.skipped += 1
        log.error("%s: message %s (%s) breaks its contract; skipped and escalated: %s",
                  self.group_id, where, message.kind, "; ".join(problems))


async def purge_inbox(pool: asyncpg.Pool, *, now: datetime, older_than: timedelta,
                      batch_size: int = 5_000) -> int:
    """Delete inbox rows processed before ``now - older_than``, in batches; the number deleted.

    An inbox row only has to outlive the chance of its record being delivered again, which
    ends with the topic's retention (``PAYCORE_KAFKA_RETENTION_S``); the settings refuse a
    horizon that is not longer. An outbox replay re-publishes under the same ``dedup_key``
    only while the outbox row exists (``PAYCORE_OUTBOX_RETENTION_S``), so keep the horizon
    above that too when replays are used.
    """
    # delete_in_batches binds the batch size after the arguments given: purge's :batch_size is last.
    cutoff = now - older_than
    return await delete_in_batches(pool, INBOX.purge.sql, cutoff, batch_size=batch_size)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, owner: InboxConsumer) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: Any) -> None:
        # Graceful rebalance: hand over the revoked partitions at the offsets processed here.
        try:
            await self.owner.commit(set(revoked))
        except (KafkaError, CommitFailedError) as exc:
            log.warning("%s: could not commit offsets on revoke (%s); the next owner may redeliver, "
                        "and the inbox deduplicates", self.owner.group_id, exc)
        for tp in revoked:
            self.owner._processed.pop(tp, None)
            self.owner._committed.pop(tp, None)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        if assigned:
            self.owner._assigned.set()
