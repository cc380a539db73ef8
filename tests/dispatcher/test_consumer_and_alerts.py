"""The consumer helper and alert delivery, on real PostgreSQL, the real broker and a real HTTP receiver."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import orjson
import pytest
from aiokafka.partitioner import murmur2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from harness.servers import serve_asgi
from paycore import escalations
from paycore.clock import FakeClock, SystemClock
from paycore.consumer import InboxConsumer, Message, _Listener
from paycore.domain import EscalationReason
from paycore.kafka import KafkaSettings
from paycore_dispatcher.alerts import AlertSender, alert_consumer
from paycore_dispatcher.demo_consumers import demo_consumer
from tests.support.timings import REMINDER_INTERVAL

from .support import kafka_publisher, queue_bare, relay

FAST_GROUP = {"session_timeout_ms": 2_000, "heartbeat_interval_ms": 300, "retry_base_s": 0.05,
              "retry_max_s": 0.2}


class SimulatedCrash(Exception):
    pass


async def until(check: Callable[[], Awaitable[bool]], deadline_s: float = 30.0) -> None:
    """Poll ``check`` until true, failing at the deadline (the check is the synchronisation)."""
    async with asyncio.timeout(deadline_s):
        while not await check():  # noqa: ASYNC110 -- polls the database; the check is the condition
            await asyncio.sleep(0.05)


async def run_consumer(consumer: InboxConsumer) -> tuple[asyncio.Event, asyncio.Task[None]]:
    stop = asyncio.Event()
    return stop, asyncio.create_task(consumer.run(stop))


async def publish_effects(pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings, n: int) -> list[str]:
    keys = []
    for i in range(n):
        key = f"attempt:{uuid.uuid4()}"
        await queue_bare(pool, clock, key, "fulfillment-request", n=i)
        keys.append(f"{key}:fulfillment-request")
    async with kafka_publisher(ks) as pub:
        assert (await relay(pool, pub, clock, ks).run_once()).published == n
    return keys


async def fulfillments(pool: asyncpg.Pool) -> Counter[str]:
    return Counter(r["dedup_key"] for r in await pool.fetch("SELECT dedup_key FROM demo_fulfillments"))


async def test_a_consumer_crash_after_its_transaction_before_the_offset_commit_does_not_repeat_the_effect(
    pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings
) -> None:
    keys = await publish_effects(pool, clock, ks, 6)
    seen: list[Message] = []

    async def crash_after_third(message: Message) -> None:
        seen.append(message)
        if len(seen) == 3:
            raise SimulatedCrash("after the transaction, before the offset commit")

    group = f"demo-{uuid.uuid4().hex[:6]}"
    first = demo_consumer("fulfillment", pool, ks, SystemClock(), group_id=group,
                          after_transaction=crash_after_third, **FAST_GROUP)
    _, task = await run_consumer(first)
    with pytest.raises(SimulatedCrash):
        await asyncio.wait_for(task, 30)
    assert first.stats.handled == 3 and first.stats.commits == 0
    assert sum((await fulfillments(pool)).values()) == 3

    # A new member of the group starts from the last committed offsets: the three
    # effects already done are redelivered, found in the inbox, and not repeated.
    second = demo_consumer("fulfillment", pool, ks, SystemClock(), group_id=group, **FAST_GROUP)
    stop, task = await run_consumer(second)

    async def all_done() -> bool:
        return sum((await fulfillments(pool)).values()) >= 6 and second.stats.duplicates >= 3

    await until(all_done)
    stop.set()
    await asyncio.wait_for(task, 10)
    counts = await fulfillments(pool)
    assert counts == Counter({k: 1 for k in keys})
    assert second.stats.duplicates >= 3
    inbox = await pool.fetchval("SELECT count(*) FROM consumer_inbox WHERE consumer_group = $1", group)
    assert inbox == 6


async def test_the_consumer_helper_deduplicates_a_redelivered_message_by_dedup_key(
    pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings
) -> None:
    keys = await publish_effects(pool, clock, ks, 2)
    # An at-least-once duplicate: the same row published again (e.g. its mark was lost).
    await pool.execute("UPDATE outbox_messages SET dispatched_at = NULL")
    async with kafka_publisher(ks) as pub:
        assert (await relay(pool, pub, clock, ks).run_once()).published == 2
    consumer = demo_consumer("fulfillment", pool, ks, SystemClock(), group_id=f"d-{uuid.uuid4().hex[:6]}",
                             **FAST_GROUP)
    stop, task = await run_consumer(consumer)
    await until(lambda: _ready(consumer, handled=2, duplicates=2))
    stop.set()
    await asyncio.wait_for(task, 10)
    assert await fulfillments(pool) == Counter({k: 1 for k in keys})


async def _ready(consumer: InboxConsumer, *, handled: int, duplicates: int = 0) -> bool:
    return consumer.stats.handled >= handled and consumer.stats.duplicates >= duplicates


async def test_a_rebalance_between_two_static_members_hands_over_processed_offsets_without_repeating_effects(
    pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings
) -> None:
    keys = await publish_effects(pool, clock, ks, 30)
    group = f"demo-{uuid.uuid4().hex[:6]}"
    a = demo_consumer("fulfillment", pool, ks, SystemClock(), group_id=group, instance_id=f"{group}-a",
                      **FAST_GROUP)
    stop_a, task_a = await run_consumer(a)
    await until(lambda: _ready(a, handled=30))
    more = await publish_effects(pool, clock, ks, 30)
    b = demo_consumer("fulfillment", pool, ks, SystemClock(), group_id=group, instance_id=f"{group}-b",
                      **FAST_GROUP)
    stop_b, task_b = await run_consumer(b)

    async def all_done() -> bool:
        return sum((await fulfillments(pool)).values()) >= 60

    await until(all_done, 60)
    stop_a.set()
    stop_b.set()
    # A bound on shutdown, not a synchronisation: a member stopping while the broker holds its
    # JoinGroup (Tansu holds one for up to max(3 s, session/2) + 3 s, see below) leaves only
    # when that answer comes; both did so within 15 s alone, not always on a loaded CI machine.
    await asyncio.wait_for(asyncio.gather(task_a, task_b), 60)
    assert await fulfillments(pool) == Counter({k: 1 for k in keys + more})


# --------------------------------------------------------------------------- static membership

# Tansu v0.6.0 holds a static member's JoinGroup and SyncGroup for max(3 s, session/2) + 3 s
# (13 s here) and does not count them as contact: the restarted member keeps its old entry
# only if its first heartbeat lands within the session timeout of the old one's last.
# 20 s leaves about 7 s of headroom, enough for a loaded CI machine (12 s, measured to
# work, leaves only about 2 s); at <= 6 s a static restart always rebalances.
STATIC_GROUP = {**FAST_GROUP, "session_timeout_ms": 20_000}


def keys_per_partition(partitions: int, per_partition: int) -> list[str]:
    """Ordering keys that the producer's default partitioner spreads evenly."""
    keys: list[str] = []
    counts = Counter[int]()
    while len(keys) < partitions * per_partition:
        key = f"attempt:{uuid.uuid4()}"
        partition = (murmur2(key.encode()) & 0x7FFFFFFF) % partitions
        if counts[partition] < per_partition:
            counts[partition] += 1
            keys.append(key)
    return keys


async def publish_spread(pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings, per_partition: int
                         ) -> list[str]:
    keys = keys_per_partition(ks.effects_partitions, per_partition)
    for i, key in enumerate(keys):
        await queue_bare(pool, clock, key, "fulfillment-request", n=i)
    async with kafka_publisher(ks) as pub:
        assert (await relay(pool, pub, clock, ks).run_once()).published == len(keys)
    return [f"{key}:fulfillment-request" for key in keys]


Rebalance = tuple[InboxConsumer, str, frozenset[int]]


def record_rebalances(monkeypatch: pytest.MonkeyPatch) -> list[Rebalance]:
    """Every revoke/assign callback the group makes to any helper, in order."""
    calls: list[Rebalance] = []
    revoked, assigned = _Listener.on_partitions_revoked, _Listener.on_partitions_assigned

    async def on_revoked(self: _Listener, tps: Any) -> None:
        calls.append((self.owner, "revoked", frozenset(tp.partition for tp in tps)))
        await revoked(self, tps)

    async def on_assigned(self: _Listener, tps: Any) -> None:
        calls.append((self.owner, "assigned", frozenset(tp.partition for tp in tps)))
        await assigned(self, tps)

    monkeypatch.setattr(_Listener, "on_partitions_revoked", on_revoked)
    monkeypatch.setattr(_Listener, "on_partitions_assigned", on_assigned)
    return calls


def of(calls: list[Rebalance], member: InboxConsumer) -> list[tuple[str, frozenset[int]]]:
    return [(kind, parts) for owner, kind, parts in calls if owner is member]


def holding(calls: list[Rebalance], member: InboxConsumer) -> frozenset[int]:
    """The partitions ``member`` holds after its last callback (none while revoked)."""
    mine = of(calls, member)
    return mine[-1][1] if mine and mine[-1][0] == "assigned" else frozenset()


async def inbox_partitions(pool: asyncpg.Pool, group: str, keys: list[str]) -> Counter[int]:
    rows = await pool.fetch("SELECT kafka_partition FROM consumer_inbox WHERE consumer_group = $1 "
                            "AND dedup_key = ANY($2::text[])", group, keys)
    return Counter(r["kafka_partition"] for r in rows)


async def test_a_static_member_restarting_within_its_session_timeout_gets_its_partitions_back_without_a_rebalance(  # noqa: E501
    pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = record_rebalances(monkeypatch)
    first = await publish_spread(pool, clock, ks, 2)
    group = f"demo-{uuid.uuid4().hex[:6]}"
    crash = asyncio.Event()

    async def crash_when_told(message: Message) -> None:
        if crash.is_set():
            raise SimulatedCrash("after the transaction, before the offset commit")

    def member(name: str, **options: Any) -> InboxConsumer:
        return demo_consumer("fulfillment", pool, ks, SystemClock(), group_id=group,
                             instance_id=f"{group}-{name}", **STATIC_GROUP, **options)

    a, b = member("a"), member("b", after_transaction=crash_when_told)
    stop_a, task_a = await run_consumer(a)
    _, task_b = await run_consumer(b)

    async def settled() -> bool:
        held_a, held_b = holding(calls, a), holding(calls, b)
        return (bool(held_a) and bool(held_b) and not held_a & held_b
                and len(held_a | held_b) == ks.effects_partitions and a.stats.handled + b.stats.handled == 6)

    await until(settled)
    before = len(calls)
    b_partitions = holding(calls, b)
    b_handled = b.stats.handled

    # B dies abruptly: it commits the effect of its next message, then crashes before the
    # offset commit. A static member sends no LeaveGroup; the broker only stops hearing from it.
    crash.set()
    second = await publish_spread(pool, clock, ks, 2)
    with pytest.raises(SimulatedCrash):
        await asyncio.wait_for(task_b, 30)
    crashed_at = asyncio.get_running_loop().time()
    assert b.stats.handled == b_handled + 1

    restarted = member("b")
    stop_r, task_r = await run_consumer(restarted)

    async def caught_up() -> bool:
        done = sum((await fulfillments(pool)).values())
        return done >= 12 and restarted.stats.duplicates >= 1

    await until(caught_up)
    # An absence needs a window, not an event: once the old member's session has run out,
    # a rebalance that Tansu had not skipped would have reached A's callbacks.
    session_s = STATIC_GROUP["session_timeout_ms"] / 1000
    await asyncio.sleep(max(0.0, crashed_at + session_s + 1.0 - asyncio.get_running_loop().time()))

    assert of(calls[before:], a) == [] and of(calls[before:], b) == []
    assert of(calls, restarted) == [("revoked", frozenset()), ("assigned", b_partitions)]
    # The one message past B's last offset commit came back and was found in the inbox;
    # the offsets committed before the crash held, so nothing older was redelivered.
    assert await inbox_partitions(pool, group, second) == {p: 2 for p in range(ks.effects_partitions)}
    assert restarted.stats.duplicates == 1
    assert restarted.stats.handled == 2 * len(b_partitions) - 1
    assert a.stats.duplicates == 0
    stop_a.set()
    stop_r.set()
    await asyncio.wait_for(asyncio.gather(task_a, task_r), 15)
    assert await fulfillments(pool) == Counter({k: 1 for k in first + second})


# --------------------------------------------------------------------------- alert delivery


def receiver(fail_first: int) -> tuple[Starlette, list[dict[str, Any]], list[int]]:
    posts: list[dict[str, Any]] = []
    statuses: list[int] = []

    async def hook(request: Request) -> JSONResponse:
        body = orjson.loads(await request.body())
        posts.append(body)
        status = 503 if len(posts) <= fail_first else 202
        statuses.append(status)
        return JSONResponse({"status": "ok" if status == 202 else "busy"}, status_code=status)

    return Starlette(routes=[Route("/hook", hook, methods=["POST"])]), posts, statuses


@pytest.mark.parametrize("fmt", ["slack", "pagerduty"])
async def test_alert_delivery_posts_each_alert_once_deduplicated_and_retries_with_backoff(
    pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings, fmt: str
) -> None:
    ids = []
    for reason in (EscalationReason.DEADLINE, EscalationReason.MISMATCH):
        async with pool.acquire() as conn, conn.transaction():
            ids.append(await escalations.raise_escalation(conn, key=f"notification:x:{reason}",
                                                          reason=reason, now=clock.now(),
                                                          reminder_interval=REMINDER_INTERVAL))
    async with kafka_publisher(ks) as pub:
        assert (await relay(pool, pub, clock, ks).run_once()).published == 2
        # The same alert row published twice (at least once delivery to Kafka).
        await pool.execute("UPDATE outbox_messages SET dispatched_at = NULL WHERE dedup_key = $1",
                           f"escalation:{ids[0]}:initial")
        assert (await relay(pool, pub, clock, ks).run_once()).published == 1
    app, posts, statuses = receiver(fail_first=2)
    import httpx

    async with serve_asgi(app) as base, httpx.AsyncClient(timeout=5) as http:
        sender = AlertSender(http, f"{base}/hook", SystemClock(), format=fmt, routing_key="R0UTING")
        consumer = alert_consumer(pool, ks, sender, SystemClock(), group_id=f"al-{uuid.uuid4().hex[:6]}",
                                  **FAST_GROUP)
        stop, task = await run_consumer(consumer)

        async def delivered() -> bool:
            done = await pool.fetchval("SELECT count(*) FROM alert_deliveries")
            return bool(done == 2 and consumer.stats.duplicates >= 1)

        await until(delivered)
        stop.set()
        await asyncio.wait_for(task, 10)
    assert statuses.count(503) == 2 and statuses.count(202) == 2  # retried, then once each
    ok = [p for p, s in zip(posts, statuses, strict=True) if s == 202]
    if fmt == "slack":
        assert all("text" in p and "escalation" in p["text"] for p in ok)
    else:
        assert {p["dedup_key"] for p in ok} == {f"escalation:{i}:initial" for i in ids}
        assert all(p["routing_key"] == "R0UTING" and p["event_action"] == "trigger" for p in ok)
        assert all(p["payload"]["source"] == "paycore" for p in ok)
    rows = await pool.fetch("SELECT * FROM alert_deliveries ORDER BY escalation_id")
    assert [r["escalation_id"] for r in rows] == ids
    assert all(r["outcome"] == "delivered" and r["endpoint_format"] == fmt for r in rows)
