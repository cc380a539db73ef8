"""Every worker serves /healthz and /metrics; /healthz goes 503 when its loop is wedged.

Here because three of the four workers need the broker this suite starts. A
wedge is a real one: the test holds a lock on the table the loop's next
statement needs, sees the loop's backend wait on it, and moves a fake monotonic
clock past the loop's bound -- time, not sleeps, makes it stale. Releasing the
lock lets the loop go round and beat, and /healthz is 200 again.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import asyncpg
import httpx
import pytest
from prometheus_client import CollectorRegistry

from harness.servers import free_port
from paycore.clock import FakeClock, SystemClock
from paycore.consumer_health import run_with_health
from paycore.http.health_server import serve_health
from paycore.kafka import KafkaSettings
from paycore.liveness import Liveness
from paycore.providers.cardco import CardcoClient
from paycore_dispatcher.demo_consumers import demo_consumer
from paycore_dispatcher.relay import liveness_bound_s
from paycore_dispatcher.worker import relay_config, run_dispatcher
from paycore_recovery.loop import RecoveryWorker
from paycore_recovery.loop import liveness_bound_s as recovery_bound_s
from paycore_recovery.metrics import RecoveryMetrics
from paycore_recovery.settings import RecoverySettings
from tests.support.stack import checkout_settings

from .support import kafka_publisher, queue_bare, relay
from .test_worker_and_operators import worker_env

NOWHERE = "http://127.0.0.1:9"  # never called: no attempt or alert exists in these tests


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def until(check: Callable[[], Awaitable[bool]], what: str, deadline_s: float = 30.0) -> None:
    """Poll ``check`` until true, failing at the deadline (the check is the synchronisation)."""
    try:
        async with asyncio.timeout(deadline_s):
            while not await check():  # noqa: ASYNC110 -- polls a server; the check is the condition
                await asyncio.sleep(0.05)
    except TimeoutError:
        pytest.fail(f"timed out waiting for {what}")


async def status(url: str) -> int | None:
    async with httpx.AsyncClient(timeout=2) as http:
        try:
            return (await http.get(url)).status_code
        except httpx.TransportError:
            return None


@asynccontextmanager
async def locked(pool: asyncpg.Pool, table: str) -> AsyncIterator[None]:
    """Hold an exclusive lock on ``table``: any statement on it waits until the block ends."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        yield


async def someone_waits_on_a_lock(pool: asyncpg.Pool) -> bool:
    return bool(await pool.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock'"))


async def wedge_then_release(pool: asyncpg.Pool, table: str, port: int, fake: FakeMonotonic,
                             bound_s: float, loop: str) -> None:
    """The loop blocks on ``table``: 200 within its bound, 503 past it, 200 once it goes round again."""
    healthz = f"http://127.0.0.1:{port}/healthz"
    await until(lambda: _is(healthz, 200), "/healthz 200 while the loop runs")
    async with locked(pool, table):
        await until(lambda: someone_waits_on_a_lock(pool), f"the {loop} loop to block on {table}")
        fake.now += bound_s - 1  # wedged, but not yet for longer than a healthy pass may take
        assert await status(healthz) == 200
        fake.now += 2
        async with httpx.AsyncClient(timeout=2) as http:
            response = await http.get(healthz)
        assert response.status_code == 503
        assert response.text.startswith("stale: ") and loop in response.text
    await until(lambda: _is(healthz, 200), "/healthz 200 once the loop beats again")


async def _is(url: str, expected: int) -> bool:
    return await status(url) == expected


# -------------------------------------------------------------------------- the server itself


async def test_healthz_is_503_naming_the_loop_past_its_bound_and_200_after_it_beats() -> None:
    fake = FakeMonotonic()
    loops = [Liveness("relay-0", 60.0, monotonic=fake), Liveness("relay-1", 60.0, monotonic=fake)]
    port = free_port()
    async with serve_health(CollectorRegistry(), loops, "127.0.0.1", port, worker="test"), \
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=2) as http:
        first = await http.get("/healthz")
        assert (first.status_code, first.text) == (200, "ok")
        fake.now += 60.0
        assert (await http.get("/healthz")).status_code == 200  # the bound itself is still alive
        fake.now += 0.5
        loops[0].beat()
        stale = await http.get("/healthz")
        assert stale.status_code == 503
        assert stale.text == "stale: relay-1 (no beat for 60 s, bound 60 s)"
        loops[1].beat()
        assert (await http.get("/healthz")).status_code == 200
        assert (await http.get("/metrics")).status_code == 200
    assert await status(f"http://127.0.0.1:{port}/healthz") is None  # stopped with the block


# ------------------------------------------------------------------ each worker as run by the CLI


def _recovery_env(db_dsn: str, ks: KafkaSettings) -> dict[str, str]:
    return {**worker_env(db_dsn, ks), "PAYCORE_CARDCO_BASE_URL": NOWHERE,
            "PAYCORE_CARDCO_ACCOUNT": "acct_store", "PAYCORE_CARDCO_ENVIRONMENT": "test",
            "PAYCORE_CARDCO_API_KEY": "sk_test_acct_store_local"}


WORKERS = {
    "recovery": (["recovery"], "paycore_recovery_claims_total"),
    "dispatcher": (["dispatcher"], "paycore_outbox_backlog"),
    "consumer": (["consumer", "fulfillment"], "paycore_consumer_handled_total"),
    "alerts": (["alerts"], "paycore_consumer_handled_total"),
}


@pytest.mark.parametrize("kind", list(WORKERS))
async def test_paycore_run_worker_serves_healthz_and_its_metrics_on_the_given_host_and_port(
    kind: str, db_dsn: str, ks: KafkaSettings
) -> None:
    argv, metric_name = WORKERS[kind]
    env = _recovery_env(db_dsn, ks) if kind == "recovery" else worker_env(db_dsn, ks)
    env["PAYCORE_ALERT_WEBHOOK_URL"] = NOWHERE
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "paycore_cli", "run", *argv, "--metrics-host", "127.0.0.1",
        "--metrics-port", str(port), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async def healthy() -> bool:
            if proc.returncode is not None:
                out = await proc.stdout.read() if proc.stdout else b""
                pytest.fail(f"{kind} exited: {out.decode()}")
            return await status(base + "/healthz") == 200

        await until(healthy, f"{kind} /healthz 200", deadline_s=60)
        async with httpx.AsyncClient(timeout=2) as http:
            assert (await http.get(base + "/healthz")).text == "ok"
            metrics = await http.get(base + "/metrics")
        assert metrics.status_code == 200 and metric_name in metrics.text
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


# ------------------------------------------------------------------------ each loop, wedged


async def test_a_dispatcher_whose_relay_is_wedged_answers_503(
    pool: asyncpg.Pool, db_dsn: str, ks: KafkaSettings
) -> None:
    settings = checkout_settings(NOWHERE, db_dsn)
    fake, port, stop = FakeMonotonic(), free_port(), asyncio.Event()
    task = asyncio.create_task(run_dispatcher(settings, ks, stop, pool=pool, metrics_port=port,
                                              retention_every_s=None, monotonic=fake))
    try:
        await wedge_then_release(pool, "outbox_messages", port, fake,
                                 liveness_bound_s(relay_config(settings, ks)), "relay-0")
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)


async def test_a_recovery_worker_whose_loop_is_wedged_answers_503(pool: asyncpg.Pool, db_dsn: str) -> None:
    settings = checkout_settings(NOWHERE, db_dsn)
    recovery = RecoverySettings(interval_s=0.05)
    fake, port, stop = FakeMonotonic(), free_port(), asyncio.Event()
    clock = FakeClock()
    liveness = Liveness("recovery", recovery_bound_s(recovery), monotonic=fake)
    client = CardcoClient(settings.accounts, clock, max_call_duration_s=settings.budgets.max_call_duration_s)
    worker = RecoveryWorker(pool=pool, client=client, clock=clock, settings=settings, recovery=recovery,
                            metrics=RecoveryMetrics(), liveness=liveness)

    async def run() -> None:
        async with serve_health(worker.metrics.registry, [liveness], "127.0.0.1", port, worker="recovery"):
            await worker.run_forever(stop)

    task = asyncio.create_task(run())
    try:
        await wedge_then_release(pool, "payment_attempts", port, fake, liveness.bound_s, "recovery")
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)
        await client.aclose()


async def test_a_consumer_whose_handler_is_wedged_answers_503(
    pool: asyncpg.Pool, ks: KafkaSettings
) -> None:
    clock = FakeClock()
    consumer = demo_consumer("fulfillment", pool, ks, SystemClock(), group_id=f"h-{uuid.uuid4().hex[:6]}",
                             session_timeout_ms=2_000, heartbeat_interval_ms=300)
    fake, port, stop = FakeMonotonic(), free_port(), asyncio.Event()
    task = asyncio.create_task(run_with_health(consumer, stop, worker="consumer fulfillment",
                                               metrics_host="127.0.0.1", metrics_port=port, monotonic=fake))
    try:
        await until(lambda: _is(f"http://127.0.0.1:{port}/healthz", 200), "the consumer's /healthz")
        await asyncio.wait_for(consumer.wait_assigned(), 30)
        async with locked(pool, "consumer_inbox"):
            await queue_bare(pool, clock, f"attempt:{uuid.uuid4()}", "fulfillment-request")
            async with kafka_publisher(ks) as pub:
                assert (await relay(pool, pub, clock, ks).run_once()).published == 1
            # The message arrives and its inbox insert waits on the lock: the handler is wedged.
            await until(lambda: someone_waits_on_a_lock(pool), "the consumer to block on consumer_inbox")
            fake.now += consumer.liveness_bound_s() + 1
            assert await status(f"http://127.0.0.1:{port}/healthz") == 503
        await until(lambda: _is(f"http://127.0.0.1:{port}/healthz", 200), "the consumer to beat again")
        assert consumer.stats.handled == 1
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)
