"""The recovery worker's database gauges against real rows in real PostgreSQL.

Each gauge is read the way on-call reads it (the registry's exposition), after
``RecoveryMetrics.refresh`` with the one clock the worker passes into SQL.
"""

from __future__ import annotations

from datetime import timedelta

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from paycore import escalations, rate_limits
from paycore.attempts import Attempt, record_outcome
from paycore.clock import FakeClock
from paycore.config import ProviderAccountConfig
from paycore.domain import AttemptState, EscalationReason, ProviderOutcome
from paycore_recovery.metrics import RecoveryMetrics
from tests.matrix.helpers import RECHECK_S, live_attempt, new_order, seed_account, started_attempt
from tests.support.timings import REMINDER_INTERVAL


@pytest.fixture
async def account(pool: asyncpg.Pool, clock: FakeClock) -> ProviderAccountConfig:
    return await seed_account(pool, clock)


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


async def refreshed(pool: asyncpg.Pool, clock: FakeClock) -> CollectorRegistry:
    metrics = RecoveryMetrics()
    await metrics.refresh(pool, clock.now())
    return metrics.registry


async def unknown_attempt(pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig,
                          customer: str = "cus_1") -> Attempt:
    started = await started_attempt(pool, clock, account, customer=customer)
    recorded = await record_outcome(pool, started.attempt_id,
                                    ProviderOutcome.unknown("provider.no-response.caller"),
                                    now=clock.now(), actor="endpoint", recheck_after_s=RECHECK_S,
                                    reminder_interval=REMINDER_INTERVAL, from_send=True)
    assert recorded.attempt.state is AttemptState.UNKNOWN
    return recorded.attempt


async def escalate(pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt, reason: EscalationReason) -> int:
    async with pool.acquire() as conn, conn.transaction():
        escalation_id = await escalations.raise_escalation(
            conn, key=escalations.attempt_key(attempt.attempt_id, reason), reason=reason,
            attempt_id=attempt.attempt_id, now=clock.now(), reminder_interval=REMINDER_INTERVAL)
    assert escalation_id is not None
    return escalation_id


async def test_an_unknown_attempt_past_its_escalation_deadline_without_an_episode_counts(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    overdue = await unknown_attempt(pool, clock, account, "cus_overdue")
    assert overdue.escalation_deadline is not None
    assert value(await refreshed(pool, clock), "paycore_attempts_past_escalation_deadline") == 0

    clock.advance((overdue.escalation_deadline - clock.now()).total_seconds() + 1)
    escalated = await unknown_attempt(pool, clock, account, "cus_escalated")  # its deadline is a day away
    clock.advance((escalated.escalation_deadline - clock.now()).total_seconds() + 1)  # type: ignore[operator]
    await escalate(pool, clock, escalated, EscalationReason.DEADLINE)  # recovery did its job for this one
    await unknown_attempt(pool, clock, account, "cus_fresh")  # within its deadline
    assert value(await refreshed(pool, clock), "paycore_attempts_past_escalation_deadline") == 1

    await escalate(pool, clock, overdue, EscalationReason.DEADLINE)
    assert value(await refreshed(pool, clock), "paycore_attempts_past_escalation_deadline") == 0


async def test_open_escalations_by_reason_and_acknowledgement_and_the_oldest_unacknowledged(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    registry = await refreshed(pool, clock)
    assert value(registry, "paycore_escalations_unacknowledged_oldest_age_seconds") == 0
    assert value(registry, "paycore_escalations_open", reason="deadline", acknowledged="false") is None

    first = await escalate(pool, clock, await unknown_attempt(pool, clock, account, "cus_a"),
                           EscalationReason.DEADLINE)
    clock.advance(600)
    await escalate(pool, clock, await unknown_attempt(pool, clock, account, "cus_b"),
                   EscalationReason.DEADLINE)
    clock.advance(60)
    resolved = await escalate(pool, clock, await unknown_attempt(pool, clock, account, "cus_c"),
                              EscalationReason.RESEND_REJECTED)
    await escalations.resolve(pool, resolved, operator="ops-1", reason="handled", now=clock.now())
    clock.advance(40)
    registry = await refreshed(pool, clock)
    assert value(registry, "paycore_escalations_open", reason="deadline", acknowledged="false") == 2
    assert value(registry, "paycore_escalations_open", reason="resend-rejected", acknowledged="false") is None
    assert value(registry, "paycore_escalations_unacknowledged_oldest_age_seconds") == 700

    await escalations.acknowledge(pool, first, operator="ops-1", reason=None, now=clock.now(),
                                  reminder_interval=REMINDER_INTERVAL)
    registry = await refreshed(pool, clock)
    assert value(registry, "paycore_escalations_open", reason="deadline", acknowledged="true") == 1
    assert value(registry, "paycore_escalations_open", reason="deadline", acknowledged="false") == 1
    assert value(registry, "paycore_escalations_unacknowledged_oldest_age_seconds") == 100


async def test_paused_provider_scopes_count_until_their_pause_ends(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    assert value(await refreshed(pool, clock), "paycore_provider_scopes_paused") == 0
    await rate_limits.pause(pool, account.provider_account, clock.now() + timedelta(seconds=30), "429",
                            clock.now())
    await rate_limits.pause(pool, "cardco:acct_other:test", clock.now() + timedelta(seconds=90), "429",
                            clock.now())
    assert value(await refreshed(pool, clock), "paycore_provider_scopes_paused") == 2
    clock.advance(30)  # the first pause ends exactly now
    assert value(await refreshed(pool, clock), "paycore_provider_scopes_paused") == 1
    clock.advance(60)
    assert value(await refreshed(pool, clock), "paycore_provider_scopes_paused") == 0


async def test_open_attempts_by_state_and_the_oldest_unknown_and_open_ages(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    registry = await refreshed(pool, clock)
    for state in ("NotStarted", "Started", "Unknown"):  # zero, not absent: a graph has a line
        assert value(registry, "paycore_recovery_open_attempts", state=state) == 0
    assert value(registry, "paycore_recovery_oldest_open_age_seconds") == 0

    await live_attempt(pool, clock, account, await new_order(pool, clock, customer="cus_ns"))  # NotStarted
    clock.advance(100)
    unknown = await unknown_attempt(pool, clock, account, "cus_u1")
    clock.advance(50)
    await unknown_attempt(pool, clock, account, "cus_u2")
    await started_attempt(pool, clock, account, customer="cus_s")
    paid = await started_attempt(pool, clock, account, customer="cus_paid")  # final: not open
    await record_outcome(pool, paid.attempt_id, ProviderOutcome.succeeded("pay_1", paid.amount_minor,
                                                                          paid.currency),
                         now=clock.now(), actor="endpoint", recheck_after_s=RECHECK_S,
                         reminder_interval=REMINDER_INTERVAL, from_send=True)
    clock.advance(10)
    registry = await refreshed(pool, clock)
    assert value(registry, "paycore_recovery_open_attempts", state="NotStarted") == 1
    assert value(registry, "paycore_recovery_open_attempts", state="Started") == 1
    assert value(registry, "paycore_recovery_open_attempts", state="Unknown") == 2
    states = {sample.labels["state"] for metric in registry.collect()
              if metric.name == "paycore_recovery_open_attempts" for sample in metric.samples}
    assert states == {"NotStarted", "Started", "Unknown"}  # a final attempt is no state of its own
    assert value(registry, "paycore_recovery_oldest_unknown_age_seconds") == 60  # the first Unknown's age
    assert value(registry, "paycore_recovery_oldest_open_age_seconds") == 160  # the NotStarted one's

    evidence = ProviderOutcome.succeeded("pay_2", unknown.amount_minor, unknown.currency)
    resolved = await record_outcome(pool, unknown.attempt_id, evidence, now=clock.now(), actor="recovery",
                                    recheck_after_s=RECHECK_S, reminder_interval=REMINDER_INTERVAL)
    assert resolved.attempt.state is AttemptState.SUCCEEDED
    registry = await refreshed(pool, clock)
    assert value(registry, "paycore_recovery_open_attempts", state="Unknown") == 1
    assert value(registry, "paycore_recovery_oldest_unknown_age_seconds") == 10
