"""The growth bench's seeding (bench.growth_seed): data the real code can live with, at a small size.

The bench seeds 1M attempts with the same code; here 2,000 then 3,000 (grown, as the bench
grows), on a real migrated database with every constraint in force.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import asyncpg
import orjson

from bench import growth_seed
from bench.common import seed_provider_account
from paycore import contracts, leases
from paycore.clock import SystemClock
from paycore.outbox import OUTBOX

MIX = """
SELECT state, count(*) AS n, count(*) FILTER (WHERE next_check_at > now()) AS ahead
FROM payment_attempts GROUP BY state
"""


async def seeded(db_dsn: str, size: int) -> tuple[asyncpg.Connection, growth_seed.Progress]:
    conn = await asyncpg.connect(db_dsn)
    await seed_provider_account(conn)
    progress = await growth_seed.grow(conn, growth_seed.Progress(), size, now=SystemClock().now(),
                                      report=lambda _: None)
    return conn, progress


async def test_seeded_data_holds_the_invariants_and_grows(db_dsn: str) -> None:
    conn, progress = await seeded(db_dsn, 2000)
    try:
        assert await growth_seed.broken_invariants(conn) == dict.fromkeys(growth_seed.INVARIANTS, 0)
        attempts = await conn.fetchval("SELECT count(*) FROM payment_attempts")
        events = await conn.fetchval("SELECT count(*) FROM payment_attempt_events")
        assert 2000 <= attempts < 2010 and attempts == progress.attempts
        assert 8 <= events / attempts <= 11  # about ten history rows each
        mix = {r["state"]: (r["n"], r["ahead"]) for r in await conn.fetch(MIX)}
        assert set(mix) == {"Succeeded", "Failed", "Unknown", "NotApplied"}
        assert (mix["Succeeded"][0] + mix["Failed"][0]) / attempts > 0.9
        assert 0.01 < mix["Unknown"][0] / attempts < 0.05
        assert mix["Unknown"][1] == mix["Unknown"][0]  # every Unknown one's next check is ahead
        # Mostly dispatched, a few pending, none dead.
        pending = await conn.fetchval("SELECT count(*) FROM outbox_messages WHERE dispatched_at IS NULL")
        total = await conn.fetchval("SELECT count(*) FROM outbox_messages")
        assert 1 <= pending <= total * 0.01
        assert await conn.fetchval("SELECT count(*) FROM payment_escalations WHERE resolved_at IS NULL") > 0

        # Every payload the relay would send conforms to its contract.
        for kind in ("order-confirmation", "fulfillment-request", "operator-alert"):
            payload = await conn.fetchval("SELECT payload FROM outbox_messages WHERE kind = $1 LIMIT 1", kind)
            assert contracts.validate(orjson.loads(payload)) == [], kind

        # Grown further, the same database still holds (no key seeded twice: COPY would refuse).
        await growth_seed.grow(conn, progress, 3000, now=SystemClock().now(), report=lambda _: None)
        assert await conn.fetchval("SELECT count(*) FROM payment_attempts") == progress.attempts >= 3000
        assert await growth_seed.broken_invariants(conn) == dict.fromkeys(growth_seed.INVARIANTS, 0)
        # The escalation sequence continues after the seeded ids (a real raise would collide otherwise).
        top = await conn.fetchval("SELECT max(escalation_id) FROM payment_escalations")
        assert await conn.fetchval("SELECT nextval(pg_get_serial_sequence('payment_escalations',"
                                   " 'escalation_id'))") > top
    finally:
        await conn.close()


async def test_the_real_claim_and_relay_queries_run_on_it(db_dsn: str) -> None:
    conn, _ = await seeded(db_dsn, 2000)
    try:
        now = SystemClock().now()
        # Nothing is due as seeded: every Unknown attempt's next check is ahead.
        assert await leases.claim_due(conn, [leases.new_lease("t") for _ in range(5)], now, 90) == []
        due = [r["attempt_id"] for r in await conn.fetch(
            "SELECT attempt_id FROM payment_attempts WHERE state = 'Unknown' ORDER BY attempt_id LIMIT 12")]
        await conn.execute("UPDATE payment_attempts SET next_check_at = $2 WHERE attempt_id = ANY($1)",
                           due, now - timedelta(seconds=1))
        claimed = await leases.claim_due(conn, [leases.new_lease("t") for _ in range(50)], now, 90)
        assert sorted(a.attempt_id for a, _ in claimed) == sorted(due)
        assert all(a.state == "Unknown" and a.recovery_owner == "t" for a, _ in claimed)

        # The relay's head claim: the seeded pending rows are backing off (nothing due now);
        # once due, each is a head (its predecessor was dispatched) and the claim takes it.
        async with conn.transaction():
            assert await OUTBOX.claim_heads.fetch(conn, now=now, limit=500) == []
        pending = await conn.fetch("SELECT message_id, ordering_key FROM outbox_messages"
                                   " WHERE dispatched_at IS NULL")
        later = now + timedelta(minutes=10)
        async with conn.transaction():
            heads = await OUTBOX.claim_heads.fetch(conn, now=later, limit=500)
            assert sorted(r["message_id"] for r in heads) == sorted(r["message_id"] for r in pending)
            followers = await OUTBOX.followers.fetch(conn, ordering_keys=[r["ordering_key"] for r in pending],
                                                     now=later)
            assert len(followers) == len(pending) and all(r["due"] for r in followers)
    finally:
        await conn.close()


# A copy of an order's Succeeded attempt, Succeeded too, with no history and no effects.
SECOND_SUCCEEDED = """
INSERT INTO payment_attempts (attempt_id, order_id, customer_id, attempt_number, provider_account,
    endpoint, api_version, client_reference, idempotency_key, request_body, amount_minor,
    currency, state, created_at, first_sent_at, escalation_deadline, next_check_at)
SELECT $1, order_id, customer_id, attempt_number + 1, provider_account, endpoint, api_version,
    client_reference || '-x', idempotency_key || '-x', request_body, amount_minor, currency,
    'Succeeded', created_at, first_sent_at, escalation_deadline, next_check_at
FROM payment_attempts WHERE order_id = $2 AND attempt_number = $3
"""


async def test_the_invariant_checks_see_broken_data(db_dsn: str) -> None:
    """The checks above could fail: a second Succeeded attempt on a paid order is caught."""
    conn, _ = await seeded(db_dsn, 300)
    try:
        order = await conn.fetchrow(
            "SELECT o.order_id, a.attempt_number FROM orders o JOIN payment_attempts a USING (order_id)"
            " WHERE o.status = 'Paid' AND a.state = 'Succeeded' LIMIT 1")
        await conn.execute(SECOND_SUCCEEDED, uuid.uuid4(), order["order_id"], order["attempt_number"])
        broken = await growth_seed.broken_invariants(conn)
        assert broken["at most one Succeeded attempt per order"] == 1
        assert broken["state matches the history's last transition"] == 1  # it has no history
        assert broken["every Succeeded attempt has its order confirmation and fulfillment queued"] == 1
    finally:
        await conn.close()
