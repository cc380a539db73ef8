"""The attach preview says what the attach then does: for each kind of case, preview, attach, compare.

:func:`paycore.notifications.preview_attach` decides without writing, from the attach's own checks,
its evidence verdict and :func:`paycore.domain.decide_outcome` (the decision the writer
executes: the same function). Each case here previews, then attaches for real, and checks
that the attempt's state and version, the order, the outbox rows queued, the escalations raised and
resolved, and a refusal's message are exactly what the preview said.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import pytest

from paycore.attempts import Attempt, get_attempt
from paycore.domain import AttemptState
from paycore.notifications import AttachRefused, attach_notification, preview_attach, record_notification
from paycore.orders import cancel_order
from tests.matrix.test_notification_matrix import account, live_attempt, succeeded_event
from tests.support.attempts import recorded_attempt
from tests.support.timings import REMINDER_INTERVAL
from tests.support.webhooks import WebhookStack

TYPO = "ORD-typo-a1"  # a reference no attempt has: the notification is stored unmatched


async def stray(hooks: WebhookStack, attempt: Attempt, payment_id: str = "pay_1", **kw: Any) -> int:
    """The provider's notification about ``attempt``'s payment with a mistyped reference: unmatched."""
    amount_refunded = kw.pop("amount_refunded", None)
    evt = succeeded_event(attempt, payment_id, **kw)
    evt["data"]["object"]["reference"] = TYPO
    if amount_refunded is not None:
        evt["data"]["object"]["amount_refunded"] = amount_refunded
    answer = await hooks.deliver(evt)
    assert answer.json()["result"] == "unmatched", answer.text
    event_id: int = await hooks.pool.fetchval(
        "SELECT max(event_id) FROM payment_attempt_events WHERE kind = 'notification' AND attempt_id IS NULL")
    return event_id


async def matched(hooks: WebhookStack, attempt: Attempt, payment_id: str = "pay_1", **kw: Any) -> None:
    answer = await hooks.deliver(succeeded_event(attempt, payment_id, **kw))
    assert answer.json()["result"] == "applied", answer.text


Setup = Callable[[WebhookStack], Awaitable[tuple[Attempt, int]]]


async def unknown_then(hooks: WebhookStack, **kw: Any) -> tuple[Attempt, int]:
    attempt = await live_attempt(hooks)
    return attempt, await stray(hooks, attempt, **kw)


async def started_then_succeeded(hooks: WebhookStack) -> tuple[Attempt, int]:
    attempt = await live_attempt(hooks, unknown=False)
    return attempt, await stray(hooks, attempt)


async def succeeded_then(hooks: WebhookStack, **kw: Any) -> tuple[Attempt, int]:
    # Stored while the attempt knows no payment id (a later one on the same id would match it).
    attempt = await live_attempt(hooks)
    event_id = await stray(hooks, attempt, sequence=2, **kw)
    await matched(hooks, attempt, sequence=1)
    return attempt, event_id


async def cancel_requested(hooks: WebhookStack) -> tuple[Attempt, int]:
    attempt = await live_attempt(hooks)
    await cancel_order(hooks.pool, attempt.order_id, "cus_alice", hooks.clock.now())
    return attempt, await stray(hooks, attempt)


async def another_payment(hooks: WebhookStack) -> tuple[Attempt, int]:
    attempt = await live_attempt(hooks)
    await matched(hooks, attempt, "pay_1", status="processing")  # the attempt records pay_1
    return attempt, await stray(hooks, attempt, "pay_2")


async def matched_on_arrival(hooks: WebhookStack) -> tuple[Attempt, int]:
    attempt = await live_attempt(hooks)
    await matched(hooks, attempt, status="processing")
    event_id: int = await hooks.pool.fetchval("SELECT max(event_id) FROM payment_attempt_events"
                                              " WHERE kind = 'notification'")
    return attempt, event_id


async def never_sent(hooks: WebhookStack) -> tuple[Attempt, int]:
    order = await hooks.shop.as_customer("cus_alice").create_order()
    attempt = await recorded_attempt(hooks.pool, hooks.clock, account(hooks), order, "cus_alice")
    return attempt, await stray(hooks, attempt)


async def unreadable(hooks: WebhookStack) -> tuple[Attempt, int]:
    """A stored event its provider cannot read (say, a parser changed since it was stored)."""
    attempt = await live_attempt(hooks)
    async with hooks.pool.acquire() as conn, conn.transaction():
        stored = await record_notification(conn, provider_account=attempt.provider_account, key="evt_odd",
                                           attempt_id=None, now=hooks.clock.now(),
                                           detail={"type": "payment.odd", "event": {"type": "payment.odd"}})
    assert stored.event_id is not None
    return attempt, stored.event_id


async def attached_already(hooks: WebhookStack) -> tuple[Attempt, int]:
    attempt, event_id = await unknown_then(hooks, status="processing")
    await attach(hooks, event_id, attempt.attempt_id)
    return attempt, event_id


async def attach(hooks: WebhookStack, event_id: int, attempt_id: UUID) -> Any:
    return await attach_notification(hooks.pool, event_id=event_id, attempt_id=attempt_id, operator="ops-1",
                                     reason="reference typo", now=hooks.clock.now(),
                                     reminder_interval=REMINDER_INTERVAL, recheck_after_s=60)


@dataclass(frozen=True)
class Seen:
    state: str
    version: int
    order_status: str
    outbox: tuple[str, ...]  # the attempt's effects queued, in order
    open_escalations: frozenset[int]
    reasons: dict[int, str]  # every escalation of the attempt or the notification, by id


async def seen(hooks: WebhookStack, attempt_id: UUID) -> Seen:
    a = await get_attempt(hooks.pool, attempt_id)
    order_status = await hooks.pool.fetchval("SELECT status FROM orders WHERE order_id = $1", a.order_id)
    outbox = await hooks.pool.fetch("SELECT dedup_key FROM outbox_messages WHERE dedup_key LIKE $1"
                                    " ORDER BY message_id", f"attempt:{attempt_id}:%")
    episodes = await hooks.pool.fetch("SELECT escalation_id, reason, resolved_at FROM payment_escalations"
                                      " WHERE attempt_id = $1 OR attempt_id IS NULL", attempt_id)
    return Seen(a.state.value, a.version, order_status,
                tuple(r["dedup_key"].rsplit(":", 1)[1] for r in outbox),
                frozenset(e["escalation_id"] for e in episodes if e["resolved_at"] is None),
                {e["escalation_id"]: e["reason"] for e in episodes})


CASES: dict[str, tuple[Setup, str]] = {
    # name: (setup, what the preview says, in short: the state change or the refusal's words)
    "unknown-succeeded": (lambda h: unknown_then(h), "Unknown → Succeeded, order Paid"),
    "unknown-failed": (lambda h: unknown_then(h, status="failed"), "Unknown → Failed"),
    "unknown-processing": (lambda h: unknown_then(h, status="processing"), "Unknown → Started"),
    "started-succeeded": (started_then_succeeded, "Started → Succeeded, order Paid"),
    "succeeded-then-failed": (lambda h: succeeded_then(h, status="failed"),
                              "Succeeded stays Succeeded: the attempt does not change; raises contradiction"),
    "succeeded-then-refunded": (lambda h: succeeded_then(h, event_type="payment.refunded",
                                                         amount_refunded=4999),
                                "queues refund-request"),
    "cancel-requested": (cancel_requested, "raises succeeded-after-cancel"),
    "another-payment-id": (another_payment, "is not evidence about attempt"),
    "amount-differs": (lambda h: unknown_then(h, amount=1), "mismatch (amount)"),
    "matched-on-arrival": (matched_on_arrival, "was matched on arrival"),
    "never-sent": (never_sent, "was never sent (NotStarted)"),
    "attached-already": (attached_already, "is already attached"),
    "unreadable": (unreadable, "cannot be read as its provider's event"),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_the_preview_says_what_the_attach_then_does(hooks: WebhookStack, case: str) -> None:
    setup, says = CASES[case]
    attempt, event_id = await setup(hooks)
    preview = await preview_attach(hooks.pool, event_id=event_id, attempt_id=attempt.attempt_id,
                                   now=hooks.clock.now(), recheck_after_s=60)
    assert says in preview.describe(), preview.describe()
    before = await seen(hooks, attempt.attempt_id)
    assert await seen(hooks, attempt.attempt_id) == before  # previewing wrote nothing
    actions_before = await hooks.count("SELECT count(*) FROM operator_actions")

    try:
        await attach(hooks, event_id, attempt.attempt_id)
    except AttachRefused as refused:
        assert preview.refused == str(refused)
        assert preview.describe() == f"Refused: {refused}"
        assert await seen(hooks, attempt.attempt_id) == before
        assert await hooks.count("SELECT count(*) FROM operator_actions") == actions_before
        return
    assert preview.refused is None, f"the preview said {preview.refused!r}; the attach was accepted"
    foreseen = preview.foreseen
    assert foreseen is not None
    after = await seen(hooks, attempt.attempt_id)
    assert (before.state, after.state) == (foreseen.before.value, foreseen.after.value)
    assert (after.version > before.version) == foreseen.written
    assert after.order_status == ("Paid" if foreseen.order_paid else before.order_status)
    queued = after.outbox[len(before.outbox):]
    assert queued == (*foreseen.effects, *(["refund-request"] if preview.refund_request else []))
    raised = sorted(after.reasons[e] for e in after.reasons.keys() - before.reasons.keys())
    assert raised == sorted(e.text for e in foreseen.escalations)
    resolved = before.open_escalations - after.open_escalations
    unmatched = {preview.unmatched_escalation} if preview.unmatched_escalation is not None else set()
    attempts_own = {e for e in before.open_escalations if e not in unmatched}
    assert resolved == unmatched | (attempts_own if foreseen.resolves_escalations else set())


async def test_a_preview_of_no_such_attempt_is_not_found(hooks: WebhookStack) -> None:
    from uuid import uuid4

    from paycore.errors import NotFound

    attempt, event_id = await unknown_then(hooks)
    with pytest.raises(NotFound):
        await preview_attach(hooks.pool, event_id=event_id, attempt_id=uuid4(), now=hooks.clock.now(),
                             recheck_after_s=60)
    assert (await preview_attach(hooks.pool, event_id=event_id + 1000, attempt_id=attempt.attempt_id,
                                  now=hooks.clock.now(), recheck_after_s=60)
            ).refused == f"no stored notification {event_id + 1000}"
    assert AttemptState.UNKNOWN.value == (await get_attempt(hooks.pool, attempt.attempt_id)).state.value
