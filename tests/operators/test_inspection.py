"""What operators can see (paycore_console.inspection), on a real PostgreSQL database and the fake clock.

Rows are put in place through the library's own writers where the history matters
(attempts, outcomes, escalations, notifications, operator actions), and as raw rows
where only a timestamp or a state does (ages, dead letters).
"""

from __future__ import annotations

import base64
import uuid
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import orjson
import pytest

from paycore import escalations, leases, outbox, outbox_admin, rate_limits
from paycore.attempts import Attempt, record_outcome
from paycore.clock import FakeClock
from paycore.config import ProviderAccountConfig
from paycore.domain import EscalationReason, ProviderOutcome
from paycore.events import EventKind, append_event
from paycore.notifications import record_notification
from paycore_console import inspection
from tests.matrix.helpers import attempt_values, insert_row, new_order, seed_account, started_attempt

REMINDER = timedelta(minutes=15)
OTHER_ACCOUNT = "cardco:acct_other:test"


@pytest.fixture
async def account(pool: asyncpg.Pool, clock: FakeClock) -> ProviderAccountConfig:
    return await seed_account(pool, clock)


async def raw_attempt(pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig, state: str,
                      created_at: datetime) -> uuid.UUID:
    order = await new_order(pool, clock)
    row = await insert_row(pool, "payment_attempts", attempt_values(order, account, created_at, state=state))
    attempt_id: uuid.UUID = row["attempt_id"]
    return attempt_id


async def episode(pool: asyncpg.Pool, at: datetime, reason: str = "deadline", *,
                  attempt_id: uuid.UUID | None = None, detail: dict[str, Any] | None = None,
                  key: str | None = None) -> int:
    member, _, qualifier = reason.partition(":")  # as stored: "<reason>" or "<reason>:<qualifier>"
    async with pool.acquire() as conn, conn.transaction():
        eid = await escalations.raise_escalation(
            conn, key=key or f"test:{uuid.uuid4()}", reason=EscalationReason(member),
            qualifier=qualifier or None, now=at, attempt_id=attempt_id, reminder_interval=REMINDER,
            detail=detail)
    assert eid is not None
    return eid


async def went_unknown(pool: asyncpg.Pool, attempt_id: uuid.UUID, at: datetime) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await append_event(conn, attempt_id=attempt_id, kind=EventKind.TRANSITION, actor="test", now=at,
                           detail={"from": "Started", "to": "Unknown"})


async def queued(pool: asyncpg.Pool, clock: FakeClock, kind: str, *, attempt_id: uuid.UUID | None = None,
                 dead: bool = False, error: str = "broker down") -> int:
    async with pool.acquire() as conn, conn.transaction():
        mid = await outbox.enqueue(conn, dedup_key=f"test:{uuid.uuid4()}", kind=kind, payload={},
                                   now=clock.now(), attempt_id=attempt_id)
        assert mid is not None
        if dead:
            await conn.execute("UPDATE outbox_messages SET delivery_attempts = 10, last_error = $2,"
                               " dead_lettered_at = $3 WHERE message_id = $1", mid, error, clock.now())
    return mid


async def all_pages(fetch: Any, limit: int) -> list[list[Any]]:
    """Every page of a listing, following its cursors to the end."""
    pages, cursor = [], None
    while True:
        items, cursor = await fetch(limit=limit, cursor=cursor)
        pages.append(items)
        if cursor is None:
            return pages
        assert len(pages) < 50, "the cursor never ends"


# -------------------------------------------------------------------------------- overview


async def test_overview_counts_live_attempts_by_state_and_age_and_names_the_oldest_unknown(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    now = clock.now()
    ago = {"59s": timedelta(seconds=59), "1m": timedelta(minutes=1), "59m": timedelta(minutes=59),
           "1h": timedelta(hours=1), "23h": timedelta(hours=23, minutes=59), "24h": timedelta(hours=24),
           "3d": timedelta(days=3)}
    for age in ("59s", "1m", "24h"):
        await raw_attempt(pool, clock, account, "NotStarted", now - ago[age])
    for age in ("59m", "1h", "23h"):
        await raw_attempt(pool, clock, account, "Started", now - ago[age])
    await raw_attempt(pool, clock, account, "Unknown", now - ago["1h"])
    oldest = await raw_attempt(pool, clock, account, "Unknown", now - ago["3d"])
    await raw_attempt(pool, clock, account, "Succeeded", now - ago["3d"] - ago["1h"])  # final: not counted

    seen = await inspection.overview(pool, now)

    by_state = {s.state: (s.under_1m, s.under_1h, s.under_24h, s.older) for s in seen.attempts}
    assert by_state == {"NotStarted": (1, 1, 0, 1), "Started": (0, 1, 2, 0), "Unknown": (0, 0, 1, 1)}
    assert seen.oldest_unknown == inspection.OldestUnknown(oldest, now - ago["3d"], ago["3d"])


async def test_overview_counts_unresolved_escalations_by_reason_and_account(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    attempt = await started_attempt(pool, clock, account)
    await episode(pool, clock.now(), "deadline", attempt_id=attempt.attempt_id)
    acked = await episode(pool, clock.now(), "deadline", attempt_id=attempt.attempt_id)
    await escalations.acknowledge(pool, acked, operator="ops", reason=None, now=clock.now(),
                                  reminder_interval=REMINDER)
    await episode(pool, clock.now(), "unmatched-payment", detail={"provider_account": OTHER_ACCOUNT})
    await episode(pool, clock.now(), "outbox-dead-letter")  # names no account
    gone = await episode(pool, clock.now(), "unmatched-payment", detail={"provider_account": OTHER_ACCOUNT})
    await escalations.resolve(pool, gone, operator="ops", reason="attached", now=clock.now())

    seen = await inspection.overview(pool, clock.now())

    T = inspection.EscalationTally
    assert seen.escalations_by_reason == (T("deadline", 1, 1), T("outbox-dead-letter", 1, 0),
                                          T("unmatched-payment", 1, 0))
    assert seen.escalations_by_account == (T(OTHER_ACCOUNT, 1, 0), T(account.provider_account, 1, 1),
                                           T(None, 1, 0))


async def test_overview_shows_the_outbox_backlog_per_kind_and_only_current_pauses(
    pool: asyncpg.Pool, clock: FakeClock
) -> None:
    first = clock.now()
    await queued(pool, clock, "order-confirmation")
    clock.advance(30)
    await queued(pool, clock, "order-confirmation")
    await queued(pool, clock, "order-confirmation", dead=True)
    await queued(pool, clock, "operator-alert", dead=True)
    sent = await queued(pool, clock, "refund-request")
    await pool.execute("UPDATE outbox_messages SET dispatched_at = $2 WHERE message_id = $1",
                       sent, clock.now())
    await rate_limits.pause(pool, "cardco:acct_store:test", clock.now() + timedelta(seconds=30), "429",
                            clock.now())
    await rate_limits.pause(pool, "cardco:acct_old:test", clock.now(), "429", clock.now() - timedelta(1))

    seen = await inspection.overview(pool, clock.now())

    assert seen.outbox == (inspection.OutboxKind("operator-alert", 0, 1, None),
                           inspection.OutboxKind("order-confirmation", 2, 1, first))
    assert seen.paused_scopes == (inspection.PausedScope(
        "cardco:acct_store:test", clock.now() + timedelta(seconds=30), "429"),)


async def test_the_24_hour_chart_counts_each_hour_up_to_now_and_nothing_outside_it(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    now = clock.now() + timedelta(minutes=30)  # 12:30: the chart runs from 13:00 yesterday
    first = inspection.first_charted_hour(now)
    assert first == now - timedelta(hours=23, minutes=30)
    attempt = (await started_attempt(pool, clock, account)).attempt_id
    inside = [first, first + timedelta(minutes=59, seconds=59), first + timedelta(hours=22), now]
    outside = [first - timedelta(seconds=1), now + timedelta(seconds=1)]
    for at in inside + outside:
        await went_unknown(pool, attempt, at)
        await episode(pool, at)
    async with pool.acquire() as conn, conn.transaction():  # transitions that are not entering Unknown
        for detail in ({"from": "Unknown", "to": "Unknown"}, {"from": "Unknown", "to": "Succeeded"}):
            await append_event(conn, attempt_id=attempt, kind=EventKind.TRANSITION, actor="test",
                               now=first + timedelta(hours=5), detail=detail)

    chart = (await inspection.overview(pool, now)).last_24h

    assert [h.hour for h in chart] == [first + timedelta(hours=i) for i in range(24)]
    expected = {0: 2, 22: 1, 23: 1}
    assert [h.entered_unknown for h in chart] == [expected.get(i, 0) for i in range(24)]
    assert [h.escalations_raised for h in chart] == [expected.get(i, 0) for i in range(24)]


# ----------------------------------------------------------------------------- escalations


async def test_escalations_are_listed_open_first_then_oldest_first_across_pages_without_gaps(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    t0 = clock.now()
    made = []
    for minutes in (5, 1, 3, 3, 0, 4, 2):  # two raised at the same time: the id decides
        made.append((minutes, await episode(pool, t0 + timedelta(minutes=minutes))))
    closed = [made[1][1], made[4][1]]  # raised at 1 and 0 minutes: oldest, yet listed last
    for eid in closed:
        await escalations.resolve(pool, eid, operator="ops", reason="done", now=t0 + timedelta(minutes=10))
    open_order = [eid for _, eid in sorted((m, e) for m, e in made if e not in closed)]
    closed_order = [made[4][1], made[1][1]]

    async def every(**kw: Any) -> Any:
        return await inspection.list_escalations(pool, open_only=False, **kw)

    for limit in (1, 2, 3, 7, 50):
        pages = await all_pages(every, limit)
        listed = [e.escalation_id for page in pages for e in page]
        assert listed == open_order + closed_order, limit
        assert all(len(p) == limit for p in pages[:-1]) and 0 < len(pages[-1]) <= limit
    only_open, cursor = await inspection.list_escalations(pool)
    assert [e.escalation_id for e in only_open] == open_order and cursor is None
    assert {e.status for e in only_open} == {"open"}


async def test_escalation_filters_by_reason_account_and_acknowledgement(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    attempt = await started_attempt(pool, clock, account)
    ours = await episode(pool, clock.now(), "deadline", attempt_id=attempt.attempt_id)
    theirs = await episode(pool, clock.now(), "unmatched-payment", detail={"provider_account": OTHER_ACCOUNT})
    acked = await episode(pool, clock.now(), "deadline", attempt_id=attempt.attempt_id)
    await escalations.acknowledge(pool, acked, operator="ops", reason=None, now=clock.now(),
                                  reminder_interval=REMINDER)

    async def ids(**kw: Any) -> list[int]:
        return [e.escalation_id for e in (await inspection.list_escalations(pool, **kw))[0]]

    assert await ids(reason="deadline") == [ours, acked]
    assert await ids(provider_account=OTHER_ACCOUNT) == [theirs]
    assert await ids(provider_account=account.provider_account) == [ours, acked]
    assert await ids(acknowledged=True) == [acked]
    assert await ids(acknowledged=False) == [ours, theirs]
    assert await ids(reason="deadline", acknowledged=False) == [ours]
    assert await ids(reason="no-such-reason") == []


@pytest.mark.parametrize("cursor", [
    "not base64 at all!", base64.urlsafe_b64encode(b"{}").decode(),
    base64.urlsafe_b64encode(b"[false, \"2026-11-29T12:00:00+00:00\"]").decode(),
    base64.urlsafe_b64encode(b"[false, \"yesterday\", 1]").decode(),
    base64.urlsafe_b64encode(b"[false, \"2026-11-29T12:00:00\", 1]").decode(),  # no time zone
    base64.urlsafe_b64encode(b"[0, \"2026-11-29T12:00:00+00:00\", 1]").decode(),
    base64.urlsafe_b64encode(b"[17]").decode(),  # another listing's cursor
])
async def test_a_cursor_the_listing_did_not_make_is_refused(pool: asyncpg.Pool, cursor: str) -> None:
    with pytest.raises(inspection.InvalidCursor):
        await inspection.list_escalations(pool, cursor=cursor)


async def test_a_dead_letter_cursor_must_be_one_id(pool: asyncpg.Pool) -> None:
    for cursor in ("%%%", base64.urlsafe_b64encode(b"[\"7\"]").decode(),
                   base64.urlsafe_b64encode(b"[true]").decode()):
        with pytest.raises(inspection.InvalidCursor):
            await inspection.dead_letters(pool, cursor=cursor)
        with pytest.raises(inspection.InvalidCursor):
            await inspection.unmatched_notifications(pool, cursor=cursor)


async def test_escalation_detail_shows_identifiers_and_every_action_on_it(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    attempt = await started_attempt(pool, clock, account)
    eid = await episode(pool, clock.now(), "mismatch", attempt_id=attempt.attempt_id,
                        detail={"provider_payment_id": "pay_1",
                                "reported_payment": {"id": "pay_2", "raw": {"secret": "x", "cvc": "1"}},
                                "payments": [{"id": "pay_3", "extra": ["4242"]}]})
    clock.advance(60)
    await escalations.acknowledge(pool, eid, operator="alice", reason=None, now=clock.now(),
                                  reminder_interval=REMINDER)
    clock.advance(60)
    await escalations.resolve(pool, eid, operator="bob", reason="checked at the provider", now=clock.now())

    found = await inspection.escalation_detail(pool, eid)

    assert found is not None
    assert found.escalation.escalation_id == eid and found.escalation.status == "resolved"
    assert found.escalation.attempt_id == attempt.attempt_id
    assert found.escalation.provider_account == account.provider_account
    assert found.detail == {"provider_payment_id": "pay_1",
                            "reported_payment": {"id": "pay_2", "raw": {"fields": ["cvc", "secret"]}},
                            "payments": [{"id": "pay_3", "extra": {"items": 1}}]}
    assert [(a.operator, a.action.value) for a in found.actions] == [
        ("bob", "escalation-resolve"), ("alice", "escalation-acknowledge")]
    assert await inspection.escalation_detail(pool, eid + 1000) is None


# -------------------------------------------------------------------------------- attempts


async def test_attempt_detail_holds_its_history_notifications_outbox_escalations_and_actions_but_no_secret(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    attempt: Attempt = await started_attempt(pool, clock, account)
    aid = attempt.attempt_id
    clock.advance(5)
    await record_outcome(pool, aid, ProviderOutcome.unknown("timeout"), now=clock.now(), actor="checkout",
                         recheck_after_s=50, reminder_interval=REMINDER)
    clock.advance(5)
    eid = await episode(pool, clock.now(), "deadline", attempt_id=aid)
    secret_event = {"id": "evt_1", "data": {"card": {"number": "4242424242424242", "cvc": "123"}}}
    async with pool.acquire() as conn, conn.transaction():
        matched = await record_notification(
            conn, provider_account=account.provider_account, key="evt_1", attempt_id=aid, now=clock.now(),
            detail={"type": "payment.processing", "status": "processing", "provider_payment_id": "pay_1",
                    "reference": attempt.client_reference, "event": secret_event})
        later = await record_notification(
            conn, provider_account=account.provider_account, key="evt_2", attempt_id=None, now=clock.now(),
            detail={"type": "payment.succeeded", "status": "succeeded", "event": secret_event})
        await append_event(conn, attempt_id=aid, kind=EventKind.TRANSITION, actor="operator-ops",
                           now=clock.now(), detail={"attached_notification": later.event_id})
    dead = await queued(pool, clock, "order-confirmation", attempt_id=aid, dead=True)
    await outbox_admin.requeue(pool, dead, operator="ops", reason="broker back", now=clock.now())
    await escalations.acknowledge(pool, eid, operator="alice", reason=None, now=clock.now(),
                                  reminder_interval=REMINDER)
    claimed_at = clock.now() + timedelta(seconds=60)  # due by then: recovery holds it
    assert await leases.claim(pool, aid, leases.new_lease("recovery-3"), claimed_at, lease_s=30)

    found = await inspection.attempt_detail(pool, aid)

    assert found is not None
    a = found.attempt
    assert (a.attempt_id, a.order_id, a.state, a.amount_minor, a.currency) == (
        aid, attempt.order_id, "Unknown", attempt.amount_minor, attempt.currency)
    assert a.idempotency_key == attempt.idempotency_key and a.provider_account == account.provider_account
    assert a.escalation_deadline == attempt.escalation_deadline
    assert a.next_check_at == clock.now() - timedelta(seconds=5) + timedelta(seconds=50)  # the recheck
    assert (a.recovery_owner, a.lease_expires_at) == ("recovery-3", claimed_at + timedelta(seconds=30))
    assert a.request_fields == ("amount", "currency", "payment_method", "reference")
    assert found.order.order_id == attempt.order_id and found.order.status == "Open"
    assert [(e.kind, e.summary.get("to")) for e in found.history] == [
        ("transition", "NotStarted"), ("send_intent", None), ("transition", "Started"),
        ("send_result", None), ("transition", "Unknown"), ("notification", None), ("transition", None)]
    assert [e.occurred_at for e in found.history] == sorted(e.occurred_at for e in found.history)
    assert [n.event_id for n in found.notifications] == [matched.event_id, later.event_id]
    assert found.notifications[0].provider_payment_id == "pay_1"
    assert [(m.kind, m.status, m.delivery_attempts) for m in found.outbox] == [
        ("operator-alert", "pending", 0), ("order-confirmation", "pending", 0)]  # the episode's alert, then
    assert found.outbox[-1].message_id == dead  # the requeued dead letter
    assert [e.escalation_id for e in found.escalations] == [eid]
    assert [(x.operator, x.action.value) for x in found.actions] == [
        ("alice", "escalation-acknowledge"), ("ops", "outbox-requeue")]
    shown = orjson.dumps(inspection.jsonable(found)).decode()
    for secret in ("tok_visa", "4242424242424242", "cvc", account.api_key.reveal(), "sk_test"):
        assert secret not in shown, secret
    assert await inspection.attempt_detail(pool, uuid.uuid4()) is None


def test_request_field_names_never_show_a_value() -> None:
    assert inspection.request_field_names(
        '{"amount": 5, "paymentMethod": {"type": "scheme", "encryptedCardNumber": "adyenjs_x"}}'
    ) == ["amount", "paymentMethod.encryptedCardNumber", "paymentMethod.type"]
    assert inspection.request_field_names("amount=5&payment_method=pm_card_visa&metadata[order]=o1") == [
        "amount", "metadata[order]", "payment_method"]


# ------------------------------------------------------------- unmatched notifications, dead letters


async def test_unmatched_notifications_are_listed_oldest_first_with_their_open_episode(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    acct = account.provider_account
    attempt = await started_attempt(pool, clock, account)
    stored = []
    async with pool.acquire() as conn, conn.transaction():
        # Two unkeyed deliveries about one payment share one episode, which names only the first.
        for i, (key, payment) in enumerate([(None, "pay_shared"), (None, "pay_shared"), ("evt_u2", "pay_u2"),
                                            ("evt_u3", "pay_u3"), ("evt_u4", "pay_u4")]):
            r = await record_notification(
                conn, provider_account=acct, key=key, attempt_id=None, now=clock.now() + timedelta(seconds=i),
                detail={"type": "payment.succeeded", "provider_payment_id": payment, "reference": None,
                        "event": {"secret": "whsec_x"}})
            stored.append(r.event_id)
        unparseable = await record_notification(
            conn, provider_account=acct, key=None, attempt_id=None, now=clock.now(),
            detail={"unparseable": "not JSON", "body_base64": "d2hzZWNfeA=="})
        stored.append(unparseable.event_id)
        await record_notification(conn, provider_account=acct, key="evt_m", attempt_id=attempt.attempt_id,
                                  now=clock.now(), detail={"type": "payment.succeeded"})
        await append_event(conn, attempt_id=attempt.attempt_id, kind=EventKind.TRANSITION,
                           actor="operator-ops", now=clock.now(), detail={"attached_notification": stored[2]})
    shared = await episode(pool, clock.now(), "unmatched-payment",
                           key=escalations.unmatched_key(acct, None, "pay_shared", None),
                           detail={"provider_account": acct, "notification_event_id": stored[0]})
    shut = await episode(pool, clock.now(), "unmatched-payment",
                         key=escalations.unmatched_key(acct, "evt_u3", "pay_u3", None))
    await escalations.resolve(pool, shut, operator="ops", reason="not ours", now=clock.now())
    bad = await episode(pool, clock.now(), "unparseable-notification",
                        detail={"provider_account": acct, "notification_event_id": stored[5]})

    async def unmatched(**kw: Any) -> Any:
        return await inspection.unmatched_notifications(pool, **kw)

    pages = await all_pages(unmatched, 2)
    listed = [u for page in pages for u in page]
    assert [u.notification.event_id for u in listed] == [stored[i] for i in (0, 1, 3, 4, 5)]
    assert [len(p) for p in pages] == [2, 2, 1]
    assert [u.escalation_id for u in listed] == [shared, shared, None, None, bad]
    assert listed[0].notification.provider_payment_id == "pay_shared"
    assert listed[4].notification.unparseable == "not JSON"
    assert "whsec_x" not in orjson.dumps(inspection.jsonable(listed)).decode()
    assert "d2hzZWNfeA==" not in orjson.dumps(inspection.jsonable(listed)).decode()


async def test_dead_letters_are_listed_oldest_first_by_kind_with_their_error_and_episode(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    await queued(pool, clock, "order-confirmation")  # pending: not a dead letter
    dead = [await queued(pool, clock, kind, dead=True, error=f"error {i}")
            for i, kind in enumerate(["order-confirmation", "operator-alert", "order-confirmation",
                                      "order-confirmation"])]
    ep = await episode(pool, clock.now(), "outbox-dead-letter",
                       key=escalations.dead_letter_key(dead[0]))

    async def confirmations(**kw: Any) -> Any:
        return await inspection.dead_letters(pool, kind="order-confirmation", **kw)

    async def every(**kw: Any) -> Any:
        return await inspection.dead_letters(pool, **kw)

    pages = await all_pages(confirmations, 2)
    assert [[d.row.message_id for d in p] for p in pages] == [[dead[0], dead[2]], [dead[3]]]
    listed = [d for p in await all_pages(every, 3) for d in p]
    assert [d.row.message_id for d in listed] == dead
    assert [(d.row.last_error, d.row.delivery_attempts, d.row.status) for d in listed[:2]] == [
        ("error 0", 10, "dead-lettered"), ("error 1", 10, "dead-lettered")]
    assert [d.escalation_id for d in listed] == [ep, None, None, None]
