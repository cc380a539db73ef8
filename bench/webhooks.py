"""Webhook intake throughput, beside a same-run pgbench baseline of the intake's own SQL.

Workload: signed ``payment.succeeded`` deliveries for seeded Started attempts,
each event sent twice (50 % duplicates), shuffled, from 4 concurrent senders
for 30 s (``PAYCORE_BENCH_SECONDS``, ``PAYCORE_BENCH_CLIENTS``), into the intake as one
process and then as ``--workers 2`` (``PAYCORE_BENCH_WORKERS``, as for checkout).
Baseline: pgbench running the statements the intake issues for each of those
deliveries (``bench/webhooks_baseline.sql``: the redelivery check; then, for a first
delivery, one transaction with the replay-window row, the match, the order lock, the
notification row, and the outcome write with its escalation resolution, order update,
outbox rows and history event) with the same mix, at the same concurrency and duration,
on a separate fresh database. The ratio says how much of the database's capacity for
this work the whole HTTP path delivers.

Run: ``make bench``. Prints; asserts nothing.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable

import asyncpg
import orjson
import uvloop

from bench.common import (
    Latencies,
    Request,
    bench_database,
    closed_loop,
    pgbench,
    repo_root,
    seed_provider_account,
    service,
)
from bench.cpu import CpuWindow
from bench.results import Ratio, Stage
from harness.servers import free_port, wait_http
from paycore.webhook_signatures import signed_headers
from paycore_sandbox.settings import SandboxSettings

SECONDS = float(os.environ.get("PAYCORE_BENCH_SECONDS", "30"))
CLIENTS = int(os.environ.get("PAYCORE_BENCH_CLIENTS", "4"))
EVENTS = int(os.environ.get("PAYCORE_BENCH_WEBHOOK_EVENTS", "40000"))
WORKERS = [int(n) for n in os.environ.get("PAYCORE_BENCH_WORKERS", "1,2").split(",")]
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


def delivery_order(events: int) -> list[int]:
    """Each event twice, shuffled within blocks of 100 events, so any prefix the time
    limit allows is still half duplicates (the intake run and pgbench use this one order)."""
    rng = random.Random(7)
    order: list[int] = []
    for start in range(1, events + 1, 100):
        block = [n for n in range(start, min(start + 100, events + 1)) for _ in range(2)]
        rng.shuffle(block)
        order.extend(block)
    return order


def signed_deliveries(order: list[int], secret: str, body_of: Callable[[int], bytes],
                      event_id: Callable[[int], str]) -> Callable[[], Request | None]:
    """The intake's requests in ``order``; a redelivery is signed afresh, as the provider does
    (a later timestamp)."""
    queue = iter(order)
    copies: dict[int, int] = {}

    def next_delivery() -> Request | None:
        n = next(queue, None)
        if n is None:
            return None
        copy = copies[n] = copies.get(n, -1) + 1
        body = body_of(n)
        headers = signed_headers(secret, event_id(n), int(time.time()) + copy, body)
        return "POST", "/webhooks/cardco", body, headers

    return next_delivery


def tally(results: dict[str, int]) -> Callable[[int, bytes], None]:
    """Counts each answer by the intake's ``result`` (``applied``, ``duplicate``, ...) or status."""
    def count(status: int, answer: bytes) -> None:
        label = str(orjson.loads(answer).get("result", status)) if status == 200 else str(status)
        results[label] = results.get(label, 0) + 1
    return count


async def run_intake(dsn: str, workers: int
                     ) -> tuple[int, float, Latencies, dict[str, int], CpuWindow, list[int]]:
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
    results: dict[str, int] = {}
    with service("webhooks", port, env, workers=workers) as intake:
        await wait_http(f"http://127.0.0.1:{port}/healthz")
        # One keep-alive connection per sender, HTTP/1.1 written by hand: a general client
        # (httpx) costs more CPU per request than the intake, on the same cores.
        with CpuWindow() as cpu:
            lat, elapsed = await closed_loop(
                port, CLIENTS, SECONDS,
                signed_deliveries(delivery_order(EVENTS), secret, event_body, lambda n: f"evt_bench_{n}"),
                tally(results))
        by_worker = intake.requests_by_worker()
    return len(lat.samples), elapsed, lat, results, cpu, by_worker


async def run_pgbench(dsn: str) -> tuple[float, float, CpuWindow] | None:
    # pgbench outruns the intake: seed enough events that it never runs out of fresh ones.
    await seed(dsn, EVENTS * 3)
    conn = await asyncpg.connect(dsn)
    await conn.execute("CREATE SEQUENCE bench_delivery_seq")
    await conn.execute("CREATE TABLE bench_delivery_order (seq bigint PRIMARY KEY, n int NOT NULL)")
    await conn.copy_records_to_table("bench_delivery_order",
                                     records=enumerate(delivery_order(EVENTS * 3), start=1))
    await conn.close()
    # -M prepared: the intake's driver (asyncpg) also prepares each statement once per connection.
    with CpuWindow() as cpu:
        result = await pgbench(dsn, repo_root() / "bench" / "webhooks_baseline.sql", clients=CLIENTS,
                               seconds=SECONDS, extra=["-M", "prepared", "-D", f"account={ACCOUNT}"])
    return None if result is None else (*result, cpu)


TARGET = 0.5  # issue 15: of pgbench running the intake's own statements


async def run() -> Stage:
    workload = (f"{CLIENTS} senders x {SECONDS:.0f} s, 50 % duplicates, webhooks --workers "
                f"{', '.join(map(str, WORKERS))}")
    print(f"webhook intake bench: {workload}")
    stage = Stage("webhooks", workload)
    rates: dict[int, float] = {}
    stage.details["cpu"] = {}
    for workers in WORKERS:
        async with bench_database() as dsn:
            count, elapsed, lat, results, cpu, by_worker = await run_intake(dsn, workers)
        rates[workers] = count / elapsed
        stage.measures |= {f"x{workers} deliveries/s": rates[workers], f"x{workers} p50 ms": lat.p50_ms,
                           f"x{workers} p99 ms": lat.p99_ms}
        stage.details[f"x{workers} results"] = results
        print(f"  intake x{workers}: {rates[workers]:8.1f} deliveries/s  p50 {lat.p50_ms:6.1f} ms  "
              f"p99 {lat.p99_ms:6.1f} ms  ({count} deliveries: {results})")
        stage.details["cpu"][f"x{workers}"] = cpu.report(count, "delivery")
        if by_worker:
            stage.details[f"x{workers} requests by worker"] = by_worker
            print(f"    requests by worker: {' / '.join(map(str, by_worker))}")
    async with bench_database() as dsn:
        baseline = await run_pgbench(dsn)
    if baseline is None:
        print("  baseline: pgbench not found; no ratio")
        return stage
    tps, avg_ms, cpu = baseline
    stage.measures |= {"baseline intake-SQL deliveries/s": tps, "baseline avg ms": avg_ms}
    print(f"  baseline: {tps:8.1f} deliveries/s of the intake's SQL via pgbench (avg {avg_ms:.2f} ms),"
          " same clients, same mix")
    stage.details["cpu"]["pgbench"] = cpu.report(round(tps * SECONDS), "delivery")
    for workers, rate in rates.items():
        stage.ratios.append(Ratio(f"intake x{workers} ÷ pgbench of its SQL", rate / tps, TARGET))
        print(f"  ratio x{workers}: {rate / tps:8.3f}  (intake deliveries/s ÷ pgbench of its SQL)")
    return stage


def main() -> Stage:
    return uvloop.run(run())  # the senders share the cores with the intake: the lighter loop


if __name__ == "__main__":
    main()
