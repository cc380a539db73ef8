"""A database outage as a storefront and a provider see it (issue 8, section 4).

Checkout and the webhook intake reach the real PostgreSQL through a TCP proxy
(``tests/support/pgproxy.py``) that the test cuts: open connections are reset
and new ones refused, as when PostgreSQL is killed. Every route must then
answer 503 problem+json with Retry-After, ``/readyz`` must say not ready, the
log must say so once per service rather than a traceback per request, and
everything must work again once the database is back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import httpx
import pytest

from paycore.db import create_pool
from tests.support.pgproxy import CuttableProxy, proxy_to
from tests.support.stack import eventually
from tests.support.webhooks import WebhookStack, event, payment_object, running_webhook_stack

UNAVAILABLE = "https://paycore.dev/problems/database-unavailable"


@dataclass
class Outage:
    proxy: CuttableProxy
    hooks: WebhookStack
    direct: asyncpg.Pool  # the test's own view of the database, never through the proxy


@pytest.fixture
async def outage(db_dsn: str, pool: asyncpg.Pool) -> AsyncIterator[Outage]:
    async with proxy_to(db_dsn) as proxy:
        proxied_dsn = proxy.dsn(db_dsn)
        proxied = await create_pool(proxied_dsn, min_size=1, max_size=10)
        try:
            async for hooks in running_webhook_stack(proxied, proxied_dsn):
                try:
                    yield Outage(proxy, hooks, pool)
                finally:
                    await proxy.restore_if_cut()
        finally:
            await proxy.restore_if_cut()
            await proxied.close()


def assert_unavailable(r: httpx.Response) -> None:
    assert r.status_code == 503, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["type"] == UNAVAILABLE, r.text
    assert int(r.headers["retry-after"]) > 0


def outage_lines(records: list[logging.LogRecord], logger: str) -> list[logging.LogRecord]:
    return [r for r in records if r.name == logger and r.levelno >= logging.WARNING]


async def test_a_database_outage_is_503_with_retry_after_on_every_route_logged_once_and_then_over(
    outage: Outage, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="paycore")
    uvicorn_errors = logging.getLogger("uvicorn.error")  # it does not propagate to the root
    uvicorn_errors.addHandler(caplog.handler)
    try:
        await run_the_outage(outage, caplog)
    finally:
        uvicorn_errors.removeHandler(caplog.handler)


async def run_the_outage(outage: Outage, caplog: pytest.LogCaptureFixture) -> None:
    hooks, shop = outage.hooks, outage.hooks.shop
    confirming = await shop.create_order()  # paid asynchronously: the webhook will settle it
    paying = await shop.pay(confirming, "tok_async")
    assert paying.status_code == 202, paying.text
    payment_id = paying.json()["provider_payment_id"]
    attempt_id = paying.json()["attempt_id"]
    unpaid = await shop.create_order()
    settle = event(payment_object(payment_id=payment_id, reference=None, status="succeeded"))
    caplog.clear()

    await outage.proxy.cut()

    for _ in range(5):
        assert_unavailable(await shop.http.post("/orders", json={"amount_minor": 4999, "currency": "EUR"},
                                                headers=shop.auth))
    assert_unavailable(await shop.status(confirming))
    assert_unavailable(await shop.http.get(f"/orders/{confirming}", headers=shop.auth))
    pay = await shop.pay(unpaid)
    assert_unavailable(pay)  # never payment-not-started: that one promises nothing was sent
    assert_unavailable(await shop.pay(unpaid, headers={"Idempotency-Key": "during-the-outage"}))
    assert_unavailable(await shop.cancel(unpaid))
    for _ in range(3):
        assert_unavailable(await hooks.deliver(settle))  # never acknowledged: Cardco redelivers
    assert_unavailable(await shop.http.get("/readyz"))
    assert_unavailable(await hooks.intake.get("/readyz"))

    records = list(caplog.records)
    assert len(outage_lines(records, "paycore.checkout")) == 1, [r.getMessage() for r in records]
    assert len(outage_lines(records, "paycore.webhooks")) == 1, [r.getMessage() for r in records]
    assert [r.getMessage() for r in records if r.exc_info or r.levelno >= logging.ERROR] == []

    await outage.proxy.restore()

    async def ready() -> bool:
        return ((await shop.http.get("/readyz")).status_code == 200
                and (await hooks.intake.get("/readyz")).status_code == 200)

    await eventually(ready, what="both services ready again")

    async def back_in_the_log() -> bool:
        infos = {r.name for r in caplog.records if r.levelno == logging.INFO and "again" in r.getMessage()}
        return {"paycore.checkout", "paycore.webhooks"} <= infos

    await eventually(back_in_the_log, what="one 'database answers again' line per service")

    assert (await shop.http.post("/orders", json={"amount_minor": 4999, "currency": "EUR"},
                                 headers=shop.auth)).status_code == 201
    paid = await shop.pay(unpaid)
    assert paid.status_code == 200 and paid.json()["state"] == "Succeeded"
    keyed = await shop.pay(unpaid, headers={"Idempotency-Key": "during-the-outage"})
    assert keyed.status_code == 200 and keyed.json()["state"] == "Succeeded"  # the key was never held
    redelivered = await hooks.deliver(settle)
    assert redelivered.status_code == 200 and redelivered.json() == {"result": "applied"}
    state = await outage.direct.fetchval("SELECT state FROM payment_attempts WHERE attempt_id = $1",
                                         attempt_id)
    assert state == "Succeeded"
    assert await outage.direct.fetchval("SELECT count(*) FROM orders") == 3
    assert len(await hooks.sandbox.ledger()) == 2  # one payment per paid order, nothing doubled


async def test_requests_in_flight_when_the_database_goes_away_are_503_and_nothing_is_acknowledged(
    outage: Outage,
) -> None:
    hooks, shop = outage.hooks, outage.hooks.shop
    confirming = await shop.create_order()
    paying = await shop.pay(confirming, "tok_async")
    payment_id, attempt_id = paying.json()["provider_payment_id"], paying.json()["attempt_id"]
    unpaid = await shop.create_order()
    settle = event(payment_object(payment_id=payment_id, reference=None, status="succeeded"))

    # Both requests wait on order rows the test holds, with their statements in flight.
    async with outage.direct.acquire() as holder:
        tx = holder.transaction()
        await tx.start()
        await holder.execute("SELECT 1 FROM orders WHERE order_id = ANY($1) FOR UPDATE", [confirming, unpaid])
        delivery = asyncio.create_task(hooks.deliver(settle))
        pay = asyncio.create_task(shop.pay(unpaid))

        async def two_waiting() -> bool:
            return await outage.direct.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND datname = current_database()") == 2

        await eventually(two_waiting, what="the delivery and the payment waiting on the order locks")
        await outage.proxy.cut()
        assert_unavailable(await delivery)
        assert_unavailable(await pay)
        await tx.rollback()

    assert await outage.direct.fetchval(
        "SELECT count(*) FROM payment_attempt_events WHERE kind = 'notification'") == 0
    await outage.proxy.restore()

    async def applied() -> bool:
        r = await hooks.deliver(settle)
        return r.status_code == 200 and r.json() == {"result": "applied"}

    await eventually(applied, what="the redelivery handled normally")
    assert await outage.direct.fetchval("SELECT state FROM payment_attempts WHERE attempt_id = $1",
                                        attempt_id) == "Succeeded"
    paid = await shop.pay(unpaid)
    assert paid.status_code == 200 and paid.json()["state"] == "Succeeded"
    assert len(await hooks.sandbox.ledger()) == 2
