"""NotStarted attempts, left by a checkout that crashed before the send boundary: recovery
reschedules a young one, closes a stale one NotApplied (never-sent), and never sends either.

The recovery matrix continued; setup as in test_recovery_matrix.py.
"""

from __future__ import annotations

from uuid import UUID

from paycore import attempts, leases
from paycore.attempts import StartResult, get_attempt, try_mark_started
from paycore.domain import AttemptState
from paycore_recovery.loop import Pass
from tests.support.recovery import RecoveryStack, seconds, settle_s

# -- NotStarted: crashes before the send boundary -------------------------------------------------


async def test_a_crash_after_not_started_is_closed_not_applied_after_the_threshold_then_a_new_checkout_succeeds(  # noqa: E501
    rec: RecoveryStack,
) -> None:
    threshold = rec.hooks.settings.abandonment_threshold_s
    attempt = await rec.not_started_attempt()  # the checkout crashed before the Started transition
    assert attempt.next_check_at == attempt.created_at + seconds(threshold)  # recovery will find it
    worker = rec.worker()

    # A young NotStarted attempt that recovery picks up is rescheduled, never sent by recovery.
    rec.clock.advance(10)
    await rec.due_now(attempt)
    assert await worker.run_pass() == [Pass.RESCHEDULED]
    young = await rec.current(attempt)
    assert young.state is AttemptState.NOT_STARTED
    assert young.next_check_at == attempt.created_at + seconds(threshold)
    assert young.recovery_owner is None and young.lease_token is None
    assert await rec.sends_for(attempt) == []

    # Past the abandonment threshold: closed as NotApplied (never-sent), never sent.
    await rec.make_due(attempt)
    assert await worker.run_pass() == [Pass.CLOSED_NEVER_SENT]
    closed = await rec.current(attempt)
    assert closed.state is AttemptState.NOT_APPLIED and closed.outcome_reason == "never-sent"
    assert closed.first_sent_at is None and closed.escalation_deadline is None
    assert closed.recovery_owner is None and closed.lease_token is None and closed.lease_expires_at is None
    assert await rec.sends_for(attempt) == [] and await rec.sandbox.ledger() == []
    assert await rec.history(attempt) == ["transition", "transition"]  # NotStarted, then NotApplied

    # The order is still payable: a new checkout makes attempt 2, which succeeds.
    r = await rec.hooks.shop.pay(attempt.order_id)
    assert r.status_code == 200 and r.json()["state"] == "Succeeded", r.text
    second = await get_attempt(rec.pool, UUID(r.json()["attempt_id"]))
    assert second.attempt_number == 2 and second.attempt_id != attempt.attempt_id
    assert len(await rec.sandbox.ledger()) == 1


async def test_a_stale_not_started_attempt_the_endpoint_starts_as_recovery_closes_it_is_rescheduled_not_closed(  # noqa: E501
    rec: RecoveryStack,
) -> None:
    attempt = await rec.not_started_attempt()
    await rec.make_due(attempt)  # stale: as old as the abandonment threshold
    lease = leases.new_lease("w1")
    claimed = await leases.claim(rec.pool, attempt.attempt_id, lease, rec.clock.now(), rec.recovery.lease_s)
    assert claimed is not None and claimed.version == attempt.version  # claiming is not a state change

    # The endpoint's Started transition commits first (a new version).
    now = rec.clock.now()
    result, started = await try_mark_started(rec.pool, claimed, now=now,
                                             next_check_at=now + seconds(1000))
    assert result is StartResult.STARTED and started is not None and started.version != claimed.version

    # Recovery acts on the attempt as it claimed it.
    worker = rec.worker("w1")
    assert await worker.rescue(claimed, lease) is Pass.RESCHEDULED
    after = await rec.current(attempt)
    assert after.state is AttemptState.STARTED  # not closed
    assert after.recovery_owner is None and after.lease_token is None  # released
    assert after.next_check_at == now + seconds(settle_s(rec))  # scheduled for its new state
    assert "NotApplied" not in [r["detail"].get("to") for r in await rec.pool.fetch(
        "SELECT detail FROM payment_attempt_events WHERE attempt_id = $1 AND kind = 'transition'",
        attempt.attempt_id)]
    # Released exactly once: there is nothing left for this lease to finish.
    assert await leases.finish(rec.pool, attempt.attempt_id, lease, now, 1) is False
    assert (await rec.current(attempt)).next_check_at == after.next_check_at


async def test_a_worker_whose_lease_was_reclaimed_cannot_close_the_not_started_attempt(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.not_started_attempt()
    await rec.make_due(attempt)  # stale: as old as the abandonment threshold
    stale = leases.new_lease("w1")
    claimed = await leases.claim(rec.pool, attempt.attempt_id, stale, rec.clock.now(), rec.recovery.lease_s)
    assert claimed is not None
    rec.clock.advance(rec.recovery.lease_s)  # w1 stalls past its lease; w2 takes the attempt over
    current = leases.new_lease("w2")
    assert await leases.claim(rec.pool, attempt.attempt_id, current, rec.clock.now(), rec.recovery.lease_s)
    assert await attempts.close_never_sent(rec.pool, claimed, stale, rec.clock.now(), "recovery-w1") is None
    after = await rec.current(attempt)
    assert after.state is AttemptState.NOT_STARTED and after.version == attempt.version
    assert (after.recovery_owner, after.lease_token) == ("w2", current.token)
