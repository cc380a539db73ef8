"""Claims, leases and scheduling: which due attempt a sweep takes and in what order, that each
is claimed once however many workers sweep, who may release a lease, and when a young
attempt is looked at again.

The recovery matrix continued; setup as in test_recovery_matrix.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta

from paycore import leases, writer
from paycore.attempts import record_outcome
from paycore.domain import AttemptState, Escalation, EscalationReason, ProviderOutcome
from paycore_recovery.loop import Pass
from tests.support.recovery import RecoveryStack, seconds, settle_s
from tests.support.timings import REMINDER_INTERVAL

# -- Scheduling: a young Started attempt ----------------------------------------------------------


async def test_a_young_started_attempt_is_left_alone_until_its_call_record_and_processing_time_pass(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.started_attempt()
    rec.clock.advance(20)
    await rec.due_now(attempt)
    assert await rec.worker().run_pass() == [Pass.RESCHEDULED]
    after = await rec.current(attempt)
    assert after.state is AttemptState.STARTED and after.recovery_owner is None
    assert after.first_sent_at is not None
    assert after.next_check_at == after.first_sent_at + seconds(15 + 5 + 30)
    assert after.next_check_at == after.first_sent_at + seconds(settle_s(rec))
    assert "lookup" not in await rec.history(attempt)
    assert await rec.lookup_requests() == [] and await rec.sends_for(attempt) == []


# -- Leases ---------------------------------------------------------------------------------------


async def test_a_stale_worker_cannot_release_the_new_owners_lease(rec: RecoveryStack) -> None:
    attempt = await rec.started_attempt()
    lease_a = leases.new_lease("w")
    assert await leases.claim(rec.pool, attempt.attempt_id, lease_a, rec.clock.now(), rec.recovery.lease_s)
    assert await leases.claim(rec.pool, attempt.attempt_id, leases.new_lease("other"), rec.clock.now(),
                              rec.recovery.lease_s) is None  # A's live lease keeps others out
    rec.clock.advance(rec.recovery.lease_s)  # A's lease expires; A is stalled, not dead
    now = rec.clock.now()
    # B claims it, even under the same owner name: only the fresh token tells them apart.
    lease_b = leases.new_lease("w")
    assert await leases.claim(rec.pool, attempt.attempt_id, lease_b, now, rec.recovery.lease_s)
    before = await rec.current(attempt)

    assert await leases.finish(rec.pool, attempt.attempt_id, lease_a, now, 60) is False
    assert await writer.escalate_and_finish(rec.pool, attempt.attempt_id, lease_a,
                                            Escalation(EscalationReason.DEADLINE), recheck_after_s=60,
                                            now=now, reminder_interval=REMINDER_INTERVAL) is False
    after = await rec.current(attempt)
    assert after == before  # B's lease intact, schedule unchanged
    assert after.lease_token == lease_b.token
    assert after.lease_expires_at == now + seconds(rec.recovery.lease_s)
    assert await rec.escalation_rows() == [] and await rec.alerts() == []
    assert await leases.owns(rec.pool, attempt.attempt_id, lease_b, now)
    assert not await leases.owns(rec.pool, attempt.attempt_id, lease_a, now)

    # A applying a valid provider outcome records it, but still cannot release B's lease.
    recorded = (await record_outcome(
        rec.pool, attempt.attempt_id,
        ProviderOutcome.processing("pay_observed_by_a", amount_minor=attempt.amount_minor,
                                   currency=attempt.currency),
        now=now, actor="recovery-a", recheck_after_s=60, from_send=False, lease=lease_a,
        reminder_interval=REMINDER_INTERVAL)).attempt
    assert recorded.provider_status == "processing" and recorded.version == attempt.version + 1
    assert recorded.recovery_owner == "w" and recorded.lease_token == lease_b.token
    assert await leases.finish(rec.pool, attempt.attempt_id, lease_b, now, 60) is True


async def test_a_recovery_pass_that_finishes_releases_its_lease_so_the_next_due_check_claims_without_waiting(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("lose_response")
    await rec.make_due(attempt)
    await rec.sandbox.fault("not_processed_503", times=1, match={"operation": "lookup"})
    now = rec.clock.now()
    assert await rec.worker("a").run_pass() == [Pass.LOOKUP_FAILED]
    after = await rec.current(attempt)
    assert after.recovery_owner is None and after.lease_token is None and after.lease_expires_at is None
    delay = (after.next_check_at - now).total_seconds()
    assert 0 < delay < rec.recovery.lease_s
    rec.clock.advance(delay)  # due again, well before A's lease would have expired
    assert await rec.worker("b").run_pass() == [Pass.RESOLVED]
    assert await rec.state(attempt) == "Succeeded"


# -- Sweeps: claim order, SKIP LOCKED, several workers --------------------------------------------


async def test_any_number_of_recovery_instances_resolve_each_attempt_once(rec: RecoveryStack) -> None:
    attempts = []
    for i in range(10):
        attempts.append(await rec.charged_but_unknown(customer=f"cus_charged_{i}"))
        attempts.append(await rec.unknown_never_sent(customer=f"cus_unsent_{i}"))
    workers = [rec.worker(f"w{i}") for i in range(3)]
    rounds = 0
    results: list[Pass] = []
    while await rec.pool.fetchval("SELECT count(*) FROM payment_attempts"
                                  " WHERE state IN ('NotStarted', 'Started', 'Unknown')"):
        assert rounds < 10, "recovery did not converge"
        rounds += 1
        await rec.make_due()
        for passes in await asyncio.gather(*(w.run_pass() for w in workers)):
            results.extend(passes)
    assert {await rec.state(a) for a in attempts} == {"Succeeded"}
    for a in attempts:
        assert len(await rec.payments_for(a)) == 1, a.client_reference
        assert len(await rec.sends_for(a)) == 1, a.client_reference  # never resent twice
        assert len(await rec.lookup_events(a)) <= rounds
    assert len(await rec.sandbox.ledger()) == 20
    assert results.count(Pass.RESENT) == 10
    assert results.count(Pass.RESOLVED) == 10
    assert await rec.escalation_rows() == []


async def test_a_sweep_claims_due_attempts_in_next_check_then_created_then_id_order(
    rec: RecoveryStack,
) -> None:
    a = [await rec.charged_but_unknown(customer=f"cus_order_{i}") for i in range(5)]
    base = rec.clock.now()
    # (next_check_at, created_at) per attempt, set against creation order.
    schedule = {0: (3, 1), 1: (2, 1), 2: (2, 2), 3: (1, 1), 4: (1, 1)}
    for i, (due_ago, created_ago) in schedule.items():
        await rec.pool.execute(
            "UPDATE payment_attempts SET next_check_at = $2, created_at = $3 WHERE attempt_id = $1",
            a[i].attempt_id, base - timedelta(seconds=due_ago), base - timedelta(hours=created_ago))
    one_lane = dataclasses.replace(rec.recovery, concurrency=1)
    assert await rec.worker(recovery=one_lane).run_pass() == [Pass.RESOLVED] * 5
    rows = await rec.pool.fetch(
        "SELECT attempt_id FROM payment_attempt_events WHERE kind = 'lookup' AND attempt_id = ANY($1::uuid[])"
        " ORDER BY event_id", [x.attempt_id for x in a])
    last_two = sorted([a[3].attempt_id, a[4].attempt_id])  # same due time and creation: by id
    assert [r["attempt_id"] for r in rows] == [a[0].attempt_id, a[2].attempt_id, a[1].attempt_id, *last_two]


async def test_a_sweep_never_claims_a_resolved_attempt_even_when_its_next_check_time_has_passed(
    rec: RecoveryStack,
) -> None:
    succeeded = await rec.charged_but_unknown(customer="cus_paid")
    closed = await rec.not_started_attempt(customer="cus_gone")
    rec.clock.advance(rec.hooks.settings.abandonment_threshold_s)
    await rec.make_due()
    assert sorted(await rec.worker().run_pass()) == sorted([Pass.RESOLVED, Pass.CLOSED_NEVER_SENT])
    assert await rec.state(succeeded) == "Succeeded" and await rec.state(closed) == "NotApplied"
    live = await rec.charged_but_unknown(customer="cus_live")  # due after both resolved ones
    requests_before = len(await rec.sandbox.requests())
    rec.clock.advance(rec.recovery.slow_cadence_s * 24)  # every stored next_check_at is long past
    one_lane = dataclasses.replace(rec.recovery, concurrency=1)  # no other lane to go past them
    assert await rec.worker("w2", recovery=one_lane).run_pass() == [Pass.RESOLVED]  # the live one
    assert len(await rec.lookup_events(live)) == 1
    assert len(await rec.sandbox.requests()) == requests_before + 1  # its lookup: nothing else asked
    for attempt in (succeeded, closed):
        assert (await rec.current(attempt)).recovery_owner is None


async def test_workers_sweeping_together_claim_each_due_attempt_once_and_never_collide(
    rec: RecoveryStack,
) -> None:
    attempts = [await rec.charged_but_unknown(customer=f"cus_swept_{i}") for i in range(12)]
    await rec.make_due()
    lanes = dataclasses.replace(rec.recovery, concurrency=4)
    a, b = rec.worker("a", recovery=lanes), rec.worker("b", recovery=lanes)
    passes_a, passes_b = await asyncio.gather(a.run_pass(), b.run_pass())
    # SKIP LOCKED hands each claimer a different attempt: no wasted claim, no second look.
    assert sorted(passes_a + passes_b) == [Pass.RESOLVED] * 12
    for attempt in attempts:
        assert len(await rec.lookup_events(attempt)) == 1
        assert len(await rec.payments_for(attempt)) == 1
    assert await a.run_pass() == await b.run_pass() == []


async def test_a_sweep_skips_a_due_attempt_whose_row_another_transaction_holds_and_takes_the_next(
    rec: RecoveryStack,
) -> None:
    first, second = [await rec.charged_but_unknown(customer=f"cus_held_{i}") for i in range(2)]
    await rec.make_due()
    async with rec.pool.acquire() as holder, holder.transaction():
        # Another writer (say, a notification being applied) holds the earliest due attempt.
        await holder.execute("SELECT 1 FROM payment_attempts WHERE attempt_id = $1 FOR NO KEY UPDATE",
                             first.attempt_id)
        passes = await asyncio.wait_for(rec.worker().run_pass(), timeout=10)  # never waits on the lock
        assert passes == [Pass.RESOLVED]
        assert await rec.state(second) == "Succeeded"
    assert await rec.state(first) == "Unknown"
    assert await rec.worker().run_pass() == [Pass.RESOLVED]  # the next sweep takes it
    assert await rec.state(first) == "Succeeded"
