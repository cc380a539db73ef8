"""The same black-box flows for Cardco, Stripe and Adyen, against the sandbox's dialects.

Each test runs once per provider (``cardco``, ``stripe``, ``adyen``), with that provider
alone configured through its own ``PAYCORE_<PROVIDER>_*`` settings: the sandbox, checkout
and the webhook intake as real HTTP servers on free ports, real PostgreSQL, recovery
workers on the fake clock (``tests/support/providers.py``). A test sees what a storefront,
the provider and an operator see: checkout's answers, the sandbox's ledger (payments) and
request capture (sends), the intake's answers and counters, and the database's history.

Where a provider cannot do what a flow needs, the test says what replaces it and why:
Adyen has no lookup (its notifications and a same-key resend are the evidence); Stripe's
Search is eventually consistent (a miss proves nothing until the search lag is over).
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from uuid import UUID

import asyncpg
import orjson
import pytest

from paycore.attempts import get_attempt
from paycore_recovery.loop import Pass
from tests.support.providers import PROVIDERS, ProviderStack, adyen_batch, running_provider_stack
from tests.support.stack import eventually


@pytest.fixture(params=PROVIDERS)
async def flows(request: pytest.FixtureRequest, pool: asyncpg.Pool,
                db_dsn: str) -> AsyncIterator[ProviderStack]:
    async for s in running_provider_stack(request.param, pool, db_dsn):
        yield s


# What the storefront sees of a decline: the provider's own code (Cardco's decline code,
# Stripe's decline_code, Adyen's refusalReasonCode).
DECLINE_REASONS = {"cardco": "declined:card_declined", "stripe": "declined:generic_decline",
                   "adyen": "declined:2"}
# A documented rejection before execution, as each provider names it.
REJECTION_REASONS = {"cardco": "rejected:parameter_invalid:payment_method",
                     "stripe": "rejected:resource_missing:payment_method", "adyen": "rejected:129"}
# The provider's own word for "accepted, not finished".
PROCESSING_STATUSES = {"cardco": "processing", "stripe": "processing", "adyen": "Received"}
# provider_status and outcome_reason after a failed authentication.
AUTHENTICATION_FAILED = {
    "cardco": ("failed", "failed"),
    "stripe": ("requires_payment_method", "declined:payment_intent_authentication_failure"),
    "adyen": ("failed", "declined"),
}
# The customer's next step as each provider words it (Stripe without a return_url: card-only,
# authenticated in Stripe.js; Cardco and Adyen redirect).
ACTION_TYPES = {"cardco": "redirect_to_url", "stripe": "use_stripe_sdk", "adyen": "redirect"}
# The provider's own word for "waiting for the customer" (checkout shows it as provider_status).
ACTION_STATUSES = {"cardco": "requires_action", "stripe": "requires_action", "adyen": "RedirectShopper"}
# How recovery resolves a payment the provider made but whose answer checkout never had:
# Cardco's lookup finds it; Stripe's Search misses a new intent inside its lag (concluding
# nothing), then finds it; Adyen cannot be asked, so the same-key resend gets the key's answer.
RECOVERY_PASSES = {"cardco": [Pass.RESOLVED], "stripe": [Pass.INCONCLUSIVE, Pass.RESOLVED],
                   "adyen": [Pass.RESENT]}
# escalation_deadline − first_sent_at: the provider's key retention minus the margin.
KEY_WINDOW_S = {"cardco": 86_400 - 7_200, "stripe": 86_400 - 7_200, "adyen": 31 * 86_400 - 7_200}


async def succeeded_event(flows: ProviderStack, payment_id: str) -> dict[str, Any]:
    """The sandbox's success event for the payment, as the provider would send it."""
    events = [e for e in await flows.sandbox.events_of(payment_id) if e["type"].endswith("succeeded")]
    assert len(events) == 1, events
    return events[0]


async def wait_until(flows: ProviderStack, attempt_id: Any, state: str) -> None:
    async def reached() -> bool:
        row = await flows.pool.fetchrow("SELECT state FROM payment_attempts WHERE attempt_id = $1",
                                        attempt_id)
        return row is not None and row["state"] == state

    await eventually(reached, what=f"attempt {state}")
    await eventually(flows.deliveries_settled, what="the sandbox to finish delivering")


# -- 1. the outcome mapping, as the storefront sees it --------------------------------------------


async def test_a_payment_through_checkout_succeeds_with_one_payment_at_the_provider(
    flows: ProviderStack,
) -> None:
    r = await flows.pay("visa")
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["state"], body["next_action"]) == ("Succeeded", None)
    [payment] = await flows.sandbox.ledger()
    assert (payment["dialect"], payment["provider_account"]) == (flows.wire.name, flows.wire.provider_account)
    attempt = await flows.pool.fetchrow("SELECT * FROM payment_attempts WHERE attempt_id = $1",
                                        body["attempt_id"])
    assert attempt["provider_payment_id"] == payment["id"]
    assert payment["idempotency_key"] == str(attempt["idempotency_key"])
    assert payment["reference"] == attempt["client_reference"]


async def test_a_declined_payment_is_failed_with_the_providers_reason(flows: ProviderStack) -> None:
    r = await flows.pay("decline")
    assert r.status_code == 200, r.text
    assert (r.json()["state"], r.json()["outcome_reason"]) == ("Failed", DECLINE_REASONS[flows.wire.name])
    [payment] = await flows.sandbox.ledger()
    assert payment["status"] == "declined"


async def test_a_documented_rejection_of_the_only_send_is_not_applied_and_a_new_checkout_succeeds(
    flows: ProviderStack,
) -> None:
    """Refused by the provider's validation before anything executed (Cardco 400, Stripe 400
    ``invalid_request_error``, Adyen 422): NotApplied, not a decline, and the order takes a new
    attempt under a new key."""
    order = await flows.shop.create_order()
    r = await flows.shop.pay_with(order, flows.wire.method("rejected"))
    assert (r.status_code, r.json()["state"]) == (200, "NotApplied"), r.text
    assert r.json()["outcome_reason"] == REJECTION_REASONS[flows.wire.name]
    assert await flows.sandbox.ledger() == []
    again = await flows.shop.pay_with(order, flows.wire.method("visa"))
    assert (again.status_code, again.json()["state"]) == (200, "Succeeded"), again.text
    keys = await flows.pool.fetch("SELECT idempotency_key FROM payment_attempts WHERE order_id = $1", order)
    assert len({k["idempotency_key"] for k in keys}) == 2
    assert len(await flows.sandbox.ledger()) == 1


async def test_a_payment_needing_3ds_returns_the_customers_action_and_its_completion_arrives_by_webhook(
    flows: ProviderStack,
) -> None:
    """Started with the provider's next action (200, never 202); once the customer authenticates,
    the provider's notification resolves it (Adyen notifies nothing while the shopper acts)."""
    await flows.subscribe()
    r = await flows.pay("3ds")
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["state"], body["provider_status"]) == ("Started", ACTION_STATUSES[flows.wire.name])
    assert body["next_action"]["type"] == ACTION_TYPES[flows.wire.name]
    status = await flows.shop.status(body["order_id"])
    assert status.status_code == 200 and status.json()["next_action"] == body["next_action"]

    [payment] = await flows.sandbox.ledger()
    await flows.sandbox.complete_action(payment["id"])
    await wait_until(flows, body["attempt_id"], "Succeeded")
    assert len(await flows.sandbox.create_requests()) == 1  # resolved by the notification: nothing resent


async def test_a_payment_still_processing_is_started_and_resolved_once_by_the_providers_notification(
    flows: ProviderStack,
) -> None:
    """The provider accepted the payment but has not finished (Cardco and Stripe ``processing``,
    Adyen ``Received``): Started, 202 with the status URL, no action; its success
    notification resolves it once (Adyen notifies only the final AUTHORISATION)."""
    await flows.subscribe()
    r = await flows.pay("async")
    assert (r.status_code, r.json()["state"], r.json()["next_action"]) == (202, "Started", None), r.text
    assert r.json()["provider_status"] == PROCESSING_STATUSES[flows.wire.name]
    await wait_until(flows, r.json()["attempt_id"], "Succeeded")
    status = await flows.shop.status(r.json()["order_id"])
    assert status.status_code == 200 and status.json()["state"] == "Succeeded"
    assert len(await flows.notifications()) == (1 if flows.wire.name == "adyen" else 2)
    assert len(await flows.sandbox.create_requests()) == 1


async def test_a_failed_3ds_authentication_is_failed_once_by_the_providers_notification(
    flows: ProviderStack,
) -> None:
    """The customer fails authentication: Cardco ``payment.failed``, Stripe
    ``payment_intent.payment_failed`` (the intent back to ``requires_payment_method``), Adyen
    ``AUTHORISATION`` ``success=false``. Failed with the provider's reason, nothing resent."""
    await flows.subscribe()
    r = await flows.pay("3ds")
    assert r.status_code == 200, r.text
    body = r.json()
    [payment] = await flows.sandbox.ledger()
    await flows.sandbox.complete_action(payment["id"], "failed")
    await wait_until(flows, body["attempt_id"], "Failed")

    status = (await flows.shop.status(body["order_id"])).json()
    assert (status["provider_status"], status["outcome_reason"]) == AUTHENTICATION_FAILED[flows.wire.name]
    assert status["next_action"] is None
    assert len(await flows.sandbox.create_requests()) == 1


async def test_an_abandoned_3ds_is_closed_failed_once_by_the_providers_notification(
    flows: ProviderStack,
) -> None:
    """The customer never authenticates: the provider gives up on the action (the sandbox
    after 15 minutes of its clock) and says so — Cardco ``payment.canceled``, Stripe
    ``payment_intent.canceled``, Adyen ``CANCELLATION`` — and the attempt is Failed, the order
    free for a new payment. Nothing is resent. (Only the provider's clock moves: the intake
    checks the signature's wall-clock timestamp against paycore's.)"""
    await flows.subscribe()
    r = await flows.pay("3ds")
    assert (r.status_code, r.json().get("state")) == (200, "Started"), r.text
    attempt = await get_attempt(flows.pool, UUID(r.json()["attempt_id"]))

    await flows.sandbox.advance(16 * 60)
    await wait_until(flows, attempt.attempt_id, "Failed")

    after = await flows.current(attempt)
    assert (after.provider_status, after.outcome_reason) == ("canceled", "canceled")
    assert await flows.transitions_to(attempt, "Failed") == 1
    assert [p["status"] for p in await flows.payments_for(attempt)] == ["canceled"]
    assert len(await flows.sends_for(attempt)) == 1
    again = await flows.shop.pay_with(attempt.order_id, flows.wire.method("visa"))
    assert (again.status_code, again.json()["state"]) == (200, "Succeeded"), again.text


async def test_a_completed_3ds_whose_notification_never_arrives_is_resolved_by_recovery(
    flows: ProviderStack,
) -> None:
    """The customer authenticates and the provider charges, but its notification never reaches
    the intake. Cardco states when the action expires; after that recovery looks the payment up
    and resolves it. Stripe states no expiry: recovery looks the intent up by id at each action
    poll (never resending) and resolves it. Adyen can neither be asked nor safely resent to
    (the key would replay the ``RedirectShopper`` answer): recovery waits, sends nothing, and
    the notification, which Adyen retries for 30 days, resolves it."""
    r = await flows.pay("3ds")
    assert (r.status_code, r.json().get("state")) == (200, "Started"), r.text
    attempt = await get_attempt(flows.pool, UUID(r.json()["attempt_id"]))
    [payment] = await flows.payments_for(attempt)
    await flows.sandbox.complete_action(payment["id"])  # no endpoint: the notification is lost
    worker = flows.worker()

    if flows.wire.lookups:
        passes = await flows.recover(attempt, worker, passes=6)
        assert passes[-1] == Pass.RESOLVED and Pass.RESENT not in passes
    else:
        for _ in range(6):
            await flows.make_due(attempt)
            assert await worker.run_pass() == [Pass.RESCHEDULED]
        assert await flows.state(attempt) == "Started"
        await flows.subscribe()
        await flows.sandbox.redeliver((await succeeded_event(flows, payment["id"]))["id"])
        await wait_until(flows, attempt.attempt_id, "Succeeded")
    assert await flows.state(attempt) == "Succeeded"
    assert len(await flows.sends_for(attempt)) == 1
    assert [p["status"] for p in await flows.payments_for(attempt)] == ["succeeded"]


async def test_a_pending_action_is_never_resent_and_only_an_action_without_an_expiry_is_looked_up(
    flows: ProviderStack,
) -> None:
    """While the customer has not acted, recovery never resends. Cardco's action states its
    expiry: recovery waits for it without asking. Stripe's states none: recovery looks the
    intent up by id at each action poll (it is still ``requires_action``: observed, the action
    still shown). Adyen cannot be asked: it waits."""
    r = await flows.pay("3ds")
    attempt = await get_attempt(flows.pool, UUID(r.json()["attempt_id"]))
    captured = len(await flows.sandbox.requests())
    worker = flows.worker()
    expected = Pass.OBSERVED if flows.wire.name == "stripe" else Pass.RESCHEDULED
    for _ in range(3):
        await flows.make_due(attempt)
        assert await worker.run_pass() == [expected]
    assert await flows.state(attempt) == "Started"
    assert (await flows.shop.status(attempt.order_id)).json()["next_action"] == r.json()["next_action"]
    later = (await flows.sandbox.requests())[captured:]
    assert [q["method"] for q in later] == (["GET"] * 3 if flows.wire.name == "stripe" else [])


# -- 2. lost response → Unknown (202) → resolved exactly once -------------------------------------


async def test_a_lost_response_is_unknown_then_resolved_once_by_the_providers_notification(
    flows: ProviderStack,
) -> None:
    """The provider charged, its answer was lost: checkout says 202 Unknown. The payment's
    success notification (redelivered by the sandbox once the intake is subscribed, as the
    provider's retry schedule does) resolves it: one notification, one transition, one payment."""
    attempt, r = await flows.unknown_via_checkout("lose_response")
    assert r.headers["location"].endswith(f"/orders/{attempt.order_id}/payment/status")
    [payment] = await flows.payments_for(attempt)

    await flows.subscribe()
    await flows.sandbox.redeliver((await succeeded_event(flows, payment["id"]))["id"])
    await wait_until(flows, attempt.attempt_id, "Succeeded")

    assert len(await flows.notifications(attempt)) == 1
    assert await flows.transitions_to(attempt, "Succeeded") == 1
    assert [p["id"] for p in await flows.payments_for(attempt)] == [payment["id"]]
    assert len(await flows.sends_for(attempt)) == 1
    assert (await flows.current(attempt)).provider_payment_id == payment["id"]
    status = await flows.shop.status(attempt.order_id)
    assert status.status_code == 200 and status.json()["state"] == "Succeeded"


async def test_a_lost_response_is_unknown_then_resolved_once_by_recovery(flows: ProviderStack) -> None:
    """Cardco and Stripe: recovery's lookup finds the payment and nothing is resent (Stripe's
    Search misses a new intent for a while: that miss concludes nothing, and the look after the
    search lag finds it). Adyen has no lookup: recovery's same-key resend is answered from the stored key
    (the first answer replayed, the same pspReference), so it cannot charge twice."""
    attempt, _ = await flows.unknown_via_checkout("lose_response")
    [payment] = await flows.payments_for(attempt)

    passes = await flows.recover(attempt, flows.worker())

    assert await flows.state(attempt) == "Succeeded"
    assert [p["id"] for p in await flows.payments_for(attempt)] == [payment["id"]]
    assert (await flows.current(attempt)).provider_payment_id == payment["id"]
    assert passes == RECOVERY_PASSES[flows.wire.name]
    sends = await flows.sends_for(attempt)
    if flows.wire.lookups:
        assert len(sends) == 1
    else:
        assert len(sends) == 2 and sends[1]["replayed"] is True
        assert sends[0]["headers"]["idempotency-key"] == sends[1]["headers"]["idempotency-key"]
    status = await flows.shop.status(attempt.order_id)
    assert status.status_code == 200 and status.json()["state"] == "Succeeded"


async def test_a_server_error_after_the_provider_charged_is_unknown_and_resolved_once(
    flows: ProviderStack,
) -> None:
    """The provider charged, then answered 500: not a decline, so Unknown (202), never Failed.
    Cardco and Stripe keep the 500 under the key (a resend would only replay it), so recovery's
    lookup resolves it. Adyen has no lookup; its key keeps the real answer (a 500 without
    ``Transient-Error``), so recovery's same-key resend gets the payment's own result."""
    await flows.sandbox.fault("error_500_after", times=1, match={"operation": "create"})
    r = await flows.pay("visa")
    assert (r.status_code, r.json()["state"], r.json()["outcome_reason"]) == \
        (202, "Unknown", "provider.http-500"), r.text
    attempt = await get_attempt(flows.pool, UUID(r.json()["attempt_id"]))
    [payment] = await flows.payments_for(attempt)

    passes = await flows.recover(attempt, flows.worker())

    assert await flows.state(attempt) == "Succeeded"
    assert [p["id"] for p in await flows.payments_for(attempt)] == [payment["id"]]
    assert passes == RECOVERY_PASSES[flows.wire.name]
    assert len(await flows.sends_for(attempt)) == (1 if flows.wire.lookups else 2)


async def test_a_503_not_processed_is_unknown_and_the_same_key_resend_makes_exactly_one_payment(
    flows: ProviderStack,
) -> None:
    """A 503 that says "not processed" (Cardco ``not_processed``, Stripe ``Stripe-Should-Retry``,
    Adyen ``Transient-Error: true``) is still Unknown: a proxy may have forwarded the request,
    and Adyen asks for a same-key repeat. Nothing was stored under the key, so the resend
    executes, once (Stripe's only after the search lag: the miss proves nothing before)."""
    await flows.sandbox.fault("not_processed_503", times=1, match={"operation": "create"})
    r = await flows.pay("visa")
    reason = "provider.transient-error" if flows.wire.name == "adyen" else "provider.http-503"
    assert (r.status_code, r.json()["state"], r.json()["outcome_reason"]) == (202, "Unknown", reason), r.text
    attempt = await get_attempt(flows.pool, UUID(r.json()["attempt_id"]))
    assert await flows.payments_for(attempt) == []

    passes = await flows.recover(attempt, flows.worker())

    assert passes == ([Pass.INCONCLUSIVE, Pass.RESENT] if flows.wire.name == "stripe" else [Pass.RESENT])
    assert await flows.state(attempt) == "Succeeded"
    payments = await flows.payments_for(attempt)
    assert len(payments) == 1 and payments[0]["idempotency_key"] == str(attempt.idempotency_key)
    sends = await flows.sends_for(attempt)
    assert [q["status"] for q in sends] == [503, 200 if flows.wire.name != "cardco" else 201]


# -- 3. the request never arrived → same-key resend inside the window -----------------------------


async def test_a_request_that_never_arrived_is_resent_under_its_key_and_makes_exactly_one_payment(
    flows: ProviderStack,
) -> None:
    """Cardco: the reference lookup says "not found" and recovery resends at once. Adyen: no
    lookup, so "not found" is all recovery can know and it resends at once (the key makes a
    late original harmless). Stripe: a Search miss proves nothing within the search lag after
    the last send, so nothing is resent inside it; once it is over, the miss counts and the
    resend goes out under the same key."""
    attempt, _ = await flows.unknown_via_checkout("drop_request")
    assert await flows.payments_for(attempt) == []
    worker = flows.worker()

    if flows.wire.name == "stripe":
        await flows.make_due(attempt)
        assert await worker.run_pass() == [Pass.INCONCLUSIVE]
        conclusive = (await flows.current(attempt)).next_check_at
        assert conclusive is not None
        sent = (await flows.current(attempt)).first_sent_at
        assert sent is not None
        assert conclusive - sent >= timedelta(seconds=flows.recovery.search_lag_s)
        await flows.advance((conclusive - flows.clock.now()).total_seconds() - 1)
        assert await worker.run_pass() == []  # still inside the lag: not even due
        assert len(await flows.sends_for(attempt)) == 1

    await flows.make_due(attempt)
    assert await worker.run_pass() == [Pass.RESENT]
    assert await flows.state(attempt) == "Succeeded"
    payments = await flows.payments_for(attempt)
    assert len(payments) == 1 and payments[0]["idempotency_key"] == str(attempt.idempotency_key)
    sends = await flows.sends_for(attempt)
    assert len(sends) == 2 and sends[0]["body"] == sends[1]["body"] == attempt.request_body
    keys = {q["headers"]["idempotency-key"].strip('"') for q in sends}  # Cardco sends it quoted
    assert keys == {str(attempt.idempotency_key)}


async def test_a_late_original_after_the_resend_is_answered_from_the_key_and_makes_one_payment(
    flows: ProviderStack,
) -> None:
    """The first send arrives at the provider only after checkout gave up and recovery resent
    under the same key: the provider answers the late original from the key (a replay), so
    there is one payment (Stripe resends only after the search lag, the others at once)."""
    attempt, _ = await flows.unknown_via_checkout("late_arrival", delay_ms=1500)
    passes = await flows.recover(attempt, flows.worker())
    assert passes == ([Pass.INCONCLUSIVE, Pass.RESENT] if flows.wire.name == "stripe" else [Pass.RESENT])

    async def original_answered() -> bool:
        sends = await flows.sends_for(attempt)
        return len(sends) == 2 and all(q["status"] is not None for q in sends)

    await eventually(original_answered, what="the late original to be answered")
    original, resend = await flows.sends_for(attempt)  # in order of arrival
    assert (original["replayed"], resend["replayed"]) == (True, False)
    assert len(await flows.payments_for(attempt)) == 1
    assert await flows.state(attempt) == "Succeeded"


# -- 4. past the key window: escalate, send nothing -----------------------------------------------


async def test_past_the_key_window_recovery_escalates_the_deadline_and_sends_nothing(
    flows: ProviderStack,
) -> None:
    """The deadline is the first send + the provider's key retention − the margin (Adyen keeps
    keys 31 days, Cardco and Stripe 24 h). Past it, recovery may still look (Cardco, Stripe)
    but never resends; for Adyen nothing at all reaches the provider."""
    attempt, _ = await flows.unknown_via_checkout("drop_request")
    assert attempt.escalation_deadline is not None and attempt.first_sent_at is not None
    window = (attempt.escalation_deadline - attempt.first_sent_at).total_seconds()
    assert window == KEY_WINDOW_S[flows.wire.name]
    captured_before = len(await flows.sandbox.requests())

    await flows.advance((attempt.escalation_deadline - flows.clock.now()).total_seconds() + 1)
    assert await flows.worker().run_pass() == [Pass.ESCALATED]

    assert await flows.open_escalations() == [f"attempt:{attempt.attempt_id}:deadline"]
    assert await flows.state(attempt) == "Unknown"
    assert len(await flows.sends_for(attempt)) == 1  # only the first, dropped send
    assert await flows.payments_for(attempt) == []
    later = (await flows.sandbox.requests())[captured_before:]
    assert all(q["method"] == "GET" for q in later), later  # lookups at most
    if not flows.wire.lookups:
        assert later == []


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_configured_key_retention_and_margin_set_each_new_attempts_deadline(
    provider: str, pool: asyncpg.Pool, db_dsn: str,
) -> None:
    """``PAYCORE_<PROVIDER>_KEY_RETENTION_S`` and ``_ESCALATION_MARGIN_S`` override the provider's
    defaults for its account, and the deadline stamped at the first send is the first send +
    that retention − that margin."""
    def shorter_window(env: dict[str, str]) -> None:
        env[f"PAYCORE_{provider.upper()}_KEY_RETENTION_S"] = str(3 * 86_400)
        env[f"PAYCORE_{provider.upper()}_ESCALATION_MARGIN_S"] = "3600"

    async for flows in running_provider_stack(provider, pool, db_dsn, configure=shorter_window):
        attempt, _ = await flows.unknown_via_checkout("drop_request")
        assert attempt.escalation_deadline is not None and attempt.first_sent_at is not None
        window = (attempt.escalation_deadline - attempt.first_sent_at).total_seconds()
        assert window == 3 * 86_400 - 3_600


# -- 5. duplicate and forged webhooks -------------------------------------------------------------


async def test_a_duplicate_webhook_is_recorded_once_and_answered_duplicate(flows: ProviderStack) -> None:
    await flows.subscribe()
    r = await flows.pay("visa")
    assert (r.status_code, r.json().get("state")) == (200, "Succeeded"), r.text
    attempt_id = r.json()["attempt_id"]

    async def recorded() -> bool:
        return bool(await flows.pool.fetchval(
            "SELECT count(*) FROM payment_attempt_events WHERE kind = 'notification' AND attempt_id = $1",
            attempt_id))

    await eventually(recorded, what="the notification to be recorded")
    await eventually(flows.deliveries_settled, what="the first delivery")
    [delivery] = await flows.sandbox.deliveries()
    before = await flows.stored_rows()

    await flows.sandbox.redeliver(delivery["event_id"])  # the provider sends the same event again
    await eventually(flows.deliveries_settled, what="the redelivery")

    deliveries = await flows.sandbox.deliveries(event=delivery["event_id"])
    assert [d["result"] for d in deliveries] == ["succeeded", "succeeded"]  # acknowledged both times
    assert await flows.delivered_count("duplicate") == 1
    assert len(await flows.notifications()) == 1
    assert await flows.stored_rows() == before


async def test_concurrent_copies_and_a_dropped_first_delivery_change_the_attempt_once(
    flows: ProviderStack,
) -> None:
    """The provider sends two extra copies of the event at the same time as the original, and
    its first attempt is lost (redelivered on its schedule): one notification row, one
    transition, every delivery acknowledged."""
    await flows.subscribe()
    r = await flows.sandbox.http.post("/_sandbox/faults", json={"rules": [
        {"fault": "webhook_duplicate", "match": {"any": True}, "times": 2},
        {"fault": "webhook_drop_first", "match": {"any": True}},
    ]})
    r.raise_for_status()
    paid = await flows.pay("visa")
    assert paid.status_code == 200, paid.text
    attempt_id = paid.json()["attempt_id"]
    await wait_until(flows, attempt_id, "Succeeded")

    deliveries = await flows.sandbox.deliveries()
    assert len({d["event_id"] for d in deliveries}) == 1
    final = {d["delivery"]: d["result"] for d in deliveries}  # each delivery's last attempt
    assert len(final) == 3 and set(final.values()) == {"succeeded"}
    assert "retry" in [d["result"] for d in deliveries]  # the dropped first attempts
    assert len(await flows.notifications()) == 1
    row = await flows.pool.fetchrow("SELECT * FROM payment_attempts WHERE attempt_id = $1", attempt_id)
    assert await flows.pool.fetchval(
        "SELECT count(*) FROM payment_attempt_events WHERE attempt_id = $1 AND kind = 'transition'"
        " AND detail ->> 'to' = 'Succeeded'", row["attempt_id"]) == 1


async def test_a_refund_notification_is_recorded_and_queued_after_the_confirmation(
    flows: ProviderStack,
) -> None:
    """The merchant refunds a paid order at the provider (Cardco ``payment.refunded``, Stripe
    ``charge.refunded`` naming its intent, Adyen ``REFUND`` naming the payment in
    ``originalReference``): the attempt stays Succeeded and a refund request is queued after
    its confirmation and fulfilment, once."""
    await flows.subscribe()
    paid = await flows.pay("visa")
    assert paid.status_code == 200, paid.text
    attempt_id = paid.json()["attempt_id"]
    await wait_until(flows, attempt_id, "Succeeded")
    [payment] = await flows.sandbox.ledger()

    r = await flows.sandbox.http.post(f"/_sandbox/payments/{payment['id']}/refund", json={})
    r.raise_for_status()
    await eventually(flows.deliveries_settled, what="the refund notification")

    keys = await flows.pool.fetch("SELECT dedup_key FROM outbox_messages WHERE ordering_key IS NOT NULL"
                                  " ORDER BY message_id")
    effects = ("order-confirmation", "fulfillment-request", "refund-request")
    assert [k["dedup_key"] for k in keys] == [f"attempt:{attempt_id}:{effect}" for effect in effects]
    assert await flows.open_escalations() == []
    row = await flows.pool.fetchrow("SELECT state FROM payment_attempts WHERE attempt_id = $1", attempt_id)
    assert row["state"] == "Succeeded"


async def forgeries(flows: ProviderStack,
                    event: dict[str, Any]) -> list[tuple[bytes, dict[str, str], int]]:
    """The sandbox's event, signed with wrong credentials in each way the provider
    authenticates, with the status the intake must answer."""
    at = flows.now_s()
    wrong_secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    name = flows.wire.name
    if name == "cardco":
        body = orjson.dumps({k: v for k, v in event.items() if k != "notificationItem"})
        return [(body, flows.signer.cardco(body, secret=wrong_secret, at=at), 401)]
    if name == "stripe":
        body = orjson.dumps(event)
        return [(body, flows.signer.stripe(body, secret=wrong_secret, at=at), 401)]
    item = event["notificationItem"]
    wrong_key = secrets.token_hex(32).upper()
    genuine = adyen_batch(flows.signer.adyen_item(item))
    return [
        (adyen_batch(flows.signer.adyen_item(item, hmac_key=wrong_key)), flows.signer.adyen_auth(), 401),
        (genuine, flows.signer.adyen_auth(password="adyen_" + secrets.token_hex(12)), 401),
        (genuine, {"Content-Type": "application/json"}, 400),  # no basic auth at all
    ]


async def test_a_forged_webhook_is_refused_and_nothing_is_stored(flows: ProviderStack) -> None:
    """A real success event for a pending 3-D Secure payment, signed with the wrong secret
    (Cardco, Stripe) or the wrong HMAC key or basic-auth password (Adyen, which authenticates
    both): refused, nothing stored, the attempt untouched. The same event delivered by the
    provider then resolves it, so only the credentials made the difference."""
    r = await flows.pay("3ds")
    assert (r.status_code, r.json().get("state")) == (200, "Started"), r.text
    attempt_id = r.json()["attempt_id"]
    [payment] = await flows.sandbox.ledger()
    await flows.sandbox.complete_action(payment["id"])  # no endpoint yet: nothing delivered
    event = await succeeded_event(flows, payment["id"])
    before = await flows.stored_rows()

    for body, headers, status in await forgeries(flows, event):
        forged = await flows.intake.post(f"/webhooks/{flows.wire.name}", content=body, headers=headers)
        assert forged.status_code == status, forged.text
        assert forged.headers["content-type"] == "application/problem+json"
    assert await flows.stored_rows() == before
    assert await flows.delivered_count("rejected-signature") == len(await forgeries(flows, event))
    row = await flows.pool.fetchrow("SELECT state FROM payment_attempts WHERE attempt_id = $1", attempt_id)
    assert row["state"] == "Started"

    await flows.subscribe()
    await flows.sandbox.redeliver(event["id"])
    await wait_until(flows, attempt_id, "Succeeded")






