"""Reminder lines of the reference's test matrix: open escalation episodes remind a person on
their interval, once per due reminder however many job instances run, until acknowledged
(which resets the schedule) or resolved (which ends it). Real PostgreSQL, fake clock.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from paycore import escalations
from paycore.attempts import Attempt
from paycore.config import Settings
from paycore.providers.cardco import StoredRequest
from paycore_recovery.loop import Pass
from paycore_recovery.reminders import send_due_reminders
from tests.support.recovery import DEADLINE_S, RecoveryStack, seconds
from tests.support.stack import eventually


async def escalated_past_the_deadline(
    rec: RecoveryStack, settings: Settings | None = None
) -> tuple[Attempt, dict[str, Any]]:
    """An attempt whose request never arrived, escalated by a recovery pass past its deadline."""
    attempt = await rec.unknown_via_checkout("drop_request")
    rec.clock.advance(DEADLINE_S)
    assert await rec.worker(settings=settings).run_pass() == [Pass.ESCALATED]
    [episode] = await rec.escalation_rows()
    assert episode["escalation_key"] == f"attempt:{attempt.attempt_id}:deadline"
    return attempt, episode


async def episode(rec: RecoveryStack, escalation_id: int) -> dict[str, Any]:
    row = await rec.pool.fetchrow("SELECT * FROM payment_escalations WHERE escalation_id = $1", escalation_id)
    return dict(row)


async def reminders(rec: RecoveryStack) -> list[str]:
    return [key for key in await rec.alerts() if ":reminder:" in key]


async def test_an_open_episode_sends_reminders_from_next_reminder_at_before_acknowledgement(
    rec: RecoveryStack,
) -> None:
    _attempt, raised = await escalated_past_the_deadline(rec)
    eid = raised["escalation_id"]
    interval = rec.hooks.settings.reminder_interval_s
    assert raised["reminder_count"] == 0 and raised["acknowledged_at"] is None
    assert raised["next_reminder_at"] == raised["raised_at"] + seconds(interval)
    worker = rec.worker()

    rec.clock.advance(interval - 1)
    assert await worker.run_pass() == []  # the attempt is not due; neither is a reminder
    assert await reminders(rec) == []

    rec.clock.advance(1)
    await worker.run_pass()
    assert await reminders(rec) == [f"escalation:{eid}:reminder:1"]

    rec.clock.advance(interval)
    await worker.run_pass()
    assert await reminders(rec) == [f"escalation:{eid}:reminder:1", f"escalation:{eid}:reminder:2"]
    row = await episode(rec, eid)
    assert row["reminder_count"] == 2 and row["acknowledged_at"] is None
    assert row["next_reminder_at"] == rec.clock.now() + seconds(interval)
    payloads = await rec.pool.fetch("SELECT payload FROM outbox_messages WHERE dedup_key LIKE '%:reminder:%'"
                                    " ORDER BY message_id")
    assert [(p["payload"]["alert"], p["payload"]["reminder"]) for p in payloads] == [("reminder", 1),
                                                                                    ("reminder", 2)]


async def test_two_reminder_job_instances_racing_one_episode_send_one_reminder(rec: RecoveryStack) -> None:
    _attempt, raised = await escalated_past_the_deadline(rec)
    eid = raised["escalation_id"]
    rec.clock.advance(rec.hooks.settings.reminder_interval_s)
    # Hold the episode row so that both instances read it as due and then meet at their claim.
    async with rec.pool.acquire() as blocker:
        hold = blocker.transaction()
        await hold.start()
        await blocker.execute("SELECT 1 FROM payment_escalations WHERE escalation_id = $1 FOR UPDATE", eid)
        racers = [asyncio.create_task(send_due_reminders(rec.pool, rec.clock, rec.hooks.settings))
                  for _ in range(2)]

        async def both_waiting() -> bool:
            waiting = await rec.pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND query LIKE '%UPDATE payment_escalations%'")
            return bool(waiting == 2)

        await eventually(both_waiting, what="both reminder instances to reach their conditional claim")
        await hold.rollback()
    sent = await asyncio.gather(*racers)
    assert sorted(sent) == [0, 1]
    assert await reminders(rec) == [f"escalation:{eid}:reminder:1"]
    assert (await episode(rec, eid))["reminder_count"] == 1

    # And two whole recovery instances racing the next due reminder.
    rec.clock.advance(rec.hooks.settings.reminder_interval_s)
    await asyncio.gather(rec.worker("a").run_pass(), rec.worker("b").run_pass())
    assert await reminders(rec) == [f"escalation:{eid}:reminder:1", f"escalation:{eid}:reminder:2"]
    assert (await episode(rec, eid))["reminder_count"] == 2


async def test_acknowledgement_resets_the_reminder_schedule(rec: RecoveryStack) -> None:
    _attempt, raised = await escalated_past_the_deadline(rec)
    eid = raised["escalation_id"]
    settings = rec.hooks.settings
    interval, ack_interval = settings.reminder_interval_s, settings.reminder_ack_interval_s
    rec.clock.advance(300)
    acked_at = rec.clock.now()
    recorded = await escalations.acknowledge(rec.pool, eid, operator="ops-1", reason=None, now=acked_at,
                                             reminder_interval=seconds(ack_interval))
    assert recorded.escalation_id == eid
    row = await episode(rec, eid)
    assert row["acknowledged_at"] == acked_at and row["resolved_at"] is None
    assert row["next_reminder_at"] == acked_at + seconds(ack_interval)

    rec.clock.advance(interval - 300)  # when the unacknowledged schedule would have reminded
    assert await send_due_reminders(rec.pool, rec.clock, rec.hooks.settings) == 0
    rec.clock.advance((acked_at + seconds(ack_interval - 1) - rec.clock.now()).total_seconds())
    assert await send_due_reminders(rec.pool, rec.clock, rec.hooks.settings) == 0
    assert await reminders(rec) == []

    rec.clock.advance(1)  # the acknowledged episode's interval has passed: it is still open
    assert await send_due_reminders(rec.pool, rec.clock, rec.hooks.settings) == 1
    assert await reminders(rec) == [f"escalation:{eid}:reminder:1"]
    row = await episode(rec, eid)
    assert row["reminder_count"] == 1
    assert row["next_reminder_at"] == rec.clock.now() + seconds(ack_interval)  # the acknowledged cadence


async def test_resolving_an_attempt_resolves_its_open_escalations_so_no_reminder_follows(
    rec: RecoveryStack,
) -> None:
    attempt, raised = await escalated_past_the_deadline(rec)
    eid = raised["escalation_id"]
    # The original request turns up at the provider after all (a late arrival), inside the sandbox's
    # key window; recovery's next lookup finds it and resolves the attempt.
    late = rec.worker("late-original").client
    outcome = await late.create_payment(StoredRequest.from_attempt(attempt), budget_s=15,
                                        first_send=True)
    assert outcome.kind.value == "succeeded", outcome
    rec.clock.advance(60)  # before the first reminder
    await rec.due_now(attempt)
    assert await rec.worker().run_pass() == [Pass.RESOLVED]
    assert await rec.state(attempt) == "Succeeded"
    row = await episode(rec, eid)
    assert row["resolved_at"] == rec.clock.now() and row["next_reminder_at"] is None
    assert await rec.open_escalations() == []

    rec.clock.advance(rec.hooks.settings.reminder_ack_interval_s * 2)
    assert await rec.worker().run_pass() == []
    assert await send_due_reminders(rec.pool, rec.clock, rec.hooks.settings) == 0
    assert await reminders(rec) == []


async def test_a_resolved_episode_that_recurs_opens_a_new_episode_and_alerts_again(
    rec: RecoveryStack,
) -> None:
    attempt, first = await escalated_past_the_deadline(rec)
    # A person closes the episode; the attempt itself is still Unknown, past its deadline.
    rec.clock.advance(60)
    await escalations.resolve(rec.pool, first["escalation_id"], operator="ops-1", reason="looked into it",
                              now=rec.clock.now())
    assert await rec.open_escalations() == []
    assert await rec.state(attempt) == "Unknown"

    rec.clock.advance(rec.recovery.slow_cadence_s)
    assert await rec.worker().run_pass() == [Pass.ESCALATED]  # the same condition, again
    rows = await rec.escalation_rows()
    assert [r["escalation_key"] for r in rows] == [first["escalation_key"]] * 2
    assert rows[0]["resolved_at"] is not None and rows[1]["resolved_at"] is None
    second = rows[1]["escalation_id"]
    assert second != first["escalation_id"] and rows[1]["reminder_count"] == 0
    initial = [key for key in await rec.alerts() if key.endswith(":initial")]
    assert initial == [f"escalation:{first['escalation_id']}:initial", f"escalation:{second}:initial"]
    assert await reminders(rec) == []  # the closed episode never reminded


async def test_the_first_reminder_follows_the_configured_reminder_interval(rec: RecoveryStack) -> None:
    settings = dataclasses.replace(rec.hooks.settings, reminder_interval_s=300)
    _attempt, raised = await escalated_past_the_deadline(rec, settings)
    assert raised["next_reminder_at"] == raised["raised_at"] + seconds(300)
    rec.clock.advance(300)
    assert await send_due_reminders(rec.pool, rec.clock, settings) == 1
