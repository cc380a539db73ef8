"""Resolving an identity or provider-id conflict by choosing the owner (paycore.conflicts), with
the conflicts raised by real deliveries to the webhook intake, against real PostgreSQL."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from paycore.attempts import Attempt, get_attempt
from paycore.conflicts import ConflictResolutionRefused, ConflictResolved, resolve_conflict
from paycore.domain import AttemptState
from paycore.operator_actions import ActionKind, list_actions
from tests.matrix.test_notification_matrix import live_attempt, succeeded_event
from tests.support.timings import REMINDER_INTERVAL
from tests.support.webhooks import OTHER, WebhookStack


async def resolve(hooks: WebhookStack, escalation_id: int, owner: Attempt | None) -> ConflictResolved:
    return await resolve_conflict(
        hooks.pool, escalation_id=escalation_id, owner_attempt_id=owner.attempt_id if owner else None,
        operator="ops-1", reason="Cardco support confirmed the owner", now=hooks.clock.now(),
        reminder_interval=REMINDER_INTERVAL, recheck_after_s=60)


async def episode(hooks: WebhookStack, reason: str) -> asyncpg.Record:
    row = await hooks.pool.fetchrow("SELECT * FROM payment_escalations WHERE reason = $1", reason)
    assert row is not None
    return row


async def is_open(hooks: WebhookStack, escalation_id: int) -> bool:
    return bool(await hooks.pool.fetchval(
        "SELECT resolved_at IS NULL FROM payment_escalations WHERE escalation_id = $1", escalation_id))


async def identity_conflict(hooks: WebhookStack, *, unnamed_account: bool = False,
                            **event: Any) -> tuple[Attempt, Attempt, asyncpg.Record]:
    """a (Unknown) and b (Started, owns pay_b); a notification with a's reference and b's payment id
    (``unnamed_account``: naming no account, as a Stripe PaymentIntent never does)."""
    a = await live_attempt(hooks)
    b = await live_attempt(hooks, customer="cus_bob")
    await hooks.deliver(succeeded_event(b, "pay_b", status="processing", sequence=1))
    conflicting = succeeded_event(a, "pay_b", sequence=2, **event)
    if unnamed_account:
        conflicting["account"] = conflicting["data"]["object"]["account"] = None
    assert (await hooks.deliver(conflicting)).json()["result"] == "conflict"
    a, b = await get_attempt(hooks.pool, a.attempt_id), await get_attempt(hooks.pool, b.attempt_id)
    return a, b, await episode(hooks, "identity-conflict")


async def test_choosing_the_owner_of_an_identity_conflict_applies_the_stored_notification_to_it(
    hooks: WebhookStack,
) -> None:
    a, b, esc = await identity_conflict(hooks)
    done = await resolve(hooks, esc["escalation_id"], b)

    assert done.owner is not None and done.owner.state is AttemptState.SUCCEEDED
    assert done.owner.provider_payment_id == "pay_b" and done.owner.version == b.version + 1
    assert await get_attempt(hooks.pool, a.attempt_id) == a  # the other attempt is untouched
    assert not await is_open(hooks, esc["escalation_id"])
    assert await hooks.count("SELECT count(*) FROM outbox_messages WHERE dedup_key = $1",
                             f"attempt:{b.attempt_id}:order-confirmation") == 1
    [action] = await list_actions(hooks.pool, escalation_id=esc["escalation_id"])
    assert action == done.recorded and action.action is ActionKind.ESCALATION_RESOLVE_CONFLICT
    assert action.attempt_id == b.attempt_id and action.event_id == esc["detail"]["notification_event_id"]
    assert action.state_before["state"] == "Started" and action.state_after["state"] == "Succeeded"
    assert action.detail["owner"] == str(b.attempt_id)
    assert set(action.detail["candidates"]) == {str(a.attempt_id), str(b.attempt_id)}
    marks = await hooks.pool.fetch(
        "SELECT actor, detail FROM payment_attempt_events WHERE attempt_id = $1 AND kind = 'transition'"
        " AND detail ? 'resolved_conflict'", b.attempt_id)
    assert [m["actor"] for m in marks] == ["operator-ops-1"]


async def test_choosing_neither_resolves_the_episode_and_changes_no_attempt(hooks: WebhookStack) -> None:
    a, b, esc = await identity_conflict(hooks)
    done = await resolve(hooks, esc["escalation_id"], None)
    assert done.owner is None
    assert [await get_attempt(hooks.pool, x.attempt_id) for x in (a, b)] == [a, b]
    assert not await is_open(hooks, esc["escalation_id"])
    [action] = await list_actions(hooks.pool, escalation_id=esc["escalation_id"])
    assert action.detail["owner"] is None and action.state_after["resolved_at"] is not None
    assert action.state_before["resolved_at"] is None


async def test_an_owner_the_evidence_rules_refuse_is_refused_and_nothing_is_written(
    hooks: WebhookStack,
) -> None:
    # The notification says 1234 minor units; b's order is 4999: not evidence about b.
    a, b, esc = await identity_conflict(hooks, amount=1234)
    with pytest.raises(ConflictResolutionRefused, match=r"not evidence about attempt .*mismatch \(amount\)"):
        await resolve(hooks, esc["escalation_id"], b)
    # a's reference, but b owns pay_b: the evidence rules refuse a as its owner too.
    with pytest.raises(ConflictResolutionRefused, match="provider-id-conflict"):
        await resolve(hooks, esc["escalation_id"], a)
    assert [await get_attempt(hooks.pool, x.attempt_id) for x in (a, b)] == [a, b]
    assert await is_open(hooks, esc["escalation_id"])
    assert await list_actions(hooks.pool, escalation_id=esc["escalation_id"]) == []
    assert await hooks.count("SELECT count(*) FROM payment_escalations WHERE reason = 'mismatch'") == 0


async def test_an_attempt_the_episode_does_not_name_is_refused(hooks: WebhookStack) -> None:
    _, _, esc = await identity_conflict(hooks)
    stranger = await live_attempt(hooks, customer="cus_carol")
    with pytest.raises(ConflictResolutionRefused, match="is not named by escalation"):
        await resolve(hooks, esc["escalation_id"], stranger)
    assert await is_open(hooks, esc["escalation_id"])


async def test_a_provider_id_conflict_is_judged_by_the_same_rules_and_can_be_closed_as_neither(
    hooks: WebhookStack,
) -> None:
    a = await live_attempt(hooks)
    await hooks.deliver(succeeded_event(a, "pay_1", status="processing", sequence=1))  # a records pay_1
    other = succeeded_event(a, "pay_2", sequence=2)
    assert (await hooks.deliver(other)).json()["result"] == "conflict"
    esc = await episode(hooks, "provider-id-conflict")
    a = await get_attempt(hooks.pool, a.attempt_id)
    # The episode's key names the stored notification; applying pay_2 to a (which recorded pay_1)
    # breaks the rule that a recorded payment id is never replaced.
    with pytest.raises(ConflictResolutionRefused, match="provider-id-conflict"):
        await resolve(hooks, esc["escalation_id"], a)
    assert await get_attempt(hooks.pool, a.attempt_id) == a and await is_open(hooks, esc["escalation_id"])
    await resolve(hooks, esc["escalation_id"], None)
    assert await get_attempt(hooks.pool, a.attempt_id) == a and not await is_open(hooks, esc["escalation_id"])


async def test_other_episodes_and_closed_ones_are_refused(hooks: WebhookStack) -> None:
    _, b, esc = await identity_conflict(hooks)
    await resolve(hooks, esc["escalation_id"], None)
    with pytest.raises(ConflictResolutionRefused, match="is not open"):
        await resolve(hooks, esc["escalation_id"], b)
    with pytest.raises(ConflictResolutionRefused, match="does not exist"):
        await resolve(hooks, esc["escalation_id"] + 1000, None)
    unmatched = succeeded_event(b, "pay_zz")
    unmatched["data"]["object"]["reference"] = "ORD-nobody-a1"
    assert (await hooks.deliver(unmatched)).json()["result"] == "unmatched"
    other = await episode(hooks, "unmatched-payment")
    with pytest.raises(ConflictResolutionRefused, match="not an identity or provider-id conflict"):
        await resolve(hooks, other["escalation_id"], None)


async def test_an_owner_of_another_account_than_the_notifications_is_refused_and_nothing_is_written(
    hooks: WebhookStack,
) -> None:
    # The notification names no account (Stripe's never do; some Cardco deployments omit it), so
    # the account whose secret verified it is the only barrier. An episode naming an attempt of
    # another account (a hand-edited or mis-migrated row) must not let it be applied there.
    _, _, esc = await identity_conflict(hooks, unnamed_account=True)
    elsewhere = await live_attempt(hooks, OTHER, customer="cus_carol")
    await hooks.pool.execute(
        "UPDATE payment_escalations SET detail = detail || jsonb_build_object("
        "'provider_payment_id_attempt_id', $2::text) WHERE escalation_id = $1",
        esc["escalation_id"], str(elsewhere.attempt_id))
    with pytest.raises(ConflictResolutionRefused, match="verified for another provider account"):
        await resolve(hooks, esc["escalation_id"], elsewhere)
    assert await get_attempt(hooks.pool, elsewhere.attempt_id) == elsewhere
    assert await is_open(hooks, esc["escalation_id"])
    assert await list_actions(hooks.pool, escalation_id=esc["escalation_id"]) == []
    assert await hooks.count("SELECT count(*) FROM outbox_messages WHERE dedup_key = $1",
                             f"attempt:{elsewhere.attempt_id}:order-confirmation") == 0
