"""record_outcome: the one place an attempt's outcome is written, by whichever writer has evidence.

Concurrent writers are real transactions on a second connection, held open
until record_outcome's conditional UPDATE is waiting on them.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from paycore import attempts, escalations, orders, writer
from paycore.attempt_row import ATTEMPTS
from paycore.attempts import Attempt, Lease, OutcomeNotConfirmed
from paycore.clock import FakeClock
from paycore.config import ProviderAccountConfig
from paycore.domain import AttemptState, Decision, EscalationReason, OutcomeWrite, ProviderOutcome
from paycore.errors import AttemptNotFound
from tests.support.timings import REMINDER_INTERVAL

from .helpers import (
    RECHECK_S,
    event_count,
    finish,
    seed_account,
    started_attempt,
    wait_until_blocked_by,
)


@pytest.fixture
async def account(pool: asyncpg.Pool, clock: FakeClock) -> ProviderAccountConfig:
    return await seed_account(pool, clock)


@pytest.fixture
async def attempt(pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig) -> Attempt:
    return await started_attempt(pool, clock, account)


def succeeded(attempt: Attempt, payment_id: str = "pay_1", **kw: Any) -> ProviderOutcome:
    return ProviderOutcome.succeeded(payment_id, kw.pop("amount", attempt.amount_minor),
                                     kw.pop("currency", attempt.currency), **kw)


async def record(pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt, outcome: ProviderOutcome,
                 **kw: Any) -> Attempt:
    kw.setdefault("actor", "endpoint")
    kw.setdefault("recheck_after_s", RECHECK_S)
    kw.setdefault("reminder_interval", REMINDER_INTERVAL)
    return (await attempts.record_outcome(pool, attempt.attempt_id, outcome, now=clock.now(), **kw)).attempt


async def business_rows(pool: asyncpg.Pool, attempt: Attempt) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await pool.fetch(
        "SELECT * FROM outbox_messages WHERE attempt_id = $1 AND kind <> 'operator-alert' "
        "ORDER BY message_id",
        attempt.attempt_id)
    return rows


async def escalation_rows(pool: asyncpg.Pool, attempt: Attempt) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await pool.fetch(
        "SELECT * FROM payment_escalations WHERE attempt_id = $1 ORDER BY escalation_id", attempt.attempt_id)
    return rows


async def alert_rows(pool: asyncpg.Pool, attempt: Attempt) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await pool.fetch(
        "SELECT * FROM outbox_messages WHERE attempt_id = $1 AND kind = 'operator-alert' ORDER BY message_id",
        attempt.attempt_id)
    return rows


async def order_of(pool: asyncpg.Pool, attempt: Attempt) -> orders.Order:
    return await orders.get_order(pool, attempt.order_id, attempt.customer_id)


async def race_against_writer(
    pool: asyncpg.Pool, attempt: Attempt, set_clause: str, operation: Coroutine[Any, Any, Attempt]
) -> asyncio.Task[Attempt]:
    """A concurrent writer that skips the order lock changes the attempt and holds its transaction
    open until ``operation``'s conditional UPDATE waits on it, then commits; returns the running task."""
    async with pool.acquire() as writer:
        tx = writer.transaction()
        await tx.start()
        changed = await writer.execute(
            f"UPDATE payment_attempts SET {set_clause}, version = version + 1 WHERE attempt_id = $1",
            attempt.attempt_id)
        assert changed == "UPDATE 1"
        task = asyncio.create_task(operation)
        try:
            blocked = await wait_until_blocked_by(pool, writer.get_server_pid(), task)
        finally:
            await tx.commit()
    # The writer's conditional UPDATE (pg_stat_activity cuts a statement at
    # track_activity_query_size, 1 kB by default: the statement starts with what it shows).
    assert len(blocked["query"]) > 200 and ATTEMPTS.apply_outcome.sql.startswith(blocked["query"]), blocked
    return task


async def test_an_outcome_for_no_such_attempt_is_refused_as_attempt_not_found_and_writes_nothing(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    stranger = uuid.uuid4()
    with pytest.raises(AttemptNotFound, match=str(stranger)):
        await attempts.record_outcome(pool, stranger, succeeded(attempt), now=clock.now(), actor="endpoint",
                                      recheck_after_s=RECHECK_S, reminder_interval=REMINDER_INTERVAL)
    assert await pool.fetchval("SELECT count(*) FROM outbox_messages") == 0
    assert await attempts.get_attempt(pool, attempt.attempt_id) == attempt


# --- Succeeded and its effects -------------------------------------------------------------------------


async def test_a_succeeded_outcome_marks_the_order_paid_and_queues_the_confirmation_and_fulfillment(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    order_before = await order_of(pool, attempt)
    done = await record(pool, clock, attempt, succeeded(attempt))
    assert done.state is AttemptState.SUCCEEDED
    assert done.provider_payment_id == "pay_1" and done.provider_status == "succeeded"
    assert done.version == attempt.version + 1
    assert await attempts.get_attempt(pool, attempt.attempt_id) == done

    order = await order_of(pool, attempt)
    assert order.status == "Paid" and order.version == order_before.version + 1

    rows = await business_rows(pool, attempt)
    aid = attempt.attempt_id
    assert [(r["dedup_key"], r["kind"], r["ordering_key"]) for r in rows] == [
        (f"attempt:{aid}:order-confirmation", "order-confirmation", f"attempt:{aid}"),
        (f"attempt:{aid}:fulfillment-request", "fulfillment-request", f"attempt:{aid}"),
    ]
    for r in rows:
        assert r["payload"]["dedup_key"] == r["dedup_key"]
        assert r["payload"]["attempt_id"] == str(aid)
        assert r["payload"]["provider_payment_id"] == "pay_1"
        assert r["payload"]["order_id"] == attempt.order_id
        assert r["created_at"] == r["next_attempt_at"] == clock.now()
    assert await pool.fetchval("SELECT count(*) FROM outbox_messages") == 2  # nothing else queued


async def test_a_final_outcome_resolves_the_attempts_open_escalations(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    async with pool.acquire() as conn, conn.transaction():
        escalation_id = await escalations.raise_escalation(
            conn, key=f"attempt:{attempt.attempt_id}:deadline", reason=EscalationReason.DEADLINE,
            attempt_id=attempt.attempt_id, now=clock.now(), reminder_interval=REMINDER_INTERVAL)
    assert escalation_id is not None
    clock.advance(60)
    await record(pool, clock, attempt, succeeded(attempt))
    [row] = await escalation_rows(pool, attempt)
    assert row["resolved_at"] == clock.now()
    assert row["next_reminder_at"] is None


async def test_the_same_success_reached_by_a_lookup_and_then_a_notification_queues_one_confirmation(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    by_lookup = await record(pool, clock, attempt, succeeded(attempt), actor="recovery-1", from_send=False)
    clock.advance(5)
    by_notification = await record(pool, clock, attempt, succeeded(attempt), actor="notification-handler",
                                   from_send=False, evidence_key="evt_1")
    assert by_notification == by_lookup  # the final winner is returned unchanged
    assert [r["kind"] for r in await business_rows(pool, attempt)] == [
        "order-confirmation", "fulfillment-request"]
    assert (await order_of(pool, attempt)).version == 1  # marked Paid once
    assert await escalation_rows(pool, attempt) == []
    transitions = await pool.fetch(
        "SELECT detail FROM payment_attempt_events WHERE attempt_id = $1 AND kind = 'transition' "
        "AND detail->>'to' = 'Succeeded'", attempt.attempt_id)
    assert len(transitions) == 1


async def test_a_notification_that_arrives_before_the_endpoint_records_its_timeout_wins(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    """The late Unknown write does not overwrite Succeeded."""
    won = await record(pool, clock, attempt, succeeded(attempt), actor="notification-handler",
                       from_send=False, evidence_key="evt_1")
    clock.advance(10)
    late = await record(pool, clock, attempt, ProviderOutcome.unknown("provider.no-response.client-ceiling"))
    assert late.state is AttemptState.SUCCEEDED
    assert await attempts.get_attempt(pool, attempt.attempt_id) == won
    assert await event_count(pool, attempt.attempt_id, "send_result") == 1  # the timeout is still evidence
    assert await escalation_rows(pool, attempt) == []


async def test_a_lost_response_on_a_started_attempt_is_recorded_as_unknown_never_failed(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    unknown = await record(pool, clock, attempt, ProviderOutcome.unknown("provider.no-response.caller"))
    assert unknown.state is AttemptState.UNKNOWN
    assert unknown.outcome_reason == "provider.no-response.caller"
    assert unknown.next_check_at == clock.now() + timedelta(seconds=RECHECK_S)
    assert (await order_of(pool, attempt)).status == "Open"
    assert await business_rows(pool, attempt) == []


async def test_unknown_does_not_overwrite_a_started_attempt_with_an_observed_provider_status(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    processing = await record(pool, clock, attempt, ProviderOutcome.processing("pay_1"),
                              actor="notification-handler", from_send=False)
    assert processing.state is AttemptState.STARTED and processing.provider_status == "processing"
    clock.advance(10)
    after = await record(pool, clock, attempt, ProviderOutcome.unknown("provider.no-response.caller"))
    assert after == processing
    assert await attempts.get_attempt(pool, attempt.attempt_id) == processing


# --- contradictions and identity -----------------------------------------------------------------------


async def test_a_failed_outcome_reported_after_succeeded_raises_a_contradiction_and_changes_nothing(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    done = await record(pool, clock, attempt, succeeded(attempt))
    outbox_before = await pool.fetch("SELECT * FROM outbox_messages ORDER BY message_id")
    clock.advance(30)
    returned = await record(pool, clock, attempt, ProviderOutcome.failed("card_declined"),
                            actor="recovery-1", from_send=False)
    assert returned == done
    assert await attempts.get_attempt(pool, attempt.attempt_id) == done
    assert (await order_of(pool, attempt)).status == "Paid"
    [esc] = await escalation_rows(pool, attempt)
    assert esc["escalation_key"] == f"attempt:{attempt.attempt_id}:contradiction"
    assert esc["reason"] == "contradiction" and esc["resolved_at"] is None
    assert esc["detail"]["recorded"] == "Succeeded" and esc["detail"]["reported"] == "Failed"
    # Exactly one new outbox row: the episode's operator alert. No business effect changes.
    after = await pool.fetch("SELECT * FROM outbox_messages ORDER BY message_id")
    assert after[: len(outbox_before)] == outbox_before
    [alert] = after[len(outbox_before):]
    assert alert["dedup_key"] == f"escalation:{esc['escalation_id']}:initial"
    # The same contradiction reported again joins the open episode: no second alert.
    await record(pool, clock, attempt, ProviderOutcome.failed("card_declined"), actor="recovery-1",
                 from_send=False)
    assert len(await escalation_rows(pool, attempt)) == 1
    assert len(await alert_rows(pool, attempt)) == 1


async def test_a_different_provider_payment_id_raises_a_provider_id_conflict_and_replaces_nothing(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    processing = await record(pool, clock, attempt, ProviderOutcome.processing("pay_1"))
    assert processing.provider_payment_id == "pay_1"
    returned = await record(pool, clock, attempt, succeeded(attempt, "pay_2"), actor="notification-handler",
                            from_send=False)
    assert returned == processing
    assert await attempts.get_attempt(pool, attempt.attempt_id) == processing
    [esc] = await escalation_rows(pool, attempt)
    assert esc["escalation_key"] == f"attempt:{attempt.attempt_id}:provider-id-conflict"
    assert esc["detail"] == {"recorded": "pay_1", "reported": "pay_2", "actor": "notification-handler"}
    assert (await order_of(pool, attempt)).status == "Open"
    assert await business_rows(pool, attempt) == []


async def test_a_provider_payment_id_owned_by_another_attempt_raises_an_escalation_and_writes_nothing(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig, attempt: Attempt
) -> None:
    await record(pool, clock, attempt, succeeded(attempt, "pay_1"))
    other = await started_attempt(pool, clock, account, customer="cus_2")
    returned = await record(pool, clock, other, succeeded(other, "pay_1"), actor="notification-handler",
                            from_send=False)
    assert returned == other
    assert await attempts.get_attempt(pool, other.attempt_id) == other
    assert (await order_of(pool, other)).status == "Open"
    [esc] = await escalation_rows(pool, other)
    assert esc["reason"] == "provider-id-conflict"
    assert esc["detail"] == {"reported": "pay_1", "owned_by_attempt": str(attempt.attempt_id),
                             "actor": "notification-handler"}
    assert await business_rows(pool, other) == []
    # The owner is untouched and not escalated.
    assert (await attempts.get_attempt(pool, attempt.attempt_id)).state is AttemptState.SUCCEEDED
    assert await escalation_rows(pool, attempt) == []


async def test_the_same_provider_payment_id_in_another_account_is_no_conflict(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    # A provider payment id is unique within its account only (the unique index says so).
    await record(pool, clock, attempt, succeeded(attempt, "pay_1"))
    live = await started_attempt(pool, clock, await seed_account(pool, clock, environment="live"),
                                 customer="cus_2")
    done = await record(pool, clock, live, succeeded(live, "pay_1"), actor="notification-handler",
                        from_send=False)
    assert (done.state, done.provider_payment_id) == (AttemptState.SUCCEEDED, "pay_1")
    assert await escalation_rows(pool, live) == []


@pytest.mark.parametrize(("amount_delta", "currency"), [(1, None), (0, "USD")], ids=["amount", "currency"])
async def test_an_amount_or_currency_mismatch_raises_a_mismatch_escalation_and_leaves_the_state(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt, amount_delta: int, currency: str | None
) -> None:
    outcome = succeeded(attempt, amount=attempt.amount_minor + amount_delta,
                        currency=currency or attempt.currency)
    returned = await record(pool, clock, attempt, outcome, actor="notification-handler", from_send=False,
                            evidence_key="evt_9")
    assert returned == attempt
    durable = await attempts.get_attempt(pool, attempt.attempt_id)
    assert durable == attempt and durable.provider_payment_id is None
    [esc] = await escalation_rows(pool, attempt)
    assert esc["escalation_key"] == f"attempt:{attempt.attempt_id}:mismatch:evt_9"
    assert esc["reason"] == "mismatch"
    assert (await order_of(pool, attempt)).status == "Open"
    assert await business_rows(pool, attempt) == []


async def test_the_outcome_write_keeps_a_recorded_provider_payment_id_whatever_it_is_handed(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    """The decisions never hand the write another id than the one recorded (a different one is a
    provider-id conflict, above); the statement keeps the recorded one even if a caller did, so the
    id lookups and refunds go by can never be swapped under an attempt."""
    await pool.execute("UPDATE payment_attempts SET provider_payment_id = 'pay_1', version = version + 1 "
                       "WHERE attempt_id = $1", attempt.attempt_id)
    read = await attempts.get_attempt(pool, attempt.attempt_id)
    write = OutcomeWrite(target=AttemptState.UNKNOWN, provider_status=None, next_action=None,
                         next_action_expires_at=None, outcome_reason="timeout", provider_payment_id="pay_2",
                         next_check_at=clock.now())
    decision = Decision(AttemptState.STARTED, AttemptState.UNKNOWN, write=write)
    async with pool.acquire() as conn, conn.transaction():
        done = await writer.execute(conn, read, decision, now=clock.now(), actor="test", history=[])
    assert done.attempt is not None and done.attempt.provider_payment_id == "pay_1"
    assert (await attempts.get_attempt(pool, attempt.attempt_id)).provider_payment_id == "pay_1"


async def test_a_success_reported_with_a_different_provider_payment_id_after_succeeded_is_escalated(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    done = await record(pool, clock, attempt, succeeded(attempt, "pay_1"))
    await record(pool, clock, attempt, succeeded(attempt, "pay_2"), actor="notification-handler",
                 from_send=False, evidence_key="evt_2")
    assert await attempts.get_attempt(pool, attempt.attempt_id) == done
    reasons = {e["reason"] for e in await escalation_rows(pool, attempt) if e["resolved_at"] is None}
    assert reasons & {"provider-id-conflict", "contradiction"}


async def test_a_success_reported_with_a_mismatched_amount_after_succeeded_raises_a_mismatch_escalation(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    done = await record(pool, clock, attempt, succeeded(attempt, "pay_1"))
    await record(pool, clock, attempt, succeeded(attempt, "pay_1", amount=attempt.amount_minor * 2),
                 actor="notification-handler", from_send=False, evidence_key="evt_2")
    assert await attempts.get_attempt(pool, attempt.attempt_id) == done
    reasons = {e["reason"] for e in await escalation_rows(pool, attempt) if e["resolved_at"] is None}
    assert "mismatch" in reasons


# --- concurrency: reapply, bounded retries, constraint failures ----------------------------------------


async def test_an_outcome_write_that_loses_a_race_to_an_unknown_winner_is_reapplied_and_ends_succeeded(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    task = await race_against_writer(
        pool, attempt, "state = 'Unknown', outcome_reason = 'recovery.marked-unknown'",
        record(pool, clock, attempt, succeeded(attempt)))
    done = await finish(task)
    assert done.state is AttemptState.SUCCEEDED
    assert done.version == attempt.version + 2  # the writer's change, then the reapplied outcome
    last = await pool.fetchrow(
        "SELECT detail FROM payment_attempt_events WHERE attempt_id = $1 AND kind = 'transition' "
        "ORDER BY event_id DESC LIMIT 1", attempt.attempt_id)
    assert last is not None and last["detail"]["from"] == "Unknown" and last["detail"]["to"] == "Succeeded"
    assert (await order_of(pool, attempt)).status == "Paid"
    assert len(await business_rows(pool, attempt)) == 2


async def test_an_outcome_write_that_loses_a_race_to_a_succeeded_winner_returns_the_winner(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    task = await race_against_writer(
        pool, attempt, "state = 'Succeeded', provider_payment_id = 'pay_1', provider_status = 'succeeded'",
        record(pool, clock, attempt, ProviderOutcome.unknown("provider.no-response.caller")))
    returned = await finish(task)
    assert returned.state is AttemptState.SUCCEEDED
    assert returned == await attempts.get_attempt(pool, attempt.attempt_id)
    assert await escalation_rows(pool, attempt) == []


async def test_a_notification_racing_a_started_status_update_that_records_another_payment_id_is_escalated(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    """The state stays Started across the race, so only ``version = $read`` sees the change: without
    it, evidence about pay_2 would settle the attempt as Succeeded with pay_1 and mark the order Paid."""
    task = await race_against_writer(
        pool, attempt, "provider_payment_id = 'pay_1', provider_status = 'processing'",
        record(pool, clock, attempt, succeeded(attempt, "pay_2"), actor="notification-handler",
               from_send=False, evidence_key="evt_2"))
    returned = await finish(task)
    durable = await attempts.get_attempt(pool, attempt.attempt_id)
    assert returned == durable
    assert durable.state is AttemptState.STARTED and durable.provider_payment_id == "pay_1"
    assert durable.version == attempt.version + 1  # the writer's change only
    [esc] = await escalation_rows(pool, attempt)
    assert esc["escalation_key"] == f"attempt:{attempt.attempt_id}:provider-id-conflict:evt_2"
    assert esc["detail"] == {"recorded": "pay_1", "reported": "pay_2", "actor": "notification-handler"}
    assert (await order_of(pool, attempt)).status == "Open"
    assert await business_rows(pool, attempt) == []


async def test_continuous_status_churn_exhausts_the_bounded_retries(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    task = await race_against_writer(
        pool, attempt, "state = 'Unknown', outcome_reason = 'recovery.marked-unknown'",
        record(pool, clock, attempt, succeeded(attempt), max_reapply=1))
    with pytest.raises(OutcomeNotConfirmed):
        await finish(task)
    durable = await attempts.get_attempt(pool, attempt.attempt_id)
    assert durable.state is AttemptState.UNKNOWN and durable.version == attempt.version + 1
    assert (await order_of(pool, attempt)).status == "Open"
    assert await business_rows(pool, attempt) == []


async def test_a_reapplied_outcome_write_records_one_send_result_for_its_one_send(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    task = await race_against_writer(
        pool, attempt, "state = 'Unknown', outcome_reason = 'recovery.marked-unknown'",
        record(pool, clock, attempt, succeeded(attempt)))
    assert (await finish(task)).state is AttemptState.SUCCEEDED
    assert await event_count(pool, attempt.attempt_id, "send_result") == 1


async def test_a_constraint_failure_while_recording_an_outcome_is_not_retried_as_a_concurrency_conflict(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt, caplog: pytest.LogCaptureFixture
) -> None:
    # NotApplied 'never-sent' on an attempt that crossed the send boundary violates
    # ck_payment_attempt_send_boundary; it must surface at once, not as OutcomeNotConfirmed.
    caplog.set_level(logging.INFO, logger="paycore.attempts")
    with pytest.raises(asyncpg.exceptions.CheckViolationError) as exc:
        await record(pool, clock, attempt, ProviderOutcome.not_applied("never-sent"))
    assert exc.value.constraint_name == "ck_payment_attempt_send_boundary"
    assert not [r for r in caplog.records if "reapplying" in r.getMessage()]
    assert await attempts.get_attempt(pool, attempt.attempt_id) == attempt
    assert await event_count(pool, attempt.attempt_id, "send_result") == 0  # the one try rolled back


# --- cancellation, customer action, leases -------------------------------------------------------------


async def test_a_success_after_the_order_cancellation_was_requested_is_confirmed_not_fulfilled_and_escalated(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    requested = await orders.cancel_order(pool, attempt.order_id, attempt.customer_id, clock.now())
    assert requested.status == "Open" and requested.cancel_requested_at is not None
    clock.advance(5)
    done = await record(pool, clock, attempt, succeeded(attempt))
    assert done.state is AttemptState.SUCCEEDED
    aid = attempt.attempt_id
    assert [r["dedup_key"] for r in await business_rows(pool, attempt)] == [
        f"attempt:{aid}:order-confirmation"]
    [esc] = await escalation_rows(pool, attempt)
    assert esc["escalation_key"] == f"attempt:{aid}:succeeded-after-cancel"
    assert esc["resolved_at"] is None  # raised after the attempt's escalations were resolved
    assert len(await alert_rows(pool, attempt)) == 1
    order = await order_of(pool, attempt)
    assert order.cancel_requested_at == requested.cancel_requested_at
    assert order.not_payable_reason is not None  # no new attempt for a charged, cancelled order


async def test_a_requires_action_outcome_stores_the_action_and_its_expiry_and_keeps_the_attempt_started(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    action = {"type": "redirect_to_url", "url": "https://3ds.example/challenge/1"}
    expires = clock.now() + timedelta(minutes=10)
    waiting = await record(pool, clock, attempt, ProviderOutcome.requires_action("pay_1", action, expires),
                           recheck_after_s=3_600)
    assert waiting.state is AttemptState.STARTED
    assert waiting.provider_status == "requires_action"
    assert waiting.next_action == action and waiting.next_action_expires_at == expires
    assert waiting.next_check_at == expires  # recheck at the action's expiry, not the default cadence
    durable = await attempts.get_attempt(pool, attempt.attempt_id)
    assert durable == waiting  # survives a restart: it is in the row
    assert durable.action_is_current(clock.now())
    clock.advance(600)
    assert not durable.action_is_current(clock.now())


async def test_a_later_final_outcome_clears_the_stored_customer_action(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    await record(pool, clock, attempt, ProviderOutcome.requires_action(
        "pay_1", {"type": "redirect_to_url"}, clock.now() + timedelta(minutes=10)))
    clock.advance(60)
    done = await record(pool, clock, attempt, succeeded(attempt, "pay_1"), from_send=False)
    assert done.state is AttemptState.SUCCEEDED
    assert done.next_action is None and done.next_action_expires_at is None
    assert not done.action_is_current(clock.now())


async def _set_lease(pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt, owner: str,
                     token: uuid.UUID) -> None:
    # Claiming is not a state change, so it does not move version.
    await pool.execute(
        "UPDATE payment_attempts SET recovery_owner = $2, lease_token = $3, lease_acquired_at = $4, "
        "lease_expires_at = $4::timestamptz + interval '30 seconds' WHERE attempt_id = $1",
        attempt.attempt_id, owner, token, clock.now())


async def test_recording_an_outcome_with_the_matching_lease_releases_it(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    token = uuid.uuid4()
    await _set_lease(pool, clock, attempt, "recovery-1", token)
    done = await record(pool, clock, attempt, succeeded(attempt), actor="recovery-1", from_send=False,
                        lease=Lease("recovery-1", token))
    assert done.state is AttemptState.SUCCEEDED
    assert (done.recovery_owner, done.lease_token, done.lease_acquired_at, done.lease_expires_at) == (
        None, None, None, None)


async def test_an_outcome_after_the_writers_lease_expired_unclaimed_is_recorded_and_clears_that_lease(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    # The release asks for the writer's claim (owner and token), not an unexpired lease: no one
    # claimed since (a claim writes a fresh token), so the lease is nobody else's to keep.
    token = uuid.uuid4()
    await _set_lease(pool, clock, attempt, "recovery-1", token)
    clock.advance(31)  # the 30 s lease has expired; nobody claimed it
    result = await attempts.record_outcome(
        pool, attempt.attempt_id, succeeded(attempt), now=clock.now(), actor="recovery-1", from_send=False,
        lease=Lease("recovery-1", token), recheck_after_s=RECHECK_S, reminder_interval=REMINDER_INTERVAL)
    assert result.written and result.attempt.state is AttemptState.SUCCEEDED
    done = result.attempt
    assert (done.recovery_owner, done.lease_token, done.lease_acquired_at, done.lease_expires_at) == (
        None, None, None, None)


async def test_a_worker_with_a_stale_lease_token_records_the_outcome_but_cannot_release_the_new_owners_lease(
    pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt
) -> None:
    stale, current = uuid.uuid4(), uuid.uuid4()
    await _set_lease(pool, clock, attempt, "recovery-1", current)  # reclaimed under the same owner name
    done = await record(pool, clock, attempt, succeeded(attempt), actor="recovery-1", from_send=False,
                        lease=Lease("recovery-1", stale))
    assert done.state is AttemptState.SUCCEEDED
    assert done.recovery_owner == "recovery-1" and done.lease_token == current
    assert done.lease_acquired_at == clock.now()
    assert done.lease_expires_at == clock.now() + timedelta(seconds=30)
