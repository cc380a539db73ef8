"""Send intents: an intent without a result (a crash between the intent and the send) is
reconciled before any new one; an intent whose commit is unknown sends nothing and leaves
the lease to expire; a refused one reschedules; an order cancelled before the intent stops
the resend, one cancelled just after it does not.

The recovery matrix continued; setup as in test_recovery_matrix.py.
"""

from __future__ import annotations

from typing import Any

from paycore import orders
from paycore.domain import AttemptState
from paycore_recovery.loop import Pass
from tests.support.recovery import RecoveryStack, initial_alerts, seconds, settle_s
from tests.support.webhooks import event, payment_object

# -- A crash between the intent and the send ------------------------------------------------------


async def test_a_crash_between_the_send_intent_and_the_send_leaves_an_intent_without_result_that_recovery_reconciles(  # noqa: E501
    rec: RecoveryStack,
) -> None:
    attempt = await rec.started_attempt()  # send intent committed with Started; the send never happened
    rec.clock.advance(settle_s(rec))
    worker = rec.worker()
    assert await worker.run_pass() == [Pass.RESENT]
    # The history shows an intent with no result, then the lookup, then the resend.
    assert await rec.history(attempt) == [
        "transition", "send_intent", "transition",  # NotStarted; the first intent; Started
        "lookup",  # not found
        "send_intent", "send_result", "transition",  # recovery's resend, resolved
    ]
    assert [e["result"] for e in await rec.lookup_events(attempt)] == ["not_found"]
    assert worker.metrics.ambiguous_boundaries._value.get() == 1
    assert worker.metrics.registry.get_sample_value("paycore_recovery_ambiguous_send_boundaries_total") == 1
    assert await rec.state(attempt) == "Succeeded"
    assert len(await rec.payments_for(attempt)) == 1
    assert len(await rec.sends_for(attempt)) == 1


# -- Send intents whose commit is unknown ---------------------------------------------------------


FAIL_SEND_INTENT = """
CREATE FUNCTION test_fail_send_intent() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'send intent write failed (test)';
END $$;
CREATE TRIGGER test_fail_send_intent BEFORE INSERT ON payment_attempt_events
    FOR EACH ROW WHEN (NEW.kind = 'send_intent') EXECUTE FUNCTION test_fail_send_intent();
"""


HEAL_SEND_INTENT = """
DROP TRIGGER test_fail_send_intent ON payment_attempt_events;
DROP FUNCTION test_fail_send_intent();
"""


async def test_an_unconfirmed_send_intent_write_sends_nothing_and_leaves_the_lease_to_expire(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    await rec.make_due(attempt)
    await rec.pool.execute(FAIL_SEND_INTENT)
    worker = rec.worker("w1")
    assert await worker.run_pass() == [Pass.INTENT_UNKNOWN]
    assert len(await rec.sends_for(attempt)) == 1  # only the original: nothing sent this cycle
    held = await rec.current(attempt)
    assert held.recovery_owner == "w1" and held.lease_token is not None  # finish was not called
    assert (await rec.history(attempt)).count("send_intent") == 1
    assert await rec.worker("w2").run_pass() == []  # the lease still keeps others out

    await rec.pool.execute(HEAL_SEND_INTENT)
    rec.clock.advance(rec.recovery.lease_s)  # the lease expires
    # The intent is absent: the next claimed pass decides afresh and resends.
    assert await rec.worker("w2").run_pass() == [Pass.RESENT]
    assert await rec.state(attempt) == "Succeeded"
    assert len(await rec.payments_for(attempt)) == 1
    assert len(await rec.sends_for(attempt)) == 2
    assert (await rec.history(attempt))[-5:] == ["lookup", "lookup", "send_intent", "send_result",
                                                  "transition"]


async def test_a_refused_send_intent_reschedules_on_the_backoff_and_releases_the_lease(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    await rec.make_due(attempt)
    worker = rec.worker("w1")
    look_up = worker.client.find_by_reference

    async def a_notification_lands_while_the_lookup_is_answered(
        provider_account: str, reference: str, *, budget_s: float | None
    ) -> Any:
        found = await look_up(provider_account, reference, budget_s=budget_s)
        # Unknown -> Started (processing) by the webhook intake: the attempt the worker read is
        # stale, so its send intent is refused as "changed" and nothing may be sent this cycle.
        processing = event(payment_object(payment_id="pay_async", reference=reference, status="processing"))
        r = await rec.hooks.deliver(processing, timestamp=int(rec.clock.now().timestamp()))
        assert r.json()["result"] == "applied"
        return found

    worker.client.find_by_reference = a_notification_lands_while_the_lookup_is_answered  # type: ignore[method-assign]
    now = rec.clock.now()
    assert await worker.run_pass() == [Pass.INTENT_REFUSED]
    after = await rec.current(attempt)
    assert after.state is AttemptState.STARTED and after.version == attempt.version + 1
    # finish: the next check is on the backoff, and the lease is released for the next due check.
    assert after.next_check_at == now + seconds(rec.recovery.backoff(0))
    assert (after.recovery_owner, after.lease_token, after.lease_acquired_at, after.lease_expires_at) == (
        None, None, None, None)
    assert (await rec.history(attempt)).count("send_intent") == 1  # checkout's only
    assert len(await rec.sends_for(attempt)) == 1


async def test_an_unconfirmed_send_intent_that_did_commit_is_reconciled_before_any_new_intent(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    await rec.make_due(attempt)
    await rec.pool.execute(FAIL_SEND_INTENT)
    first = rec.worker("w1")
    assert await first.run_pass() == [Pass.INTENT_UNKNOWN]
    await rec.pool.execute(HEAL_SEND_INTENT)
    # The variant in which the unconfirmed commit had in fact happened: the intent is present.
    async with rec.pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO payment_attempt_events (attempt_id, occurred_at, kind, actor, detail)"
            " VALUES ($1, $2, 'send_intent', $3, $4)",
            attempt.attempt_id, rec.clock.now(), first.actor, {"first_send": False})
    rec.clock.advance(rec.recovery.lease_s)
    second = rec.worker("w2")
    assert await second.run_pass() == [Pass.RESENT]
    assert second.metrics.ambiguous_boundaries._value.get() == 1  # reconciled as an ambiguous boundary
    # Looked up first; a new intent only once every resend condition held again.
    assert (await rec.history(attempt))[-6:] == ["lookup", "send_intent", "lookup", "send_intent",
                                                  "send_result", "transition"]
    assert len(await rec.payments_for(attempt)) == 1
    assert await rec.state(attempt) == "Succeeded"


# -- Order cancellation around the send intent ----------------------------------------------------


async def outbox_keys(rec: RecoveryStack) -> list[str]:
    return [r["dedup_key"] for r in await rec.pool.fetch("SELECT dedup_key FROM outbox_messages"
                                                         " ORDER BY message_id")]


async def test_an_order_cancelled_before_the_send_intent_prevents_the_resend_and_escalates(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    cancelled = await orders.cancel_order(rec.pool, attempt.order_id, attempt.customer_id, rec.clock.now())
    assert cancelled.cancel_requested_at is not None  # a live attempt: cancellation requested
    await rec.make_due(attempt)
    assert await rec.worker().run_pass() == [Pass.ESCALATED]
    assert await rec.open_escalations() == [f"attempt:{attempt.attempt_id}:resend-not-safe:order-not-payable"]
    assert len(await rec.sends_for(attempt)) == 1  # nothing resent
    assert (await rec.history(attempt)).count("send_intent") == 1
    assert await rec.state(attempt) == "Unknown"
    assert len(await initial_alerts(rec)) == 1


async def test_an_order_cancelled_just_after_the_send_intent_does_not_stop_that_dispatch(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    await rec.make_due(attempt)
    worker = rec.worker()

    async def customer_cancels(a: object) -> None:
        await orders.cancel_order(rec.pool, attempt.order_id, attempt.customer_id, rec.clock.now())

    worker.after_final_check = customer_cancels
    assert await worker.run_pass() == [Pass.RESENT]
    assert len(await rec.sends_for(attempt)) == 2
    assert len(await rec.payments_for(attempt)) == 1
    assert await rec.state(attempt) == "Succeeded"  # resolved through reconciliation
    # The charge stands; a refund is a separate operation a person decides on.
    assert await rec.open_escalations() == [f"attempt:{attempt.attempt_id}:succeeded-after-cancel"]
    keys = await outbox_keys(rec)
    assert f"attempt:{attempt.attempt_id}:order-confirmation" in keys
    assert f"attempt:{attempt.attempt_id}:fulfillment-request" not in keys
    order = await rec.pool.fetchrow("SELECT * FROM orders WHERE order_id = $1", attempt.order_id)
    assert order["cancel_requested_at"] is not None
