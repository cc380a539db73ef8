"""The reference's outbox lines, against real PostgreSQL and a real Kafka-protocol broker.

Relays are real (``paycore_dispatcher.relay``) and publish through real aiokafka
producers. Faults are injected into our own send path (``FaultyPublisher``) or
come from real limits (a record above the producer's ``max_request_size``).
"""

from __future__ import annotations

import asyncio
import io
import logging
import random
import uuid
from collections import defaultdict
from datetime import timedelta

import asyncpg
import orjson
import pytest

from paycore import contracts, escalations, outbox_admin
from paycore.attempts import Attempt
from paycore.clock import FakeClock
from paycore.db import create_pool
from paycore.domain import EscalationReason
from paycore.kafka import KafkaSettings
from paycore.logs import JsonFormatter
from tests.matrix.helpers import seed_account, started_attempt
from tests.support.timings import REMINDER_INTERVAL

from .support import (
    FaultyPublisher,
    alerts,
    effects,
    kafka_publisher,
    keys_of,
    outbox_row,
    queue_effect,
    relay,
)


@pytest.fixture
async def attempts(pool: asyncpg.Pool, clock: FakeClock) -> list[Attempt]:
    account = await seed_account(pool, clock)
    return [await started_attempt(pool, clock, account, customer=f"cus_{i}") for i in range(3)]


def conf(a: Attempt) -> str:
    return f"attempt:{a.attempt_id}:order-confirmation"


def refund(a: Attempt) -> str:
    return f"attempt:{a.attempt_id}:refund-request"


def positions(keys: list[str]) -> dict[str, int]:
    return {k: i for i, k in reversed(list(enumerate(keys)))}


# --------------------------------------------------------------------------- M47, checklist 18


async def test_a_refund_queued_after_a_confirmation_for_the_same_attempt_is_never_delivered_before_it(
    pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings, attempts: list[Attempt]
) -> None:
    a = attempts[0]
    c_id = await queue_effect(pool, clock, a.attempt_id, "order-confirmation")
    r_id = await queue_effect(pool, clock, a.attempt_id, "refund-request")
    async with kafka_publisher(ks) as pub:
        result = await relay(pool, pub, clock, ks).run_once()
    assert result.published == 2
    got = await effects(ks, 2)
    assert keys_of(got) == [conf(a), refund(a)]
    assert {m.key for m in got} == {f"attempt:{a.attempt_id}"}
    assert len({m.partition for m in got}) == 1
    first = got[0]
    assert first.headers["kind"] == "order-confirmation"
    assert first.headers["dedup_key"] == conf(a) == first.payload["dedup_key"]
    assert first.headers["attempt_id"] == str(a.attempt_id)
    assert first.headers["message_id"] == str(c_id)
    for mid in (c_id, r_id):
        row = await outbox_row(pool, mid)
        assert row["dispatched_at"] == clock.now()


async def test_an_attempts_rows_go_out_in_id_order_even_when_the_plan_reads_them_in_heap_order(
    pool: asyncpg.Pool, db_dsn: str, clock: FakeClock, ks: KafkaSettings, attempts: list[Attempt]
) -> None:
    # An index scan happens to return id order; a bitmap heap or sequential scan (a large outbox,
    # a cold cache) returns heap order. Only the queries' ORDER BY may decide the chain.
    a = attempts[0]
    ids = [await queue_effect(pool, clock, a.attempt_id, effect)
           for effect in ("order-confirmation", "fulfillment-request", "refund-request")]
    # A row whose indexed next_attempt_at changes (a backoff, a requeue) gets a new version in a new
    # place: the fulfillment row now lies after the refund's, for every scan of the heap.
    await pool.execute("UPDATE outbox_messages SET next_attempt_at = next_attempt_at - interval '1 second'"
                       " WHERE message_id = $1", ids[1])
    heap = await pool.fetch("SELECT message_id FROM outbox_messages ORDER BY ctid")
    heap_order = [r["message_id"] for r in heap]
    assert heap_order == [ids[0], ids[2], ids[1]]
    joiner = "&" if "?" in db_dsn else "?"  # asyncpg passes unknown DSN parameters as server settings
    no_index_scans = await create_pool(f"{db_dsn}{joiner}enable_indexscan=off&enable_indexonlyscan=off")
    try:
        plan = [r[0] for r in await no_index_scans.fetch(
            "EXPLAIN SELECT message_id FROM outbox_messages WHERE ordering_key = ANY($1::text[])"
            " AND dispatched_at IS NULL", [f"attempt:{a.attempt_id}"])]
        [table_read] = [line.strip(" ->") for line in plan if " on outbox_messages " in line]
        assert table_read.startswith(("Bitmap Heap Scan", "Seq Scan")), plan  # heap order
        async with kafka_publisher(ks) as pub:
            result = await relay(no_index_scans, pub, clock, ks).run_once()
    finally:
        await no_index_scans.close()
    assert result.published == 3
    assert keys_of(await effects(ks, 3)) == [
        conf(a), f"attempt:{a.attempt_id}:fulfillment-request", refund(a)]


# --------------------------------------------------------------------------- M54, checklist 21


async def test_a_confirmation_backing_off_still_blocks_its_refund_while_other_attempts_rows_are_delivered(
    pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings, attempts: list[Attempt]
) -> None:
    a, b, _ = attempts
    c_id = await queue_effect(pool, clock, a.attempt_id, "order-confirmation")
    r_id = await queue_effect(pool, clock, a.attempt_id, "refund-request")
    await queue_effect(pool, clock, b.attempt_id, "order-confirmation")
    await queue_effect(pool, clock, b.attempt_id, "refund-request")
    async with kafka_publisher(ks) as pub:
        faulty = FaultyPublisher(pub, fail_keys={conf(a)})
        r = relay(pool, faulty, clock, ks, max_delivery_attempts=5)
        first = await r.run_once()
        assert first.failed == 1 and first.published == 2
        row = await outbox_row(pool, c_id)
        assert row["delivery_attempts"] == 1 and "injected failure" in row["last_error"]
        assert clock.now() < row["next_attempt_at"] <= clock.now() + timedelta(seconds=1)
        # Backing off: further passes before next_attempt_at neither retry it nor send the refund.
        again = await r.run_once()
        assert again.claimed == 0
        assert keys_of(await effects(ks, 2)) == [conf(b), refund(b)]
        assert (await outbox_row(pool, r_id))["dispatched_at"] is None
        # Once due and healthy, the confirmation goes first, then the refund.
        faulty.fail_keys.clear()
        clock.advance(1)
        done = await r.run_once()
        assert done.published == 2
    got = keys_of(await effects(ks, 4))
    assert got.index(conf(a)) < got.index(refund(a))
    assert sorted(got) == sorted([conf(a), refund(a), conf(b), refund(b)])


async def test_a_dead_lettered_confirmation_blocks_its_refund_until_an_operator_requeues_it(
    pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings, attempts: list[Attempt]
) -> None:
    a = attempts[0]
    c_id = await queue_effect(pool, clock, a.attempt_id, "order-confirmation")
    r_id = await queue_effect(pool, clock, a.attempt_id, "refund-request")
    async with kafka_publisher(ks) as pub:
        faulty = FaultyPublisher(pub, fail_keys={conf(a)})
        r = relay(pool, faulty, clock, ks, max_delivery_attempts=2)
        await r.run_once()
        clock.advance(10)
        second = await r.run_once()
        assert second.dead_lettered == 1
        row = await outbox_row(pool, c_id)
        assert row["dead_lettered_at"] == clock.now() and row["delivery_attempts"] == 2
        # Dead-lettered: the refund stays blocked however long we wait.
        for _ in range(3):
            clock.advance(3600)
            await r.run_once()
        assert (await outbox_row(pool, r_id))["dispatched_at"] is None
        assert refund(a) not in faulty.attempts
        assert keys_of(await effects(ks, 0)) == []
        # The operator requeues; the confirmation is delivered, then the refund.
        faulty.fail_keys.clear()
        done = await outbox_admin.requeue(pool, c_id, operator="ops@example", reason="broker fixed",
                                          now=clock.now())
        assert len(done.resolved_escalations) == 1
        assert (await r.run_once()).published == 2
    assert keys_of(await effects(ks, 2)) == [conf(a), refund(a)]
    [action] = await pool.fetch("SELECT * FROM operator_actions")
    assert action["action"] == "outbox-requeue" and action["operator"] == "ops@example"
    assert action["state_before"]["delivery_attempts"] == 2
    assert action["state_after"]["delivery_attempts"] == 0


async def test_a_dead_lettered_confirmation_skipped_by_an_operator_lets_its_refund_through(
    pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings, attempts: list[Attempt]
) -> None:
    a = attempts[0]
    c_id = await queue_effect(pool, clock, a.attempt_id, "order-confirmation")
    await queue_effect(pool, clock, a.attempt_id, "refund-request")
    async with kafka_publisher(ks) as pub:
        faulty = FaultyPublisher(pub, fail_keys={conf(a)})
        r = relay(pool, faulty, clock, ks, max_delivery_attempts=1)
        assert (await r.run_once()).dead_lettered == 1
        with pytest.raises(outbox_admin.OutboxActionRefused):
            await outbox_admin.skip(pool, c_id + 1, operator="ops", reason="x", now=clock.now())
        await outbox_admin.skip(pool, c_id, operator="ops", reason="customer refunded by hand",
                                now=clock.now())
        after = await r.run_once()
        # The refund, and the dead-letter escalation's alert.
        assert after.published_by_kind == {"refund-request": 1, "operator-alert": 1}
    assert keys_of(await effects(ks, 1)) == [refund(a)]
    row = await outbox_row(pool, c_id)
    assert row["dead_lettered_at"] is None and row["dispatched_at"] is not None
    assert "skipped by operator ops" in row["last_error"]


# --------------------------------------------------------------------------- M63, checklist 21


@pytest.mark.parametrize("state", ["dead-lettered", "backing-off"])
async def test_an_alert_for_an_attempt_whose_confirmation_is_stuck_is_delivered_without_waiting(
    pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings, attempts: list[Attempt], state: str
) -> None:
    a = attempts[0]
    c_id = await queue_effect(pool, clock, a.attempt_id, "order-confirmation")
    async with kafka_publisher(ks) as pub:
        faulty = FaultyPublisher(pub, fail_keys={conf(a)})
        r = relay(pool, faulty, clock, ks, max_delivery_attempts=1 if state == "dead-lettered" else 5)
        await r.run_once()
        row = await outbox_row(pool, c_id)
        assert (row["dead_lettered_at"] is not None) == (state == "dead-lettered")
        async with pool.acquire() as conn, conn.transaction():
            esc = await escalations.raise_escalation(conn, key=f"attempt:{a.attempt_id}:deadline",
                                                     reason=EscalationReason.DEADLINE,
                                                     attempt_id=a.attempt_id, now=clock.now(),
                                                     reminder_interval=REMINDER_INTERVAL)
        result = await r.run_once()  # same instant: the confirmation is not due, the alert is
        assert result.published >= 1
    got = await alerts(ks, 1)
    assert f"escalation:{esc}:initial" in keys_of(got)
    assert (await outbox_row(pool, c_id))["dispatched_at"] is None
    alert = next(m for m in got if m.dedup_key == f"escalation:{esc}:initial")
    assert alert.key == f"escalation:{esc}" and alert.headers["attempt_id"] == str(a.attempt_id)


# --------------------------------------------------------------------------- M64, checklist 18, 21


async def test_a_relay_that_finds_the_earliest_row_locked_does_not_deliver_the_later_row(
    pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings, attempts: list[Attempt]
) -> None:
    a, b, _ = attempts
    c_id = await queue_effect(pool, clock, a.attempt_id, "order-confirmation")
    r_id = await queue_effect(pool, clock, a.attempt_id, "refund-request")
    await queue_effect(pool, clock, b.attempt_id, "order-confirmation")
    async with pool.acquire() as holder, kafka_publisher(ks) as pub:
        tx = holder.transaction()
        await tx.start()
        await holder.execute("SELECT 1 FROM outbox_messages WHERE message_id = $1 FOR UPDATE", c_id)
        result = await relay(pool, pub, clock, ks, name="other").run_once()
        assert result.published == 1  # attempt b only
        assert (await outbox_row(pool, r_id))["dispatched_at"] is None
        await tx.rollback()
    assert keys_of(await effects(ks, 1)) == [conf(b)]


async def test_two_relays_a_claim_in_flight_never_makes_its_successor_eligible_for_the_other(
    pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings, attempts: list[Attempt]
) -> None:
    a = attempts[0]
    await queue_effect(pool, clock, a.attempt_id, "order-confirmation")
    async with kafka_publisher(ks) as pub:
        gate = asyncio.Event()
        slow = FaultyPublisher(pub, gate=gate)
        first = relay(pool, slow, clock, ks, name="first")
        in_flight = asyncio.create_task(first.run_once())
        async with asyncio.timeout(10):
            await slow.waiting.wait()  # the first relay holds its claim on the confirmation
        # The refund is queued while the confirmation is claimed and unacknowledged.
        r_id = await queue_effect(pool, clock, a.attempt_id, "refund-request")
        second = await relay(pool, pub, clock, ks, name="second").run_once()
        assert second.claimed == 0
        gate.set()
        assert (await in_flight).published == 1
        assert (await outbox_row(pool, r_id))["dispatched_at"] is None
        assert (await relay(pool, pub, clock, ks, name="second").run_once()).published == 1
    assert keys_of(await effects(ks, 2)) == [conf(a), refund(a)]


# --------------------------------------------------------------------------- M38, checklist 18


async def test_a_row_that_can_never_be_delivered_is_dead_lettered_escalated_and_does_not_delay_others(
    pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings, attempts: list[Attempt]
) -> None:
    a, b, c = attempts
    # A real limit: the record exceeds the producer's max_request_size (Kafka's message.max.bytes).
    huge = await queue_effect(pool, clock, a.attempt_id, "order-confirmation",
                              note="x" * (ks.max_request_size + 1024))
    await queue_effect(pool, clock, b.attempt_id, "order-confirmation")
    async with kafka_publisher(ks) as pub:
        r = relay(pool, pub, clock, ks, max_delivery_attempts=3, reminder_interval=timedelta(seconds=120))
        first = await r.run_once()
        assert first.failed == 1 and first.published == 1  # b is not delayed
        await queue_effect(pool, clock, c.attempt_id, "order-confirmation")
        for _ in range(2):
            clock.advance(60)
            await r.run_once()
        row = await outbox_row(pool, huge)
        assert row["dead_lettered_at"] is not None and row["delivery_attempts"] == 3
        assert "MessageSizeTooLarge" in row["last_error"]
        [episode] = await pool.fetch("SELECT * FROM payment_escalations")
        assert episode["escalation_key"] == f"outbox:{huge}:dead-letter"
        assert episode["reason"] == "outbox-dead-letter" and episode["attempt_id"] == a.attempt_id
        assert episode["detail"]["delivery_attempts"] == 3
        # PAYCORE_REMINDER_INTERVAL_S governs a dead letter's episode like every other.
        assert episode["next_reminder_at"] == episode["raised_at"] + timedelta(seconds=120)
        clock.advance(60)
        await r.run_once()
    assert sorted(keys_of(await effects(ks, 2))) == sorted([conf(b), conf(c)])
    [alert] = await alerts(ks, 1)
    assert alert.dedup_key == f"escalation:{episode['escalation_id']}:initial"
    assert alert.payload["escalation_key"] == f"outbox:{huge}:dead-letter"


# --------------------------------------------------------------------------- M52, M37


async def test_a_resolved_escalation_that_recurs_opens_a_new_episode_whose_alert_is_delivered(
    pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings, attempts: list[Attempt]
) -> None:
    a = attempts[0]
    key = f"attempt:{a.attempt_id}:deadline"
    ids = []
    async with kafka_publisher(ks) as pub:
        r = relay(pool, pub, clock, ks)
        for _ in range(2):
            async with pool.acquire() as conn, conn.transaction():
                ids.append(await escalations.raise_escalation(conn, key=key, reason=EscalationReason.DEADLINE,
                                                              attempt_id=a.attempt_id, now=clock.now(),
                                                              reminder_interval=REMINDER_INTERVAL))
            assert (await r.run_once()).published == 1
            clock.advance(60)
            async with pool.acquire() as conn, conn.transaction():
                await escalations.resolve_for_attempt(conn, a.attempt_id, clock.now())
    assert ids[0] != ids[1] and None not in ids
    got = await alerts(ks, 2)
    assert sorted(keys_of(got)) == sorted([f"escalation:{ids[0]}:initial", f"escalation:{ids[1]}:initial"])


# --------------------------------------------------------------------------- crash before the alert


async def test_a_crash_after_an_escalation_commits_before_the_alert_is_sent_still_alerts_from_the_outbox(
    pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings, attempts: list[Attempt]
) -> None:
    a = attempts[0]
    async with pool.acquire() as conn, conn.transaction():
        esc = await escalations.raise_escalation(conn, key=f"attempt:{a.attempt_id}:deadline",
                                                 reason=EscalationReason.DEADLINE, attempt_id=a.attempt_id,
                                                 now=clock.now(), reminder_interval=REMINDER_INTERVAL)
    async with kafka_publisher(ks) as pub:
        # A relay claims the alert and dies before the broker has it.
        gate = asyncio.Event()
        dying = FaultyPublisher(pub, gate=gate)
        crashed = asyncio.create_task(relay(pool, dying, clock, ks, name="dying").run_once())
        async with asyncio.timeout(10):
            await dying.waiting.wait()
        crashed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await crashed
        assert keys_of(await alerts(ks, 0)) == []
        # The claim died with its transaction; another relay delivers the alert.
        assert (await relay(pool, pub, clock, ks, name="survivor").run_once()).published == 1
    assert keys_of(await alerts(ks, 1)) == [f"escalation:{esc}:initial"]


# --------------------------------------------------------------------------- order under load


async def test_per_attempt_order_holds_across_three_relays_and_1000_attempts_with_random_publish_failures(
    pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings
) -> None:
    kinds = ["order-confirmation", "fulfillment-request", "refund-request"]
    keys = [f"attempt:{uuid.uuid4()}" for _ in range(1000)]
    async with pool.acquire() as conn:
        await conn.executemany(
            "INSERT INTO outbox_messages"
            " (dedup_key, ordering_key, kind, payload, created_at, next_attempt_at)"
            " VALUES ($1, $2, $3, $4, $5, $5)",
            [(f"{k}:{kind}", k, kind, contracts.example(kind, dedup_key=f"{k}:{kind}",
                                                        attempt_id=k.removeprefix("attempt:")), clock.now())
             for kind in kinds for k in keys])  # interleaved across attempts: ids are per kind round
    total = len(keys) * len(kinds)
    async with kafka_publisher(ks) as pub:
        relays = [relay(pool, FaultyPublisher(pub, fail_rate=0.2, rng=random.Random(i)),
                        clock, ks, name=f"relay-{i}", max_delivery_attempts=100, backoff_base_s=0.5,
                        backoff_max_s=2.0, batch_size=150, max_chain=3)
                  for i in range(3)]
        async with asyncio.timeout(90):
            while await pool.fetchval("SELECT count(*) FROM outbox_messages WHERE dispatched_at IS NULL"):
                results = await asyncio.gather(*(r.run_once() for r in relays))
                if not any(res.claimed for res in results):
                    clock.advance(1)  # everything left is backing off
        failures = await pool.fetchval("SELECT count(*) FROM outbox_messages WHERE delivery_attempts > 0")
        assert failures > 100  # the injected failures really happened
        dead = await pool.fetchval("SELECT count(*) FROM outbox_messages WHERE dead_lettered_at IS NOT NULL")
        assert dead == 0
    # The relay's own guarantee: every row it marked dispatched was acknowledged by the broker.
    acked = [k for r in relays for k in r.publisher.acked]  # type: ignore[attr-defined]
    assert len(acked) == len(set(acked)) == total
    try:
        got = await effects(ks, total, deadline_s=10)
    except AssertionError as exc:
        got = await effects(ks, 0)
        lost = sorted(set(acked) - set(keys_of(got)))
        raise AssertionError(
            f"the broker lost {len(lost)} acknowledged records: {lost[:5]} ({exc})") from None
    assert len(got) == total  # faults are injected before producing: no duplicates either
    by_key: dict[str, list[int]] = defaultdict(list)
    for m in sorted(got, key=lambda m: (m.partition, m.offset)):
        assert m.key is not None and m.message_id is not None
        by_key[m.key].append(m.message_id)
    assert len(by_key) == len(keys)
    for key, ids in by_key.items():
        assert ids == sorted(ids), key
        assert len(ids) == 3


async def test_a_failed_and_a_dead_lettered_send_log_json_lines_that_name_their_attempt(
    pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings, attempts: list[Attempt]
) -> None:
    """The relay's correlation: what an on-call engineer greps for when an effect is late."""
    a = attempts[0]
    await queue_effect(pool, clock, a.attempt_id, "order-confirmation")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter("dispatcher"))
    relay_log = logging.getLogger("paycore.dispatcher")
    relay_log.addHandler(handler)
    try:
        async with kafka_publisher(ks) as pub:
            r = relay(pool, FaultyPublisher(pub, fail_keys={conf(a)}), clock, ks, max_delivery_attempts=2)
            await r.run_once()
            clock.advance(10)
            assert (await r.run_once()).dead_lettered == 1
    finally:
        relay_log.removeHandler(handler)
    lines = [orjson.loads(line) for line in stream.getvalue().splitlines()]
    assert [(line["level"], line.get("attempt_id")) for line in lines] == [
        ("WARNING", str(a.attempt_id)), ("ERROR", str(a.attempt_id))]
    assert all(line["service"] == "dispatcher" for line in lines)
