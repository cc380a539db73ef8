"""Webhook intake throughput, beside a same-run pgbench baseline of its first statement.

Workload: signed ``payment.succeeded`` deliveries for seeded Started attempts,
each event sent twice (50 % duplicates), shuffled, from 4 concurrent senders
for 30 s (``PAYCORE_BENCH_SECONDS``, ``PAYCORE_BENCH_CLIENTS``), into one intake
process. Baseline: pgbench running the raw ``INSERT … ON CONFLICT DO NOTHING``
of a notification row with the same duplicate ratio and concurrency.

Run: ``make bench``. Prints; asserts nothing.
"""

from __future__ import annotations

import asyncio
import os
import random
import time

import asyncpg
import httpx
import orjson

from bench.common import (
    Latencies,
    bench_database,
    pgbench,
    repo_root,
    seed_provider_account,
    service,
)
from harness.servers import free_port, wait_http
from paycore.webhook_signatures import signed_headers
from paycore_sandbox.settings import SandboxSettings

SECONDS = float(os.environ.get("PAYCORE_BENCH_SECONDS", "30"))
CLIENTS = int(os.environ.get("PAYCORE_BENCH_CLIENTS", "4"))
EVENTS = int(os.environ.get("PAYCORE_BENCH_WEBHOOK_EVENTS", "40000"))
ACCOUNT = "cardco:acct_store:test"

SEED = """
INSERT INTO orders (order_id, customer_id, amount_minor, currency, created_at)
SELECT 'wh-' || n, 'cus_bench', 4999, 'EUR', now() FROM generate_series(1, $1) AS n;
INSERT INTO payment_attempts (attempt_id, order_id, customer_id, attempt_number, provider_account,
    endpoint, api_version, client_reference, idempotency_key, request_body, amount_minor, currency,
    state, created_at, first_sent_at, escalation_deadline, next_check_at)
SELECT gen_random_uuid(), 'wh-' || n, 'cus_bench', 1, 'cardco:acct_store:test',
    'http://127.0.0.1:1/v1/payments', '2026-11-01', 'wh-' || n || '-a1', gen_random_uuid()::text,
    '{}', 4999, 'EUR', 'Started', now(), now(), now() + interval '22 hours', now() + interval '1 hour'
FROM generate_series(1, $1) AS n;
"""


def webhook_secret() -> str:
    for acct in SandboxSettings.default().accounts:
        if acct.account == "acct_store" and acct.environment == "test":
            return acct.webhook_secret
    raise RuntimeError("no sandbox acct_store test account")


def event_body(n: int) -> bytes:
    payment = {"id": f"pay_bench_{n}", "object": "payment", "account": "acct_store", "livemode": False,
               "amount": 4999, "currency": "EUR", "reference": f"wh-{n}-a1", "status": "succeeded",
               "decline_code": None, "amount_refunded": 0, "next_action": None, "created": 1795900000}
    return orjson.dumps({"id": f"evt_bench_{n}", "type": "payment.succeeded", "created": 1795900000,
                         "account": "acct_store", "livemode": False, "sequence": 2,
                         "data": {"object": payment}})


async def seed(dsn: str, count: int) -> None:
    conn = await asyncpg.connect(dsn)
    await seed_provider_account(conn)
    for statement in SEED.strip().split(";\n"):
        if statement.strip():
            await conn.execute(statement, count)
    await conn.close()


async def run_intake(dsn: str) -> tuple[int, float, Latencies, dict[str, int]]:
    await seed(dsn, EVENTS)
    port = free_port()
    secret = webhook_secret()
    env = {
        "PAYCORE_DATABASE_URL": dsn,
        "PAYCORE_CARDCO_BASE_URL": "http://127.0.0.1:1",
        "PAYCORE_CARDCO_ACCOUNT": "acct_store",
        "PAYCORE_CARDCO_ENVIRONMENT": "test",
        "PAYCORE_CARDCO_API_KEY": "sk_test_acct_store_local",
        "PAYCORE_CARDCO_WEBHOOK_SECRET": secret,
    }
    # Each event twice, shuffled within blocks of 100 events, so any prefix the
    # time limit allows is still half duplicates.
    rng = random.Random(7)
    order: list[int] = []
    for start in range(1, EVENTS + 1, 100):
        block = [n for n in range(start, min(start + 100, EVENTS + 1)) for _ in range(2)]
        rng.shuffle(block)
        order.extend(block)
    queue = iter(order)
    samples: list[float] = []
    results: dict[str, int] = {}

    with service("webhooks", port, env):
        base = f"http://127.0.0.1:{port}"
        await wait_http(f"{base}/healthz")
        limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
        async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as http:
            stop_at = time.perf_counter() + SECONDS

            async def sender() -> None:
                while time.perf_counter() < stop_at:
                    n = next(queue, None)
                    if n is None:
                        return
                    body = event_body(n)
                    headers = signed_headers(secret, f"evt_bench_{n}", int(time.time()), body)
                    t0 = time.perf_counter()
                    r = await http.post("/webhooks/cardco", content=body, headers=headers)
                    samples.append(time.perf_counter() - t0)
                    label = r.json().get("result", str(r.status_code)) if r.status_code == 200 else str(
                        r.status_code)
                    results[label] = results.get(label, 0) + 1

            started = time.perf_counter()
            await asyncio.gather(*(sender() for _ in range(CLIENTS)))
            elapsed = time.perf_counter() - started
    return len(samples), elapsed, Latencies(samples), results


async def run_pgbench(dsn: str) -> tuple[float, float] | None:
    await seed(dsn, 1)  # the provider account row the statement names
    return await pgbench(dsn, repo_root() / "bench" / "webhooks_baseline.sql", clients=CLIENTS,
                         seconds=SECONDS, extra=["-D", f"keys={EVENTS}"])


async def main() -> None:
    print(f"webhook intake bench: {CLIENTS} senders x {SECONDS:.0f} s, 50 % duplicates, one intake process")
    async with bench_database() as dsn:
        count, elapsed, lat, results = await run_intake(dsn)
    rate = count / elapsed
    print(f"  intake  : {rate:8.1f} deliveries/s  p50 {lat.p50_ms:6.1f} ms  p99 {lat.p99_ms:6.1f} ms"
          f"  ({count} deliveries: {results})")
    async with bench_database() as dsn:
        baseline = await run_pgbench(dsn)
    if baseline is None:
        print("  baseline: pgbench not found; no ratio")
        return
    tps, avg_ms = baseline
    print(f"  baseline: {tps:8.1f} raw INSERT … ON CONFLICT/s via pgbench (avg {avg_ms:.2f} ms),"
          " same clients")
    print(f"  ratio   : {rate / tps:8.3f}  (intake deliveries/s ÷ raw notification inserts/s)")


if __name__ == "__main__":
    asyncio.run(main())
