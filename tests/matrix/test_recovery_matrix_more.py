"""More recovery lines of the reference's test matrix: the recovery worker on the fake clock,
the Cardco sandbox over HTTP, real PostgreSQL.

The sandbox ledger counts payments; its request capture counts sends and lookups.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import Any
from uuid import UUID

from harness.servers import serve_asgi
from paycore import accounts, attempts, leases, orders
from paycore.attempts import Attempt, StartResult, get_attempt, record_outcome, try_mark_started
from paycore.domain import AttemptState, ProviderOutcome
from paycore_recovery.loop import Pass
from paycore_recovery.settings import RecoverySettings
from paycore_sandbox.app import create_app as create_sandbox_app
from paycore_sandbox.settings import SandboxSettings
from tests.support.recovery import RecoveryStack
from tests.support.timings import REMINDER_INTERVAL
from tests.support.webhooks import OTHER, TEST, event, payment_object

DEADLINE_S = 86_400 - 7_200  # the account's retention minus its margin


def settle_s(rec: RecoveryStack) -> float:
    """Call and record budgets plus the provider's normal processing time."""
    b = rec.hooks.settings.budgets
    return b.call_s + b.record_s + rec.hooks.settings.processing_allowance_s


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


async def outbox_keys(rec: RecoveryStack) -> list[str]:
    return [r["dedup_key"] for r in await rec.pool.fetch("SELECT dedup_key FROM outbox_messages"
                                                         " ORDER BY message_id")]


async def initial_alerts(rec: RecoveryStack) -> list[str]:
    return [key for key in await rec.alerts() if key.endswith(":initial")]


# -- NotStarted: crashes before the send boundary -----------------------------------------------


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
    result, started = await try_mark_started(rec.pool, attempt.attempt_id, claimed.version, now=now,
                                             next_check_at=now + seconds(1000))
    assert result is StartResult.STARTED and started is not None and started.version != claimed.version

    # Recovery acts on the attempt as it claimed it.
    worker = rec.worker("w1")
    assert await worker._not_started(claimed, lease, now) is Pass.RESCHEDULED
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


# -- Started: young, and a crash between the intent and the send ---------------------------------


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


# -- Send intents whose commit is unknown --------------------------------------------------------

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


# -- Order cancellation around the send intent ---------------------------------------------------


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


# -- Resend conditions ---------------------------------------------------------------------------


async def test_two_different_failed_resend_conditions_open_separate_escalations(rec: RecoveryStack) -> None:
    worker = rec.worker(recovery=RecoverySettings(payment_token_ttl_s=3600))
    attempt = await rec.unknown_via_checkout("drop_request")
    rec.clock.advance(3601)  # the stored token has expired; still well inside the deadline
    assert await worker.run_pass() == [Pass.ESCALATED]
    token_key = f"attempt:{attempt.attempt_id}:resend-not-safe:token-expired"
    assert await rec.open_escalations() == [token_key]

    await orders.cancel_order(rec.pool, attempt.order_id, attempt.customer_id, rec.clock.now())
    rec.clock.advance(worker.recovery.slow_cadence_s)
    assert await worker.run_pass() == [Pass.ESCALATED]
    assert await rec.open_escalations() == [
        token_key, f"attempt:{attempt.attempt_id}:resend-not-safe:order-not-payable"]
    ids = [r["escalation_id"] for r in await rec.escalation_rows()]
    assert await initial_alerts(rec) == [f"escalation:{i}:initial" for i in ids]
    assert len(await rec.sends_for(attempt)) == 1
    assert await rec.state(attempt) == "Unknown"


async def test_a_changed_endpoint_is_escalated_without_a_resend(rec: RecoveryStack) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    await rec.make_due(attempt)
    # The account now lives at another address (another Cardco host, which has no record of it).
    async with serve_asgi(create_sandbox_app(SandboxSettings.default())) as moved_url:
        settings = rec.hooks.settings
        moved = tuple(dataclasses.replace(a, base_url=moved_url) if a.provider_account == TEST else a
                      for a in settings.accounts)
        worker = rec.worker(settings=dataclasses.replace(settings, accounts=moved))
        assert await worker.run_pass() == [Pass.ESCALATED]
    assert await rec.open_escalations() == [f"attempt:{attempt.attempt_id}:resend-not-safe:endpoint-changed"]
    assert len(await rec.sends_for(attempt)) == 1  # nothing sent to the old endpoint ...
    assert (await rec.history(attempt)).count("send_intent") == 1  # ... nor anywhere else
    assert await rec.state(attempt) == "Unknown"


def without_test_account(rec: RecoveryStack):  # type: ignore[no-untyped-def]
    settings = rec.hooks.settings
    return dataclasses.replace(settings, accounts=tuple(a for a in settings.accounts
                                                        if a.provider_account != TEST))


async def test_a_stored_account_that_is_no_longer_configured_sends_nothing(rec: RecoveryStack) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    await rec.make_due(attempt)
    worker = rec.worker(settings=without_test_account(rec))
    assert await worker.run_pass() in ([Pass.LOOKUP_FAILED], [Pass.ESCALATED])
    assert len(await rec.sends_for(attempt)) == 1
    assert (await rec.history(attempt)).count("send_intent") == 1
    assert await rec.state(attempt) == "Unknown"
    after = await rec.current(attempt)
    assert after.recovery_owner is None and after.next_check_at > rec.clock.now()


async def test_a_stored_account_that_is_no_longer_configured_is_escalated_without_a_resend(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    await rec.make_due(attempt)
    worker = rec.worker(settings=without_test_account(rec))
    assert await worker.run_pass() == [Pass.ESCALATED]
    assert await rec.open_escalations() == [
        f"attempt:{attempt.attempt_id}:resend-not-safe:account-not-configured"]
    assert len(await rec.sends_for(attempt)) == 1


# -- Customer actions ----------------------------------------------------------------------------


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


# -- Lookups -------------------------------------------------------------------------------------


async def test_a_failed_lookup_is_not_not_found_and_reschedules_on_backoff(rec: RecoveryStack) -> None:
    attempt = await rec.unknown_via_checkout("lose_response")
    await rec.make_due(attempt)
    await rec.sandbox.fault("not_processed_503", times=2, match={"operation": "lookup"})
    worker = rec.worker()
    now = rec.clock.now()
    assert await worker.run_pass() == [Pass.LOOKUP_FAILED]
    after = await rec.current(attempt)
    assert after.state is AttemptState.UNKNOWN and after.recovery_owner is None
    assert after.next_check_at == now + seconds(60)  # the first backoff step
    [lookup] = await rec.lookup_events(attempt)
    assert lookup["result"] == "failed" and lookup["reason"] == "provider.http-503"
    assert len(await rec.sends_for(attempt)) == 1  # a failed lookup is not "not found": nothing sent

    rec.clock.advance(60)
    now = rec.clock.now()
    assert await worker.run_pass() == [Pass.LOOKUP_FAILED]
    assert (await rec.current(attempt)).next_check_at == now + seconds(120)  # the next backoff step
    assert len(await rec.sends_for(attempt)) == 1

    rec.clock.advance(120)  # the provider answers again
    assert await worker.run_pass() == [Pass.RESOLVED]
    assert await rec.state(attempt) == "Succeeded"
    assert len(await rec.payments_for(attempt)) == 1


async def test_a_lookup_by_recorded_payment_id_that_misses_falls_back_to_the_client_reference(
    rec: RecoveryStack,
) -> None:
    # The recorded id is wrong: the id lookup misses, the reference lookup finds another id.
    # (A correct id that misses through replication lag: the replica-lag tests below.)
    attempt = await rec.charged_but_unknown()
    await rec.pool.execute("UPDATE payment_attempts SET provider_payment_id = 'pay_missing'"
                           " WHERE attempt_id = $1", attempt.attempt_id)
    await rec.make_due(attempt)
    [payment] = await rec.payments_for(attempt)
    assert await rec.worker().run_pass() == [Pass.ESCALATED]
    lookups = await rec.lookup_requests()
    assert [(q["path"], q["status"]) for q in lookups] == [
        ("/v1/payments/pay_missing", 404), ("/v1/payments", 200)]
    assert attempt.client_reference in str(lookups[1]["query"])
    assert [(e["by"], e["result"]) for e in await rec.lookup_events(attempt)] == [
        ("id", "not_found"), ("reference", "found")]
    # A record with another id than the recorded one: nothing resolved, nothing sent.
    assert await rec.open_escalations() == [f"attempt:{attempt.attempt_id}:provider-id-conflict"]
    [esc] = await rec.escalation_rows()
    assert esc["detail"]["recorded"] == "pay_missing" and esc["detail"]["reported"] == payment["id"]
    after = await rec.current(attempt)
    assert after.state is AttemptState.UNKNOWN and after.provider_payment_id == "pay_missing"
    assert len(await rec.sends_for(attempt)) == 1 and len(await rec.payments_for(attempt)) == 1


async def test_every_lookup_of_a_fallback_is_recorded_in_the_attempt_history(rec: RecoveryStack) -> None:
    attempt = await rec.charged_but_unknown()
    await rec.pool.execute("UPDATE payment_attempts SET provider_payment_id = 'pay_missing'"
                           " WHERE attempt_id = $1", attempt.attempt_id)
    await rec.make_due(attempt)
    assert await rec.worker().run_pass() == [Pass.ESCALATED]
    assert [(e["by"], e["result"]) for e in await rec.lookup_events(attempt)] == [
        ("id", "not_found"), ("reference", "found")]


async def charged_unknown_with_its_payment_id(rec: RecoveryStack) -> tuple[Attempt, dict[str, Any]]:
    """Unknown, charged (succeeded at the provider), the right provider payment id recorded."""
    attempt = await rec.charged_but_unknown()
    [payment] = await rec.payments_for(attempt)
    assert payment["status"] == "succeeded"
    await rec.pool.execute("UPDATE payment_attempts SET provider_payment_id = $2 WHERE attempt_id = $1",
                           attempt.attempt_id, payment["id"])
    attempt = await rec.current(attempt)
    assert attempt.state is AttemptState.UNKNOWN and attempt.provider_payment_id == payment["id"]
    return attempt, payment


async def active_faults(rec: RecoveryStack) -> list[tuple[str, int | None]]:
    r = await rec.sandbox.http.get("/_sandbox/faults")
    r.raise_for_status()
    return [(rule["fault"], rule["times"]) for rule in r.json()["rules"]]


async def assert_resolved_from_the_reference_without_a_resend(rec: RecoveryStack, attempt: Attempt,
                                                              payment: dict[str, Any]) -> None:
    after = await rec.current(attempt)
    assert after.state is AttemptState.SUCCEEDED and after.provider_payment_id == payment["id"]
    assert after.recovery_owner is None and after.lease_token is None
    assert [(e["by"], e["result"]) for e in await rec.lookup_events(attempt)] == [
        ("id", "not_found"), ("reference", "found")]
    assert [(q["path"], q["status"]) for q in await rec.lookup_requests()] == [
        (f"/v1/payments/{payment['id']}", 404), ("/v1/payments", 200)]
    # One payment, one create request (the original send): no resend, no intent to resend.
    assert [p["id"] for p in await rec.sandbox.ledger()] == [payment["id"]]
    assert len(await rec.sandbox.create_requests()) == 1
    history = await rec.history(attempt)
    assert history.count("send_intent") == 1  # the endpoint's, before the first send
    assert "send_intent" not in history[history.index("lookup"):]
    assert await rec.open_escalations() == []


async def test_a_payment_id_lookup_that_misses_through_replica_lag_resolves_from_the_reference_lookup(
    rec: RecoveryStack,
) -> None:
    # The recorded id is right and the payment exists, but the by-id read answers 404 once
    # (a lagging read replica); the reference lookup sees the payment.
    attempt, payment = await charged_unknown_with_its_payment_id(rec)
    await rec.sandbox.fault("lookup_stale", times=1, match={"reference": attempt.client_reference})
    await rec.make_due(attempt)
    assert await rec.worker().run_pass() == [Pass.RESOLVED]
    await assert_resolved_from_the_reference_without_a_resend(rec, attempt, payment)
    assert await active_faults(rec) == []  # the one stale read was used


async def test_a_payment_id_lookup_that_always_misses_through_replica_lag_still_resolves_and_never_resends(
    rec: RecoveryStack,
) -> None:
    attempt, payment = await charged_unknown_with_its_payment_id(rec)
    await rec.sandbox.fault("lookup_stale", match={"operation": "lookup"})  # every by-id lookup
    await rec.make_due(attempt)
    worker = rec.worker()
    assert await worker.run_pass() == [Pass.RESOLVED]
    await assert_resolved_from_the_reference_without_a_resend(rec, attempt, payment)
    assert await active_faults(rec) == [("lookup_stale", None)]  # still hiding it by id
    rec.clock.advance(rec.recovery.slow_cadence_s)
    assert await worker.run_pass() == []  # final: nothing left to look up or send
    assert len(await rec.sandbox.create_requests()) == 1


async def two_attempts_one_payment(rec: RecoveryStack):  # type: ignore[no-untyped-def]
    """A charged (Unknown, no id recorded); B never sent, yet recording A's payment id."""
    a = await rec.charged_but_unknown()
    b = await rec.started_attempt(customer="cus_bob")
    [payment] = await rec.payments_for(a)
    await rec.pool.execute(
        "UPDATE payment_attempts SET provider_payment_id = $2, next_check_at = $3 WHERE attempt_id = $1",
        b.attempt_id, payment["id"], rec.clock.now() + timedelta(days=1))
    return a, b, payment


async def test_a_record_owned_by_another_attempt_resolves_nothing_and_escalates(rec: RecoveryStack) -> None:
    a, b, payment = await two_attempts_one_payment(rec)
    await rec.make_due(a)  # B is not due
    assert await rec.worker().run_pass() == [Pass.ESCALATED]
    assert await rec.open_escalations() == [f"attempt:{a.attempt_id}:provider-id-conflict"]
    [esc] = await rec.escalation_rows()
    assert esc["detail"]["owned_by_attempt"] == str(b.attempt_id)
    assert esc["detail"]["reported"] == payment["id"]
    # Both attempts exactly as they were; nothing sent.
    after_a, after_b = await rec.current(a), await rec.current(b)
    assert after_a.state is AttemptState.UNKNOWN and after_a.provider_payment_id is None
    assert after_a.version == a.version and after_a.recovery_owner is None
    assert after_b.state is AttemptState.STARTED and after_b.provider_payment_id == payment["id"]
    assert after_b.version == b.version
    assert len(await rec.sends_for(a)) == 1 and await rec.sends_for(b) == []
    assert len(await rec.sandbox.ledger()) == 1


async def test_a_payment_found_by_recorded_id_carrying_another_attempts_reference_resolves_nothing(
    rec: RecoveryStack,
) -> None:
    a, b, _payment = await two_attempts_one_payment(rec)
    await rec.pool.execute("UPDATE payment_attempts SET next_check_at = $2 WHERE attempt_id = $1",
                           a.attempt_id, rec.clock.now() + timedelta(days=1))
    rec.clock.advance(settle_s(rec))  # B is a stalled Started attempt now
    await rec.due_now(b)
    result = await rec.worker().run_pass()
    assert await rec.state(b) == "Started"  # B's own request never reached the provider
    assert await rec.open_escalations() == [f"attempt:{b.attempt_id}:provider-id-conflict"]
    assert result == [Pass.ESCALATED]


async def test_a_found_payment_with_another_amount_escalates_a_mismatch_and_resolves_nothing(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.charged_but_unknown()
    await rec.pool.execute("UPDATE payment_attempts SET amount_minor = 5999 WHERE attempt_id = $1",
                           attempt.attempt_id)
    await rec.pool.execute("UPDATE orders SET amount_minor = 5999 WHERE order_id = $1", attempt.order_id)
    await rec.make_due(attempt)
    assert await rec.worker().run_pass() == [Pass.ESCALATED]
    assert await rec.open_escalations() == [f"attempt:{attempt.attempt_id}:mismatch"]
    [esc] = await rec.escalation_rows()
    assert esc["detail"]["field"] == "amount"
    after = await rec.current(attempt)
    assert after.state is AttemptState.UNKNOWN and after.provider_payment_id is None
    order = await rec.pool.fetchrow("SELECT status FROM orders WHERE order_id = $1", attempt.order_id)
    assert order["status"] == "Open"
    assert len(await rec.sends_for(attempt)) == 1 and len(await rec.payments_for(attempt)) == 1


async def test_a_429_in_one_account_pauses_lookups_for_that_account_only(rec: RecoveryStack) -> None:
    store = await rec.charged_but_unknown(TEST)
    other = await rec.charged_but_unknown(OTHER, "cus_bob")
    await rec.make_due()
    await rec.sandbox.fault("rate_limit", times=1, match={"account": "acct_store", "operation": "lookup"})
    worker = rec.worker()
    now = rec.clock.now()
    assert sorted(await worker.run_pass()) == sorted([Pass.PAUSED, Pass.RESOLVED])
    assert await rec.state(store) == "Unknown" and await rec.state(other) == "Succeeded"
    pauses = await rec.pool.fetch("SELECT scope, paused_until FROM provider_rate_limit_pauses")
    assert [(p["scope"], p["paused_until"]) for p in pauses] == [(TEST, now + seconds(1))]  # Retry-After: 1
    assert (await rec.current(store)).next_check_at == now + seconds(1)

    # Another attempt of the paused account, due inside the pause: no lookup is started.
    store2 = await rec.charged_but_unknown(TEST, "cus_carol")
    await rec.due_now(store2)
    lookups_before = len(await rec.lookup_requests())
    assert await worker.run_pass() == [Pass.PAUSED]
    assert len(await rec.lookup_requests()) == lookups_before
    assert (await rec.current(store2)).next_check_at == now + seconds(1)  # until the pause ends

    rec.clock.advance(1)
    assert await worker.run_pass() == [Pass.RESOLVED, Pass.RESOLVED]
    assert len(await rec.sandbox.ledger()) == 3


# -- Leases --------------------------------------------------------------------------------------


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
    assert await leases.escalate_and_finish(rec.pool, attempt.attempt_id, lease_a, reason="deadline",
                                            delay_s=60, now=now, reminder_interval=REMINDER_INTERVAL) is False
    after = await rec.current(attempt)
    assert after == before  # B's lease intact, schedule unchanged
    assert after.lease_token == lease_b.token
    assert after.lease_expires_at == now + seconds(rec.recovery.lease_s)
    assert await rec.escalation_rows() == [] and await rec.alerts() == []
    assert await leases.owns(rec.pool, attempt.attempt_id, lease_b, now)
    assert not await leases.owns(rec.pool, attempt.attempt_id, lease_a, now)

    # A applying a valid provider outcome records it, but still cannot release B's lease.
    recorded = await record_outcome(
        rec.pool, attempt.attempt_id,
        ProviderOutcome.processing("pay_observed_by_a", amount_minor=attempt.amount_minor,
                                   currency=attempt.currency),
        now=now, actor="recovery-a", recheck_after_s=60, from_send=False, lease=lease_a,
        reminder_interval=REMINDER_INTERVAL)
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
    assert await leases.escalate_and_finish(rec.pool, attempt.attempt_id, lease, reason="deadline",
                                            delay_s=rec.recovery.slow_cadence_s,
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
