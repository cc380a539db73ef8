"""Refund notifications resolve refunds through the intake (issue 29), end to end.

The sandbox delivers Cardco's ``refund.*`` webhooks over HTTP to the intake service, on real
PostgreSQL: a pending refund settles by webhook; a refund that fails frees its amount; a
succeeded refund that comes back (a closed card) is Returned, its amount refundable again and a
person told; redeliveries and reordered events change nothing twice (its failure reported
before its success leaves it Failed, and a person told); a refund of ours never made by paycore
is kept and escalated, never dropped.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from paycore.domain import OperationKind, OperationRefusal, OperationState
from paycore.operations import Operation, Refused, get_operation
from tests.support.webhooks import WebhookStack

from .support import effects_of, eventually, order_status, paid_order, sender

REFUND = OperationKind.REFUND
S = OperationState


async def refund(hooks: WebhookStack, amount: int, paid: int = 5000) -> Operation:
    _, attempt_id = await paid_order(hooks, paid)
    async with sender(hooks) as s:
        op = await s.request(attempt_id, REFUND, amount, requested_by="test")
    assert isinstance(op, Operation), op
    return op


async def reaches(hooks: WebhookStack, op: Operation, state: OperationState) -> Operation:
    async def there() -> Operation | None:
        current = await get_operation(hooks.pool, op.operation_id)
        return current if current.state is state else None

    reached = await eventually(there, what=f"operation {state}", within_s=15)
    await eventually(hooks.deliveries_settled, what="the sandbox to finish delivering")
    return reached


async def test_a_pending_refund_is_settled_by_its_webhook(hooks: WebhookStack) -> None:
    await hooks.subscribe()
    op = await refund(hooks, 1093)  # 93: pending until settled
    assert op.state is S.STARTED
    r = await hooks.sandbox.http.post(f"/_sandbox/refunds/{op.provider_operation_id}/settle",
                                      json={"result": "succeeded"})
    assert r.status_code == 200, r.text
    await reaches(hooks, op, S.SUCCEEDED)
    assert (await effects_of(hooks.pool, op.attempt_id)).count("refund-succeeded") == 1
    noted = await hooks.pool.fetch("SELECT operation_id FROM payment_attempt_events "
                                   "WHERE kind = 'notification' AND detail->>'event_type' LIKE 'refund.%'")
    assert noted and {r["operation_id"] for r in noted} == {op.operation_id}


async def test_a_refund_that_fails_frees_its_amount(hooks: WebhookStack) -> None:
    await hooks.subscribe()
    op = await refund(hooks, 1092)  # 92: pending, then failed
    failed = await reaches(hooks, op, S.FAILED)
    assert failed.outcome_reason is not None and failed.outcome_reason.startswith("failed")
    assert "refund-failed" in await effects_of(hooks.pool, op.attempt_id)
    async with sender(hooks) as s:
        again = await s.request(op.attempt_id, REFUND, 5000, requested_by="test")
    assert isinstance(again, Operation) and again.state is S.SUCCEEDED


async def test_a_succeeded_refund_that_comes_back_is_returned_and_a_person_told(hooks: WebhookStack) -> None:
    await hooks.subscribe()
    op = await refund(hooks, 5000)
    assert op.state is S.SUCCEEDED
    order_id = await hooks.pool.fetchval("SELECT order_id FROM payment_attempts WHERE attempt_id = $1",
                                         op.attempt_id)
    assert await order_status(hooks.pool, order_id) == "Refunded"
    r = await hooks.sandbox.http.post(f"/_sandbox/refunds/{op.provider_operation_id}/fail", json={})
    assert r.status_code == 200, r.text
    await reaches(hooks, op, S.RETURNED)
    assert await order_status(hooks.pool, order_id) == "Paid"  # the customer did not get it
    effects = await effects_of(hooks.pool, op.attempt_id)
    assert [e for e in effects if e.startswith("refund-")] == ["refund-succeeded", "refund-returned"]
    episodes = await hooks.pool.fetch("SELECT escalation_key FROM payment_escalations "
                                      "WHERE resolved_at IS NULL")
    assert [e["escalation_key"] for e in episodes] == [f"operation:{op.operation_id}:refund-returned"]
    async with sender(hooks) as s:  # refundable again
        again = await s.request(op.attempt_id, REFUND, 5000, requested_by="test")
    assert isinstance(again, Operation) and again.state is S.SUCCEEDED


async def refund_events(hooks: WebhookStack, op: Operation) -> list[dict[str, Any]]:
    r = await hooks.sandbox.http.get("/_sandbox/events")
    return [e for e in r.json()["data"]
            if e["type"].startswith("refund.") and e["data"]["object"]["id"] == op.provider_operation_id]


async def refund_events_in_order(hooks: WebhookStack, op: Operation, count: int) -> list[dict[str, Any]]:
    """The refund's ``count`` events once the sandbox has made them all, by their sequence."""
    async def all_made() -> list[dict[str, Any]] | None:
        events = await refund_events(hooks, op)
        return events if len(events) == count else None

    made = await eventually(all_made, what=f"the refund's {count} events")
    return sorted(made, key=lambda e: e["sequence"])


async def deliver_each(hooks: WebhookStack, events: tuple[dict[str, Any], ...]) -> None:
    """Each event to the intake, in the order given, as the provider (re)delivers it."""
    for event in events:
        r = await hooks.deliver(orjson.dumps(event), msg_id=event["id"])
        assert r.status_code == 200, r.text


async def test_redelivered_and_reordered_refund_events_change_it_once(hooks: WebhookStack) -> None:
    # Not subscribed: the test delivers the sandbox's own events itself, in the order it likes.
    op = await refund(hooks, 1092)  # pending, then failed
    pending, failed = await refund_events_in_order(hooks, op, 2)
    assert (pending["type"], failed["type"]) == ("refund.pending", "refund.failed")
    # Failed first, twice, then the stale pending.
    await deliver_each(hooks, (failed, failed, pending, failed))
    current = await get_operation(hooks.pool, op.operation_id)
    assert current.state is S.FAILED
    moves = await hooks.pool.fetchval(
        "SELECT count(*) FROM payment_attempt_events WHERE operation_id = $1 AND kind = 'transition' "
        "AND detail->>'to' = 'Failed'", op.operation_id)
    assert moves == 1
    assert (await effects_of(hooks.pool, op.attempt_id)).count("refund-failed") == 1


async def test_a_refund_reported_failed_before_its_success_stays_failed_and_a_person_is_told(
        hooks: WebhookStack) -> None:
    """A refund that succeeded and then came back is sent as succeeded, then failed (Returned).
    Delivered the other way round, the failure ends it first: Failed is final, so the stale
    success is a contradiction a person is told of; the refund stays Failed, its amount
    refundable again (the customer did not get the money), its effects queued once."""
    # Not subscribed: the test delivers the sandbox's own events itself, in the order it likes.
    op = await refund(hooks, 1093)  # pending until settled
    assert op.state is S.STARTED
    for change in ("settle", "fail"):  # it succeeds, then the network sends it back
        r = await hooks.sandbox.http.post(f"/_sandbox/refunds/{op.provider_operation_id}/{change}",
                                          json={"result": "succeeded"} if change == "settle" else {})
        assert r.status_code == 200, r.text
    events = await refund_events_in_order(hooks, op, 3)
    pending, succeeded, failed = events
    assert [e["type"] for e in events] == ["refund.pending", "refund.succeeded", "refund.failed"]
    # The failure first; the success redelivered.
    await deliver_each(hooks, (failed, succeeded, pending, succeeded))

    current = await get_operation(hooks.pool, op.operation_id)
    assert current.state is S.FAILED
    moves = await hooks.pool.fetch(
        "SELECT detail->>'to' AS target FROM payment_attempt_events WHERE operation_id = $1 "
        "AND kind = 'transition' ORDER BY event_id", op.operation_id)
    assert [m["target"] for m in moves] == ["NotStarted", "Started", "Failed"]  # never Succeeded nor Returned
    effects = await effects_of(hooks.pool, op.attempt_id)
    assert [e for e in effects if e.startswith("refund-")] == ["refund-failed"]
    order_id = await hooks.pool.fetchval("SELECT order_id FROM payment_attempts WHERE attempt_id = $1",
                                         op.attempt_id)
    assert await order_status(hooks.pool, order_id) == "Paid"
    episodes = await hooks.pool.fetch("SELECT reason, escalation_key, detail FROM payment_escalations "
                                      "WHERE resolved_at IS NULL")
    assert [(e["reason"], e["escalation_key"]) for e in episodes] == [
        ("contradiction", f"operation:{op.operation_id}:contradiction")]  # once, for both deliveries
    assert (episodes[0]["detail"]["from"], episodes[0]["detail"]["to"]) == ("Failed", "Failed")
    # The provider agrees nothing stays refunded, and the whole payment is refundable again.
    [payment] = [p for p in await hooks.sandbox.ledger() if p["id"] == succeeded["data"]["object"]["payment"]]
    assert payment["amount_refunded"] == 0
    async with sender(hooks) as s:
        assert await s.request(op.attempt_id, REFUND, 5001, requested_by="test") == Refused(
            OperationRefusal.EXCEEDS_REFUNDABLE)
        again = await s.request(op.attempt_id, REFUND, 5000, requested_by="test")
    assert isinstance(again, Operation) and again.state is S.SUCCEEDED
    assert await order_status(hooks.pool, order_id) == "Refunded"


async def test_a_refund_made_elsewhere_is_announced_as_before(hooks: WebhookStack) -> None:
    # Someone refunds in the provider's dashboard: the payment reports it refunded, and no refund
    # of paycore's holds that amount, so the store is asked to act (refund-request), as before.
    await hooks.subscribe()
    _, attempt_id = await paid_order(hooks, 5000)
    payment_id = await hooks.pool.fetchval("SELECT provider_payment_id FROM payment_attempts "
                                           "WHERE attempt_id = $1", attempt_id)
    r = await hooks.sandbox.http.post(f"/_sandbox/payments/{payment_id}/refund", json={})
    assert r.status_code == 200, r.text

    async def announced() -> bool:
        return "refund-request" in await effects_of(hooks.pool, attempt_id)

    await eventually(announced, what="a refund-request", within_s=15)


async def test_a_refund_event_of_nothing_of_ours_is_kept_and_escalated(hooks: WebhookStack) -> None:
    op = await refund(hooks, 5000)
    [event] = await eventually(lambda: refund_events(hooks, op), what="the refund's event")
    stranger = {**event, "id": "evt_" + uuid.uuid4().hex}
    stranger["data"] = {"object": {**event["data"]["object"], "id": "re_elsewhere",
                                   "reference": "dashboard-1"}}
    r = await hooks.deliver(orjson.dumps(stranger), msg_id=stranger["id"])
    assert r.status_code == 200 and r.json()["result"] == "unmatched", r.text
    rows = await hooks.pool.fetch("SELECT reason, detail FROM payment_escalations")
    assert [(e["reason"], e["detail"]["provider_operation_id"]) for e in rows] == [
        ("unmatched-operation", "re_elsewhere")]
    kept = await hooks.pool.fetchval("SELECT count(*) FROM payment_attempt_events "
                                     "WHERE kind = 'notification' AND notification_key = $1", stranger["id"])
    assert kept == 1


async def test_a_refund_event_about_another_amount_or_payment_resolves_nothing(hooks: WebhookStack) -> None:
    op = await refund(hooks, 1093)  # pending until settled
    [event] = await eventually(lambda: refund_events(hooks, op), what="the refund's pending event")
    obj = event["data"]["object"]
    lies = [({"amount": obj["amount"] + 1}, "mismatch"), ({"payment": "pay_someone_else"}, "conflict")]
    for change, result in lies:
        forged = {**event, "id": "evt_" + uuid.uuid4().hex, "type": "refund.succeeded",
                  "data": {"object": {**obj, "status": "succeeded", **change}}}
        r = await hooks.deliver(orjson.dumps(forged), msg_id=forged["id"])
        assert r.status_code == 200 and r.json()["result"] == result, r.text
    assert (await get_operation(hooks.pool, op.operation_id)).state is S.STARTED
    reasons = await hooks.pool.fetch("SELECT reason FROM payment_escalations ORDER BY escalation_id")
    assert [r["reason"] for r in reasons] == ["mismatch", "provider-id-conflict"]
    assert "refund-succeeded" not in await effects_of(hooks.pool, op.attempt_id)


async def test_an_event_whose_id_and_reference_name_two_refunds_is_applied_to_neither(
        hooks: WebhookStack) -> None:
    first = await refund(hooks, 1093)
    async with sender(hooks) as s:
        second = await s.request(first.attempt_id, REFUND, 1093, requested_by="test")
    assert isinstance(second, Operation)
    [event] = await eventually(lambda: refund_events(hooks, first), what="the first refund's event")
    crossed = {**event, "id": "evt_" + uuid.uuid4().hex, "type": "refund.succeeded",
               "data": {"object": {**event["data"]["object"], "status": "succeeded",
                                   "reference": second.client_reference}}}
    r = await hooks.deliver(orjson.dumps(crossed), msg_id=crossed["id"])
    assert r.status_code == 200 and r.json()["result"] == "conflict", r.text
    for op in (first, second):
        assert (await get_operation(hooks.pool, op.operation_id)).state is S.STARTED
    # One episode naming both (not a conflict about one of them only).
    [episode] = await hooks.pool.fetch("SELECT reason, detail FROM payment_escalations")
    assert episode["reason"] == "identity-conflict"
    assert {episode["detail"]["by_reference"], episode["detail"]["by_provider_id"]} == {
        str(first.operation_id), str(second.operation_id)}
