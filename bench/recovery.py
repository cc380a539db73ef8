"""Recovery sweep rate, beside a same-run baseline of the sandbox's own lookup rate.

Workload: 10,000 due Unknown attempts (``PAYCORE_BENCH_ATTEMPTS``) whose payments
exist at the sandbox; ``paycore run recovery`` with 1 and then 2 instances
(separate processes, each with the same settings: concurrency 16) resolves them by lookup,
in ``PAYCORE_BENCH_RECOVERY_REPEAT`` alternating rounds (default 2), each configuration's
median reported. Baseline: a bare loop doing the same reference lookups against the same
sandbox at the same concurrency, with paycore's own provider client
(:func:`paycore.providers.http.no_retry_client`: httpx over aiohttp's pool), so the ratio
says what a sweep adds to the lookups it makes: the claims, the history, the outcome
writes. The same loop on httpx's default pool (httpcore), the baseline of the passes
before the sixth, is printed beside it.

Run: ``make bench``. Prints; asserts nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import orjson

from bench.common import bench_database, paycore_process, seed_provider_account, service
from bench.cpu import CpuWindow
from bench.results import Ratio, Stage
from harness.servers import free_port, wait_http
from paycore.providers.http import no_retry_client

ATTEMPTS = int(os.environ.get("PAYCORE_BENCH_ATTEMPTS", "10000"))
CONCURRENCY = int(os.environ.get("PAYCORE_BENCH_RECOVERY_CONCURRENCY", "16"))
REPEAT = int(os.environ.get("PAYCORE_BENCH_RECOVERY_REPEAT", "2"))  # rounds of (1, 2) instances
API_KEY = "sk_test_acct_store_local"
HEADERS = {"Authorization": f"Bearer {API_KEY}", "Cardco-Account": "acct_store",
           "Cardco-Version": "2026-11-01"}

SEED_ATTEMPTS = """
INSERT INTO orders (order_id, customer_id, amount_minor, currency, created_at)
SELECT 'rb-' || n, 'cus_bench', 4999, 'EUR', now() - interval '1 hour' FROM generate_series(1, $1) AS n;
INSERT INTO payment_attempts (attempt_id, order_id, customer_id, attempt_number, provider_account,
    endpoint, api_version, client_reference, idempotency_key, request_body, amount_minor, currency,
    state, outcome_reason, created_at, first_sent_at, escalation_deadline, next_check_at)
SELECT gen_random_uuid(), 'rb-' || n, 'cus_bench', 1, 'cardco:acct_store:test',
    $2 || '/v1/payments', '2026-11-01', 'rb-' || n || '-a1', gen_random_uuid()::text, '{}', 4999, 'EUR',
    'Unknown', 'provider.no-response.caller', now() - interval '1 hour', now() - interval '1 hour',
    now() + interval '20 hours', now() - interval '1 second'
FROM generate_series(1, $1) AS n;
"""


@contextlib.contextmanager
def sandbox_config() -> Iterator[Path]:
    """A sandbox whose lookup limit is far above the sweep, so the bench measures paycore."""
    config = {"accounts": [{"account": "acct_store", "environment": "test", "api_key": API_KEY,
                            "lookup_rate_per_s": 1_000_000, "lookup_burst": 1_000_000}]}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sandbox.json"
        path.write_bytes(orjson.dumps(config))
        yield path


async def create_payments(http: httpx.AsyncClient) -> None:
    todo = iter(range(1, ATTEMPTS + 1))

    async def creator() -> None:
        for n in todo:
            body = {"amount": 4999, "currency": "EUR", "payment_method": "tok_visa",
                    "reference": f"rb-{n}-a1"}
            r = await http.post("/v1/payments", json=body,
                                headers={**HEADERS, "Idempotency-Key": f'"{uuid.uuid4()}"'})
            r.raise_for_status()

    await asyncio.gather(*(creator() for _ in range(CONCURRENCY)))


async def seed(dsn: str, sandbox_url: str, env: dict[str, str]) -> None:
    conn = await asyncpg.connect(dsn)
    await seed_provider_account(conn, sandbox_url, env)  # registered as the workers are configured
    orders, attempts = SEED_ATTEMPTS.strip().split(";\n")
    await conn.execute(orders, ATTEMPTS)
    await conn.execute(attempts, ATTEMPTS, sandbox_url)
    await conn.close()


async def sweep(dsn: str, sandbox_url: str, instances: int) -> tuple[float, CpuWindow]:
    """Seconds until every seeded attempt is resolved by ``instances`` worker processes."""
    env = {
        "PAYCORE_DATABASE_URL": dsn, "PAYCORE_CARDCO_BASE_URL": sandbox_url,
        "PAYCORE_CARDCO_ACCOUNT": "acct_store", "PAYCORE_CARDCO_ENVIRONMENT": "test",
        "PAYCORE_CARDCO_API_KEY": API_KEY, "PAYCORE_CARDCO_LOOKUP_RATE_PER_S": "1000000",
        "PAYCORE_RECOVERY_INTERVAL_S": "0.05", "PAYCORE_RECOVERY_BATCH": "500",
        # Each instance as it would be deployed: scaling out adds instances with the same settings.
        "PAYCORE_RECOVERY_CONCURRENCY": str(CONCURRENCY),
    }
    await seed(dsn, sandbox_url, env)
    conn = await asyncpg.connect(dsn)
    with contextlib.ExitStack() as stack:
        started = time.perf_counter()
        workers = [stack.enter_context(paycore_process(
            ["run", "recovery", "--owner", f"bench-{i}", "--metrics-port", "0"], env))
                   for i in range(instances)]
        cpu = stack.enter_context(CpuWindow())  # closed before the workers stop, so they are counted
        while await conn.fetchval("SELECT count(*) FROM payment_attempts WHERE state = 'Unknown'"):
            if all(w.poll() is not None for w in workers):  # e.g. a configuration error at start-up
                codes = [w.returncode for w in workers]
                raise RuntimeError(f"every recovery worker exited (codes {codes}) before the sweep finished;"
                                   " run `paycore run recovery` with its env to see why")
            if time.perf_counter() - started > 600:
                raise TimeoutError("the sweep did not finish within 10 minutes")
            await asyncio.sleep(0.1)
        elapsed = time.perf_counter() - started
    resolved = await conn.fetchval("SELECT count(*) FROM payment_attempts WHERE state = 'Succeeded'")
    await conn.close()
    if resolved != ATTEMPTS:
        print(f"  warning: {resolved} of {ATTEMPTS} attempts resolved Succeeded")
    return elapsed, cpu


async def baseline(http: httpx.AsyncClient, url: str) -> tuple[float, CpuWindow]:
    """Lookups per second from a bare loop on ``http``: the lookups alone, nothing recorded."""
    todo = iter(range(1, ATTEMPTS + 1))

    async def looker() -> None:
        for n in todo:
            r = await http.get(f"{url}/v1/payments", params={"reference": f"rb-{n}-a1"}, headers=HEADERS)
            r.raise_for_status()

    with CpuWindow() as cpu:
        started = time.perf_counter()
        await asyncio.gather(*(looker() for _ in range(CONCURRENCY)))
        elapsed = time.perf_counter() - started
    return ATTEMPTS / elapsed, cpu


TARGET_ONE, TARGET_SCALE = 0.5, 1.7  # issue 15: of bare lookups; two instances over one


async def run() -> Stage:
    workload = f"{ATTEMPTS} due Unknown attempts whose payments exist, concurrency {CONCURRENCY}"
    print(f"recovery bench: {workload}")
    stage = Stage("recovery", workload)
    port = free_port()
    with sandbox_config() as config:
        with service("sandbox", port, {"PAYCORE_SANDBOX_CONFIG": str(config)}):
            url = f"http://127.0.0.1:{port}"
            await wait_http(url + "/_sandbox/payments")
            limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
            async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as http:
                await create_payments(http)
                httpcore_lookups_per_s, httpcore_window = await baseline(http, url)
            print(f"  bare lookups, httpx's default pool (httpcore): {httpcore_lookups_per_s:8.1f}/s")
            httpcore_cpu = httpcore_window.report(ATTEMPTS, "attempt")
            async with no_retry_client() as http:
                lookups_per_s, window = await baseline(http, url)
            print(f"  bare lookups, paycore's provider client:       {lookups_per_s:8.1f}/s")
            stage.details["cpu"] = {"baseline": window.report(ATTEMPTS, "attempt"),
                                    "baseline on httpcore": httpcore_cpu}
            # Alternating 1, 2, 2, 1, ...: a load change on a shared machine between two sweeps
            # would otherwise read as scaling (or its absence); each configuration's median counts.
            runs: dict[int, list[float]] = {1: [], 2: []}
            windows: dict[int, list[CpuWindow]] = {1: [], 2: []}
            for round_ in range(REPEAT):
                for instances in ((1, 2) if round_ % 2 == 0 else (2, 1)):
                    async with bench_database() as dsn:
                        elapsed, cpu = await sweep(dsn, url, instances)
                    runs[instances].append(ATTEMPTS / elapsed)
                    windows[instances].append(cpu)
                    print(f"  {instances} instance(s): {ATTEMPTS / elapsed:8.1f} attempts resolved/s"
                          f"  ({elapsed:.1f} s, process start-up included)")
                    stage.details["cpu"][f"{instances} instance(s), round {round_ + 1}"] = \
                        cpu.report(ATTEMPTS, "attempt")
            rates = {n: statistics.median(r) for n, r in runs.items()}
            for instances, rate in rates.items():
                stage.measures[f"{instances} instance(s) resolved/s"] = rate
            stage.details["runs"] = runs
    stage.measures["baseline lookups/s"] = lookups_per_s
    stage.measures["baseline lookups/s on httpcore"] = httpcore_lookups_per_s
    print(f"  median   : 1 instance {rates[1]:.1f}/s, 2 instances {rates[2]:.1f}/s over {REPEAT} round(s)")
    print(f"  baseline : {lookups_per_s:8.1f} bare reference lookups/s against the same sandbox,"
          " paycore's provider client")
    print(f"             {httpcore_lookups_per_s:8.1f} the same on httpx's default pool (httpcore; the"
          f" baselines before the sixth pass): ratio 1 ÷ it {rates[1] / httpcore_lookups_per_s:.3f}")
    for instances, rate in rates.items():
        stage.ratios.append(Ratio(f"{instances} instance(s) ÷ bare lookups", rate / lookups_per_s,
                                  TARGET_ONE if instances == 1 else None))
        print(f"  ratio {instances}: {rate / lookups_per_s:8.3f}  (resolved/s ÷ bare lookups/s)")
    stage.ratios.append(Ratio("1 instance(s) ÷ bare lookups on httpcore", rates[1] / httpcore_lookups_per_s,
                              None))
    stage.ratios.append(Ratio("2 instances ÷ 1", rates[2] / rates[1], TARGET_SCALE))
    print(f"  scale-out: {rates[2] / rates[1]:8.3f}  (2 instances ÷ 1)")
    busy_one = statistics.median(w.busy for w in windows[1])
    stage.details["scale-out ceiling"] = 1 / busy_one
    print(f"  ceiling  : {1 / busy_one:8.3f}  (one instance kept the machine {100 * busy_one:.0f}% busy:"
          " a second cannot add more than this on these cores)")
    return stage


def main() -> Stage:
    return asyncio.run(run())


if __name__ == "__main__":
    main()
