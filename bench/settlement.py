"""Settlement reconciliation throughput beside a same-run ``COPY`` of the same rows.

Workload: a Cardco lines CSV of ``PAYCORE_BENCH_SETTLEMENT_LINES`` lines (default 1,000,000)
on disk, against as many Succeeded payments (and their refunds) seeded in the database: 97 %
charges of them, 2 % refunds, 1 % planted exceptions (charges of no payment, wrong amounts). paycore
reconciles the file as ``paycore reconcile settlements --file`` does -- parse every row, COPY,
match, write, record and escalate the exceptions, in one transaction -- in a child process, so
that the peak RSS it reports is its own; it does so for a tenth of the lines too, so the two
peaks show whether memory grows with the batch (it should not: the lines stream).

Baseline: PostgreSQL alone loading the same file, ``COPY settlement_copy FROM STDIN (FORMAT
csv, HEADER)`` into a table of the same columns -- the least any reconciliation of these rows
costs here. Run: ``make bench`` (``PAYCORE_BENCH_STAGES=settlement`` for this stage alone).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import asyncpg

from bench.common import bench_database
from bench.results import Ratio, Stage

LINES = int(os.environ.get("PAYCORE_BENCH_SETTLEMENT_LINES", "1000000"))
ACCOUNT = "cardco:acct_bench:test"
HEADER = "line_id,type,payment,refund,capture,reference,created,currency,gross,fee,net\n"

SEED_ACCOUNT = """
INSERT INTO provider_accounts (provider_account, provider, account, environment, base_url, api_version,
    key_retention, escalation_margin, lookup_rate_per_s, updated_at)
VALUES ($1, 'cardco', 'acct_bench', 'test', 'http://127.0.0.1:9', '2026-11-01', interval '1 day',
    interval '2 hours', 20, now())
"""
# One paid order and its Succeeded payment per n; the payment of n is pay_<n>, 1000 + n % 5000 EUR cents.
SEED_PAYMENTS = """
WITH n AS (SELECT g FROM generate_series(1, $1::int) g),
orders_made AS (
    INSERT INTO orders (order_id, customer_id, amount_minor, currency, status, created_at)
    SELECT 'bench-' || g, 'cus_bench', 1000 + g % 5000, 'EUR', 'Paid', now() FROM n
)
INSERT INTO payment_attempts (attempt_id, order_id, customer_id, attempt_number, provider_account, endpoint,
    api_version, client_reference, idempotency_key, request_body, amount_minor, currency, state,
    provider_status, created_at, first_sent_at, escalation_deadline, provider_payment_id, next_check_at)
SELECT md5('bench-' || g)::uuid, 'bench-' || g, 'cus_bench', 1, $2, 'http://127.0.0.1:9/v1/payments',
       '2026-11-01', 'bench-' || g || '-a1', md5('key-' || g), '{}', 1000 + g % 5000, 'EUR', 'Succeeded',
       'succeeded', now(), now(), now() + interval '22 hours', 'pay_' || g, now() + interval '1 minute'
FROM n
"""
# Every 50th payment, from the first, refunded whole: re_<n>.
SEED_REFUNDS = """
INSERT INTO payment_operations (operation_id, attempt_id, kind, requested_by, provider_account, endpoint,
    api_version, client_reference, idempotency_key, request_body, amount_minor, currency, state,
    provider_status, provider_operation_id, created_at, first_sent_at, escalation_deadline, next_check_at)
SELECT md5('refund-' || g)::uuid, md5('bench-' || g)::uuid, 'refund', 'backoffice:bench', $2,
       'http://127.0.0.1:9/v1/refunds', '2026-11-01', 'bench-' || g || '-r1', md5('refund-key-' || g), '{}',
       1000 + g % 5000, 'EUR', 'Succeeded', 'succeeded', 're_' || g, now(), now(),
       now() + interval '22 hours', now() + interval '1 minute'
FROM generate_series(1, $1::int) g
WHERE g % 50 = 1
"""
BASELINE_TABLE = """
CREATE TABLE settlement_copy (line_id text, type text, payment text, refund text, capture text,
    reference text, created timestamptz, currency text, gross bigint, fee bigint, net bigint)
"""


def write_report(path: Path, first: int, lines: int) -> None:
    """The lines CSV: row n is about payment n, from ``first`` (see the module's workload)."""
    with path.open("w", encoding="utf-8") as out:
        out.write(HEADER)
        for n in range(first, first + lines):
            amount = 1000 + n % 5000
            reference = f"bench-{n}-a1"
            if n % 100 == 0:  # planted: a charge of no payment here, or a wrong amount
                kind, refund = "charge", ""
                payment, gross = (f"pay_x{n}", amount) if n % 200 == 0 else (f"pay_{n}", amount + 1)
                reference = f"nobody-{n}" if n % 200 == 0 else reference
            elif n % 50 == 1:
                kind, payment, refund, gross = "refund", f"pay_{n}", f"re_{n}", -amount
                reference = f"bench-{n}-r1"
            else:
                kind, payment, refund, gross = "charge", f"pay_{n}", "", amount
            fee = round(gross * 0.014) + 25 if gross > 0 else 0
            out.write(f"ln_{n},{kind},{payment},{refund},,{reference},2026-12-03T10:00:00Z,EUR,"
                      f"{gross},{fee},{gross - fee}\n")


async def seed(dsn: str, lines: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(SEED_ACCOUNT, ACCOUNT)
        await conn.execute(SEED_PAYMENTS, lines, ACCOUNT)
        await conn.execute(SEED_REFUNDS, lines, ACCOUNT)
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


async def baseline_copy(dsn: str, report: Path) -> float:
    """Seconds PostgreSQL takes to COPY the file into a table of its columns."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(BASELINE_TABLE)
        started = time.perf_counter()
        with report.open("rb") as source:
            await conn.copy_to_table("settlement_copy", source=source, format="csv", header=True)
        return time.perf_counter() - started
    finally:
        await conn.close()


def reconcile_in_child(dsn: str, report: Path, batch_id: str) -> dict[str, float]:
    """``python -m bench.settlement_child``: its seconds, counts and peak RSS."""
    command = [sys.executable, "-m", "bench.settlement_child", dsn, str(report), ACCOUNT, batch_id]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    measured: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return measured


def main() -> Stage:
    print(f"settlement: reconcile a Cardco batch of {LINES:,} lines against {LINES:,} payments")
    stage = Stage("settlement", f"{LINES:,}-line Cardco batch, {LINES:,} payments, 1% planted exceptions")

    async def run() -> None:
        async with bench_database() as dsn:
            started = time.perf_counter()
            tenth = max(LINES // 10, 1)
            await seed(dsn, LINES + tenth)  # the small batch is about payments of its own
            print(f"  seeded {LINES + tenth:,} payments in {time.perf_counter() - started:.1f} s")
            with tempfile.TemporaryDirectory(prefix="paycore-bench-settlement-") as tmp:
                small, large = Path(tmp, "small.csv"), Path(tmp, "large.csv")
                write_report(small, LINES + 1, tenth)
                write_report(large, 1, LINES)
                copy_s = await baseline_copy(dsn, large)
                small_run = reconcile_in_child(dsn, small, "bench-tenth")
                whole = reconcile_in_child(dsn, large, "bench-whole")
        copy_rate, ours = LINES / copy_s, whole["lines"] / whole["seconds"]
        print(f"  COPY of the rows (baseline)   {copy_rate:12,.0f} lines/s  ({copy_s:.1f} s)")
        print(f"  paycore reconciles            {ours:12,.0f} lines/s  ({whole['seconds']:.1f} s; "
              f"{whole['matched']:,.0f} matched, {whole['exceptions']:,.0f} exceptions)")
        print(f"  peak RSS: {small_run['max_rss_mb']:.0f} MB at {small_run['lines']:,.0f} lines, "
              f"{whole['max_rss_mb']:.0f} MB at {whole['lines']:,.0f} lines")
        stage.measures.update({
            "copy lines/s": copy_rate, "reconcile lines/s": ours, "reconcile seconds": whole["seconds"],
            "peak RSS MB (tenth)": small_run["max_rss_mb"], "peak RSS MB (whole)": whole["max_rss_mb"]})
        stage.ratios.append(Ratio("reconcile lines/s over COPY lines/s", ours / copy_rate))
        rss_growth = whole["max_rss_mb"] / small_run["max_rss_mb"]
        stage.ratios.append(Ratio("peak RSS whole batch over a tenth of it", rss_growth))
        stage.details["counts"] = {"tenth": small_run, "whole": whole}

    asyncio.run(run())
    return stage


if __name__ == "__main__":
    main()
