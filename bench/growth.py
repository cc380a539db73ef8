"""Cost as the work grows: the hot paths measured on one database grown 10k -> 100k -> 1M attempts.

The database is seeded with COPY (:mod:`bench.growth_seed`: orders, attempts in a realistic
mix of states, ~10 history events each, outbox rows, escalations) to each size in
``PAYCORE_BENCH_GROWTH_SIZES`` (default ``10000,100000,1000000``), cumulatively, then VACUUMed
(ANALYZE) and checkpointed, as a live table of that size would be.
At each size, for ``PAYCORE_BENCH_GROWTH_SECONDS`` (default 10) each:

- **claim**: recovery's claim statement (``paycore.leases.claim_due``, a batch of
  ``PAYCORE_BENCH_GROWTH_CLAIM_BATCH``, default 200 as recovery's default) with
  ``PAYCORE_BENCH_GROWTH_DUE`` (default 300) due Unknown attempts among the big table, each
  call in a transaction rolled back so every call claims the same due set; p50/p99.
- **intake**: ``paycore serve webhooks`` taking signed ``payment.succeeded`` deliveries for
  seeded Started attempts, half of them redeliveries, from ``PAYCORE_BENCH_CLIENTS`` senders.
- **checkout**: ``paycore serve checkout`` + the sandbox, ``tok_visa`` payments on new orders.
- **relay**: one ``paycore_dispatcher.relay.Relay`` relaying the pending outbox rows
  (``PAYCORE_BENCH_GROWTH_RELAY_ROWS``, default 3,000 fresh ones, plus what checkout and the
  intake just queued) to a local Tansu (or ``PAYCORE_BENCH_KAFKA_BOOTSTRAP``).

And EXPLAIN (ANALYZE, BUFFERS) of the hot statements (:mod:`bench.growth_plans`), bound and
generic; a Seq Scan on a growing table is reported. ``run()`` returns the structured result;
``main()`` (``python -m bench.growth``, or the ``growth`` stage of ``python -m bench``) prints it
as a table and returns it as a :class:`bench.results.Stage`. The data's invariants are checked after each
size is seeded (``PAYCORE_BENCH_GROWTH_CHECK=0`` skips that).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import asyncpg
import jwt
import orjson

from bench import growth_plans, growth_seed
from bench.checkout import JWT_SECRET, pay_orders
from bench.common import Latencies, bench_database, closed_loop, seed_provider_account, service
from bench.relay import broker
from bench.results import Ratio, Stage
from bench.webhooks import delivery_order, signed_deliveries, tally, webhook_secret
from harness.servers import free_port, wait_http
from paycore import contracts, kafka, leases
from paycore.clock import SystemClock
from paycore.db import create_pool
from paycore.kafka import KafkaSettings
from paycore_dispatcher.relay import PRODUCER_OPTIONS, KafkaPublisher, Relay, RelayConfig

SIZES = [int(n) for n in os.environ.get("PAYCORE_BENCH_GROWTH_SIZES", "10000,100000,1000000").split(",")]
SECONDS = float(os.environ.get("PAYCORE_BENCH_GROWTH_SECONDS", "10"))
CLIENTS = int(os.environ.get("PAYCORE_BENCH_CLIENTS", "4"))
DUE = int(os.environ.get("PAYCORE_BENCH_GROWTH_DUE", "300"))
CLAIM_BATCH = int(os.environ.get("PAYCORE_BENCH_GROWTH_CLAIM_BATCH", "200"))
RELAY_ROWS = int(os.environ.get("PAYCORE_BENCH_GROWTH_RELAY_ROWS", "3000"))
RELAY_BATCH = 500  # RelayConfig's default
CHECKOUT_ORDERS = int(os.environ.get("PAYCORE_BENCH_GROWTH_CHECKOUT_ORDERS", "8000"))
WEBHOOK_EVENTS = int(os.environ.get("PAYCORE_BENCH_GROWTH_WEBHOOK_EVENTS", "2500"))
CHECK = os.environ.get("PAYCORE_BENCH_GROWTH_CHECK", "1") != "0"
LEASE_S = 90.0  # recovery's default lease
ACCOUNT = growth_seed.ACCOUNT
API_KEY = "sk_test_acct_store_local"


def service_env(dsn: str, sandbox_url: str) -> dict[str, str]:
    return {
        "PAYCORE_DATABASE_URL": dsn, "PAYCORE_JWT_SECRET": JWT_SECRET,
        "PAYCORE_CARDCO_BASE_URL": sandbox_url, "PAYCORE_CARDCO_ACCOUNT": "acct_store",
        "PAYCORE_CARDCO_ENVIRONMENT": "test", "PAYCORE_CARDCO_API_KEY": API_KEY,
        "PAYCORE_CARDCO_WEBHOOK_SECRET": webhook_secret(),
    }


class _Rollback(Exception):
    """Leaves a measured claim's transaction without keeping its leases."""


# --- claim -------------------------------------------------------------------------------------

# The due set the claim is timed on: the same DUE Unknown attempts at every size (the seeded
# share of Unknown ones grows with the size, and a claim's cost follows how many it claims),
# each with the history recovery would have found. Their next check is an hour ahead except
# while the claim is measured.
SEED_UNKNOWN = """
WITH o AS (
    INSERT INTO orders (order_id, customer_id, amount_minor, currency, created_at, provider_account)
    SELECT 'due-' || n, 'cus_bench', 4999, 'EUR', now() - interval '1 hour', $2
    FROM generate_series(1, $1) AS n
    RETURNING order_id
), a AS (
    INSERT INTO payment_attempts (attempt_id, order_id, customer_id, attempt_number, provider_account,
        endpoint, api_version, client_reference, idempotency_key, request_body, amount_minor, currency,
        state, outcome_reason, created_at, first_sent_at, escalation_deadline, next_check_at, version)
    SELECT gen_random_uuid(), order_id, 'cus_bench', 1, $2, '/v1/payments', '2026-11-01',
        order_id || '-a1', gen_random_uuid()::text, '{}', 4999, 'EUR', 'Unknown',
        'provider.no-response.caller', now() - interval '1 hour', now() - interval '1 hour' + interval '3 ms',
        now() + interval '20 hours', now() + interval '1 hour', 2
    FROM o
    RETURNING attempt_id, created_at, next_check_at
), history AS (
    INSERT INTO payment_attempt_events (attempt_id, occurred_at, kind, actor, detail)
    SELECT attempt_id, created_at + interval '1 ms' * e.i, e.kind, 'endpoint', e.detail::jsonb
    FROM a, (VALUES (1, 'transition', '{"from": null, "to": "NotStarted"}'),
                    (2, 'send_intent', '{"first_send": true}'),
                    (3, 'transition', '{"from": "NotStarted", "to": "Started"}'),
                    (4, 'send_result', '{"outcome": "unknown", "reason": "provider.no-response.caller"}'),
                    (5, 'transition', '{"from": "Started", "to": "Unknown"}')) AS e(i, kind, detail)
)
SELECT attempt_id, next_check_at FROM a
"""
SET_NEXT_CHECK = """
UPDATE payment_attempts a SET next_check_at = v.next_check_at
FROM unnest($1::uuid[], $2::timestamptz[]) AS v(attempt_id, next_check_at)
WHERE a.attempt_id = v.attempt_id
"""


@contextlib.asynccontextmanager
async def due_unknown(conn: asyncpg.Connection, rows: list[asyncpg.Record]) -> AsyncIterator[int]:
    """The fixture's Unknown attempts made due now; their next checks put back afterwards."""
    ids = [r["attempt_id"] for r in rows]
    due_at = SystemClock().now() - timedelta(seconds=1)
    await conn.execute(SET_NEXT_CHECK, ids, [due_at] * len(ids))
    try:
        yield len(ids)
    finally:
        await conn.execute(SET_NEXT_CHECK, ids, [r["next_check_at"] for r in rows])


# How many of the table's row updates were HOT (no index entry written): a claim changes only
# the lease columns, none indexed, so it can be HOT when the row's page has room.
UPDATE_STATS = """
SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'payment_attempts'
"""


async def update_stats(conn: asyncpg.Connection, after: tuple[int, int] | None = None) -> tuple[int, int]:
    """(updates, HOT updates) of payment_attempts; with ``after``, polls until they moved past it."""
    await conn.execute("SELECT pg_stat_force_next_flush()")  # this session's counts, flushed
    deadline = time.monotonic() + 5
    while True:
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        row = await conn.fetchrow(UPDATE_STATS)
        got = (int(row["n_tup_upd"]), int(row["n_tup_hot_upd"]))
        if after is None or got[0] > after[0] or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.05)  # polling the statistics collector, with a deadline


async def measure_claim(conn: asyncpg.Connection, plans: growth_plans.Plans,
                        due_rows: list[asyncpg.Record]) -> dict[str, float]:
    async with due_unknown(conn, due_rows) as due:
        now = SystemClock().now()
        await growth_plans.claim(conn, plans, CLAIM_BATCH, now, LEASE_S)
        expect = min(due, CLAIM_BATCH)
        samples: list[float] = []
        wrong = 0
        before = await update_stats(conn)
        stop_at = time.perf_counter() + SECONDS
        while time.perf_counter() < stop_at or len(samples) < 20:
            batch = [leases.new_lease("growth-bench") for _ in range(CLAIM_BATCH)]
            try:
                async with conn.transaction():
                    t0 = time.perf_counter()
                    claimed = await leases.claim_due(conn, batch, SystemClock().now(), LEASE_S)
                    samples.append(time.perf_counter() - t0)
                    wrong += len(claimed) != expect
                    raise _Rollback
            except _Rollback:
                pass
        after = await update_stats(conn, before)
    lat = Latencies(samples)
    updates, hot = after[0] - before[0], after[1] - before[1]
    return {"claim_p50_ms": lat.p50_ms, "claim_p99_ms": lat.p99_ms, "claim_calls": len(samples),
            "claim_rows": expect, "claim_short_batches": wrong,
            "claim_hot_share": hot / updates if updates else float("nan")}


# --- webhook intake ----------------------------------------------------------------------------

# Started attempts the deliveries are about, each with the history checkout would have written.
SEED_STARTED = """
WITH o AS (
    INSERT INTO orders (order_id, customer_id, amount_minor, currency, created_at, provider_account)
    SELECT $1::text || n, 'cus_bench', 4999, 'EUR', now() - interval '10 seconds', $3
    FROM generate_series(1, $2) AS n
    RETURNING order_id
), a AS (
    INSERT INTO payment_attempts (attempt_id, order_id, customer_id, attempt_number, provider_account,
        endpoint, api_version, client_reference, idempotency_key, request_body, amount_minor, currency,
        state, created_at, first_sent_at, escalation_deadline, next_check_at, version)
    SELECT gen_random_uuid(), order_id, 'cus_bench', 1, $3, '/v1/payments', '2026-11-01',
        order_id || '-a1', gen_random_uuid()::text, '{}', 4999, 'EUR', 'Started',
        now() - interval '10 seconds', now() - interval '9 seconds', now() + interval '22 hours',
        now() + interval '1 hour', 1
    FROM o
    RETURNING attempt_id, created_at
)
INSERT INTO payment_attempt_events (attempt_id, occurred_at, kind, actor, detail)
SELECT attempt_id, created_at + interval '1 ms' * e.i, e.kind, 'endpoint', e.detail::jsonb
FROM a, (VALUES (1, 'transition', '{"from": null, "to": "NotStarted"}'),
                (2, 'send_intent', '{"first_send": true}'),
                (3, 'transition', '{"from": "NotStarted", "to": "Started"}')) AS e(i, kind, detail)
"""


def event_body(prefix: str, n: int) -> bytes:
    ref, pay, evt = f"{prefix}{n}-a1", f"pay_{prefix}{n}", f"evt_{prefix}{n}"
    payment = {"id": pay, "object": "payment", "account": "acct_store", "livemode": False,
               "amount": 4999, "currency": "EUR", "reference": ref, "status": "succeeded",
               "decline_code": None, "amount_refunded": 0, "next_action": None, "created": 1795900000}
    return orjson.dumps({"id": evt, "type": "payment.succeeded", "created": 1795900000,
                         "account": "acct_store", "livemode": False, "sequence": 2,
                         "data": {"object": payment}})


async def measure_intake(conn: asyncpg.Connection, env: dict[str, str], size: int) -> dict[str, Any]:
    prefix = f"wh{size}-"
    await conn.execute(SEED_STARTED, prefix, WEBHOOK_EVENTS, ACCOUNT)
    secret = env["PAYCORE_CARDCO_WEBHOOK_SECRET"]
    port = free_port()
    results: dict[str, int] = {}
    with service("webhooks", port, env):
        await wait_http(f"http://127.0.0.1:{port}/healthz")
        lat, elapsed = await closed_loop(  # keep-alive, HTTP/1.1 by hand, as bench/webhooks.py
            port, CLIENTS, SECONDS,
            signed_deliveries(delivery_order(WEBHOOK_EVENTS), secret, lambda n: event_body(prefix, n),
                              lambda n: f"evt_{prefix}{n}"),
            tally(results))
    return {"intake_per_s": len(lat.samples) / elapsed, "intake_p50_ms": lat.p50_ms,
            "intake_p99_ms": lat.p99_ms, "intake_deliveries": len(lat.samples), "intake_results": results}


# --- checkout ----------------------------------------------------------------------------------

SEED_ORDERS = """
INSERT INTO orders (order_id, customer_id, amount_minor, currency, created_at)
SELECT $1::text || n, 'cus_bench', 4999, 'EUR', now() FROM generate_series(1, $2) AS n
"""


async def measure_checkout(conn: asyncpg.Connection, env: dict[str, str], size: int) -> dict[str, Any]:
    prefix = f"ck{size}-"
    await conn.execute(SEED_ORDERS, prefix, CHECKOUT_ORDERS)
    token = jwt.encode({"sub": "cus_bench", "exp": int(time.time()) + 3600}, JWT_SECRET, algorithm="HS256")
    port = free_port()
    with service("checkout", port, env):
        await wait_http(f"http://127.0.0.1:{port}/healthz")
        lat, elapsed, errors = await pay_orders(port, token, prefix, CHECKOUT_ORDERS, clients=CLIENTS,
                                                seconds=SECONDS)
    return {"checkout_per_s": len(lat.samples) / elapsed, "checkout_p50_ms": lat.p50_ms,
            "checkout_p99_ms": lat.p99_ms, "checkout_payments": len(lat.samples), "checkout_errors": errors}


# --- relay -------------------------------------------------------------------------------------

COUNT_DUE = """
SELECT count(*) FROM outbox_messages
WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL AND next_attempt_at <= $1
"""


async def seed_pending(conn: asyncpg.Connection, rows: int) -> list[str]:
    """``rows`` fresh pending effects, three per ordering key (as bench/relay.py queues them)."""
    now = SystemClock().now()
    kinds = ["order-confirmation", "fulfillment-request", "refund-request"]
    keys = [f"attempt:{uuid.uuid4()}" for _ in range(max(1, rows // len(kinds)))]
    records = []
    for i in range(rows):
        key, kind = keys[i % len(keys)], kinds[(i // len(keys)) % len(kinds)]
        dedup = f"{key}:{kind}-growth"
        payload = contracts.example(kind, dedup_key=dedup, attempt_id=key.removeprefix("attempt:"))
        records.append((dedup, key, kind, orjson.dumps(payload).decode(), now, now))
    await conn.copy_records_to_table(
        "outbox_messages", records=records,
        columns=["dedup_key", "ordering_key", "kind", "payload", "created_at", "next_attempt_at"])
    return keys


async def measure_relay(conn: asyncpg.Connection, dsn: str, base: KafkaSettings, plans: growth_plans.Plans,
                        size: int) -> dict[str, Any]:
    keys = await seed_pending(conn, RELAY_ROWS)
    await conn.execute("ANALYZE outbox_messages")  # as autovacuum would after a burst of inserts
    now = SystemClock().now()
    pending = int(await conn.fetchval(COUNT_DUE, now))
    await growth_plans.relay_statements(conn, plans, RELAY_BATCH, now, keys[:50])
    run_id = uuid.uuid4().hex[:6]
    ks = base.with_topics(f"growth.effects.{size}.{run_id}", f"growth.alerts.{size}.{run_id}")
    await kafka.ensure_topics(ks)
    pool = await create_pool(dsn, min_size=1, max_size=2)
    producer = kafka.producer(ks, **PRODUCER_OPTIONS)
    await producer.start()
    try:
        config = RelayConfig(effects_topic=ks.effects_topic, alerts_topic=ks.alerts_topic,
                             reminder_interval=timedelta(seconds=900), batch_size=RELAY_BATCH)
        worker = Relay(pool, KafkaPublisher(producer), SystemClock(), config, name="growth-relay")
        published = failed = 0
        started = time.perf_counter()
        idle = 0
        while idle < 3 and time.perf_counter() - started < 300:
            result = await worker.run_once()
            published += result.published
            failed += result.failed + result.dead_lettered
            idle = idle + 1 if result.claimed == 0 else 0
        # The idle passes found nothing: they are not relay work.
        elapsed = time.perf_counter() - started
    finally:
        await producer.stop()
        await pool.close()
    left = int(await conn.fetchval(COUNT_DUE, SystemClock().now()))
    return {"relay_per_s": published / elapsed, "relay_rows": published, "relay_pending_before": pending,
            "relay_failed": failed, "relay_left_due": left}


# --- the run -----------------------------------------------------------------------------------

COUNTS = """
SELECT (SELECT count(*) FROM payment_attempts) AS attempts,
       (SELECT count(*) FROM payment_attempt_events) AS events,
       (SELECT count(*) FROM outbox_messages) AS outbox,
       (SELECT count(*) FROM orders) AS orders,
       (SELECT count(*) FROM payment_escalations) AS escalations,
       pg_database_size(current_database()) AS bytes
"""


async def measure_size(conn: asyncpg.Connection, dsn: str, env: dict[str, str], ks: KafkaSettings,
                       progress: growth_seed.Progress, due_rows: list[asyncpg.Record],
                       size: int) -> tuple[dict[str, Any], growth_plans.Plans]:
    before = progress.seconds
    await growth_seed.grow(conn, progress, size, now=SystemClock().now())
    metrics: dict[str, Any] = {"seed_s": progress.seconds - before}
    metrics.update({k: int(v) for k, v in (await conn.fetchrow(COUNTS)).items()})
    if CHECK:
        t0 = time.perf_counter()
        broken = await growth_seed.broken_invariants(conn)
        bad = metrics["broken_invariants"] = {k: v for k, v in broken.items() if v}
        print(f"    invariants: {bad or 'all hold'} ({time.perf_counter() - t0:.1f} s)")
    metrics["load_1m"] = os.getloadavg()[0]
    plans = growth_plans.Plans()
    s = await growth_plans.sample(conn, progress.orders)
    await growth_plans.checkout_and_intake(conn, plans, s, ACCOUNT, SystemClock().now())
    for step, measure in (("claim", lambda: measure_claim(conn, plans, due_rows)),
                          ("intake", lambda: measure_intake(conn, env, size)),
                          ("checkout", lambda: measure_checkout(conn, env, size)),
                          ("relay", lambda: measure_relay(conn, dsn, ks, plans, size))):
        got = await measure()
        metrics.update(got)
        print(f"    {step}: " + "  ".join(f"{k}={_fmt(v)}" for k, v in got.items()))
    metrics["load_1m_after"] = os.getloadavg()[0]
    return metrics, plans


def _fmt(v: Any) -> str:
    return f"{v:,.1f}" if isinstance(v, float) else str(v)


async def run() -> dict[str, Any]:
    """Grow one database through ``SIZES`` and measure at each; the structured result."""
    per_size: dict[int, dict[str, Any]] = {}
    plans: dict[int, dict[str, str]] = {}
    plan_details: dict[int, dict[str, dict[str, Any]]] = {}
    seq_scans: dict[int, list[str]] = {}
    sandbox_port = free_port()
    sandbox_url = f"http://127.0.0.1:{sandbox_port}"
    with broker() as (bootstrap, local), service("sandbox", sandbox_port, {}):
        await wait_http(f"{sandbox_url}/_sandbox/payments")
        base = KafkaSettings(bootstrap=bootstrap, idempotent=not local, effects_partitions=12,
                             alerts_partitions=3)
        async with bench_database() as dsn:
            env = service_env(dsn, sandbox_url)
            conn = await asyncpg.connect(dsn)
            try:
                await seed_provider_account(conn, sandbox_url, env)
                progress = growth_seed.Progress()
                due_rows = await conn.fetch(SEED_UNKNOWN, DUE, ACCOUNT)
                for size in SIZES:
                    print(f"  size {size:,} attempts")
                    metrics, found = await measure_size(conn, dsn, env, base, progress, due_rows, size)
                    per_size[size] = metrics
                    plans[size] = {name: p.summary for name, p in found.by_statement.items()}
                    plan_details[size] = {
                        name: {"ms": p.ms, "buffers": p.buffers, "seq_scans": list(p.seq_scans)}
                        for name, p in found.by_statement.items()}
                    plan_details[size].update({name: {"error": e} for name, e in found.errors.items()})
                    seq_scans[size] = sorted(name for name, p in found.by_statement.items() if p.seq_scans)
            finally:
                await conn.close()
    return {"sizes": SIZES, "per_size": per_size, "plans": plans, "plan_details": plan_details,
            "seq_scans": seq_scans}


METRICS = [("seed_s", "seed s"), ("attempts", "attempts"), ("events", "history rows"),
           ("outbox", "outbox rows"), ("bytes", "database MB"), ("claim_p50_ms", "claim p50 ms"),
           ("claim_p99_ms", "claim p99 ms"), ("claim_hot_share", "claim HOT share"),
           ("intake_per_s", "intake deliveries/s"),
           ("intake_p99_ms", "intake p99 ms"), ("checkout_per_s", "checkout payments/s"),
           ("checkout_p99_ms", "checkout p99 ms"), ("relay_per_s", "relay rows/s"),
           ("relay_rows", "relayed rows"), ("load_1m", "load (1 min)")]


def table(result: dict[str, Any]) -> str:
    sizes = result["sizes"]
    lines = [f"  {'':22}" + "".join(f"{s:>14,}" for s in sizes)]
    for key, label in METRICS:
        cells = []
        for s in sizes:
            v = result["per_size"][s].get(key)
            if key == "bytes" and v is not None:
                v = v / 1e6
            cells.append(f"{v:>14,.1f}" if isinstance(v, float) else f"{v!s:>14}")
        lines.append(f"  {label:22}" + "".join(cells))
    lines.append("  plans (bound parameters; [generic] = the prepared statement's generic plan):")
    for name in result["plans"][sizes[-1]]:
        ms = "  ".join(f"{result['plan_details'][s].get(name, {}).get('ms', float('nan')):7.2f} ms"
                       for s in sizes)
        lines.append(f"    {name:44} {ms}   {result['plans'][sizes[-1]][name]}")
    for s in sizes:
        if result["seq_scans"][s]:
            lines.append(f"  SEQ SCAN at {s:,}: {', '.join(result['seq_scans'][s])}")
    return "\n".join(lines)


# The per-size measures the runner charts (bench.charts.growth): "/s" rates, "ms" latencies.
CHARTED = {"checkout_per_s": "checkout payments/s", "intake_per_s": "intake deliveries/s",
           "relay_per_s": "relay rows/s", "checkout_p99_ms": "checkout p99 ms",
           "intake_p99_ms": "intake p99 ms", "claim_p50_ms": "claim p50 ms", "claim_p99_ms": "claim p99 ms"}


def stage(result: dict[str, Any]) -> Stage:
    """The run as the runner's :class:`bench.results.Stage`: charted measures per size, all in details."""
    sizes = result["sizes"]
    per_size = {str(size): {label: float(result["per_size"][size][key]) for key, label in CHARTED.items()}
                for size in sizes}
    largest, smallest = str(sizes[-1]), str(sizes[0])
    ratios = [Ratio(f"{label} at {int(largest):,} ÷ at {int(smallest):,}",
                    per_size[largest][label] / per_size[smallest][label])
              for label in ("checkout payments/s", "intake deliveries/s", "relay rows/s")
              if per_size[smallest][label]]
    return Stage(
        name="growth",
        workload=(f"one database grown to {', '.join(f'{s:,}' for s in sizes)} attempts"
                  f" (~10 history rows each), {SECONDS:.0f} s per measure, {CLIENTS} clients"),
        measures={f"{label} at {int(largest):,}": value for label, value in per_size[largest].items()},
        ratios=ratios,
        details={"per_size": per_size, "measured": {str(k): v for k, v in result["per_size"].items()},
                 "plans": result["plans"], "plan_details": result["plan_details"],
                 "seq_scans": result["seq_scans"]},
    )


def main() -> Stage:
    print(f"growth bench: sizes {', '.join(f'{s:,}' for s in SIZES)} attempts, {SECONDS:.0f} s per measure,"
          f" {CLIENTS} clients")
    result = asyncio.run(run())
    print(table(result))
    return stage(result)


if __name__ == "__main__":
    main()
