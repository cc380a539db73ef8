"""Customer actions (3-D Secure): a current action is never resent and is rescheduled to its
expiry or the next status check; an expired one is reconciled; an Unknown attempt found
waiting for one moves to Started and shows it.

The recovery matrix continued; setup as in test_recovery_matrix.py.
"""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

from paycore.attempts import get_attempt
from paycore.domain import AttemptState
from paycore_recovery.loop import Pass
from tests.support.recovery import RecoveryStack, initial_alerts, seconds

# -- Customer actions -----------------------------------------------------------------------------


async def pay_with_3ds(rec: RecoveryStack):  # type: ignore[no-untyped-def]
    order = await rec.hooks.shop.create_order()
    r = await rec.hooks.shop.pay(order, "tok_3ds")
    assert r.status_code == 200 and r.json()["state"] == "Started" and r.json()["next_action"], r.text
    attempt = await get_attempt(rec.pool, UUID(r.json()["attempt_id"]))
    assert attempt.next_action is not None and attempt.next_action_expires_at is not None
    return attempt


async def test_a_current_customer_action_is_never_resent_and_is_rescheduled_to_its_expiry_or_the_next_status_check(  # noqa: E501
    rec: RecoveryStack,
) -> None:
    attempt = await pay_with_3ds(rec)  # the action expires 15 minutes after creation
    expiry = attempt.next_action_expires_at
    assert expiry is not None
    worker = rec.worker()
    poll = seconds(rec.recovery.action_poll_s)
    schedule = []
    for _ in range(3):
        await rec.make_due(attempt)
        now = rec.clock.now()
        assert await worker.run_pass() == [Pass.RESCHEDULED]
        after = await rec.current(attempt)
        assert after.next_check_at == min(expiry, now + poll)
        assert after.next_check_at > now and after.recovery_owner is None
        schedule.append(after.next_check_at)
    assert schedule[0] < schedule[1] < schedule[2] == expiry  # the last check waits for the expiry
    assert len(await rec.sends_for(attempt)) == 1  # never resent
    assert await rec.lookup_requests() == []
    assert await rec.state(attempt) == "Started"


async def test_a_customer_action_past_the_escalation_deadline_escalates_and_schedules_in_one_transaction(
    rec: RecoveryStack,
) -> None:
    attempt = await pay_with_3ds(rec)
    await rec.pool.execute("UPDATE payment_attempts SET next_action_expires_at = $2 WHERE attempt_id = $1",
                           attempt.attempt_id, rec.clock.now() + timedelta(days=30))
    assert attempt.escalation_deadline is not None
    rec.clock.advance((attempt.escalation_deadline - rec.clock.now()).total_seconds())
    now = rec.clock.now()
    assert await rec.worker().run_pass() == [Pass.ESCALATED]
    assert await rec.open_escalations() == [f"attempt:{attempt.attempt_id}:deadline"]
    after = await rec.current(attempt)
    assert after.recovery_owner is None and after.lease_token is None  # released
    assert after.next_check_at == now + seconds(rec.recovery.action_poll_s)  # the action delay
    assert after.state is AttemptState.STARTED and after.version == attempt.version  # state untouched
    assert len(await rec.sends_for(attempt)) == 1
    assert len(await initial_alerts(rec)) == 1


async def test_an_expired_customer_action_is_reconciled_never_scheduled_with_a_non_positive_delay(
    rec: RecoveryStack,
) -> None:
    attempt = await pay_with_3ds(rec)
    expiry = attempt.next_action_expires_at
    assert expiry is not None
    rec.clock.advance((expiry - rec.clock.now()).total_seconds() + 1)
    r = await rec.sandbox.http.post("/_sandbox/clock", json={"advance_seconds": 15 * 60 + 5})
    r.raise_for_status()
    status = await rec.hooks.shop.status(attempt.order_id)
    # An expired action is not shown.
    assert status.status_code == 202 and status.json()["next_action"] is None
    now = rec.clock.now()
    assert await rec.worker().run_pass() == [Pass.RESOLVED]
    after = await rec.current(attempt)
    assert after.state is AttemptState.FAILED and after.outcome_reason == "canceled"
    assert after.next_action is None and after.next_action_expires_at is None
    assert after.next_check_at > now
    assert [(e["by"], e["result"]) for e in await rec.lookup_events(attempt)] == [("id", "found")]
    assert len(await rec.sends_for(attempt)) == 1  # never resent


async def test_an_expired_action_the_provider_still_reports_is_never_rescheduled_with_a_non_positive_delay(
    rec: RecoveryStack,
) -> None:
    # The provider has not cancelled the payment yet (its clock lags ours, or it cancels lazily).
    attempt = await pay_with_3ds(rec)
    expiry = attempt.next_action_expires_at
    assert expiry is not None
    rec.clock.advance((expiry - rec.clock.now()).total_seconds() + 1)
    worker = rec.worker()
    assert await worker.run_pass() == [Pass.OBSERVED]
    after = await rec.current(attempt)
    assert after.next_check_at > rec.clock.now()
    assert await worker.run_pass() == []  # not due again at the same instant


async def test_an_unknown_attempt_found_requiring_action_moves_to_started_and_shows_the_action(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout_paying("tok_3ds", "lose_response")
    unknown = await rec.hooks.shop.status(attempt.order_id)
    assert unknown.status_code == 202 and unknown.json()["next_action"] is None  # Unknown never shows one
    await rec.make_due(attempt)
    now = rec.clock.now()
    assert await rec.worker().run_pass() == [Pass.OBSERVED]
    after = await rec.current(attempt)
    assert after.state is AttemptState.STARTED and after.provider_status == "requires_action"
    assert after.next_action is not None and after.next_action_expires_at is not None
    assert after.provider_payment_id == (await rec.payments_for(attempt))[0]["id"]
    assert after.next_check_at == min(after.next_action_expires_at, now + seconds(rec.recovery.action_poll_s))
    assert after.recovery_owner is None
    status = await rec.hooks.shop.status(attempt.order_id)
    assert status.status_code == 200 and status.json()["state"] == "Started"
    assert status.json()["next_action"] == after.next_action
    assert len(await rec.sends_for(attempt)) == 1  # never resent
