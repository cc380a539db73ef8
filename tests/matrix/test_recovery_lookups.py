"""Lookups and the evidence they bring: a failed lookup is not "not found"; by recorded id,
then by client reference (replica lag included); a payment that is not this attempt's
(another id, another owner, another amount) resolves nothing and escalates; a 429 pauses
its account only.

The recovery matrix continued; setup as in test_recovery_matrix.py.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from paycore.attempts import Attempt
from paycore.domain import AttemptState
from paycore.providers.base import StoredRequest
from paycore_recovery.loop import Pass
from tests.support.recovery import RecoveryStack, seconds, settle_s
from tests.support.webhooks import OTHER, TEST

# -- Lookups --------------------------------------------------------------------------------------


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


async def test_the_lookups_that_resolve_an_attempt_commit_with_its_transition_and_before_it(
    rec: RecoveryStack,
) -> None:
    attempt, payment = await resolved_after_one_stale_id_read(rec)
    rows = await rec.pool.fetch(
        "SELECT kind, xmin::text AS tx, detail FROM payment_attempt_events"
        " WHERE attempt_id = $1 AND kind IN ('lookup', 'transition') ORDER BY event_id", attempt.attempt_id)
    written = rows[-3:]  # the pass's two lookups and the transition they brought
    assert [(r["kind"], r["detail"].get("by"), r["detail"].get("to")) for r in written] == [
        ("lookup", "id", None), ("lookup", "reference", None), ("transition", None, "Succeeded")]
    assert len({r["tx"] for r in written}) == 1  # one transaction: one commit per resolution
    assert (await rec.current(attempt)).provider_payment_id == payment["id"]


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


async def resolved_after_one_stale_id_read(rec: RecoveryStack) -> tuple[Attempt, dict[str, Any]]:
    """A charged Unknown attempt with its right payment id, whose by-id read answers 404 once
    (a lagging read replica), after one recovery pass that resolved it from the reference."""
    attempt, payment = await charged_unknown_with_its_payment_id(rec)
    await rec.sandbox.fault("lookup_stale", times=1, match={"reference": attempt.client_reference})
    await rec.make_due(attempt)
    assert await rec.worker().run_pass() == [Pass.RESOLVED]
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
    attempt, payment = await resolved_after_one_stale_id_read(rec)
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


# -- Evidence about another attempt, or another amount --------------------------------------------


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


async def test_two_provider_payments_for_one_reference_escalate_and_resolve_nothing(
    rec: RecoveryStack,
) -> None:
    # The attempt's own payment, and a second one carrying its reference under another key (a
    # double charge's signature): the lookup by reference finds both, and a person must look.
    attempt = await rec.charged_but_unknown()
    second = dataclasses.replace(StoredRequest.from_attempt(attempt), idempotency_key="another-key-same-ref")
    created = await rec.worker("sender").client.create_payment(second, budget_s=15, first_send=True)
    assert created.kind.value == "succeeded", created
    payments = await rec.payments_for(attempt)
    assert len({p["id"] for p in payments}) == 2
    await rec.make_due(attempt)
    assert await rec.worker().run_pass() == [Pass.ESCALATED]
    assert await rec.open_escalations() == [f"attempt:{attempt.attempt_id}:multiple-provider-payments"]
    [esc] = await rec.escalation_rows()
    assert esc["detail"]["provider_payment_ids"] == sorted(p["id"] for p in payments)
    after = await rec.current(attempt)
    assert after.state is AttemptState.UNKNOWN and after.provider_payment_id is None
    assert after.recovery_owner is None
    order = await rec.pool.fetchrow("SELECT status FROM orders WHERE order_id = $1", attempt.order_id)
    assert order["status"] == "Open"  # not Paid on a payment that may be one of two
    assert await rec.pool.fetchval("SELECT count(*) FROM outbox_messages WHERE kind <> 'operator-alert'") == 0
    [looked] = await rec.lookup_events(attempt)
    assert looked["result"] == "found" and len(looked["payments"]) == 2  # the evidence, for the person


# -- Rate limits ----------------------------------------------------------------------------------


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
