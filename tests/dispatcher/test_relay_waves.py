"""The relay sends chains in waves (the n-th row of every key at once): a failure or a
late acknowledgement inside a wave touches exactly that row and the rows behind it.

Real PostgreSQL, real Kafka-protocol broker; faults are injected into our own send path.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from paycore.clock import FakeClock
from paycore.kafka import KafkaSettings
from paycore_dispatcher.relay import Publisher, Record

from .support import (
    DEADLINE_S,
    FaultyPublisher,
    effects,
    kafka_publisher,
    keys_of,
    outbox_row,
    queue_bare,
    relay,
)

EFFECTS = ("order-confirmation", "fulfillment-request", "refund-request")


async def queue_keys(pool: asyncpg.Pool, clock: FakeClock, n: int) -> dict[str, list[tuple[int, str]]]:
    """``n`` keys with three effects each, queued interleaved: key -> [(message_id, dedup_key)]."""
    keys = [f"attempt:{uuid.uuid4()}" for _ in range(n)]
    rows: dict[str, list[tuple[int, str]]] = {k: [] for k in keys}
    for effect in EFFECTS:
        for k in keys:
            rows[k].append((await queue_bare(pool, clock, k, effect), f"{k}:{effect}"))
    return rows


def per_key_order(dedup_keys: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for d in dedup_keys:
        out.setdefault(d.rsplit(":", 1)[0], []).append(d)
    return out


async def test_a_failed_send_in_the_middle_of_a_wave_stops_only_its_own_key(
    pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings
) -> None:
    rows = await queue_keys(pool, clock, 6)
    broken = list(rows)[2]
    (first_id, first), (failing_id, failing), (last_id, last) = rows[broken]
    async with kafka_publisher(ks) as pub:
        faulty = FaultyPublisher(pub, fail_keys={failing})
        r = relay(pool, faulty, clock, ks, max_delivery_attempts=5)
        result = await r.run_once()
        # Six keys in three waves: every row but the failed one and the one behind it.
        assert (result.published, result.failed) == (16, 1)
        assert (await outbox_row(pool, first_id))["dispatched_at"] == clock.now()
        failed = await outbox_row(pool, failing_id)
        assert failed["dispatched_at"] is None and failed["delivery_attempts"] == 1
        assert (await outbox_row(pool, last_id))["dispatched_at"] is None
        assert last not in faulty.attempts  # never sent behind its failed predecessor
        undispatched = await pool.fetchval("SELECT count(*) FROM outbox_messages WHERE dispatched_at IS NULL")
        assert undispatched == 2
        got = per_key_order(keys_of(await effects(ks, 16)))
        assert got[broken] == [first]
        assert all(got[k] == [d for _, d in rows[k]] for k in rows if k != broken)
        # Healthy and due again: the rest of the broken key follows, in order.
        faulty.fail_keys.clear()
        clock.advance(10)
        assert (await r.run_once()).published == 2
    assert per_key_order(keys_of(await effects(ks, 18)))[broken] == [first, failing, last]


@dataclass
class HoldOne:
    """Never acknowledges (nor produces) one dedup key; ``others_acked`` is set once
    ``others`` other sends were acknowledged."""

    inner: Publisher
    held: str
    others: int
    acked: list[str] = field(default_factory=list)
    others_acked: asyncio.Event = field(default_factory=asyncio.Event)

    async def publish(self, records: Sequence[Record], acks: list[asyncio.Future[Any]]) -> None:
        for record in records:
            dedup_key = dict(record[3])["dedup_key"].decode()
            if dedup_key == self.held:
                acks.append(asyncio.get_running_loop().create_future())  # no acknowledgement, ever
                continue
            await self.inner.publish([record], acks)
            acks[-1].add_done_callback(lambda ack, d=dedup_key: self._acked(d))

    def _acked(self, dedup_key: str) -> None:
        self.acked.append(dedup_key)
        if len(self.acked) >= self.others:
            self.others_acked.set()


async def test_a_late_acknowledgement_times_out_only_its_row_and_the_acknowledged_rest_of_the_wave_is_marked(
    pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings
) -> None:
    rows = await queue_keys(pool, clock, 4)
    stuck = list(rows)[1]
    (stuck_id, stuck_dedup), (behind_id, _), _ = rows[stuck]
    async with kafka_publisher(ks) as pub:
        hold = HoldOne(pub, held=stuck_dedup, others=3)
        r = relay(pool, hold, clock, ks, max_delivery_attempts=5, send_timeout_s=10.0)
        started = clock.now()
        running = asyncio.create_task(r.run_once())
        # The first wave's three other heads are acknowledged; only the stuck one waits.
        async with asyncio.timeout(DEADLINE_S):
            await hold.others_acked.wait()
        clock.advance(11)  # past the send deadline, on the application clock
        result = await running
    # Wave 1: 3 acknowledged + 1 timed out; waves 2 and 3: the other three keys.
    assert (result.published, result.failed) == (9, 1)
    timed_out = await outbox_row(pool, stuck_id)
    assert timed_out["dispatched_at"] is None and timed_out["delivery_attempts"] == 1
    assert timed_out["last_error"].startswith("TimeoutError")
    assert (await outbox_row(pool, behind_id))["dispatched_at"] is None
    others = [mid for k in rows if k != stuck for mid, _ in rows[k]]
    marked = await pool.fetch("SELECT dispatched_at FROM outbox_messages WHERE message_id = ANY($1)", others)
    assert [m["dispatched_at"] for m in marked] == [started] * 9


async def test_a_malformed_row_behind_a_failed_send_is_not_dead_lettered_in_that_pass(
    pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings
) -> None:
    # The relay builds a wave's next rows while the wave is in flight; a row built ahead
    # behind a failed send is not reached this pass, so its contract failure must not count.
    key, other = f"attempt:{uuid.uuid4()}", f"attempt:{uuid.uuid4()}"
    failing = await queue_bare(pool, clock, key, "fulfillment-request")
    malformed = await queue_bare(pool, clock, key, "order-confirmation", amount_minor="not a number")
    await queue_bare(pool, clock, other, "order-confirmation")
    await queue_bare(pool, clock, other, "refund-request")
    async with kafka_publisher(ks) as pub:
        faulty = FaultyPublisher(pub, fail_keys={f"{key}:fulfillment-request"})
        result = await relay(pool, faulty, clock, ks, max_delivery_attempts=5).run_once()
        assert (result.published, result.failed, result.dead_lettered) == (2, 1, 0)
        assert (await outbox_row(pool, failing))["delivery_attempts"] == 1
        behind = await outbox_row(pool, malformed)
        assert behind["delivery_attempts"] == 0 and behind["dead_lettered_at"] is None
        assert f"{key}:order-confirmation" not in faulty.attempts
        # Once its predecessor is through, the malformed row is reached and dead-lettered at once.
        faulty.fail_keys.clear()
        clock.advance(10)
        again = await relay(pool, faulty, clock, ks, max_delivery_attempts=5).run_once()
        assert (again.published, again.dead_lettered) == (1, 1)
        assert (await outbox_row(pool, malformed))["dead_lettered_at"] is not None
