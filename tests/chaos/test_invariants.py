"""The chaos run's sampling, settling and money invariants.

The pure invariants on hand-made facts; then ``check`` against a real database, a
real sandbox, checkout and intake (``running_webhook_stack``), the real broker,
relay and demo consumers: a clean paid order breaks nothing, and each invariant
broken on purpose counts exactly what was broken.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import orjson

from paycore.clock import SystemClock
from paycore.consumer import InboxConsumer
from paycore.kafka import KafkaSettings
from paycore_devstack.chaos import invariants
from paycore_devstack.chaos.invariants import (
    AttemptFacts,
    Facts,
    OperationFacts,
    OrderFacts,
    WireCopies,
    fulfillment_key,
    history_gap,
)
from paycore_devstack.chaos.model import ChaosOptions, ClientAnswer, Endpoints, RunRecord
from paycore_dispatcher.demo_consumers import demo_consumer
from tests.dispatcher import conftest as broker
from tests.dispatcher.support import kafka_publisher, relay
from tests.support.stack import JWT_SECRET, eventually
from tests.support.webhooks import TEST, WebhookStack, sandbox_secrets

# The dispatcher suite's real broker and per-test topics, as this module's fixtures.
kafka_bootstrap = broker.kafka_bootstrap
ks = broker.ks

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
PAY = "POST /orders/{id}/payment"
FAST_GROUP = {"session_timeout_ms": 2_000, "heartbeat_interval_ms": 300, "retry_base_s": 0.05,
              "retry_max_s": 0.2}

# -- the pure invariants, on hand-made facts ---------------------------------------------------------


REFUNDED = {"payment": "pay_1", "reference": "ord_1-a1-refund1", "amount": 3000, "status": "succeeded"}


def test_the_operations_invariants_count_what_the_provider_and_paycore_did_twice_or_too_much() -> None:
    refund = OperationFacts("op1", "a1", "refund", "Succeeded", "ord_1-a1-refund1", 3000, NOW)
    late = OperationFacts("op2", "a1", "refund", "Unknown", "ord_1-a1-refund2", 2000,
                          NOW - timedelta(minutes=5))
    f = Facts(now=NOW, operations={"op1": refund, "op2": late},
              ledger=[{"id": "pay_1", "status": "succeeded", "amount": 4999}],
              refunds=[REFUNDED, REFUNDED],  # one refund of paycore's made twice at the provider
              captures=[{"payment": "pay_1", "amount": 5000, "status": "succeeded"}],
              operation_effects={"operation:op1:refund-succeeded": 2})
    assert invariants.provider_refunds_per_operation_above_one(f).count == 1
    assert invariants.provider_refunds_exceeding_the_capture(f).count == 1  # 6000 back of 4999
    assert invariants.captures_above_the_hold(f).count == 1
    assert invariants.operations_neither_resolved_nor_escalated(f).count == 1
    assert invariants.operation_effects_applied_twice(f).count == 1
    clean = Facts(now=NOW, operations={"op1": refund}, operation_escalations={"op2"},
                  ledger=[{"id": "pay_1", "status": "succeeded", "amount": 4999}],
                  refunds=[REFUNDED, {**REFUNDED, "reference": "elsewhere", "amount": 1999}],
                  operation_effects={"operation:op1:refund-succeeded": 1})
    for check in (invariants.provider_refunds_per_operation_above_one,
                  invariants.provider_refunds_exceeding_the_capture, invariants.captures_above_the_hold,
                  invariants.operations_neither_resolved_nor_escalated,
                  invariants.operation_effects_applied_twice):
        assert check(clean).count == 0, check.__name__


def test_a_history_must_chain_from_none_to_not_started_to_the_current_state() -> None:
    paid = [(None, "NotStarted"), ("NotStarted", "Started"), ("Started", "Unknown"), ("Unknown", "Succeeded")]
    assert history_gap(paid, "Succeeded") is None
    assert history_gap([*paid[:2], ("Started", "Started")], "Started") is None  # processing -> action

    assert history_gap([], "NotStarted") == "no transitions"
    assert history_gap(paid[1:], "Succeeded") == "transition 1 starts at NotStarted, the history was at None"
    assert history_gap([(None, "Started")], "Started") == (
        "the first transition goes to Started, not NotStarted")
    assert history_gap(paid[:2] + paid[3:], "Succeeded") == (
        "transition 3 starts at Unknown, the history was at Started")  # Started -> Unknown is missing
    assert history_gap(paid[:3], "Succeeded") == "the history ends at Unknown, the attempt is Succeeded"
    assert history_gap([*paid, ("Succeeded", "Failed")], "Failed") == (
        "transition 5 Succeeded -> Failed is not allowed")


def test_client_answers_5xx_are_allowed_only_as_503_with_retry_after() -> None:
    answers = [ClientAnswer(1.0, 0, "POST /orders", 201),
               ClientAnswer(2.0, 0, PAY, 503, "database-unavailable", retry_after=True),
               ClientAnswer(3.0, 1, PAY, 503, "payment-not-started", order_id="ord_1"),
               ClientAnswer(4.0, 1, "GET /orders/{id}/payment/status", 500, "internal"),
               ClientAnswer(5.0, 2, "POST /orders", 502),
               ClientAnswer(6.0, 2, "POST /orders", None, error="ReadTimeout"),
               ClientAnswer(7.0, 3, "POST /orders/{id}/cancel", 409, "conflict")]

    result = invariants.server_errors_without_retry_after(answers)

    assert result.count == 3
    assert result.examples == ("POST /orders/{id}/payment 503 payment-not-started ord_1 at 3.0 s",
                               "GET /orders/{id}/payment/status 500 internal at 4.0 s",
                               "POST /orders 502 at 5.0 s")
    assert result.note == "1 answers 503 with Retry-After (allowed); 1 unanswered"
    assert invariants.processes_exited_on_their_own([("recovery-2", 1)]).examples == ("recovery-2 (exit 1)",)


def test_an_idempotency_key_is_read_as_a_structured_field_string_or_a_bare_token() -> None:
    assert invariants.idempotency_key_of('"8e03978e-40d5"') == "8e03978e-40d5"
    assert invariants.idempotency_key_of('"a\\"b\\\\c"') == 'a"b\\c'
    assert invariants.idempotency_key_of("8e03978e-40d5") == "8e03978e-40d5"
    assert invariants.idempotency_key_of(None) is None


def body(reference: str) -> str:
    return orjson.dumps({"amount": 4999, "currency": "EUR", "payment_method": "tok_visa",
                         "reference": reference}).decode()


def attempt(n: int, order: str, state: str, pid: str | None = None, **kw: Any) -> AttemptFacts:
    return AttemptFacts(f"att-{n}", order, state, client_reference=f"{order}-a{n}",
                        idempotency_key=f"key-{n}", request_body=body(f"{order}-a{n}"),
                        api_version="2026-11-01", provider_payment_id=pid, **kw)


def payment(pid: str, reference: str, status: str = "succeeded", refunded: int = 0) -> dict[str, Any]:
    return {"id": pid, "provider_account": TEST, "reference": reference, "status": status,
            "amount_refunded": refunded}


def create(key: str, sent: str, **headers: str) -> dict[str, Any]:
    return {"method": "POST", "path": "/v1/payments", "body": sent,
            "headers": {"idempotency-key": f'"{key}"', "cardco-version": "2026-11-01",
                        "cardco-account": "acct_store", "authorization": "sk_test", **headers}}


def facts(orders: list[OrderFacts], attempts: list[AttemptFacts], **kw: Any) -> Facts:
    return Facts(now=NOW, orders={o.order_id: o for o in orders},
                 attempts={a.attempt_id: a for a in attempts}, **kw)


def test_a_payment_not_recorded_by_its_attempt_counts_unless_a_person_has_the_attempt() -> None:
    f = facts([OrderFacts("ord_a", "Paid"), OrderFacts("ord_b", "Open"), OrderFacts("ord_c", "Open")],
              [attempt(1, "ord_a", "Succeeded", "pay_1"), attempt(2, "ord_b", "Unknown"),
               attempt(3, "ord_c", "Unknown"), attempt(4, "ord_c", "Failed", "pay_gone")],
              ledger=[payment("pay_1", "ord_a-a1"), payment("pay_2", "ord_b-a2", "processing"),
                      payment("pay_3", "ord_c-a3", "processing"), payment("pay_x", "ord_z-a1")],
              open_escalations={"att-3": ["deadline"]})

    result = invariants.provider_payments_not_linked_to_one_attempt(f)

    assert result.count == 3
    assert result.examples == ("pay_2 (attempt att-2 recorded None)",
                               "pay_x (no attempt has reference ord_z-a1)",
                               "att-4 (recorded pay_gone, not in the ledger)")
    assert "1 unrecorded by an attempt with an open escalation (allowed" in result.note
    assert "pay_3" in result.note


def test_an_order_agrees_with_the_ledger_when_paid_exactly_once_or_never_charged() -> None:
    cancelled_at = NOW - timedelta(minutes=1)
    f = facts([OrderFacts("ord_ok", "Paid"), OrderFacts("ord_twice", "Paid"), OrderFacts("ord_free", "Paid"),
               OrderFacts("ord_lost", "Open"), OrderFacts("ord_refunded", "Open"),
               OrderFacts("ord_cancelled", "Cancelled", cancelled_at), OrderFacts("ord_open", "Open")],
              [attempt(1, "ord_ok", "Succeeded", "p1"), attempt(2, "ord_twice", "Succeeded", "p2"),
               attempt(3, "ord_twice", "Unknown"), attempt(4, "ord_free", "Succeeded"),
               attempt(5, "ord_lost", "Failed", "p5"), attempt(6, "ord_refunded", "Succeeded", "p6"),
               attempt(7, "ord_cancelled", "Succeeded", "p7")],
              ledger=[payment("p1", "ord_ok-a1"), payment("p2", "ord_twice-a2"),
                      payment("p3", "ord_twice-a3"),
                      payment("p5", "ord_lost-a5"), payment("p6", "ord_refunded-a6", refunded=4999),
                      payment("p7", "ord_cancelled-a7"), payment("p8", "ord_nobody-a1")],
              escalation_reasons={"att-7": {"succeeded-after-cancel"}})

    result = invariants.orders_disagreeing_with_the_ledger(f)

    assert result.count == 4
    assert set(result.examples) == {"ord_twice (Paid, 2 charged or held payments)",
                                    "ord_free (Paid, 0 charged or held payments)",
                                    "ord_lost (Open, 1 succeeded payments)",
                                    "ord_nobody (no such order, succeeded payment)"}
    assert "1 succeeded after a cancellation, escalated (allowed)" in result.note
    assert invariants.orders_with_more_than_one_succeeded_payment(f).examples == ("ord_twice",)


def test_an_order_says_what_its_refunds_and_its_hold_did_unless_an_operation_is_still_open() -> None:
    f = facts([OrderFacts("ord_part", "PartiallyRefunded"), OrderFacts("ord_all", "Refunded"),
               OrderFacts("ord_held", "Authorized"), OrderFacts("ord_stale", "Paid"),
               OrderFacts("ord_busy", "Paid"), OrderFacts("ord_voided", "Voided")],
              [attempt(1, "ord_part", "Succeeded", "p1"), attempt(2, "ord_all", "Succeeded", "p2"),
               attempt(3, "ord_held", "Succeeded", "p3"), attempt(4, "ord_stale", "Succeeded", "p4"),
               attempt(5, "ord_busy", "Succeeded", "p5"), attempt(6, "ord_voided", "Succeeded", "p6")],
              ledger=[payment("p1", "ord_part-a1", refunded=1000), payment("p2", "ord_all-a2", refunded=4999),
                      payment("p3", "ord_held-a3", "requires_capture"),
                      payment("p4", "ord_stale-a4", refunded=1000),
                      payment("p5", "ord_busy-a5", refunded=1000),
                      payment("p6", "ord_voided-a6", "canceled")],
              operations={"op5": OperationFacts("op5", "att-5", "refund", "Unknown", "r5", 1000)})
    for p in f.ledger:
        p["amount"] = 4999
    result = invariants.orders_disagreeing_with_the_ledger(f)
    # Only the Paid order whose payment the provider refunded in part, with nothing in flight.
    assert result.examples == ("ord_stale (Paid, the provider says PartiallyRefunded)",)


def test_a_paid_orders_fulfillment_is_applied_once_and_an_unpaid_or_cancelled_orders_never() -> None:
    f = facts([OrderFacts("ord_once", "Paid"), OrderFacts("ord_twice", "Paid"),
               OrderFacts("ord_never", "Paid"),
               OrderFacts("ord_after_cancel", "Paid", NOW), OrderFacts("ord_open", "Open")],
              [attempt(1, "ord_once", "Succeeded"), attempt(2, "ord_twice", "Succeeded"),
               attempt(3, "ord_never", "Succeeded"), attempt(4, "ord_after_cancel", "Succeeded"),
               attempt(5, "ord_open", "Failed")],
              fulfillments={fulfillment_key("att-1"): 1, fulfillment_key("att-2"): 2,
                            fulfillment_key("att-5"): 1},
              wire=WireCopies(messages=5, keys_repeated=1, extra_copies=2))

    result = invariants.fulfillments_not_applied_once(f)

    assert result.examples == ("ord_twice (Paid, applied 2x)", "ord_never (Paid, applied 0x)",
                               "ord_open (Open, applied 1x)")
    assert result.note == ("on the wire: 5 fulfillment messages, 1 of them more than once (2 extra copies), "
                           "deduplicated by the consumer's inbox")


def test_live_attempts_deadlines_requests_and_resends_on_hand_made_facts() -> None:
    late = NOW - timedelta(minutes=5)
    a1 = attempt(1, "ord_a", "Unknown", escalation_deadline=late)
    a2 = attempt(2, "ord_b", "Started", escalation_deadline=late)
    a3 = attempt(3, "ord_b", "NotStarted")
    a4 = attempt(4, "ord_c", "Unknown", escalation_deadline=NOW - timedelta(seconds=5))  # inside the grace
    f = facts([], [a1, a2, a3, a4], open_escalations={"att-2": ["deadline"]}, send_intents={"att-1": 1},
              creates=[create("key-1", a1.request_body), create("key-1", a1.request_body),
                       create("key-2", a2.request_body + " "),
                       create("key-9", a4.request_body, **{"cardco-version": "2025-01-01"}),
                       create("key-3", body("ord_q-a1"))])

    assert invariants.orders_with_more_than_one_live_attempt(f).examples == ("ord_b",)
    assert invariants.attempts_past_deadline_without_escalation(f).examples == ("att-1",)
    requests = invariants.provider_requests_without_send_intent(f)
    assert requests.examples == ("att-1 (2 requests, 1 send intents)", "att-2 (1 requests, 0 send intents)",
                                 "att-3 (1 requests, 0 send intents)",
                                 "key key-9 (1 requests, no attempt has it)")
    resends = invariants.resends_not_under_original_key_and_bytes(f)
    assert resends.examples == ("att-2 (body)", "att-4 (key, version)")
    assert resends.note == "1 resends of 1 attempts examined, with 4 creates of 3 attempts"
    assert resends.examined == 1
    alone = invariants.resends_not_under_original_key_and_bytes(facts([], [a1], creates=f.creates[:1]))
    assert alone.count == 0 and alone.examined == 0
    assert alone.note.startswith("no resend was examined (1 creates")


STRIPE_ACCOUNT = "stripe:acct_store:test"
ADYEN_ACCOUNT = "adyen:acct_store:test"


def test_a_stripe_resend_is_its_form_bytes_key_version_and_key_mode() -> None:
    form = ("amount=4999&currency=eur&payment_method=pm_card_visa&confirm=true"
            "&metadata[paycore_reference]=ord_a-a1")
    a1 = AttemptFacts("att-1", "ord_a", "Unknown", STRIPE_ACCOUNT, "ord_a-a1", "key-1", form,
                      "2026-10-28.endive")

    def sent(body: str = form, **headers: str) -> dict[str, Any]:
        return {"method": "POST", "path": "/v1/payment_intents", "body": body,
                "headers": {"idempotency-key": "key-1", "stripe-version": "2026-10-28.endive",
                            "authorization": "sk_test", **headers}}

    ok = facts([], [a1], provider="stripe", creates=[sent(), sent()])
    # Stripe's wire names no account (the key is the account): nothing to compare.
    assert invariants.resends_not_under_original_key_and_bytes(ok).count == 0
    bad = facts([], [a1], provider="stripe", creates=[
        sent(), sent(form.replace("4999", "5000")), sent(**{"stripe-version": "2025-01-01"}),
        sent(authorization="sk_live"), sent(**{"idempotency-key": "key-2"})])
    assert invariants.resends_not_under_original_key_and_bytes(bad).examples == (
        "att-1 (api key mode, body, key, version)",)
    assert invariants.provider_requests_without_send_intent(ok).examples == (
        "att-1 (2 requests, 0 send intents)",)


def test_an_adyen_resend_keeps_its_version_path_merchant_account_and_key_mode() -> None:
    def adyen_body(account: str = "acct_store", amount: int = 4999) -> str:
        return orjson.dumps({"amount": {"value": amount, "currency": "EUR"}, "reference": "ord_a-a1",
                             "merchantAccount": account, "returnUrl": "https://shop.example/"}).decode()

    a1 = AttemptFacts("att-1", "ord_a", "Unknown", ADYEN_ACCOUNT, "ord_a-a1", "key-1", adyen_body(), "v71")

    def sent(body: str, path: str = "/v71/payments", mode: str = "sk_test") -> dict[str, Any]:
        return {"method": "POST", "path": path, "body": body,
                "headers": {"idempotency-key": "key-1", "x-api-key": mode}}

    ok = facts([], [a1], provider="adyen", creates=[sent(adyen_body()), sent(adyen_body())])
    assert invariants.resends_not_under_original_key_and_bytes(ok).count == 0
    bad = facts([], [a1], provider="adyen", creates=[
        sent(adyen_body(), "/v70/payments"), sent(adyen_body(account="acct_other")),
        sent(adyen_body(), mode="sk_live")])
    assert invariants.resends_not_under_original_key_and_bytes(bad).examples == (
        "att-1 (account, api key mode, body, version)",)


def test_a_run_is_clean_only_when_it_settled_within_its_bound_and_made_every_kill_it_planned() -> None:
    record = RunRecord(ChaosOptions(settle_within_s=150))
    assert invariants.unsettled_when_the_bound_passed(record).examples == ("settling was never checked",)
    record.extra.update(settled=False, settle_remains=["3 webhook deliveries pending", "1 outbox rows"])
    unsettled = invariants.unsettled_when_the_bound_passed(record)
    assert (unsettled.count, unsettled.note) == (2, "after 150 s")
    record.extra.update(settled=True, settle_remains=[])
    record.phases["settle"] = 12.25
    assert invariants.unsettled_when_the_bound_passed(record).note == "settled after 12.2 s of 150 s"

    record.extra["kill_plan"] = [{"at": 0.1, "target": "webhooks", "outcome": "carried out"},
                                 {"at": 0.2, "target": "checkout-2", "outcome": "failed: ChaosStackError: x"},
                                 {"at": 0.3, "target": "postgres", "down_s": 3.0, "outcome": "under way"}]
    kills = invariants.planned_kills_not_carried_out(record)
    assert kills.examples == ("checkout-2@0.20 (failed: ChaosStackError: x)", "postgres@0.30 (under way)")
    assert kills.note == "1 of 3 planned kills carried out"


# -- against the real system -------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def demo_consumers(pool: asyncpg.Pool, ks: KafkaSettings) -> AsyncIterator[list[InboxConsumer]]:
    """The fulfillment and email demo consumers under their default groups, as the run starts them."""
    consumers = [demo_consumer(name, pool, ks, SystemClock(), **FAST_GROUP)
                 for name in ("fulfillment", "email")]
    stop = asyncio.Event()
    tasks = [asyncio.create_task(c.run(stop)) for c in consumers]
    try:
        yield consumers
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 15)


async def relay_once(hooks: WebhookStack, ks: KafkaSettings) -> int:
    async with kafka_publisher(ks) as pub:
        return (await relay(hooks.pool, pub, hooks.clock, ks).run_once()).published


def endpoints_of(hooks: WebhookStack, db_dsn: str, ks: KafkaSettings) -> Endpoints:
    return Endpoints(dsn=db_dsn, sandbox_url=hooks.sandbox.url,
                     checkout_urls=(str(hooks.shop.http.base_url),),
                     intake_url=hooks.intake_url, jwt_secret=JWT_SECRET, provider_account=TEST,
                     webhook_secret=sandbox_secrets()[TEST], kafka_bootstrap=ks.bootstrap,
                     effects_topic=ks.effects_topic)


async def a_clean_paid_order(hooks: WebhookStack, ks: KafkaSettings,
                             consumers: list[InboxConsumer]) -> tuple[str, str]:
    """An order paid through checkout, its webhooks delivered, its effects on the wire and applied."""
    await hooks.subscribe()
    order_id = await hooks.shop.create_order()
    paid = await hooks.shop.pay(order_id)
    assert paid.status_code == 200 and paid.json()["state"] == "Succeeded", paid.text
    assert await relay_once(hooks, ks) == 2  # order-confirmation, fulfillment-request
    await eventually(lambda: _handled(consumers, 2), what="both effects applied by both consumers")
    await eventually(hooks.deliveries_settled, what="the sandbox's webhooks delivered")
    return order_id, str(paid.json()["attempt_id"])


async def _handled(consumers: list[InboxConsumer], n: int, duplicates: int = 0) -> bool:
    return all(c.stats.handled >= n and c.stats.duplicates >= duplicates for c in consumers)


def counts(results: list[Any]) -> list[int]:
    assert len(results) == 18
    return [r.count for r in results]


def settled_run() -> RunRecord:
    """A run's record as it is when the invariants are checked: settled, its kills carried out."""
    record = RunRecord(ChaosOptions())
    record.extra.update(settled=True, settle_remains=[], kill_plan=[])
    return record


async def test_a_clean_paid_order_breaks_no_invariant_and_duplicates_on_the_wire_are_counted_apart(
        hooks: WebhookStack, pool: asyncpg.Pool, db_dsn: str, ks: KafkaSettings) -> None:
    endpoints = endpoints_of(hooks, db_dsn, ks)
    async with demo_consumers(pool, ks) as consumers:
        await a_clean_paid_order(hooks, ks, consumers)
        # At least once on the wire: both effects published again (as after a lost mark).
        await pool.execute("UPDATE outbox_messages SET dispatched_at = NULL")
        assert await relay_once(hooks, ks) == 2
        await eventually(lambda: _handled(consumers, 2, duplicates=2), what="the copies deduplicated")

    results = await invariants.check(endpoints, settled_run())

    assert counts(results) == [0] * 18, results
    fulfillment = results[5]
    assert fulfillment.note == ("on the wire: 2 fulfillment messages, 1 of them more than once "
                                "(1 extra copies), deduplicated by the consumer's inbox")
    assert results[1].note == "1 ledger payments" and results[7].note == "1 create requests, 1 send intents"


async def insert_attempt(pool: asyncpg.Pool, hooks: WebhookStack, order_id: str, number: int, state: str,
                         history: list[str], deadline: datetime | None = None) -> str:
    """An attempt written straight into the tables, past every rule checkout and recovery keep."""
    attempt_id = uuid.uuid4()
    sent = deadline - timedelta(hours=1) if deadline else None
    await pool.execute(
        "INSERT INTO payment_attempts (attempt_id, order_id, customer_id, attempt_number, provider_account, "
        "endpoint, api_version, client_reference, idempotency_key, request_body, amount_minor, currency, "
        "state, created_at, first_sent_at, escalation_deadline, next_check_at) "
        "VALUES ($1, $2, 'cus_alice', $3, $4, $5, '2026-11-01', $6, $7, '{}', 4999, 'EUR', $8, now(), "
        "$9, $10, now() + interval '1 day')",
        attempt_id, order_id, number, TEST, hooks.sandbox.url + "/v1/payments", f"{order_id}-a{number}",
        str(uuid.uuid4()), state, sent, deadline)
    before: str | None = None
    for after in history:
        await append(pool, attempt_id, "transition", {"from": before, "to": after})
        if after == "Started":
            await append(pool, attempt_id, "send_intent", {"first_send": True})
        before = after
    return str(attempt_id)


async def append(pool: asyncpg.Pool, attempt_id: uuid.UUID | str, kind: str, detail: dict[str, Any]) -> None:
    await pool.execute("INSERT INTO payment_attempt_events (attempt_id, occurred_at, kind, actor, detail) "
                       "VALUES ($1, now(), $2, 'test', $3)", uuid.UUID(str(attempt_id)), kind, detail)


async def create_directly(hooks: WebhookStack, reference: str) -> httpx.Response:
    """A create request straight to the sandbox, under a key no attempt has: nobody recorded an intent."""
    return await hooks.sandbox.http.post(
        "/v1/payments", content=body(reference),
        headers={"Authorization": "Bearer sk_test_acct_store_local", "Cardco-Account": "acct_store",
                 "Cardco-Version": "2026-11-01", "Idempotency-Key": f'"{uuid.uuid4()}"',
                 "Content-Type": "application/json"})


async def test_each_invariant_broken_on_purpose_is_counted(
        hooks: WebhookStack, pool: asyncpg.Pool, db_dsn: str, ks: KafkaSettings) -> None:
    endpoints = endpoints_of(hooks, db_dsn, ks)
    record = settled_run()
    async with demo_consumers(pool, ks) as consumers:
        order_id, attempt_id = await a_clean_paid_order(hooks, ks, consumers)
    assert counts(await invariants.check(endpoints, record)) == [0] * 18

    # 6: the consumer applied the fulfillment twice.
    await pool.execute("INSERT INTO demo_fulfillments (dedup_key, kind, attempt_id, received_at) "
                       "VALUES ($1, 'fulfillment-request', $2, now())",
                       fulfillment_key(attempt_id), attempt_id)
    # 7: a transition from a state the attempt was never in (its Started -> Unknown is missing).
    await append(pool, attempt_id, "transition", {"from": "Unknown", "to": "Succeeded"})
    # 5: Unknown an hour past its deadline, and nobody was told.
    stuck = await insert_attempt(pool, hooks, await hooks.shop.create_order(), 1, "Unknown",
                                 ["NotStarted", "Started", "Unknown"],
                                 deadline=datetime.now(UTC) - timedelta(hours=1))
    # 4: two live attempts on one order, past the index that forbids it.
    await pool.execute("DROP INDEX one_live_attempt_per_order")
    doubled = await hooks.shop.create_order()
    for n in (1, 2):
        await insert_attempt(pool, hooks, doubled, n, "NotStarted", ["NotStarted"])
    results = await invariants.check(endpoints, record)
    assert counts(results) == [0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], results
    assert results[3].examples == (doubled,) and results[4].examples == (stuck,)
    assert results[6].examples == (
        f"{attempt_id} (transition 4 starts at Unknown, the history was at Succeeded)",)
    assert results[5].examples == (f"{order_id} (Paid, applied 2x)",)

    # 2, 3, 8: a charge nobody asked for, under a reference no attempt has.
    assert (await create_directly(hooks, "ord_nobody-a1")).status_code == 201
    await eventually(hooks.deliveries_settled, what="its webhook delivered (and escalated unmatched)")
    assert counts(await invariants.check(endpoints, record)) == [0, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0,
                                                                 0, 0, 0, 0, 0]

    # 1, 3, 8, 9: the paid attempt's reference charged again under another key (a second payment).
    # Its webhook names the reference with another payment id: intake escalates the attempt
    # (provider-id-conflict), so that payment is one a person has, not one more unlinked payment.
    assert (await create_directly(hooks, f"{order_id}-a1")).status_code == 201
    await eventually(hooks.deliveries_settled, what="its webhook delivered (and escalated)")
    # 10, 11: from the run's record.
    record.answers.append(ClientAnswer(3.0, 0, PAY, 500, "internal", order_id=order_id))
    record.exited_on_own.append(("recovery-1", 1))
    # 12, 13: a run that did not settle, and a kill it planned but never made.
    record.extra.update(settled=False, settle_remains=["2 outbox rows not dispatched"])
    record.extra["kill_plan"] = [{"at": 0.5, "target": "recovery-2", "outcome": "carried out"},
                                 {"at": 0.8, "target": "recovery-1",
                                  "outcome": "not carried out: the load ended at 60%"}]
    results = await invariants.check(endpoints, record)
    assert counts(results) == [1, 1, 2, 1, 1, 1, 1, 2, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0], results
    assert results[11].examples == ("2 outbox rows not dispatched",)
    assert results[12].examples == ("recovery-1@0.80 (not carried out: the load ended at 60%)",)
    assert results[12].note == "1 of 2 planned kills carried out"

    assert results[0].examples == (order_id,)
    assert "1 unrecorded by an attempt with an open escalation (allowed" in results[1].note
    assert results[8].examples == (f"{attempt_id} (body, key)",)


async def test_settle_waits_for_the_system_and_says_what_remains_when_it_does_not_settle(
        hooks: WebhookStack, pool: asyncpg.Pool, db_dsn: str, ks: KafkaSettings) -> None:
    endpoints = endpoints_of(hooks, db_dsn, ks)
    record = RunRecord(ChaosOptions())
    async with demo_consumers(pool, ks) as consumers:
        await a_clean_paid_order(hooks, ks, consumers)
        await invariants.settle(endpoints, ChaosOptions(settle_within_s=20), record)
        assert record.incidents[-1].kind == "settled"
        assert record.incidents[-1].detail.startswith("settled after"), record.incidents[-1]

        # Unknown past its deadline with no escalation: recovery has not done its part.
        stuck = await insert_attempt(pool, hooks, await hooks.shop.create_order(), 1, "Unknown",
                                     ["NotStarted", "Started", "Unknown"],
                                     deadline=datetime.now(UTC) - timedelta(minutes=1))
        await invariants.settle(endpoints, ChaosOptions(settle_within_s=1.5), record)
        assert record.incidents[-1].detail == (
            f"not settled: 1 live attempts neither resolved nor escalated (1 Unknown; e.g. {stuck})")
        assert record.extra["settled"] is False
        assert record.extra["settle_remains"] == [
            f"1 live attempts neither resolved nor escalated (1 Unknown; e.g. {stuck})"]

        # Escalated past its deadline, and a 3-D Secure step nobody completes: both may stay live.
        await pool.execute("INSERT INTO payment_escalations (escalation_key, attempt_id, reason, raised_at) "
                           "VALUES ($1, $2, 'deadline', now())",
                           f"attempt:{stuck}:deadline", uuid.UUID(stuck))
        waiting = await insert_attempt(pool, hooks, await hooks.shop.create_order(), 1, "Started",
                                       ["NotStarted", "Started"],
                                       deadline=datetime.now(UTC) + timedelta(hours=1))
        await pool.execute("UPDATE payment_attempts SET next_action = '{\"type\": \"redirect_to_url\"}', "
                           "next_action_expires_at = now() + interval '15 minutes' WHERE attempt_id = $1",
                           uuid.UUID(waiting))
        await invariants.settle(endpoints, ChaosOptions(settle_within_s=20), record)
        assert record.incidents[-1].detail.startswith("settled after"), record.incidents[-1]
        assert record.extra["settled"] is True


async def test_the_sampler_records_the_databases_state_and_outlives_a_database_it_cannot_reach(
        hooks: WebhookStack, pool: asyncpg.Pool, db_dsn: str, free_tcp_port: int) -> None:
    paid = await hooks.shop.create_order()
    await pool.execute("UPDATE orders SET status = 'Paid' WHERE order_id = $1", paid)
    await insert_attempt(pool, hooks, await hooks.shop.create_order(), 1, "Unknown",
                         ["NotStarted", "Started", "Unknown"], deadline=datetime.now(UTC))
    await pool.execute("INSERT INTO payment_escalations (escalation_key, reason, raised_at) "
                       "VALUES ('k', 'mismatch', now())")

    for dsn, up in ((db_dsn, True), (f"postgresql://postgres@127.0.0.1:{free_tcp_port}/nothing", False)):
        record = RunRecord(ChaosOptions())
        stop = asyncio.Event()
        sampling = asyncio.create_task(invariants.sample_loop(
            Endpoints(dsn, "", (), "", "", TEST, ""), record, stop))

        async def sampled(record: RunRecord = record) -> bool:
            return len(record.samples) >= 1

        await eventually(sampled, what="a sample")
        stop.set()
        await asyncio.wait_for(sampling, 10)  # ends once asked to, and never raised
        sample = record.samples[0]
        expected = (2, 1, 0, 1, 1) if up else (0, 0, 0, 0, 0)
        assert (sample.orders_created, sample.orders_paid, sample.attempts_started, sample.attempts_unknown,
                sample.open_escalations, sample.db_up) == (*expected, up)
