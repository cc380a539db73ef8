"""The outbox relay: rows to Kafka in per-attempt order, with backoff and dead letters.

One pass, in one transaction:

1. **Alerts** (``ordering_key IS NULL``): due, pending rows, claimed with
   ``FOR NO KEY UPDATE SKIP LOCKED``. They never wait behind business rows.
2. **Business heads**: a due, pending row is *eligible* only if no earlier row
   with the same ``ordering_key`` is unfinished -- ``dispatched_at IS NULL``,
   which covers pending, claimed by another relay (locked), backing off, and
   dead-lettered. The ``NOT EXISTS`` is a plain snapshot read over
   ``outbox_messages_unfinished_by_order``: it does not skip locked rows, so a
   predecessor claimed by another relay still blocks. Only then is the row
   claimed with ``SKIP LOCKED``.
3. **Chains**: behind each claimed head, the following rows of the same key that
   are already due are claimed too (a run that stops at the first row that is
   backing off, dead-lettered or locked by someone else), so a key with many
   queued effects moves several per pass. Holding the head's lock makes them
   ours: every other relay's eligibility check sees the head unfinished.
4. Publish in waves: wave ``n`` is the ``n``-th row of every chain, sent at once
   (different keys), under one send timeout; the whole wave is acknowledged
   (``acks=all``) before the next, so a key's row is sent only after its previous
   one was acknowledged, whatever the producer's in-flight or idempotence settings.
   A wave is handed to the producer in one loop (:meth:`Publisher.publish`) and its
   acknowledgements awaited together: no task, no current span, per row; while they
   are on their way the next wave's records are built (contract check, JSON).
5. Mark (:mod:`paycore.outbox`, beside the table's other writes): acknowledged rows get
   ``dispatched_at`` in one conditional update; a failed
   row gets ``delivery_attempts + 1``, ``last_error`` and ``next_attempt_at`` with
   exponential backoff and jitter -- or, at the limit, ``dead_lettered_at`` and an
   escalation ``outbox:<message_id>:dead-letter`` whose alert is an ordinary
   alert row. A row whose payload breaks its contract (``paycore.contracts``) is
   never sent and dead-lettered at once. The rows after a failed one in its chain
   are not sent.
6. Commit, which releases the claims.

Every timestamp is the application clock's, passed into SQL.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol, cast
from uuid import UUID

import asyncpg
import orjson
from aiokafka.partitioner import DefaultPartitioner, murmur2
from opentelemetry.trace import Span, Status, StatusCode

from paycore import contracts, escalations, outbox, tracing
from paycore.clock import Clock
from paycore.db import DATABASE_ERRORS
from paycore.domain import EscalationReason
from paycore.liveness import SLACK_S, Liveness, beat
from paycore.logs import bind_log_context
from paycore.outbox import OUTBOX
from paycore_dispatcher import settings

log = logging.getLogger("paycore.dispatcher")

SEND_BACKSTOP_S = 5.0


class CachingPartitioner:
    """aiokafka's default partitioner (murmur2 of the key, modulo the partition count) with
    the hash remembered per key: a key's rows go out one per wave, so the relay hashes the
    same key up to ``max_chain`` times a pass, and aiokafka's murmur2 is pure Python (about
    a tenth of the relay's CPU, profiled). Only the hash is cached, never the partition, so a
    change in the partition count is seen at once; a key maps exactly as without the cache.
    """

    LIMIT = 20_000  # keys remembered; the cache starts over beyond (a pass holds ~batch_size keys)

    def __init__(self) -> None:
        self._hashes: dict[bytes, int] = {}

    def __call__(self, key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
        if key is None:
            return cast(int, DefaultPartitioner()(None, all_partitions, available))
        h = self._hashes.get(key)
        if h is None:
            if len(self._hashes) >= self.LIMIT:
                self._hashes.clear()
            h = self._hashes[key] = murmur2(key) & 0x7FFFFFFF
        return all_partitions[h % len(all_partitions)]


# Room in each partition's producer batch for a whole wave (aiokafka's default is 16 KiB,
# about 35 of our records): a full batch makes further sends wait for it to drain.
PRODUCER_OPTIONS: dict[str, Any] = {"max_batch_size": 256 * 1024, "partitioner": CachingPartitioner()}
# Rows built per turn of the event loop while a wave is in flight (~2 ms of CPU).
BUILD_CHUNK = 100
IDLE_POLL_S = 0.5  # a relay with nothing to do looks again after this (wall time)

# The claims are the library's statements (paycore/queries/outbox_messages.sql: every statement
# on the table in one place), run here; the marks go through paycore.outbox's functions.

# For this pass's transaction only. After five runs of a prepared statement PostgreSQL may
# switch to a generic plan, chosen without the parameter values: for ``message_id =
# ANY(:message_ids)`` with 10,000 ids it walks the pending index and filters (measured on
# 100,000 rows: the follower lock and the mark went from 0.1-0.2 s to 2-3 s each from the
# sixth pass of a connection on). Planning each statement for its own values costs well
# under a millisecond.
CUSTOM_PLANS = "SET LOCAL plan_cache_mode = force_custom_plan"


Record = tuple[str, bytes, bytes, list[tuple[str, bytes]]]  # topic, key, value, headers


class Publisher(Protocol):
    """Hands records to the broker without waiting for their acknowledgements."""

    async def publish(self, records: Sequence[Record], acks: list[asyncio.Future[Any]]) -> None:
        """Hands ``records`` over in order, appending to ``acks`` one future per record as soon
        as that record is handed over -- so a caller that gives up midway (a deadline) knows
        which were. A future resolves once the broker acknowledged its record, or fails with
        that record's own error (one record's failure is not the others')."""
        ...


def failed(exc: BaseException) -> asyncio.Future[Any]:
    """An acknowledgement that already failed with ``exc``."""
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_exception(exc)
    return future


class KafkaPublisher:
    """A :class:`Publisher` over a started aiokafka producer."""

    def __init__(self, producer: Any) -> None:
        self.producer = producer
        # Relays sharing this producer append one wave at a time: when a partition's batch
        # is full, aiokafka makes *every* waiting sender wake and retry on each drain
        # (measured: 2.5 appends per record with concurrent senders).
        self._append = asyncio.Lock()

    async def publish(self, records: Sequence[Record], acks: list[asyncio.Future[Any]]) -> None:
        send = self.producer.send
        async with self._append:
            for topic, key, value, headers in records:
                try:
                    acks.append(await send(topic, value=value, key=key, headers=headers))
                except Exception as exc:  # this record's (e.g. too large): the others still go
                    acks.append(failed(exc))


@dataclass(frozen=True)
class RelayConfig:
    effects_topic: str
    alerts_topic: str
    reminder_interval: timedelta  # a dead letter's escalation: PAYCORE_REMINDER_INTERVAL_S
    batch_size: int = settings.DispatcherSettings.batch_size
    max_chain: int = 50  # rows of one key claimed behind its head in one pass
    max_delivery_attempts: int = settings.DispatcherSettings.max_delivery_attempts
    send_timeout_s: float = settings.DispatcherSettings.send_timeout_s
    backoff_base_s: float = settings.DispatcherSettings.backoff_base_s
    backoff_max_s: float = settings.DispatcherSettings.backoff_max_s


@dataclass
class PassResult:
    claimed: int = 0
    published: int = 0
    failed: int = 0
    dead_lettered: int = 0
    published_by_kind: dict[str, int] = field(default_factory=dict)


class Row(NamedTuple):
    """One claimed outbox row: the columns a claim selects, in that order."""

    message_id: int
    dedup_key: str
    attempt_id: UUID | None
    ordering_key: str | None
    kind: str
    payload: Any
    delivery_attempts: int
    traceparent: str | None = None  # the trace that queued the row (paycore.tracing)

    @classmethod
    def of(cls, r: asyncpg.Record) -> Row:
        # By position: a claim returns ~10,000 rows a pass and a frozen dataclass built by
        # column name cost ~5 us a row (profiled); the check below keeps the orders the same.
        return cls._make(r)


# The statements whose rows become Rows: each must select Row's fields, in order.
CLAIMS = (OUTBOX.claim_alerts, OUTBOX.claim_heads, OUTBOX.lock_followers)
if any(not q.sql.startswith(f"SELECT {', '.join(Row._fields)}\n") for q in CLAIMS):
    raise RuntimeError("relay: a claim's columns and Row's fields differ; Row.of reads by position")


Failure = tuple[Row, str, bool]  # the row, its error, and whether it is permanent (dead-letter now)


def backoff(attempts: int, base_s: float, max_s: float, rng: random.Random | None = None) -> float:
    """Exponential backoff with jitter: ``min(max, base * 2**(attempts-1))`` scaled by 0.5-1.0."""
    ceiling = min(max_s, base_s * 2.0 ** max(0, min(attempts - 1, 60)))
    jitter: float = (rng or random).random()
    return ceiling * (0.5 + jitter / 2)


def record_for(row: Row, config: RelayConfig) -> tuple[str, bytes, bytes, list[tuple[str, bytes]]]:
    """(topic, key, value, headers) for one outbox row; raises ContractViolation if it breaks its schema."""
    payload = row.payload if isinstance(row.payload, dict) else {"value": row.payload}
    if payload.get("dedup_key") != row.dedup_key:
        payload = {**payload, "dedup_key": row.dedup_key}
    payload = dict(contracts.with_version(payload))
    contracts.check(payload)
    headers = [("kind", row.kind.encode()), ("dedup_key", row.dedup_key.encode()),
               ("message_id", str(row.message_id).encode()),
               ("schema_version", str(payload["schema_version"]).encode())]
    if row.attempt_id is not None:
        headers.append(("attempt_id", str(row.attempt_id).encode()))
    if row.ordering_key is not None:
        return config.effects_topic, row.ordering_key.encode(), orjson.dumps(payload), headers
    escalation_id = payload.get("escalation_id")
    key = f"escalation:{escalation_id}" if escalation_id is not None else row.dedup_key
    return config.alerts_topic, key.encode(), orjson.dumps(payload), headers


class Relay:
    """One relay. Any number may run at once, in one process or many."""

    def __init__(
        self, pool: asyncpg.Pool, publisher: Publisher, clock: Clock, config: RelayConfig,
        *, name: str = "relay", on_pass: Callable[[PassResult], Awaitable[None] | None] | None = None,
        liveness: Liveness | None = None,
    ) -> None:
        self.pool = pool
        self.publisher = publisher
        self.clock = clock
        self.config = config
        self.name = name
        self.on_pass = on_pass
        self.liveness = liveness  # beaten each pass and after each send
        self.rng = random.Random()

    async def run_once(self) -> PassResult:
        """One claim-publish-mark pass; returns what it did."""
        result = PassResult()
        now = self.clock.now()
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(CUSTOM_PLANS)
            limit = self.config.batch_size
            alerts = [Row.of(r) for r in await OUTBOX.claim_alerts.fetch(conn, now=now, limit=limit)]
            heads = [Row.of(r) for r in await OUTBOX.claim_heads.fetch(conn, now=now, limit=limit)]
            chains = await self._chains(conn, heads, now)
            result.claimed = len(alerts) + sum(len(c) for c in chains)
            if result.claimed == 0:
                return result
            # Each alert is its own chain of one; each key's chain is sent in order.
            sent, failures = await self._publish([[a] for a in alerts] + chains)
            if sent:
                await outbox.mark_dispatched(conn, [r.message_id for r in sent], now)
            for row in sent:
                result.published_by_kind[row.kind] = result.published_by_kind.get(row.kind, 0) + 1
            result.published = len(sent)
            for row, error, permanent in failures:
                with bind_log_context(attempt_id=row.attempt_id):
                    dead = await self._record_failure(conn, row, error, now, permanent=permanent)
                result.failed += 1
                result.dead_lettered += int(dead)
        if self.on_pass is not None:
            maybe = self.on_pass(result)
            if maybe is not None:
                await maybe
        return result

    async def _chains(self, conn: asyncpg.Connection, heads: list[Row], now: datetime) -> list[list[Row]]:
        chains: dict[str, list[Row]] = {h.ordering_key or "": [h] for h in heads}
        if self.config.max_chain <= 1 or not heads:
            return list(chains.values())
        followers = await OUTBOX.followers.fetch(conn, ordering_keys=list(chains), now=now)
        wanted: dict[str, list[int]] = {}
        head_ids = {h.message_id for h in heads}
        blocked: set[str] = set()
        for f in followers:
            key, mid = f["ordering_key"], f["message_id"]
            if mid in head_ids or key in blocked:
                continue
            run = wanted.setdefault(key, [])
            if not f["due"] or len(run) + 1 >= self.config.max_chain:
                blocked.add(key)
                continue
            run.append(mid)
        ids = [mid for run in wanted.values() for mid in run]
        if not ids:
            return list(chains.values())
        locked = {r["message_id"]: Row.of(r)
                  for r in await OUTBOX.lock_followers.fetch(conn, message_ids=ids, now=now)}
        for key, run in wanted.items():
            for mid in run:
                row = locked.get(mid)
                if row is None:  # locked by someone else, or changed: the chain stops here
                    break
                chains[key].append(row)
        return list(chains.values())

    async def _publish(self, chains: list[list[Row]]) -> tuple[list[Row], list[Failure]]:
        """Sends the chains in waves: wave ``n`` is the ``n``-th row of every chain still going.

        1. A wave's rows (all of different keys) are handed to the producer together, so it
           packs them into a few large batches instead of one small request per key.
        2. The whole wave is acknowledged before the next starts: a key's next row is
           sent only after its previous one was acknowledged -- per-key order does not
           depend on the producer's in-flight or idempotence settings.
        3. A chain whose row failed stops there; its later rows are not sent this pass
           (their records, built ahead while the wave was in flight, are dropped).
        """
        sent: list[Row] = []
        failures: list[Failure] = []
        going = [c for c in chains if c]
        built: dict[int, Record | Failure] = {}
        step = 0
        while going:
            wave = [c[step] for c in going]
            following = [c[step + 1] for c in going if step + 1 < len(c)]
            outcomes = await self._send_wave(wave, built, following)
            still: list[list[Row]] = []
            for chain, row, failure in zip(going, wave, outcomes, strict=True):
                del built[row.message_id]
                if failure is not None:
                    failures.append(failure)
                    continue
                sent.append(row)
                if step + 1 < len(chain):
                    still.append(chain)
            going, step = still, step + 1
        return sent, failures

    def _build(self, rows: list[Row]) -> dict[int, Record | Failure]:
        """Each row's record, or its failure: a payload that breaks its contract never gets
        better, so that failure is permanent (dead-letter now)."""
        built: dict[int, Record | Failure] = {}
        for row in rows:
            try:
                built[row.message_id] = record_for(row, self.config)
            except Exception as exc:  # any fault building one record is that row's own
                built[row.message_id] = row, _error(exc), isinstance(exc, contracts.ContractViolation)
        return built

    async def _send_wave(self, wave: list[Row], built: dict[int, Record | Failure],
                         following: list[Row]) -> list[Failure | None]:
        """Sends rows of different keys at once under one send deadline; each row's outcome.

        The wave is handed to the publisher in one loop and the acknowledgements are awaited
        together: no task and no current span per row (profiled: those were a third of the
        relay's CPU). Once the wave is handed over, the ``following`` rows' records are
        built into ``built`` while its acknowledgements are on their way (a row not built
        then, after a deadline, is built when its wave starts). The budget runs on the
        application clock; the wall-clock backstop bounds the wave even when that clock is a
        test's fake one. A row not acknowledged by then fails with a timeout (the producer may
        still deliver it: at least once).
        """
        built.update(self._build([row for row in wave if row.message_id not in built]))
        outcomes: list[Failure | None] = [None] * len(wave)
        records: list[Record] = []
        going: list[tuple[int, Span]] = []  # (index in wave, its producer span) per record
        for i, row in enumerate(wave):
            record = built[row.message_id]
            if isinstance(record[0], Row):  # a Failure (row, error, permanent), not a Record
                outcomes[i] = record
                continue
            topic, _, _, headers = record
            # The span continues the row's trace and adds the traceparent header; it ends
            # when the broker answers for this record.
            going.append((i, tracing.start_producer_span(topic, row.traceparent, headers,
                                                         {"paycore.outbox.message_id": row.message_id})))
            records.append(record)
        acks: list[asyncio.Future[Any]] = []
        try:
            async with self.clock.budget(self.config.send_timeout_s), \
                    asyncio.timeout(self.config.send_timeout_s + SEND_BACKSTOP_S):
                await self.publisher.publish(records, acks)
                for start in range(0, len(following), BUILD_CHUNK):
                    await asyncio.sleep(0)  # the producer's sender and the answers run between chunks
                    built.update(self._build(following[start:start + BUILD_CHUNK]))
                for pending in acks:  # in order: most are done by the time the first is
                    if not pending.done():
                        await asyncio.wait((pending,))
        except TimeoutError:
            pass
        finally:
            beat(self.liveness)
        timed_out = f"TimeoutError: no acknowledgement within {self.config.send_timeout_s} s"
        for n, (i, span) in enumerate(going):
            ack = acks[n] if n < len(acks) else None  # None: never handed over before the deadline
            answered = ack is not None and ack.done() and not ack.cancelled()
            problem = ack.exception() if answered and ack is not None else None
            if answered and problem is None:
                span.end()  # acknowledged
                continue
            # The producer's own request timeout reads as ours: the row was not acknowledged in time.
            error = timed_out if problem is None or isinstance(problem, TimeoutError) else _error(problem)
            span.set_status(Status(StatusCode.ERROR, error))
            if problem is not None:
                span.record_exception(problem)
            span.end()
            outcomes[i] = wave[i], error, False
        return outcomes

    async def _record_failure(self, conn: asyncpg.Connection, row: Row, error: str, now: datetime,
                              *, permanent: bool = False) -> bool:
        attempts = row.delivery_attempts + 1
        if attempts < self.config.max_delivery_attempts and not permanent:
            delay = backoff(attempts, self.config.backoff_base_s, self.config.backoff_max_s, self.rng)
            await outbox.mark_failed(conn, row.message_id, error, retry_at=now + timedelta(seconds=delay))
            log.warning("%s: outbox message %d (%s) failed attempt %d: %s; retrying in %.1f s",
                        self.name, row.message_id, row.kind, attempts, error, delay)
            return False
        await outbox.mark_dead_lettered(conn, row.message_id, error, now)
        log.error("%s: outbox message %d (%s, %s) dead-lettered after attempt %d: %s",
                  self.name, row.message_id, row.kind, row.dedup_key, attempts, error)
        if row.ordering_key is None and str(_payload_get(row, "escalation_key")).startswith("outbox:"):
            # An alert about a dead letter that itself cannot be delivered: raising
            # another escalation would queue another undeliverable alert, forever.
            log.critical("%s: the alert for %s cannot be delivered either; see the outbox metrics",
                         self.name, _payload_get(row, "escalation_key"))
            return True
        await escalations.raise_escalation(
            conn, key=escalations.dead_letter_key(row.message_id), reason=EscalationReason.OUTBOX_DEAD_LETTER,
            attempt_id=row.attempt_id, now=now, reminder_interval=self.config.reminder_interval,
            detail={"message_id": row.message_id, "dedup_key": row.dedup_key, "kind": row.kind,
                    "ordering_key": row.ordering_key, "delivery_attempts": attempts, "last_error": error},
        )
        return True

    async def run(self, stop: asyncio.Event, *, idle_poll_s: float = IDLE_POLL_S) -> None:
        """Run passes until ``stop`` is set; waits ``idle_poll_s`` (wall time) when idle."""
        while not stop.is_set():
            beat(self.liveness)
            try:
                result = await self.run_once()
            except DATABASE_ERRORS as exc:
                log.error("%s: pass failed (%s); retrying", self.name, exc)
                result = PassResult()
            if result.claimed == 0 or result.failed == result.claimed:
                try:
                    await asyncio.wait_for(stop.wait(), idle_poll_s)
                except TimeoutError:
                    pass


def liveness_bound_s(config: RelayConfig, idle_poll_s: float = IDLE_POLL_S) -> float:
    """The longest a healthy relay goes between beats.

    It beats before every pass and after every wave, so the longest gap is one
    idle wait, or one wave of sends (its deadline plus the wall-clock backstop), plus the
    pass's claim and mark statements, which ``SLACK_S`` covers. A pass that fails
    on the database still ends and beats.
    """
    return max(idle_poll_s, config.send_timeout_s + SEND_BACKSTOP_S) + SLACK_S


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:2000]


def _payload_get(row: Row, name: str) -> Any:
    return row.payload.get(name) if isinstance(row.payload, dict) else None
