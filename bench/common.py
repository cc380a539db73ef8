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
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import asyncpg

from harness.postgres import find_server_dsn, migrated_database
from harness.servers import free_port, stop_process
from paycore.accounts import register_provider_accounts
from paycore.clock import SystemClock
from paycore.config import load_settings


@contextlib.asynccontextmanager
async def bench_database() -> AsyncIterator[str]:
    """A fresh, migrated database on the bench server; dropped afterwards."""
    admin = os.environ.get("PAYCORE_BENCH_DATABASE_URL") or await find_server_dsn()
    async with migrated_database(admin, "paycore_bench") as dsn:
        yield dsn


@dataclass(frozen=True)
class Served:
    """A service the bench started: its process and, with ``--workers``, its admin port."""

    process: subprocess.Popen[bytes]
    admin_port: int | None

    def requests_by_worker(self) -> list[int]:
        """Requests each worker answered so far, largest first (``paycore_http_worker_requests``);
        empty without ``--workers``."""
        if self.admin_port is None:
            return []
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
        return sorted((round(float(v)) for v in re.findall(r'^paycore_http_worker_requests\{[^}]*\} (\S+)$',
                                                           text, re.M)), reverse=True)


@contextlib.contextmanager
def service(name: str, port: int, env: dict[str, str], *, workers: int = 1) -> Iterator[Served]:
    """``paycore serve NAME [--workers N]`` as a child process; terminated on exit.

    With ``--workers N`` it returns once the supervisor's admin port counts N live workers:
    a load generator that connects as soon as the first worker answers could put every
    keep-alive connection on it while the others are still starting."""
    admin_port = free_port() if workers > 1 else None  # else none: benches run side by side
    admin = [] if name == "sandbox" else ["--metrics-port", str(admin_port or 0)]
    more = ["--workers", str(workers)] if workers > 1 else []
    args = ["serve", name, "--host", "127.0.0.1", "--port", str(port), *admin, *more]
    with paycore_process(args, env) as proc:
        if admin_port is not None:
            wait_workers(proc, admin_port, workers)
        yield Served(proc, admin_port)


def wait_workers(proc: subprocess.Popen[bytes], admin_port: int, workers: int, within_s: float = 60) -> None:
    """Poll the supervisor's ``/healthz`` until it says all ``workers`` live (a deadline, no fixed sleep)."""
    url, want = f"http://127.0.0.1:{admin_port}/healthz", f"ok: {workers} of {workers} workers"
    deadline = time.monotonic() + within_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the service exited {proc.returncode} before its workers were up")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(url, timeout=5) as answer:
                if answer.read().decode() == want:
                    return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} never said {want!r} within {within_s:.0f} s")
        time.sleep(0.1)


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
        stop_process(proc)


class RawHTTP:
    """One keep-alive HTTP/1.1 connection, requests written by hand.

    The load generator shares the cores with what it measures, and a general client
    (httpx) costs about as much CPU per request as the service's own provider call; the
    baselines (pgbench) are C. This is the least a client can do: write the request,
    read the status line, headers and a Content-Length body (all paycore's services send).
    """

    def __init__(self, port: int, headers: Mapping[str, str] | None = None) -> None:
        self.port = port
        self.head = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> RawHTTP:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.writer is not None:
            self.writer.close()

    async def request(self, method: str, path: str, body: bytes = b"",
                      headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
        assert self.reader is not None and self.writer is not None, "use as an async context manager"
        self.writer.write(request_bytes(self.port, method, path, body, self.head, headers))
        return await read_response(self.reader)


Request = tuple[str, str, bytes, Mapping[str, str] | None]  # method, path, body, more headers

# Requests a client sends on one connection before it opens the next. With ``--workers N`` the
# kernel hands each new connection to a worker by a hash of its addresses, so four connections
# kept for a whole run split 2/2, 3/1 or 4/0 by chance and an ``xN`` number measured which.
# Turning over every 100 requests, a 30 s stage draws ~100 connections and its split comes
# out near even; at 1,000 (nginx's ``keepalive_requests``) a checkout stage drew ~11 and
# still read 64/36. A connect per 100 requests is one round trip more per 100.
REQUESTS_PER_CONNECTION = int(os.environ.get("PAYCORE_BENCH_REQUESTS_PER_CONNECTION", "100"))


async def closed_loop(port: int, clients: int, seconds: float, next_request: Callable[[], Request | None],
                      on_answer: Callable[[int, bytes], None],
                      headers: Mapping[str, str] | None = None) -> tuple[Latencies, float]:
    """``clients`` keep-alive connections, each sending its next request when the last is answered.

    Stops after ``seconds`` or when ``next_request`` has none left; each answer goes to
    ``on_answer(status, body)``. A client opens a new connection after
    :data:`REQUESTS_PER_CONNECTION` requests. Returns the requests' latencies and the elapsed
    seconds.
    """
    samples: list[float] = []
    stop_at = time.perf_counter() + seconds

    async def client() -> None:
        while time.perf_counter() < stop_at:
            async with RawHTTP(port, headers) as connection:
                for _ in range(REQUESTS_PER_CONNECTION):
                    if time.perf_counter() >= stop_at:
                        return
                    request = next_request()
                    if request is None:
                        return
                    t0 = time.perf_counter()
                    status, answer = await connection.request(*request)
                    samples.append(time.perf_counter() - t0)
                    on_answer(status, answer)

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return Latencies(samples), time.perf_counter() - started


def request_bytes(port: int, method: str, path: str, body: bytes, head: str = "",
                  headers: Mapping[str, str] | None = None) -> bytes:
    more = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    return (f"{method} {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
            f"content-length: {len(body)}\r\n{head}{more}\r\n").encode() + body


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """(status, body) of one HTTP/1.1 response with a Content-Length."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = next(int(line.split(":", 1)[1]) for line in lines[1:]
                  if line.lower().startswith("content-length:"))
    return status, await reader.readexactly(length)


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
