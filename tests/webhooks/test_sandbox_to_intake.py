"""End to end: the sandbox delivers its webhooks over HTTP to the intake.

Delivery is at least once and unordered; the sandbox's faults add duplicates,
drop first deliveries and remove stable event ids. The attempt still changes
once and its effects are queued once.
"""

from __future__ import annotations

import asyncio

from tests.support.stack import eventually
from tests.support.webhooks import WebhookStack


async def attempt_row(hooks: WebhookStack, order: str) -> dict[str, object]:
    row = await hooks.pool.fetchrow("SELECT * FROM payment_attempts WHERE order_id = $1", order)
    return dict(row) if row else {}


async def wait_for_state(hooks: WebhookStack, order: str, state: str) -> None:
    async def reached() -> bool:
        return (await attempt_row(hooks, order)).get("state") == state

    await eventually(reached, what=f"attempt {state}")
    await eventually(hooks.deliveries_settled, what="the sandbox to finish delivering")


async def test_an_async_payment_is_resolved_by_the_providers_webhooks(hooks: WebhookStack) -> None:
    await hooks.subscribe()
    order = await hooks.shop.create_order()
    r = await hooks.shop.pay(order, "tok_async")
    assert r.status_code == 202 and r.json()["state"] == "Started"
    await wait_for_state(hooks, order, "Succeeded")
    status = await hooks.shop.status(order)
    assert status.status_code == 200 and status.json()["state"] == "Succeeded"
    keys = await hooks.pool.fetch("SELECT dedup_key FROM outbox_messages WHERE ordering_key IS NOT NULL")
    assert len(keys) == 2


async def test_a_lost_checkout_response_is_resolved_by_the_webhook(hooks: WebhookStack) -> None:
    await hooks.subscribe()
    await hooks.sandbox.fault("lose_response", times=1)
    order = await hooks.shop.create_order()
    pending = asyncio.create_task(hooks.shop.pay(order))

    async def charged() -> bool:
        return bool(await hooks.sandbox.ledger())

    await eventually(charged, what="the provider to charge")
    await wait_for_state(hooks, order, "Succeeded")  # the webhook arrives while checkout still waits
    hooks.clock.advance(hooks.settings.budgets.call_s)
    r = await pending
    assert r.json()["state"] == "Succeeded"


async def test_duplicated_dropped_and_unstable_id_deliveries_change_the_attempt_once(
    hooks: WebhookStack,
) -> None:
    await hooks.subscribe()
    r = await hooks.sandbox.http.post("/_sandbox/faults", json={"rules": [
        {"fault": "webhook_duplicate", "match": {"any": True}, "times": 2},
        {"fault": "webhook_drop_first", "match": {"any": True}},
        {"fault": "webhook_unstable_ids", "match": {"any": True}},
    ]})
    r.raise_for_status()
    order = await hooks.shop.create_order()
    assert (await hooks.shop.pay(order)).json()["state"] == "Succeeded"
    await eventually(hooks.deliveries_settled, what="every delivery and retry")
    row = await attempt_row(hooks, order)
    notifications = await hooks.pool.fetch(
        "SELECT notification_key FROM payment_attempt_events WHERE kind = 'notification'")
    # Three copies of one logical event, with no stable id: one synthesized key, one row.
    assert len(notifications) == 1 and notifications[0]["notification_key"].startswith("v1:")
    transitions = await hooks.count(
        "SELECT count(*) FROM payment_attempt_events WHERE attempt_id = $1 AND kind = 'transition'"
        " AND detail ->> 'to' = 'Succeeded'", row["attempt_id"])
    assert transitions == 1
    deliveries = (await hooks.sandbox.http.get("/_sandbox/webhooks/deliveries")).json()["data"]
    assert len({d["webhook_id"] for d in deliveries}) == len(deliveries) >= 3
