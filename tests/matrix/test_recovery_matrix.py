"""Recovery lines of the reference's test matrix: workers on the fake clock, the sandbox over HTTP.

Here: finding the payment, the same-key resend and its bytes, the key window, the final local
check. The loop's other sections have a file each beside this one (test_recovery_*.py).
The sandbox ledger counts payments; its request capture counts sends.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from paycore import leases
from paycore.attempts import Attempt
from paycore_recovery.loop import Pass
from tests.support.recovery import DEADLINE_S, RecoveryStack
from tests.support.stack import eventually
from tests.support.webhooks import event, payment_object


async def test_recovery_finds_the_payment_and_resolves_it_succeeded_one_payment_in_total(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("lose_response")
    await rec.make_due(attempt)
    assert await rec.worker().run_pass() == [Pass.RESOLVED]
    assert await rec.state(attempt) == "Succeeded"
    assert len(await rec.payments_for(attempt)) == 1
    assert len(await rec.sends_for(attempt)) == 1  # found by lookup: nothing resent
    status = await rec.hooks.shop.status(attempt.order_id)
    assert status.status_code == 200 and status.json()["state"] == "Succeeded"


async def test_request_never_arrived_not_found_then_same_key_resend_makes_exactly_one_payment(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    assert await rec.payments_for(attempt) == []
    await rec.make_due(attempt)
    assert await rec.worker().run_pass() == [Pass.RESENT]
    assert await rec.state(attempt) == "Succeeded"
    payments = await rec.payments_for(attempt)
    assert len(payments) == 1 and payments[0]["idempotency_key"] == attempt.idempotency_key
    sends = await rec.sends_for(attempt)
    assert len(sends) == 2 and sends[0]["body"] == sends[1]["body"] == attempt.request_body
    assert sends[0]["headers"]["idempotency-key"] == sends[1]["headers"]["idempotency-key"]
    assert (await rec.history(attempt))[-4:] == ["lookup", "send_intent", "send_result", "transition"]


async def test_a_late_arriving_original_after_the_lookup_still_makes_one_payment(rec: RecoveryStack) -> None:
    attempt = await rec.unknown_via_checkout("late_arrival", delay_ms=1500)
    await rec.make_due(attempt)
    assert await rec.worker().run_pass() == [Pass.RESENT]  # not found yet: resent under the same key

    async def original_processed() -> bool:
        first = (await rec.sends_for(attempt))[0]
        return first.get("status") is not None

    await eventually(original_processed, what="the late original to be processed by the provider")
    payments = await rec.payments_for(attempt)
    assert len(payments) == 1  # the provider's key made the late original a replay
    assert await rec.state(attempt) == "Succeeded"


async def test_resend_after_the_key_window_never_happens_escalates_and_later_evidence_still_resolves(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    rec.clock.advance(DEADLINE_S)  # past the stamped escalation deadline
    await rec.sandbox.http.post("/_sandbox/clock", json={"advance_seconds": 86_400 + 1})
    assert await rec.worker().run_pass() == [Pass.ESCALATED]
    assert len(await rec.sends_for(attempt)) == 1  # only the original; nothing resent
    assert await rec.open_escalations() == [f"attempt:{attempt.attempt_id}:deadline"]
    # Later evidence still resolves it, and resolving it closes the episode.
    late = event(payment_object(payment_id="pay_late", reference=attempt.client_reference))
    r = await rec.hooks.deliver(late, timestamp=int(rec.clock.now().timestamp()))
    assert r.json()["result"] == "applied"
    assert await rec.state(attempt) == "Succeeded"
    assert await rec.open_escalations() == []


async def test_an_escalated_attempt_keeps_being_looked_up_on_the_slow_cadence(rec: RecoveryStack) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    rec.clock.advance(DEADLINE_S)
    worker = rec.worker()
    assert await worker.run_pass() == [Pass.ESCALATED]
    row = await rec.pool.fetchrow("SELECT next_check_at, recovery_owner FROM payment_attempts"
                                  " WHERE attempt_id = $1", attempt.attempt_id)
    assert (row["next_check_at"] - rec.clock.now()).total_seconds() == rec.recovery.slow_cadence_s
    assert row["recovery_owner"] is None  # escalation, schedule and release committed together
    rec.clock.advance(rec.recovery.slow_cadence_s)
    assert await worker.run_pass() == [Pass.ESCALATED]  # looked up again, still not found
    initial = [key for key in await rec.alerts() if key.endswith(":initial")]
    assert initial == [f"escalation:{(await escalation_ids(rec))[0]}:initial"]
    assert (await rec.history(attempt)).count("lookup") == 2


async def escalation_ids(rec: RecoveryStack) -> list[int]:
    return [r["escalation_id"] for r in await rec.pool.fetch(
        "SELECT escalation_id FROM payment_escalations ORDER BY escalation_id")]


async def test_a_worker_paused_before_its_final_check_past_the_deadline_records_send_abandoned(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    assert attempt.escalation_deadline is not None
    # Due, and 30 s inside the window when the intent commits.
    rec.clock.advance((attempt.escalation_deadline - rec.clock.now()).total_seconds() - 30)
    worker = rec.worker()

    async def pause_past_deadline(a: Attempt) -> None:
        rec.clock.advance(60)  # the worker stalls past the deadline, though not past its lease

    worker.before_final_check = pause_past_deadline
    assert await worker.run_pass() == [Pass.ABANDONED]
    assert len(await rec.sends_for(attempt)) == 1  # no resend
    assert (await rec.history(attempt))[-2:] == ["send_intent", "send_abandoned"]
    assert await rec.open_escalations() == [f"attempt:{attempt.attempt_id}:deadline"]
    assert await rec.state(attempt) == "Unknown"  # send_abandoned resolves nothing


async def test_a_worker_whose_lease_was_reclaimed_before_its_final_check_records_send_abandoned_sends_nothing(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    await rec.make_due(attempt)  # well inside the key window: only the lease branch can stop the send
    worker = rec.worker("w1")
    taken = leases.new_lease("w2")

    async def lease_expires_and_another_worker_claims(a: Attempt) -> None:
        rec.clock.advance(rec.recovery.lease_s)  # w1 stalls past its lease...
        assert await leases.claim(rec.pool, a.attempt_id, taken, rec.clock.now(), rec.recovery.lease_s)

    worker.before_final_check = lease_expires_and_another_worker_claims
    assert await worker.run_pass() == [Pass.ABANDONED]
    assert len(await rec.sends_for(attempt)) == 1  # only the original: w1 sent nothing
    assert (await rec.history(attempt))[-2:] == ["send_intent", "send_abandoned"]
    abandoned = await rec.pool.fetchrow(
        "SELECT actor, detail FROM payment_attempt_events WHERE attempt_id = $1 AND kind = 'send_abandoned'",
        attempt.attempt_id)
    assert abandoned["detail"] == {"why": "lease-lost"} and abandoned["actor"] == worker.actor
    held = await rec.current(attempt)
    assert (held.recovery_owner, held.lease_token) == ("w2", taken.token)  # the new owner's lease stands
    assert held.state.value == "Unknown" and await rec.open_escalations() == []


async def test_a_worker_paused_after_its_final_check_sends_and_the_send_is_recorded_and_reconciled(
    rec: RecoveryStack,
) -> None:
    # The residual limit: local checks cannot stop a send already past them. The design
    # guarantees that send is recorded and reconciled, inside the provider's key window.
    attempt = await rec.unknown_via_checkout("drop_request")
    rec.clock.advance(DEADLINE_S - 120)
    worker = rec.worker()

    async def pause_past_deadline(a: Attempt) -> None:
        rec.clock.advance(600)

    worker.after_final_check = pause_past_deadline
    assert await worker.run_pass() == [Pass.RESENT]
    assert (await rec.history(attempt))[-3:-1] == ["send_intent", "send_result"]
    assert await rec.state(attempt) == "Succeeded"
    assert len(await rec.payments_for(attempt)) == 1


async def test_lease_expiry_during_an_in_flight_send_and_another_workers_resend_make_one_payment(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    await rec.make_due(attempt)
    # Worker A's resend reaches the provider but is processed only later.
    await rec.sandbox.fault("late_arrival", times=1, delay_ms=1500, match={"operation": "create"})
    a = rec.worker("a")
    a_pass = asyncio.create_task(a.run_pass())

    async def a_sending() -> bool:
        return len(await rec.sends_for(attempt)) == 2 and rec.clock.pending_timers > 0

    await eventually(a_sending, what="worker A's resend to be in flight")
    rec.clock.advance(rec.recovery.lease_s + 1)  # A's lease (and its call budget) expire
    b = rec.worker("b")
    b_results = await b.run_pass()
    await a_pass
    assert b_results == [Pass.RESENT]

    async def a_processed() -> bool:
        _original, a_send, _b_send = await rec.sends_for(attempt)  # the original was dropped
        return a_send.get("status") is not None

    await eventually(a_processed, what="A's late request to be processed")
    assert len(await rec.payments_for(attempt)) == 1  # same key: the provider made them one
    assert await rec.state(attempt) == "Succeeded"


async def test_a_replayed_500_on_resend_leaves_the_attempt_unknown(rec: RecoveryStack) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    await rec.make_due(attempt)
    await rec.sandbox.fault("error_500_after", times=1, match={"operation": "create"})
    assert await rec.worker().run_pass() == [Pass.RESENT]
    assert await rec.state(attempt) == "Unknown"
    last = await rec.pool.fetchrow(
        "SELECT detail FROM payment_attempt_events WHERE attempt_id = $1"
        " AND kind = 'send_result' ORDER BY event_id DESC LIMIT 1", attempt.attempt_id)
    assert last["detail"]["reason"] == "provider.http-500"


async def test_a_same_key_resend_rejected_before_execution_leaves_the_attempt_unknown(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    await rec.make_due(attempt)
    await rec.sandbox.fault("not_processed_503", times=1, match={"operation": "create"})
    assert await rec.worker().run_pass() == [Pass.RESENT]
    assert await rec.state(attempt) == "Unknown"  # a no-effect rejection of this send proves nothing
    assert await rec.payments_for(attempt) == []


async def last_send_result(rec: RecoveryStack, attempt: Attempt) -> dict[str, Any]:
    row = await rec.pool.fetchrow(
        "SELECT detail FROM payment_attempt_events WHERE attempt_id = $1"
        " AND kind = 'send_result' ORDER BY event_id DESC LIMIT 1", attempt.attempt_id)
    return dict(row["detail"])


# How the attempt came to need a resend: its first send timed out (Unknown), or checkout crashed
# after the Started transition (a stalled Started attempt; its send may have reached the provider).
EARLIER_SEND = ["checkout-crashed-after-started", "first-send-timed-out"]


async def needing_a_resend(rec: RecoveryStack, how: str, method: str = "tok_visa") -> Attempt:
    if how == "first-send-timed-out":
        attempt = await rec.unknown_via_checkout_paying(method, "drop_request")
    else:
        attempt = await rec.started_attempt(method=method)
        b = rec.hooks.settings.budgets
        rec.clock.advance(b.call_s + b.record_s + rec.hooks.settings.processing_allowance_s)
    await rec.make_due(attempt)
    return attempt


@pytest.mark.parametrize("how", EARLIER_SEND)
async def test_a_resend_answered_400_with_a_documented_rejection_code_leaves_the_attempt_unknown(
    rec: RecoveryStack, how: str,
) -> None:
    # The stored card is one the provider rejects at validation (tok_expired): a rejection of
    # this resend says nothing about the earlier send, so it is never NotApplied.
    attempt = await needing_a_resend(rec, how, "tok_expired")
    assert await rec.worker().run_pass() == [Pass.RESENT]
    assert (await rec.sends_for(attempt))[-1]["status"] == 400
    result = await last_send_result(rec, attempt)
    assert (result["http_status"], result["outcome"]) == (400, "unknown")
    assert result["reason"] == "provider.rejected-this-send.parameter_invalid"
    assert await rec.state(attempt) == "Unknown"
    assert await rec.payments_for(attempt) == []


@pytest.mark.parametrize("how", EARLIER_SEND)
async def test_a_resend_answered_429_leaves_the_attempt_unknown(rec: RecoveryStack, how: str) -> None:
    attempt = await needing_a_resend(rec, how)
    await rec.sandbox.fault("rate_limit", times=1, match={"operation": "create"})
    assert await rec.worker().run_pass() == [Pass.RESENT]
    assert (await rec.sends_for(attempt))[-1]["status"] == 429
    result = await last_send_result(rec, attempt)
    assert (result["http_status"], result["outcome"], result["reason"]) == (
        429, "unknown", "provider.rate-limited")
    assert await rec.state(attempt) == "Unknown"
    assert await rec.payments_for(attempt) == []


SAME_ON_EVERY_SEND = ("idempotency-key", "cardco-version", "cardco-account", "content-type",
                      "authorization")


async def test_a_recovery_resend_carries_the_first_sends_key_endpoint_headers_and_identical_bytes(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    await rec.make_due(attempt)
    assert await rec.worker().run_pass() == [Pass.RESENT]
    first, resend = await rec.sends_for(attempt)
    assert first["fault"] == "drop_request" and resend["fault"] is None  # checkout's send, then recovery's
    for name in SAME_ON_EVERY_SEND:
        assert resend["headers"].get(name) == first["headers"].get(name), name
    assert first["headers"]["idempotency-key"] == f'"{attempt.idempotency_key}"'
    assert first["headers"]["cardco-version"] == attempt.api_version
    assert first["headers"]["cardco-account"] == "acct_store"
    assert (resend["method"], resend["path"], resend["query"]) == (first["method"], first["path"],
                                                                  first["query"])
    assert attempt.endpoint.endswith(first["path"])
    assert resend["body"] == first["body"] == attempt.request_body  # byte for byte
    assert len(await rec.payments_for(attempt)) == 1
