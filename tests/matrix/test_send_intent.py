"""The recovery send intent: committed only with an owned lease, a payable order, a
sendable attempt, and before the stamped escalation deadline."""

from __future__ import annotations

from paycore import attempts, leases
from paycore.orders import cancel_order
from tests.support.recovery import RecoveryStack


async def intents(rec: RecoveryStack, attempt_id: object) -> int:
    return await rec.hooks.count("SELECT count(*) FROM payment_attempt_events WHERE attempt_id = $1"
                                 " AND kind = 'send_intent'", attempt_id)


async def claimed(rec: RecoveryStack, owner: str = "w1"):  # type: ignore[no-untyped-def]
    attempt = await rec.unknown_via_checkout("drop_request")
    await rec.make_due(attempt)
    lease = leases.new_lease(owner)
    claimed_attempt = await leases.claim(rec.pool, attempt.attempt_id, lease, rec.clock.now(),
                                         rec.recovery.lease_s)
    assert claimed_attempt is not None
    return claimed_attempt, lease


async def test_a_send_intent_commit_attempted_after_the_escalation_deadline_is_refused(
    rec: RecoveryStack,
) -> None:
    attempt, lease = await claimed(rec)
    before = await intents(rec, attempt.attempt_id)
    assert attempt.escalation_deadline is not None
    late = attempt.escalation_deadline  # the one clock says the deadline is now
    # Keep the lease valid at that moment, so the deadline alone decides.
    await rec.pool.execute("UPDATE payment_attempts SET lease_expires_at = $2 WHERE attempt_id = $1",
                           attempt.attempt_id, late.replace(year=late.year + 1))
    assert await attempts.commit_send_intent(rec.pool, attempt, lease, late, "recovery-w1") == (
        attempts.IntentResult.REFUSED, "deadline-passed")
    assert await intents(rec, attempt.attempt_id) == before


async def test_the_repository_cannot_commit_a_send_intent_without_the_recovery_owners_lease(
    rec: RecoveryStack,
) -> None:
    attempt, lease = await claimed(rec)
    before = await intents(rec, attempt.attempt_id)
    stranger = leases.new_lease("w1")  # same owner name, another token
    assert await attempts.commit_send_intent(rec.pool, attempt, stranger, rec.clock.now(), "recovery-w1") == (
        attempts.IntentResult.REFUSED, "lease-lost")
    assert await intents(rec, attempt.attempt_id) == before
    assert await attempts.commit_send_intent(rec.pool, attempt, lease, rec.clock.now(), "recovery-w1") == (
        attempts.IntentResult.COMMITTED, None)
    assert await intents(rec, attempt.attempt_id) == before + 1


async def test_a_send_intent_is_refused_once_the_order_cancellation_has_committed(rec: RecoveryStack) -> None:
    attempt, lease = await claimed(rec)
    await cancel_order(rec.pool, attempt.order_id, attempt.customer_id, rec.clock.now())
    assert await attempts.commit_send_intent(rec.pool, attempt, lease, rec.clock.now(), "recovery-w1") == (
        attempts.IntentResult.REFUSED, "order-not-payable")


async def test_a_send_intent_is_refused_for_an_attempt_changed_since_it_was_read(rec: RecoveryStack) -> None:
    attempt, lease = await claimed(rec)
    await rec.pool.execute("UPDATE payment_attempts SET version = version + 1 WHERE attempt_id = $1",
                           attempt.attempt_id)
    assert await attempts.commit_send_intent(rec.pool, attempt, lease, rec.clock.now(), "recovery-w1") == (
        attempts.IntentResult.REFUSED, "changed")


async def test_a_committed_resend_intent_records_what_is_sent_and_that_it_is_not_the_first_send(
    rec: RecoveryStack,
) -> None:
    """The history is the audit of every send: a resend's intent names the stored endpoint, API
    version and account, says it is a resend (the first send's intent says ``first_send: true``),
    and which lease committed it."""
    attempt, lease = await claimed(rec)
    assert await attempts.commit_send_intent(rec.pool, attempt, lease, rec.clock.now(), "recovery-w1") == (
        attempts.IntentResult.COMMITTED, None)
    details = await rec.pool.fetch(
        "SELECT detail, actor FROM payment_attempt_events WHERE attempt_id = $1 AND kind = 'send_intent'"
        " ORDER BY event_id", attempt.attempt_id)
    first, resend = (r["detail"] for r in details[-2:])
    assert first["first_send"] is True
    assert resend == {"endpoint": attempt.endpoint, "api_version": attempt.api_version,
                      "provider_account": attempt.provider_account, "first_send": False,
                      "lease_token": str(lease.token)}
    assert details[-1]["actor"] == "recovery-w1"
