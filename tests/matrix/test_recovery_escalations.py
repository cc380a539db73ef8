"""Escalations and deadlines: one alert per open episode across passes and workers; a
notification that resolves the attempt first wins; the stamped deadline holds through a
configuration change; past it lookups go on, slowly and read-only; a resend refused
before execution is escalated at once and never repeated.

The recovery matrix continued; setup as in test_recovery_matrix.py.
"""

from __future__ import annotations

import asyncio
import dataclasses

from paycore import accounts, leases, writer
from paycore.domain import AttemptState, Escalation, EscalationReason
from paycore_recovery.loop import Pass
from tests.support.recovery import DEADLINE_S, RecoveryStack, initial_alerts, seconds
from tests.support.timings import REMINDER_INTERVAL
from tests.support.webhooks import TEST, event, payment_object

# -- Escalations and deadlines --------------------------------------------------------------------


async def test_escalation_is_raised_once_per_episode_across_passes_and_two_workers(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    rec.clock.advance(DEADLINE_S)
    a, b = rec.worker("a"), rec.worker("b")
    for _ in range(2):
        passes = [p for ps in await asyncio.gather(a.run_pass(), b.run_pass()) for p in ps]
        assert passes.count(Pass.ESCALATED) == 1
        assert set(passes) <= {Pass.ESCALATED, Pass.NOT_CLAIMED}
        rec.clock.advance(rec.recovery.slow_cadence_s)
    assert await rec.open_escalations() == [f"attempt:{attempt.attempt_id}:deadline"]
    [esc] = await rec.escalation_rows()
    assert await initial_alerts(rec) == [f"escalation:{esc['escalation_id']}:initial"]
    assert (await rec.history(attempt)).count("lookup") == 2
    assert len(await rec.sends_for(attempt)) == 1


async def test_a_notification_that_resolves_an_attempt_while_recovery_is_about_to_escalate_it_wins(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    rec.clock.advance(DEADLINE_S)
    lease = leases.new_lease("w1")
    assert await leases.claim(rec.pool, attempt.attempt_id, lease, rec.clock.now(), rec.recovery.lease_s)
    # The notification handler resolves it first.
    late = event(payment_object(payment_id="pay_late", reference=attempt.client_reference))
    r = await rec.hooks.deliver(late, timestamp=int(rec.clock.now().timestamp()))
    assert r.json()["result"] == "applied", r.text
    assert await rec.state(attempt) == "Succeeded"
    assert await writer.escalate_and_finish(rec.pool, attempt.attempt_id, lease,
                                            Escalation(EscalationReason.DEADLINE),
                                            recheck_after_s=rec.recovery.slow_cadence_s,
                                            now=rec.clock.now(), reminder_interval=REMINDER_INTERVAL) is False
    assert await rec.escalation_rows() == [] and await rec.alerts() == []


async def test_a_configuration_change_does_not_move_a_stamped_deadline_for_recovery(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_never_sent()
    assert attempt.first_sent_at is not None and attempt.escalation_deadline is not None
    stamped = attempt.escalation_deadline
    assert stamped == attempt.first_sent_at + seconds(DEADLINE_S)
    acct = rec.hooks.settings.account(TEST)
    assert acct is not None
    shorter = dataclasses.replace(acct, key_retention_s=3_600, escalation_margin_s=600)
    async with rec.pool.acquire() as conn, conn.transaction():  # the operator's explicit change
        await accounts.apply_provider_account(conn, shorter, rec.clock.now())
    settings = dataclasses.replace(rec.hooks.settings, accounts=tuple(
        shorter if a.provider_account == TEST else a for a in rec.hooks.settings.accounts))

    rec.clock.advance(2 * 3_600)  # past a deadline the new configuration would give, inside the stamped one
    assert (await rec.current(attempt)).escalation_deadline == stamped
    assert await rec.worker(settings=settings).run_pass() == [Pass.RESENT]
    assert await rec.state(attempt) == "Succeeded"
    assert len(await rec.payments_for(attempt)) == 1
    assert await rec.escalation_rows() == []
    # An attempt started now is stamped from the configuration now in force.
    fresh = await rec.started_attempt(customer="cus_bob")
    assert fresh.first_sent_at is not None
    assert fresh.escalation_deadline == fresh.first_sent_at + seconds(3_000)


async def test_lookups_that_keep_failing_past_the_deadline_still_escalate_and_keep_looking(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("lose_response")
    assert attempt.escalation_deadline is not None
    rec.clock.advance((attempt.escalation_deadline - rec.clock.now()).total_seconds() + 1)
    await rec.sandbox.fault("not_processed_503", match={"operation": "lookup"})
    worker = rec.worker()
    assert await worker.run_pass() == [Pass.LOOKUP_FAILED]
    assert await rec.open_escalations() == [f"attempt:{attempt.attempt_id}:deadline"]
    after = await rec.current(attempt)
    assert after.state is AttemptState.UNKNOWN and after.recovery_owner is None
    assert after.next_check_at > rec.clock.now()  # still scheduled: looking goes on
    assert len(await rec.sends_for(attempt)) == 1  # and nothing is sent past the deadline


async def test_failing_lookups_past_the_deadline_are_made_on_the_slow_read_only_cadence(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("lose_response")
    assert attempt.escalation_deadline is not None
    rec.clock.advance((attempt.escalation_deadline - rec.clock.now()).total_seconds() + 1)
    await rec.sandbox.fault("not_processed_503", match={"operation": "lookup"})
    assert await rec.worker().run_pass() == [Pass.LOOKUP_FAILED]
    after = await rec.current(attempt)
    # Not the ordinary backoff's first step: past the deadline every pass only reads, slowly.
    assert after.next_check_at == rec.clock.now() + seconds(rec.recovery.slow_cadence_s)


async def test_a_resend_refused_before_execution_is_escalated_at_once_and_never_repeated(
    rec: RecoveryStack,
) -> None:
    # The first send never arrived; the stored token has since expired, so every resend
    # of these bytes is refused with a validation 400 (nothing is created, nothing stored).
    attempt = await rec.unknown_via_checkout_paying("tok_expired", "drop_request")
    await rec.make_due(attempt)
    assert await rec.worker().run_pass() == [Pass.RESENT]
    assert await rec.state(attempt) == "Unknown"  # a rejected resend proves nothing about the first
    [escalation] = await rec.escalation_rows()
    assert escalation["escalation_key"] == f"attempt:{attempt.attempt_id}:resend-rejected"
    assert escalation["resolved_at"] is None
    assert await rec.alerts() == [f"escalation:{escalation['escalation_id']}:initial"]
    after = await rec.current(attempt)
    assert after.next_check_at == rec.clock.now() + seconds(rec.recovery.slow_cadence_s)
    sends = len(await rec.sends_for(attempt))

    # Later passes keep looking the payment up, and never send the refused bytes again.
    for _ in range(2):
        await rec.make_due(attempt)
        assert await rec.worker().run_pass() == [Pass.ESCALATED]
    assert len(await rec.sends_for(attempt)) == sends
    assert [r["escalation_key"] for r in await rec.escalation_rows()] == [escalation["escalation_key"]]
    # The open episode alerted once (and reminds on its interval); no new episode per pass.
    assert [a for a in await rec.alerts() if a.endswith(":initial")] == [
        f"escalation:{escalation['escalation_id']}:initial"]
    assert len(await rec.lookup_events(attempt)) == 3
