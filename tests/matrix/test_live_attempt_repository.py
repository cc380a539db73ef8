"""The live-attempt repository: one live attempt per order, and the Started transition.

Real PostgreSQL, real concurrent transactions. Where an interleaving matters,
one transaction is held open and the other operation runs as a task until
PostgreSQL reports it waiting on a lock the first one holds.
"""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta

import asyncpg
import pytest

from paycore import attempts, db, orders
from paycore.attempt_row import ATTEMPTS
from paycore.attempts import Attempt, StartResult
from paycore.clock import FakeClock
from paycore.config import ProviderAccountConfig
from paycore.domain import LIVE_STATE_PREDICATE, LIVE_STATES, AttemptState, OrderStatus, ProviderOutcome
from paycore.events import history
from paycore.operation_views import payment_of_order
from tests.support.timings import REMINDER_INTERVAL

from .helpers import (
    ABANDONMENT_S,
    RECHECK_S,
    attempt_values,
    event_count,
    finish,
    insert_row,
    live_attempt,
    new_order,
    seed_account,
    start,
    started_attempt,
    wait_until_blocked_by,
)

MIGRATION_SQL = next(m.sql for m in db.migrations() if m.version == "0001_schema")


@pytest.fixture
async def account(pool: asyncpg.Pool, clock: FakeClock) -> ProviderAccountConfig:
    return await seed_account(pool, clock)


async def _attempt_rows(pool: asyncpg.Pool, order_id: str) -> list[asyncpg.Record]:
    rows: list[asyncpg.Record] = await pool.fetch(
        "SELECT * FROM payment_attempts WHERE order_id = $1 ORDER BY attempt_number", order_id)
    return rows


async def _record(pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt,
                  outcome: ProviderOutcome) -> Attempt:
    return (await attempts.record_outcome(
        pool, attempt.attempt_id, outcome, now=clock.now(), actor="endpoint", recheck_after_s=RECHECK_S,
        reminder_interval=REMINDER_INTERVAL)).attempt


async def _fail(pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt) -> Attempt:
    return await _record(pool, clock, attempt, ProviderOutcome.failed("card_declined"))


async def _succeed(pool: asyncpg.Pool, clock: FakeClock, attempt: Attempt, payment_id: str) -> Attempt:
    return await _record(pool, clock, attempt,
                         ProviderOutcome.succeeded(payment_id, attempt.amount_minor, attempt.currency))


async def _next_attempt(pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig,
                        after: Attempt) -> Attempt:
    """The next attempt of ``after``'s order (``after`` final)."""
    return await live_attempt(pool, clock, account, await orders.get_order(pool, after.order_id,
                                                                            after.customer_id))


# --- get_or_create_live_attempt ------------------------------------------------------------------------


async def test_a_new_attempt_is_recorded_not_started_with_its_request_before_any_send(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    order = await new_order(pool, clock)
    attempt = await live_attempt(pool, clock, account, order)
    assert attempt.state is AttemptState.NOT_STARTED
    assert attempt.attempt_number == 1
    assert attempt.client_reference == f"{order.order_id}-a1"
    assert attempt.provider_account == "cardco:acct_store:test"
    assert attempt.endpoint == "http://127.0.0.1:9/v1/payments"
    assert attempt.api_version == account.api_version
    assert (attempt.amount_minor, attempt.currency) == (order.amount_minor, order.currency)
    assert f'"reference":"{attempt.client_reference}"' in attempt.request_body
    assert attempt.first_sent_at is None and attempt.escalation_deadline is None
    assert attempt.next_check_at == clock.now() + timedelta(seconds=ABANDONMENT_S)
    events = await history(pool, attempt.attempt_id)
    assert [(e["kind"], e["detail"]["to"]) for e in events] == [("transition", "NotStarted")]


async def test_a_double_click_of_twenty_concurrent_requests_gets_one_attempt(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    order = await new_order(pool, clock)
    results = await finish(asyncio.gather(*(live_attempt(pool, clock, account, order) for _ in range(20))))
    assert len({a.attempt_id for a in results}) == 1
    assert len({a.idempotency_key for a in results}) == 1
    rows = await _attempt_rows(pool, order.order_id)
    assert len(rows) == 1
    assert rows[0]["attempt_id"] == results[0].attempt_id
    assert await event_count(pool, results[0].attempt_id, "transition") == 1


async def test_a_paid_order_cannot_get_another_attempt(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    attempt = await started_attempt(pool, clock, account)
    await _succeed(pool, clock, attempt, "pay_1")
    order = await orders.get_order(pool, attempt.order_id, attempt.customer_id)
    assert order.status == "Paid"
    with pytest.raises(orders.OrderNotPayable) as exc:
        await live_attempt(pool, clock, account, order)
    assert exc.value.why == "paid"
    assert len(await _attempt_rows(pool, order.order_id)) == 1


async def test_a_cancelled_order_cannot_get_an_attempt(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    order = await new_order(pool, clock)
    cancelled = await orders.cancel_order(pool, order.order_id, order.customer_id, clock.now())
    assert cancelled.status == "Cancelled"
    with pytest.raises(orders.OrderNotPayable) as exc:
        await live_attempt(pool, clock, account, order)
    assert exc.value.why == "cancelled"
    assert await _attempt_rows(pool, order.order_id) == []


async def test_an_order_without_a_live_attempt_is_cancelled_outright_whatever_other_orders_have(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    await started_attempt(pool, clock, account)  # another order's live attempt
    order = await new_order(pool, clock)
    cancelled = await orders.cancel_order(pool, order.order_id, order.customer_id, clock.now())
    assert cancelled.status == "Cancelled"  # not an intent left Open for a live attempt
    # Nor does a final attempt of its own make it wait.
    failed = await _fail(pool, clock, await started_attempt(pool, clock, account))
    again = await orders.cancel_order(pool, failed.order_id, failed.customer_id, clock.now())
    assert again.status == "Cancelled"


async def test_the_orders_payment_is_its_succeeded_attempt_never_a_failed_one(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    first = await started_attempt(pool, clock, account)
    await _fail(pool, clock, first)
    assert await payment_of_order(pool, first.order_id) is None
    _, second = await start(pool, clock, await _next_attempt(pool, clock, account, first))
    assert second is not None
    await _succeed(pool, clock, second, "pay_2")
    paid = await payment_of_order(pool, first.order_id)
    assert paid is not None and paid.attempt_id == second.attempt_id


async def test_an_order_whose_cancellation_was_requested_cannot_get_a_new_attempt(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    attempt = await started_attempt(pool, clock, account)
    requested = await orders.cancel_order(pool, attempt.order_id, attempt.customer_id, clock.now())
    assert requested.status == "Open" and requested.cancel_requested_at == clock.now()
    await _fail(pool, clock, attempt)
    with pytest.raises(orders.OrderNotPayable) as exc:
        await live_attempt(pool, clock, account, requested)
    assert exc.value.why == "cancelled"


async def test_another_customer_never_sees_an_orders_attempt(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    # latest_attempt is the payment-status endpoint's only ownership check.
    attempt = await started_attempt(pool, clock, account)
    assert (await attempts.latest_attempt(pool, attempt.order_id, attempt.customer_id)) == attempt
    assert await attempts.latest_attempt(pool, attempt.order_id, "cus_someone_else") is None


async def test_attempts_are_numbered_within_their_order(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    first = await _fail(pool, clock, await started_attempt(pool, clock, account))
    other = await live_attempt(pool, clock, account, await new_order(pool, clock))
    second = await _next_attempt(pool, clock, account, first)
    assert (first.attempt_number, other.attempt_number, second.attempt_number) == (1, 1, 2)


async def test_the_latest_attempt_is_the_orders_newest_not_its_first(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    first = await started_attempt(pool, clock, account)
    await _fail(pool, clock, first)
    second = await _next_attempt(pool, clock, account, first)
    latest = await attempts.latest_attempt(pool, first.order_id, first.customer_id)
    assert latest is not None and latest.attempt_id == second.attempt_id


async def test_another_customers_order_is_not_found(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    order = await new_order(pool, clock, customer="cus_1")
    with pytest.raises(orders.OrderNotFound):
        await attempts.get_or_create_live_attempt(
            pool, order_id=order.order_id, customer_id="cus_2", account=account,
            build_body=lambda *_: "{}", now=clock.now(), abandonment_threshold_s=ABANDONMENT_S)
    with pytest.raises(orders.OrderNotFound):
        await attempts.get_or_create_live_attempt(
            pool, order_id="ord_missing", customer_id="cus_1", account=account,
            build_body=lambda *_: "{}", now=clock.now(), abandonment_threshold_s=ABANDONMENT_S)
    assert await _attempt_rows(pool, order.order_id) == []


async def test_the_attempt_after_a_failed_attempt_gets_a_new_idempotency_key_and_reference(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    first = await started_attempt(pool, clock, account)
    failed = await _fail(pool, clock, first)
    assert failed.state is AttemptState.FAILED
    order = await orders.get_order(pool, first.order_id, first.customer_id)
    second = await live_attempt(pool, clock, account, order)
    assert second.attempt_id != first.attempt_id
    assert second.attempt_number == 2
    assert second.state is AttemptState.NOT_STARTED
    assert second.idempotency_key != first.idempotency_key
    assert second.client_reference == f"{order.order_id}-a2" != first.client_reference
    assert f'"reference":"{second.client_reference}"' in second.request_body
    # The live attempt is returned again, not a third one.
    assert (await live_attempt(pool, clock, account, order)).attempt_id == second.attempt_id


async def test_a_writer_that_skipped_the_order_lock_and_holds_a_live_insert_makes_the_endpoint_return_it(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    """The rogue's foreign-key check takes KEY SHARE on the order row, so the endpoint waits at its lock."""
    order = await new_order(pool, clock)
    async with pool.acquire() as rogue:
        tx = rogue.transaction()
        await tx.start()
        winner = await insert_row(rogue, "payment_attempts",
                                  attempt_values(order, account, clock.now(), number=7))
        task = asyncio.create_task(live_attempt(pool, clock, account, order))
        try:
            blocked = await wait_until_blocked_by(pool, rogue.get_server_pid(), task)
        finally:
            await tx.commit()
        got = await finish(task)
    assert blocked["query"].strip() == orders.ORDERS.lock_order.sql, blocked["query"]
    assert got.attempt_id == winner["attempt_id"]
    assert got.attempt_number == 7
    assert [r["attempt_id"] for r in await _attempt_rows(pool, order.order_id)] == [winner["attempt_id"]]


async def test_an_insert_that_violates_the_partial_unique_index_from_a_writer_that_skipped_the_order_lock_returns_the_winning_attempt_without_querying_inside_an_aborted_transaction(  # noqa: E501
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    """The rogue takes no lock on the order row at all (its FK check is off for its session).

    So the endpoint passes its order lock and its "no live attempt" read, and
    its insert waits on the rogue's uncommitted index entry; when the rogue
    commits, ON CONFLICT absorbs the violation and the transaction, still
    usable, reloads the winner.
    """
    order = await new_order(pool, clock)
    async with pool.acquire() as rogue:
        tx = rogue.transaction()
        await tx.start()
        await rogue.execute("SET LOCAL session_replication_role = replica")  # no FK check, no order lock
        winner = await insert_row(rogue, "payment_attempts",
                                  attempt_values(order, account, clock.now(), number=7))
        task = asyncio.create_task(live_attempt(pool, clock, account, order))
        try:
            blocked = await wait_until_blocked_by(pool, rogue.get_server_pid(), task, in_query="ON CONFLICT")
        finally:
            await tx.commit()
        got = await finish(task)
    assert "ON CONFLICT" in blocked["query"], blocked["query"]
    assert blocked["locktype"] == "transactionid"
    assert got.attempt_id == winner["attempt_id"]
    assert got.attempt_number == 7
    assert got.state is AttemptState.NOT_STARTED
    assert [r["attempt_id"] for r in await _attempt_rows(pool, order.order_id)] == [winner["attempt_id"]]
    # The loser wrote nothing else: no NotStarted transition for an attempt that never existed.
    assert await pool.fetchval("SELECT count(*) FROM payment_attempt_events") == 0


def _normalise(sql: str) -> str:
    return " ".join(sql.split())


async def test_the_on_conflict_predicate_for_the_live_attempt_insert_matches_the_partial_index_on_the_postgresql_version_in_use(  # noqa: E501
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    insert_match = re.search(r"ON CONFLICT \(order_id\) WHERE (.+?) DO NOTHING", ATTEMPTS.insert_live.sql,
                             re.S)
    migration_match = re.search(
        r"CREATE UNIQUE INDEX one_live_attempt_per_order\s+ON payment_attempts \(order_id\)\s+WHERE (.+?);",
        MIGRATION_SQL, re.S)
    assert insert_match and migration_match
    insert_predicate = _normalise(insert_match.group(1))
    # Textually identical, as the reference requires, and to the module's named constant.
    assert insert_predicate == _normalise(migration_match.group(1)) == LIVE_STATE_PREDICATE
    assert {s.value for s in LIVE_STATES} == set(re.findall(r"'(\w+)'", insert_predicate))

    # And identical as PostgreSQL itself parses and prints them, on this server version.
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            f"CREATE UNIQUE INDEX probe_live_attempt ON payment_attempts (order_id) WHERE {insert_predicate}")
        predicates = await conn.fetch(
            "SELECT c.relname, pg_get_expr(i.indpred, i.indrelid) AS predicate FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname IN ('one_live_attempt_per_order', 'probe_live_attempt')")
        assert len(predicates) == 2
        assert predicates[0]["predicate"] == predicates[1]["predicate"]
        await conn.execute("DROP INDEX probe_live_attempt")

    # Behaviourally: with a live attempt present, the insert's conflict is absorbed by that index
    # (no UniqueViolation), and the transaction stays usable for the reload.
    order = await new_order(pool, clock)
    live = await live_attempt(pool, clock, account, order)
    values = attempt_values(order, account, clock.now(), number=2)
    async with pool.acquire() as conn, conn.transaction():
        row = await ATTEMPTS.insert_live.fetchrow(
            conn, attempt_id=values["attempt_id"], order_id=order.order_id, customer_id=order.customer_id,
            attempt_number=2, account=account.provider_account, endpoint=values["endpoint"],
            api_version=values["api_version"], reference=values["client_reference"],
            idempotency_key=values["idempotency_key"], request_body=values["request_body"],
            amount_minor=order.amount_minor, currency=order.currency, now=clock.now(),
            next_check_at=clock.now())
        assert row is None
        reloaded = await ATTEMPTS.live_of_order.fetchrow(conn, order_id=order.order_id)
        assert reloaded is not None and reloaded["attempt_id"] == live.attempt_id


# --- try_mark_started ----------------------------------------------------------------------------------


async def test_starting_an_attempt_starts_no_other_orders_attempt(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    waiting = await live_attempt(pool, clock, account, await new_order(pool, clock, customer="cus_2"))
    started = await started_attempt(pool, clock, account)  # the same version, another attempt
    assert waiting.version == 0 and started.state is AttemptState.STARTED
    assert await attempts.get_attempt(pool, waiting.attempt_id) == waiting  # still NotStarted, unsent


async def test_exactly_one_of_two_concurrent_starts_with_the_same_version_wins(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    attempt = await live_attempt(pool, clock, account, await new_order(pool, clock))
    results = await finish(asyncio.gather(start(pool, clock, attempt), start(pool, clock, attempt)))
    assert sorted(r.value for r, _ in results) == [StartResult.CONFLICT.value, StartResult.STARTED.value]
    assert [a for r, a in results if r is StartResult.CONFLICT] == [None]
    assert await event_count(pool, attempt.attempt_id, "send_intent") == 1
    durable = await attempts.get_attempt(pool, attempt.attempt_id)
    assert durable.state is AttemptState.STARTED and durable.version == attempt.version + 1


async def test_the_started_transition_stamps_first_sent_at_and_the_escalation_deadline_from_the_clock(
    pool: asyncpg.Pool, clock: FakeClock
) -> None:
    account = await seed_account(pool, clock, retention_s=86_400, margin_s=7_200)
    attempt = await live_attempt(pool, clock, account, await new_order(pool, clock))
    clock.advance(5)
    result, started = await start(pool, clock, attempt)
    assert result is StartResult.STARTED and started is not None
    assert started.state is AttemptState.STARTED
    assert started.first_sent_at == clock.now()
    assert started.escalation_deadline == clock.now() + timedelta(seconds=86_400 - 7_200)
    assert started.next_check_at == clock.now() + timedelta(seconds=RECHECK_S)
    assert started.version == attempt.version + 1
    assert await attempts.get_attempt(pool, attempt.attempt_id) == started


async def test_the_started_transition_appends_a_send_intent_and_a_transition_event(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    started = await started_attempt(pool, clock, account)
    events = await history(pool, started.attempt_id)
    assert [e["kind"] for e in events] == ["transition", "send_intent", "transition"]
    intent, transition = events[1], events[2]
    assert intent["detail"] == {"endpoint": started.endpoint, "api_version": started.api_version,
                                "provider_account": started.provider_account, "first_send": True}
    assert transition["detail"] == {"from": "NotStarted", "to": "Started"}
    assert intent["occurred_at"] == transition["occurred_at"] == started.first_sent_at
    assert {e["actor"] for e in events} == {"endpoint"}
    assert all(e["provider_account"] is None and e["notification_key"] is None for e in events)


async def test_an_order_cancelled_before_the_started_transition_prevents_the_send(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    order = await new_order(pool, clock)
    attempt = await live_attempt(pool, clock, account, order)
    requested = await orders.cancel_order(pool, order.order_id, order.customer_id, clock.now())
    assert requested.cancel_requested_at is not None  # a live attempt exists: an intent, not outright
    result, started = await start(pool, clock, attempt)
    assert (result, started) == (StartResult.ORDER_NOT_PAYABLE, None)
    durable = await attempts.get_attempt(pool, attempt.attempt_id)
    assert durable == attempt  # nothing stamped, version unchanged
    assert await event_count(pool, attempt.attempt_id, "send_intent") == 0


async def test_a_stale_start_after_another_caller_paid_the_order_is_a_conflict_not_a_refusal(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    # Two clicks read the same NotStarted attempt; the first starts it and the
    # payment succeeds before the second tries to start. The second must learn
    # that someone else sent it (and report the payment), not that the order
    # refuses payment: CI once saw this interleaving answer 409 to a double click.
    order = await new_order(pool, clock)
    attempt = await live_attempt(pool, clock, account, order)
    result, started = await start(pool, clock, attempt)
    assert result is StartResult.STARTED and started is not None
    await _succeed(pool, clock, started, "pay_1")
    assert (await orders.get_order(pool, order.order_id, order.customer_id)).status is OrderStatus.PAID
    assert await start(pool, clock, attempt) == (StartResult.CONFLICT, None)
    assert await event_count(pool, attempt.attempt_id, "send_intent") == 1


async def test_a_provider_account_configuration_change_does_not_move_the_stamped_escalation_deadline_of_an_attempt_already_started(  # noqa: E501
    pool: asyncpg.Pool, clock: FakeClock
) -> None:
    account = await seed_account(pool, clock, retention_s=86_400, margin_s=7_200)
    started = await started_attempt(pool, clock, account)
    stamped = started.escalation_deadline
    assert stamped == clock.now() + timedelta(hours=22)

    clock.advance(60)
    shorter = await seed_account(pool, clock, retention_s=3_600, margin_s=600)
    assert await pool.fetchval("SELECT key_retention FROM provider_accounts") == timedelta(hours=1)
    assert (await attempts.get_attempt(pool, started.attempt_id)).escalation_deadline == stamped

    # The new configuration applies to attempts started after it.
    later = await started_attempt(pool, clock, shorter)
    assert later.escalation_deadline == clock.now() + timedelta(seconds=3_000)


async def test_the_repository_cannot_commit_a_send_intent_for_an_attempt_without_the_transition_to_started(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    # A NotStarted attempt read at a stale version.
    fresh = await live_attempt(pool, clock, account, await new_order(pool, clock))
    stale = await pool.fetchrow(
        "UPDATE payment_attempts SET version = version + 1 WHERE attempt_id = $1 RETURNING version",
        fresh.attempt_id)
    assert stale is not None
    assert (await start(pool, clock, fresh))[0] is StartResult.CONFLICT
    assert await event_count(pool, fresh.attempt_id, "send_intent") == 0

    # An attempt already Started, presented at its current version.
    started = await started_attempt(pool, clock, account)
    assert (await start(pool, clock, started))[0] is StartResult.CONFLICT
    # An attempt that is Unknown.
    unknown = (await attempts.record_outcome(
        pool, started.attempt_id, ProviderOutcome.unknown("provider.no-response.caller"), now=clock.now(),
        actor="endpoint", recheck_after_s=RECHECK_S, reminder_interval=REMINDER_INTERVAL)).attempt
    assert unknown.state is AttemptState.UNKNOWN
    assert (await start(pool, clock, unknown))[0] is StartResult.CONFLICT
    assert await event_count(pool, started.attempt_id, "send_intent") == 1

    # An attempt closed as never sent.
    closed = await live_attempt(pool, clock, account, await new_order(pool, clock))
    await pool.execute(
        "UPDATE payment_attempts SET state = 'NotApplied', outcome_reason = 'never-sent', "
        "version = version + 1 WHERE attempt_id = $1", closed.attempt_id)
    now_closed = await attempts.get_attempt(pool, closed.attempt_id)
    assert (await start(pool, clock, now_closed))[0] is StartResult.CONFLICT
    assert await event_count(pool, closed.attempt_id, "send_intent") == 0
    assert (await attempts.get_attempt(pool, closed.attempt_id)).first_sent_at is None
