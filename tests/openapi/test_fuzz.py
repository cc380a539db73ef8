"""schemathesis against the live services: every generated request answers without a 5xx and as
the service's own ``/openapi.json`` says (status, content type, headers, body schema).

Checkout runs on real PostgreSQL and pays against the real sandbox, with a customer's JWT (so the
requests reach the handlers, on generated order ids and on one the test created) and without one.
The intake gets deliveries signed as each provider signs them (so they pass verification and
are recorded) and unsigned ones. Bounded: a few derandomized examples per operation.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import httpx
import pytest
import schemathesis

from harness.servers import serve_asgi
from paycore.clock import FakeClock
from paycore.notifications import event_detail, record_notification
from paycore.operators import add_operator
from paycore.providers.registry import notification_format
from paycore.providers.stripe import signature_header
from paycore.webhook_signatures import signed_headers
from paycore_console.app import create_app as create_console_app
from paycore_console.settings import ConsoleSettings
from paycore_webhooks.app import create_app as create_webhooks_app
from tests.console.conftest import PASSWORD, console_env, hidden
from tests.matrix.helpers import seed_account
from tests.openapi.apps import STRIPE_SECRET, webhooks_settings
from tests.openapi.fuzz import fuzz
from tests.operators.test_dead_ends import dead_end
from tests.operators.test_inspection import queued
from tests.support.stack import Stack, token_for
from tests.support.webhooks import TEST, event, payment_object, sandbox_secrets
from tests.unit.test_adyen_notifications import basic

EXAMPLES = 5  # per operation and run: the whole module stays well under a minute


async def test_checkout_answers_as_documented(stack: Stack) -> None:
    customer = {"Authorization": f"Bearer {token_for('cus_fuzz')}"}
    shop = stack.shop.as_customer("cus_fuzz")
    to_pay, to_cancel = await shop.create_order(), await shop.create_order()
    url = stack.checkout_url
    found = await asyncio.to_thread(fuzz, url, max_examples=EXAMPLES, headers=customer)
    on_order = await asyncio.to_thread(fuzz, url, max_examples=EXAMPLES, headers=customer,
                                       path_parameters={"order_id": to_pay},
                                       only=lambda p: "{order_id}" in p and not p.endswith("/cancel"))
    on_order += await asyncio.to_thread(fuzz, url, max_examples=EXAMPLES, headers=customer,
                                        path_parameters={"order_id": to_cancel},
                                        only=lambda path: path.endswith("/cancel"))
    anonymous = await asyncio.to_thread(fuzz, url, max_examples=2, only=lambda p: p.startswith("/orders"))
    found += await asyncio.to_thread(fuzz, url, max_examples=EXAMPLES, headers=customer, negative=True,
                                     path_parameters={"order_id": to_cancel})
    found += on_order
    found += anonymous
    assert found.failures == [], found.report()
    # The fuzzer got past authentication to the handlers, and paid the order it was given.
    assert 201 in found.statuses("POST /orders")
    assert 200 in on_order.statuses("POST /orders/{order_id}/payment")
    assert 200 in on_order.statuses("GET /orders/{order_id}/payment/status")
    assert {s for (_, s) in anonymous.answers} == {401}


@pytest.fixture
async def intake(pool: asyncpg.Pool, db_dsn: str) -> AsyncIterator[str]:
    """The intake for Cardco (the sandbox's accounts), Stripe and Adyen, on a real database."""
    settings = webhooks_settings("http://127.0.0.1:9", db_dsn)
    app = create_webhooks_app(settings, clock=FakeClock(current=datetime.now(UTC)), pool=pool)
    async with serve_asgi(app) as url:
        yield url


def signed_delivery(case: schemathesis.Case, base_url: str) -> httpx.Response:
    """POST the generated body signed as its provider signs, so it passes verification."""
    body = json.dumps(case.body).encode()  # the standard library: any integer, lone surrogates escaped
    now = int(time.time())
    provider = case.path.rsplit("/", 1)[-1]
    headers = {"content-type": "application/json"}
    if provider == "cardco":
        headers.update(signed_headers(sandbox_secrets()[TEST], f"msg_{uuid.uuid4().hex}", now, body))
    elif provider == "stripe":
        headers["stripe-signature"] = signature_header(STRIPE_SECRET, now, body)
    else:
        headers.update(basic())  # Adyen: the Basic credentials; each item's HMAC is in the body
    return httpx.post(f"{base_url}{case.formatted_path}", content=body, headers=headers, timeout=30)


async def test_the_webhook_intake_answers_as_documented(intake: str) -> None:
    found = await asyncio.to_thread(fuzz, intake, max_examples=EXAMPLES)
    found += await asyncio.to_thread(fuzz, intake, max_examples=EXAMPLES, negative=True)
    signed = await asyncio.to_thread(fuzz, intake, max_examples=EXAMPLES, send=signed_delivery,
                                     only=lambda path: path.startswith("/webhooks/"))
    found += signed
    assert found.failures == [], found.report()
    # Signed deliveries passed verification and were recorded (as unparseable: not provider events).
    assert 200 in signed.statuses("POST /webhooks/cardco")
    assert 200 in signed.statuses("POST /webhooks/stripe")



async def console_rows(pool: asyncpg.Pool, clock: FakeClock) -> dict[str, Any]:
    """Something for every listing and detail to answer with (so their item schemas are checked too):
    an escalated Unknown attempt, a stored unmatched notification of it, and a dead letter."""
    account = await seed_account(pool, clock)
    attempt = await dead_end(pool, clock, account)
    escalation_id = await pool.fetchval("SELECT escalation_id FROM payment_escalations WHERE attempt_id = $1",
                                        attempt.attempt_id)
    n = notification_format(account.provider_account).parse_notification(json.dumps(event(payment_object(
        payment_id="pay_fuzz", reference="ORD-typo-fuzz", amount=attempt.amount_minor))).encode())
    async with pool.acquire() as conn, conn.transaction():
        stored = await record_notification(conn, provider_account=account.provider_account,
                                           key="evt_fuzz", attempt_id=None,
                                           detail=event_detail(n, "evt_fuzz"), now=clock.now())
    message_id = await queued(pool, clock, "order-confirmation", dead=True, attempt_id=attempt.attempt_id)
    return {"escalation_id": escalation_id, "attempt_id": str(attempt.attempt_id),
            "event_id": stored.event_id, "message_id": message_id}


async def test_the_console_api_answers_as_documented(pool: asyncpg.Pool, db_dsn: str,
                                                     clock: FakeClock) -> None:
    """Signed in as an operator (the session cookie and its CSRF token), and not signed in; on ids
    that exist (so details and actions answer 200 and are checked against their schemas) and not."""
    settings = ConsoleSettings.from_env({**console_env(db_dsn), "PAYCORE_CONSOLE_INSECURE_COOKIES": "true"})
    await add_operator(pool, "ops-fuzz", PASSWORD, "operator", clock.now(), operator="root")
    rows = await console_rows(pool, clock)
    async with serve_asgi(create_console_app(settings, clock=clock, pool=pool)) as url, \
            httpx.AsyncClient(base_url=url) as browser:
        form = await browser.get("/login")
        signed_in = await browser.post("/login", data={"csrf_token": hidden(form.text, "csrf_token"),
                                                       "name": "ops-fuzz", "password": PASSWORD, "next": "/"})
        assert signed_in.status_code == 303, signed_in.text
        csrf = hidden((await browser.get("/")).text, "csrf_token")
        session = {"Cookie": "; ".join(f"{k}={v}" for k, v in browser.cookies.items()), "X-CSRF-Token": csrf}
        api = lambda path: path.startswith("/api/")  # noqa: E731
        found = await asyncio.to_thread(fuzz, url, max_examples=EXAMPLES, headers=session, only=api)
        # GETs first on the ids that exist, then everything (the actions change them).
        existing = await asyncio.to_thread(fuzz, url, max_examples=EXAMPLES, headers=session,
                                           path_parameters=rows, only=lambda p: api(p) and "{" in p)
        found += existing
        found += await asyncio.to_thread(fuzz, url, max_examples=2, only=api)
        found += await asyncio.to_thread(fuzz, url, max_examples=EXAMPLES, headers=session, only=api,
                                         negative=True)
        # What the fuzzer found: an id past bigint's range reached PostgreSQL and was a 500.
        past_bigint = await browser.get("/api/v1/escalations/99999999999999999999", headers=session)
        assert past_bigint.status_code == 404, past_bigint.text
        assert past_bigint.headers["content-type"] == "application/problem+json"
    assert found.failures == [], found.report()
    assert 200 in found.statuses("GET /api/v1/escalations")
    # The details answered about real rows, and were checked against their schemas.
    for operation in ("GET /api/v1/escalations/{escalation_id}", "GET /api/v1/attempts/{attempt_id}"):
        assert 200 in existing.statuses(operation), (operation, existing.answers)

