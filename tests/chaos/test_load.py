"""The chaos run's storefront load and provider faults."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator
from typing import Any

import asyncpg
import httpx
import orjson
import pytest

from harness.servers import free_port, serve_asgi
from paycore import currencies
from paycore.config import load_settings
from paycore_checkout.app import create_app as create_checkout_app
from paycore_devstack.chaos import faults, load
from paycore_devstack.chaos.load import Progress
from paycore_devstack.chaos.model import ChaosOptions, Endpoints, RunRecord
from paycore_devstack.chaos.providers import PROVIDERS
from paycore_devstack.up import sandbox_provider_env
from paycore_sandbox.app import create_app as create_sandbox_app
from paycore_sandbox.faults import ALL_FAULTS, TRANSPORT_FAULTS
from paycore_sandbox.settings import SandboxSettings
from paycore_webhooks.app import create_app as create_webhooks_app
from tests.support.stack import JWT_SECRET, Sandbox


async def test_progress_waits_idle_until_the_orders_or_the_end_come() -> None:
    loop = asyncio.get_running_loop()
    created = 0

    def counting(loop: asyncio.AbstractEventLoop,
                 coro: Coroutine[Any, Any, Any] | Generator[Any, None, Any]) -> asyncio.Task[Any]:
        nonlocal created
        created += 1
        return asyncio.Task(coro, loop=loop)

    loop.set_task_factory(counting)
    try:
        progress = Progress(total=4)
        waiting = asyncio.create_task(progress.reached(0.5))
        for _ in range(5):
            await asyncio.sleep(0)
        before = created
        for _ in range(50):  # nothing changes: a waiter that spins creates work here
            await asyncio.sleep(0)
        assert created == before and not waiting.done()
        await progress.advance()
        await progress.advance()
        assert await waiting is True
        assert await progress.reached(0.25) is True
        late = asyncio.create_task(progress.reached(1.0))
        progress.finished.set()
        assert await late is False
    finally:
        loop.set_task_factory(None)


# -- the plan: from the seed alone, covering every token and behaviour ----------------------------

def test_the_scripts_come_from_the_seed_alone_and_cover_every_token_and_behaviour() -> None:
    options = ChaosOptions(orders=400, clients=16, seed=11)
    scripts = load.draw_scripts(options)
    assert scripts == load.draw_scripts(options)
    assert scripts != load.draw_scripts(dataclasses.replace(options, seed=12))
    assert len(scripts) == 400 and {s.client for s in scripts} == set(range(16))

    assert {s.token for s in scripts} == {t for t, _ in load.TOKENS}
    assert {s.action for s in scripts if s.token == "tok_3ds"} == {"complete", "abandon"}
    assert {s.action for s in scripts if s.token != "tok_3ds"} == {"none"}
    assert {s.double_clicks for s in scripts} == {0, 1, 2}
    both = {(k, r) for k in (True, False) for r in (True, False)}
    assert {(s.keys, s.retry_create) for s in scripts} == both
    assert {(s.keys, s.retry_pay) for s in scripts} == both
    assert {s.cancel for s in scripts} == {"none", "before-pay", "while-paying"}
    assert {s.token for s in scripts if s.pay_again} | {"tok_3ds"} >= load.FAILING_TOKENS
    assert any(s.pay_again and s.action == "abandon" for s in scripts)
    assert not any(s.pay_again and (s.cancel != "none" or s.token in ("tok_visa", "tok_async"))
                   for s in scripts)

    assert {"JPY", "EUR", "KWD"} <= {s.currency for s in scripts}
    for s in scripts:
        assert 1 <= s.amount_minor <= currencies.max_amount_minor(s.currency), s

    strays = load.draw_stray_webhooks(options)
    assert strays == load.draw_stray_webhooks(options) and len(strays) == 4
    assert len(load.draw_stray_webhooks(ChaosOptions(orders=30))) == 1


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_every_provider_plays_the_same_scripts_with_its_own_methods_for_each_outcome(name: str) -> None:
    options = ChaosOptions(orders=400, clients=16, seed=11, provider=name)
    provider = PROVIDERS[name]
    scripts = load.draw_scripts(options)
    cardco = load.draw_scripts(dataclasses.replace(options, provider="cardco"))
    # The same customers whichever provider runs (amounts only capped by the provider's ceiling;
    # a provider that holds nothing for a capture refunds those orders instead).
    def same(s: load.Script) -> load.Script:
        return dataclasses.replace(s, amount_minor=0, manual_capture=False, after="none")

    assert [same(s) for s in scripts] == [same(s) for s in cardco]
    if not provider.manual_capture:
        assert not any(s.manual_capture for s in scripts)
        assert {s.after for s in scripts} <= {"none", "refund-full", "refund-parts", "refund-race"}
    if provider.max_amount_minor is not None:
        assert max(s.amount_minor for s in scripts) <= provider.max_amount_minor
    assert set(provider.methods) == {t for t, _ in load.TOKENS}
    sent = {orjson.dumps(provider.method(s.token, s.variant)) for s in scripts}
    assert sent == {orjson.dumps(m) for methods in provider.methods.values() for m in methods}
    assert {s.status for s in load.draw_stray_webhooks(options)} <= set(provider.stray_statuses)


# Faults only a lookup meets, and the one only a lagging search index (Stripe's) has.
LOOKUP_ONLY = frozenset({"lookup_stale", "search_stale"})


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_the_fault_rules_come_from_the_seed_and_add_up_to_the_fault_rate(name: str) -> None:
    options = ChaosOptions(fault_rate=0.3, seed=5, provider=name)
    provider = PROVIDERS[name]
    rules = faults.plan_rules(options)
    assert rules == faults.plan_rules(options)
    assert rules != faults.plan_rules(dataclasses.replace(options, seed=6))
    # Every fault the sandbox has that this provider's wire can meet, and only its dialect's.
    can_meet = ALL_FAULTS - (set() if provider.search_lags else {"search_stale"}) \
        - (set() if provider.lookups else LOOKUP_ONLY)
    assert {r["fault"] for r in rules} == can_meet
    assert {r["match"]["dialect"] for r in rules} == {name}
    operations = {r["match"].get("operation", "webhook") for r in rules}
    after_payment = set(faults.OPERATION_KINDS)  # refunds, captures and cancels meet a create's faults
    assert operations == ({"create", "lookup", "webhook"} if provider.lookups else {"create", "webhook"}) \
        | after_payment
    for operation, shares in faults.effective_shares(rules).items():
        assert sum(shares.values()) == pytest.approx(0.3, abs=0.002), operation
    for rule in rules:
        if rule["fault"] == "delay":
            assert 4_000 <= rule["delay_ms"] <= 6_000  # past the stack's 3 s call budget
        if rule["fault"] == "webhook_delay":  # 2-8 s late in real time at the stack's 0.01 scale
            assert 200_000 <= rule["delay_ms"] <= 800_000
    assert faults.plan_rules(dataclasses.replace(options, fault_rate=0.0)) == []
    with pytest.raises(ValueError):
        faults.plan_rules(dataclasses.replace(options, fault_rate=1.5))


def test_the_runs_together_meet_every_fault_the_sandbox_has() -> None:
    met = {r["fault"] for name in PROVIDERS for r in faults.plan_rules(ChaosOptions(provider=name))}
    assert met == ALL_FAULTS


# -- against a real stack ------------------------------------------------------------------------

WEBHOOK_TIME_SCALE = 0.001  # webhook retries and delays a thousand times faster
ASGI = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


def _counting(app: Any, seen: list[str]) -> ASGI:
    """The app, noting every HTTP request it receives (to check the clients recorded each)."""
    async def counted(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.append(f"{scope['method']} {scope['path']}")
        await app(scope, receive, send)
    return counted


@contextlib.asynccontextmanager
async def _stack(pool: asyncpg.Pool, db_dsn: str,
                 provider: str = "cardco") -> AsyncIterator[tuple[Endpoints, list[str]]]:
    """The sandbox, two checkouts and the intake as real HTTP servers, on the real clock,
    configured with ``provider``'s account as ``paycore chaos`` configures it."""
    sandbox_settings = dataclasses.replace(SandboxSettings.default(), webhook_time_scale=WEBHOOK_TIME_SCALE,
                                           async_delay_s=0.2)
    async with serve_asgi(create_sandbox_app(sandbox_settings)) as sandbox_url:
        provider_env = sandbox_provider_env(provider, sandbox_url, "https://shop.example")
        settings = load_settings({"PAYCORE_DATABASE_URL": db_dsn, "PAYCORE_JWT_SECRET": JWT_SECRET,
                                  "PAYCORE_CALL_BUDGET_S": "3", "PAYCORE_DEFAULT_PROVIDER": provider,
                                  **provider_env})
        seen: list[str] = []
        async with serve_asgi(_counting(create_checkout_app(settings, pool=pool), seen)) as one, \
                serve_asgi(_counting(create_checkout_app(settings, pool=pool), seen)) as two, \
                serve_asgi(create_webhooks_app(settings, pool=pool)) as intake_url:
            async with httpx.AsyncClient(base_url=sandbox_url, timeout=10) as http:
                r = await http.post("/_sandbox/webhooks/endpoints",
                                    json={"url": f"{intake_url}/webhooks/{provider}", "dialect": provider})
                r.raise_for_status()
            secret, basic_auth = PROVIDERS[provider].webhook_credentials(provider_env)
            yield Endpoints(dsn=db_dsn, sandbox_url=sandbox_url, checkout_urls=(one, two),
                            intake_url=intake_url, jwt_secret=JWT_SECRET,
                            provider_account=settings.default_account.provider_account,
                            webhook_secret=secret, provider=provider, webhook_basic_auth=basic_auth), seen


CHECKOUT_ROUTES = {load.CREATE, load.PAY, load.STATUS, load.CANCEL}


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_the_load_under_faults_records_every_order_and_every_exchange(
        pool: asyncpg.Pool, db_dsn: str, provider: str) -> None:
    # Fewer orders for the providers added later: the same code path, a shorter run.
    options = ChaosOptions(orders=30 if provider == "cardco" else 20, clients=6, fault_rate=0.3, seed=3,
                           provider=provider)
    record = RunRecord(options)
    async with _stack(pool, db_dsn, provider) as (endpoints, seen):
        sandbox = Sandbox(endpoints.sandbox_url)
        await faults.install(endpoints, options, record, webhook_time_scale=WEBHOOK_TIME_SCALE)
        listed = (await sandbox.http.get("/_sandbox/faults")).json()["rules"]
        assert listed == record.extra["fault_rules"]
        assert [r["fault"] for r in listed] == [r["fault"] for r in faults.plan_rules(options)]

        progress = load.Progress(total=options.orders)
        await load.run(endpoints, options, record, progress, poll_budget_s=4)

        requests = await sandbox.requests()
        faulted = [q for q in requests if q["fault"] is not None]
        await faults.clear(endpoints, record)
        assert (await sandbox.http.get("/_sandbox/faults")).json()["rules"] == []
        await sandbox.aclose()

    assert faulted, "no provider request met a fault"
    assert [i.kind for i in record.incidents] == ["faults-on", "faults-off"]
    # What fired is what the sandbox did: each transport fault as often as its request log shows it.
    fired = record.extra["faults_fired"]
    assert set(fired) == {r["match"].get("operation", "webhook") for r in listed}
    transport: Counter[str] = Counter()
    for operation in ("create", "lookup"):
        transport.update({f: n for f, n in fired.get(operation, {}).items() if f in TRANSPORT_FAULTS})
    assert +transport == Counter(q["fault"] for q in faulted)
    # Every POST the provider got is a create the invariants will recognise as one.
    posts = [q for q in requests if q["method"] == "POST"]
    assert posts and [q for q in requests if PROVIDERS[provider].is_create(q)] == posts
    assert progress.done == progress.total == options.orders
    assert record.extra.get("client_errors", 0) == 0

    spare = set(record.extra["spare_orders"])
    planned = {k: p for k, p in record.orders.items() if k not in spare}
    assert len(planned) == options.orders and all(p.done and p.tokens for p in planned.values())
    assert all(p.done and not p.tokens for k, p in record.orders.items() if k in spare)

    # Every request a checkout received is a recorded answer (or a recorded no-answer).
    to_checkout = [a for a in record.answers if a.route in CHECKOUT_ROUTES]
    answered = sum(1 for a in to_checkout if a.status is not None)
    assert answered <= len(seen) <= len(to_checkout)
    assert all(a.order_id in record.orders for a in to_checkout if a.route != load.CREATE)
    bad = [a for a in record.answers
           if a.status is not None and a.status >= 500 and not (a.status == 503 and a.retry_after)]
    assert bad == []

    # The stray webhook, in the provider's format on its route: answered, and escalated.
    [stray] = record.extra["unknown_webhooks"]
    assert stray["result"] == ("[accepted]" if provider == "adyen" else "unmatched")
    assert [(a.status, a.client) for a in record.answers if a.route == load.WEBHOOK] == [(200, -1)]
    escalated = await pool.fetchval(
        "SELECT count(*) FROM payment_escalations WHERE reason = 'unmatched-payment'"
        " AND detail->>'provider_payment_id' = $1", stray["payment_id"])
    assert escalated == 1


async def test_clients_fail_over_from_a_dead_instance_and_stop_when_the_duration_passes(
        pool: asyncpg.Pool, db_dsn: str) -> None:
    options = ChaosOptions(orders=8, clients=2, fault_rate=0.0, seed=9)
    record = RunRecord(options)
    async with _stack(pool, db_dsn) as (endpoints, _):
        # A checkout that was SIGKILLed: its port refuses every connection.
        dead = f"http://127.0.0.1:{free_port()}"
        endpoints = dataclasses.replace(endpoints, checkout_urls=(dead, endpoints.checkout_urls[0]))
        progress = load.Progress(total=options.orders)
        await load.run(endpoints, options, record, progress, poll_budget_s=4)

        stopped = RunRecord(dataclasses.replace(options, duration_s=0.0))
        stopped_progress = load.Progress(total=options.orders)
        await load.run(endpoints, stopped.options, stopped, stopped_progress)

    refused = [a for a in record.answers if a.status is None]
    assert refused and {a.error for a in refused} == {"ConnectError"}
    assert progress.done == 8 and "orders_not_created" not in record.extra
    spare = set(record.extra["spare_orders"])
    assert len([k for k in record.orders if k not in spare]) == 8
    assert all(p.last_state in load.FINAL_STATES for p in record.orders.values()
               if p.tokens and p.cancel != "before-pay")

    assert stopped_progress.done == 0 and stopped.orders == {}
    assert [a.route for a in stopped.answers] == [load.WEBHOOK]  # the stray webhook still goes
