"""Benchmark plumbing: a database, services as child processes, latency statistics."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import asyncpg

from harness.postgres import find_server_dsn, migrated_database
from paycore.accounts import register_provider_accounts
from paycore.clock import SystemClock
from paycore.config import load_settings


@contextlib.asynccontextmanager
async def bench_database() -> AsyncIterator[str]:
    """A fresh, migrated database on the bench server; dropped afterwards."""
    admin = os.environ.get("PAYCORE_BENCH_DATABASE_URL") or await find_server_dsn()
    async with migrated_database(admin, "paycore_bench") as dsn:
        yield dsn


def service(name: str, port: int, env: dict[str, str], *,
            workers: int = 1) -> contextlib.AbstractContextManager[subprocess.Popen[bytes]]:
    """``paycore serve NAME [--workers N]`` as a child process; terminated on exit."""
    admin = [] if name == "sandbox" else ["--metrics-port", "0"]  # no admin port: benches run side by side
    more = ["--workers", str(workers)] if workers > 1 else []
    return paycore_process(["serve", name, "--host", "127.0.0.1", "--port", str(port), *admin, *more], env)


@contextlib.contextmanager
def paycore_process(args: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """``paycore ARGS`` as a child process (quiet logs); terminated on exit."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "paycore_cli", *args],
        env={**os.environ, "PAYCORE_LOG_LEVEL": "WARNING", **env},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@dataclass(frozen=True)
class Latencies:
    samples: list[float]

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.samples) * 1000 if self.samples else float("nan")

    @property
    def p99_ms(self) -> float:
        if len(self.samples) < 2:
            return float("nan")
        return statistics.quantiles(self.samples, n=100)[98] * 1000


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


async def pgbench(dsn: str, script: Path, *, clients: int, seconds: float,
                  extra: list[str] | None = None) -> tuple[float, float] | None:
    """Run a pgbench script against ``dsn``; (transactions/s, average latency ms), or None without pgbench."""
    if shutil.which("pgbench") is None:
        return None
    parts = urlsplit(dsn)
    socket_dir = parse_qs(parts.query).get("host", [None])[0]  # embedded servers use a socket
    env = {**os.environ, "PGHOST": socket_dir or parts.hostname or "127.0.0.1",
           "PGPORT": str(parts.port or 5432), "PGUSER": parts.username or "postgres",
           "PGDATABASE": parts.path.lstrip("/")}
    run = await asyncio.to_thread(
        subprocess.run,
        ["pgbench", "-n", "-c", str(clients), "-j", str(min(clients, 2)), "-T", str(int(seconds)),
         *(extra or []), "-f", str(script)],
        env=env, capture_output=True, text=True, check=True,
    )
    tps = re.search(r"tps = ([0-9.]+)", run.stdout)
    latency = re.search(r"latency average = ([0-9.]+) ms", run.stdout)
    if tps is None or latency is None:
        raise RuntimeError("unexpected pgbench output:\n" + run.stdout)
    return float(tps.group(1)), float(latency.group(1))


async def seed_provider_account(conn: asyncpg.Connection, base_url: str = "http://127.0.0.1:1",
                                env: Mapping[str, str] | None = None) -> None:
    """The sandbox's acct_store test account as a ``provider_accounts`` row (no secrets stored).

    Pass the services' ``env`` when they check the registered account against their own
    configuration (recovery does): a row that differs stops them at start-up.
    """
    settings = load_settings({"PAYCORE_CARDCO_BASE_URL": base_url, "PAYCORE_CARDCO_ACCOUNT": "acct_store",
                              "PAYCORE_CARDCO_API_KEY": "sk_test_acct_store_local", **(env or {})})
    await register_provider_accounts(conn, settings.accounts, SystemClock().now())
