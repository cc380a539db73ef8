"""Claims made for several lanes at once: each attempt under its own lease.

A sweep's lanes that wait for work together are claimed for in one statement
(``paycore.leases.claim_due``). These tests show that batching changes nothing a
lease guards: every attempt has its own token, two instances never hold the
same attempt, and a lease lost by one attempt of a batch stops that attempt's
resend only. The recovery matrix continued; setup as in test_recovery_matrix.py.
"""

from __future__ import annotations

import asyncio
import dataclasses

from paycore import leases
from paycore.attempt_row import Attempt
from paycore_recovery.loop import Pass
from tests.support.recovery import RecoveryStack, seconds


async def test_one_claim_statement_gives_each_attempt_its_own_token_and_two_owners_never_share_one(
    rec: RecoveryStack,
) -> None:
    attempts = [await rec.charged_but_unknown(customer=f"cus_batch_{i}") for i in range(6)]
    await rec.make_due()
    now = rec.clock.now()
    batch_a = [leases.new_lease("a") for _ in range(4)]
    batch_b = [leases.new_lease("b") for _ in range(4)]
    claimed_a, claimed_b = await asyncio.gather(
        leases.claim_due(rec.pool, batch_a, now, rec.recovery.lease_s),
        leases.claim_due(rec.pool, batch_b, now, rec.recovery.lease_s))

    ids_a = {a.attempt_id for a, _ in claimed_a}
    ids_b = {a.attempt_id for a, _ in claimed_b}
    assert not ids_a & ids_b  # SKIP LOCKED: never the same attempt twice
    assert ids_a | ids_b == {a.attempt_id for a in attempts}
    tokens = [lease.token for _, lease in claimed_a + claimed_b]
    assert len(set(tokens)) == 6  # one token per attempt, never shared within a batch
    for attempt, lease in claimed_a + claimed_b:
        row = await rec.current(attempt)
        assert (row.recovery_owner, row.lease_token) == (lease.owner, lease.token)
        assert row.lease_expires_at == now + seconds(rec.recovery.lease_s)

    # A token of the same batch owns nothing else: releasing one attempt never releases another.
    (first, first_lease), (_, second_lease) = claimed_a[:2]
    assert await leases.finish(rec.pool, first.attempt_id, second_lease, now, 60) is False
    assert await leases.owns(rec.pool, first.attempt_id, first_lease, now)
    assert await leases.finish(rec.pool, first.attempt_id, first_lease, now, 60) is True
    # Nothing left to claim while the others' leases are held.
    assert await leases.claim_due(rec.pool, [leases.new_lease("c") for _ in range(3)], now,
                                  rec.recovery.lease_s) == []


async def test_instances_with_several_lanes_each_work_every_attempt_once(rec: RecoveryStack) -> None:
    attempts = [await rec.unknown_never_sent(customer=f"cus_lanes_{i}") for i in range(8)]
    await rec.make_due()
    lanes = dataclasses.replace(rec.recovery, concurrency=3)
    workers = [rec.worker(f"w{i}", recovery=lanes) for i in range(2)]
    passes = [p for ps in await asyncio.gather(*(w.run_pass() for w in workers)) for p in ps]
    assert sorted(passes) == [Pass.RESENT] * 8
    for attempt in attempts:
        assert len(await rec.sends_for(attempt)) == 1  # one resend each: no attempt worked twice
        assert len(await rec.lookup_events(attempt)) == 1
        assert (await rec.history(attempt)).count("send_intent") == 2  # the first send and one resend
        assert await rec.state(attempt) == "Succeeded"


async def test_a_lease_lost_by_one_attempt_of_a_batch_stops_its_resend_and_no_other(
    rec: RecoveryStack,
) -> None:
    attempts = [await rec.unknown_never_sent(customer=f"cus_lost_{i}") for i in range(3)]
    await rec.make_due()
    lanes = dataclasses.replace(rec.recovery, concurrency=3)  # all three claimed in one statement
    worker = rec.worker("w1", recovery=lanes)
    victim = attempts[1]
    taken = leases.new_lease("w2")

    async def another_worker_takes_the_victim(a: Attempt) -> None:
        if a.attempt_id != victim.attempt_id:
            return
        # Its lease alone lapses (as if w1 stalled on it) and another worker claims it -- in one
        # transaction, so a lane of w1 looking for more work cannot claim the lapsed lease between
        # the two (its claim skips the locked row; seen once in CI before this).
        async with rec.pool.acquire() as conn, conn.transaction():
            await conn.execute("UPDATE payment_attempts SET lease_expires_at = $2 WHERE attempt_id = $1",
                               a.attempt_id, rec.clock.now())
            assert await leases.claim(conn, a.attempt_id, taken, rec.clock.now(), rec.recovery.lease_s)

    worker.before_final_check = another_worker_takes_the_victim
    assert sorted(await worker.run_pass()) == sorted([Pass.RESENT, Pass.RESENT, Pass.ABANDONED])
    assert await rec.sends_for(victim) == []  # w1 sent nothing for the attempt it lost
    assert (await rec.history(victim))[-2:] == ["send_intent", "send_abandoned"]
    held = await rec.current(victim)
    assert (held.recovery_owner, held.lease_token) == ("w2", taken.token)
    for other in (attempts[0], attempts[2]):
        assert len(await rec.sends_for(other)) == 1 and await rec.state(other) == "Succeeded"
