"""The dispatcher as an operator runs it: the CLI worker, /metrics, SIGTERM, requeue/skip, retention."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from datetime import timedelta

import asyncpg
import httpx
import pytest

from harness.servers import free_port
from paycore import outbox, outbox_admin
from paycore.clock import FakeClock
from paycore.kafka import KafkaSettings
from paycore_cli.main import main

from .support import effects, kafka_publisher, outbox_row, queue_bare, relay


def worker_env(db_dsn: str, ks: KafkaSettings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAYCORE_")}
    env.update({
        "PAYCORE_DATABASE_URL": db_dsn, "PAYCORE_KAFKA_BOOTSTRAP": ks.bootstrap,
        "PAYCORE_KAFKA_IDEMPOTENT": "true" if ks.idempotent else "false",
        "PAYCORE_KAFKA_EFFECTS_TOPIC": ks.effects_topic, "PAYCORE_KAFKA_ALERTS_TOPIC": ks.alerts_topic,
        "PAYCORE_KAFKA_EFFECTS_PARTITIONS": str(ks.effects_partitions),
        "PAYCORE_KAFKA_ALERTS_PARTITIONS": str(ks.alerts_partitions),
        "PAYCORE_LOG_LEVEL": "WARNING",
    })
    return env


def metric(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_paycore_run_dispatcher_publishes_serves_metrics_and_stops_cleanly_on_sigterm(
    pool: asyncpg.Pool, db_dsn: str, clock: FakeClock, ks: KafkaSettings
) -> None:
    key = f"attempt:{uuid.uuid4()}"
    for effect in ("order-confirmation", "fulfillment-request"):
        await queue_bare(pool, clock, key, effect)
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "paycore_cli", "run", "dispatcher", "--relays", "2",
        "--metrics-port", str(port),
        env=worker_env(db_dsn, ks), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        text = ""
        async with asyncio.timeout(30), httpx.AsyncClient(timeout=2) as http:
            while metric(text, "paycore_outbox_published_total") < 2:
                if proc.returncode is not None:
                    out = await proc.stdout.read() if proc.stdout else b""
                    pytest.fail(f"dispatcher exited: {out.decode()}")
                try:
                    text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
                except httpx.TransportError:
                    text = ""
                await asyncio.sleep(0.05)  # poll interval; the metric is the condition
        for name in ("paycore_outbox_backlog", "paycore_outbox_oldest_pending_age_seconds",
                     "paycore_outbox_failures_total", "paycore_outbox_dead_letters_total",
                     "paycore_outbox_dead_lettered"):
            assert name in text
        got = await effects(ks, 2)
        assert [m.headers["kind"] for m in got] == ["order-confirmation", "fulfillment-request"]
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 15) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_paycore_outbox_requeue_and_skip_act_only_on_dead_lettered_rows(
    pool: asyncpg.Pool, db_dsn: str, clock: FakeClock, ks: KafkaSettings,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    key = f"attempt:{uuid.uuid4()}"
    huge = await queue_bare(pool, clock, key, "order-confirmation", note="x" * (ks.max_request_size + 1))
    later = await queue_bare(pool, clock, key, "refund-request")
    monkeypatch.setenv("PAYCORE_DATABASE_URL", db_dsn)
    refused = ["outbox", "skip", str(later), "--operator", "ops", "--reason", "not stuck"]
    assert await asyncio.to_thread(main, refused) == 1
    assert "not dead-lettered" in capsys.readouterr().err
    async with kafka_publisher(ks) as pub:
        assert (await relay(pool, pub, clock, ks, max_delivery_attempts=1).run_once()).dead_lettered == 1
        args = ["outbox", "requeue", str(huge), "--operator", "ops", "--reason", "try again"]
        assert await asyncio.to_thread(main, args) == 0
        out = capsys.readouterr().out
        assert "requeue done" in out and f"outbox-requeue by ops on outbox message {huge}" in out
        assert "reason: try again" in out and "delivery_attempts: 1 → 0" in out
        row = await outbox_row(pool, huge)
        assert row["dead_lettered_at"] is None and row["delivery_attempts"] == 0
        clock.current = max(clock.now(), row["next_attempt_at"])  # the CLI acts on the system clock
        assert (await relay(pool, pub, clock, ks, max_delivery_attempts=1).run_once()).dead_lettered == 1
        args = ["outbox", "skip", str(huge), "--operator", "ops", "--reason", "sent by hand"]
        assert await asyncio.to_thread(main, args) == 0
        assert (await relay(pool, pub, clock, ks).run_once()).published_by_kind.get("refund-request") == 1
    actions = await pool.fetch("SELECT * FROM operator_actions ORDER BY action_id")
    assert [(a["action"], a["message_id"], a["operator"]) for a in actions] == [
        ("outbox-requeue", huge, "ops"), ("outbox-skip", huge, "ops")]


async def test_retention_deletes_dispatched_rows_past_the_horizon_and_keeps_their_dedup_keys(
    pool: asyncpg.Pool, clock: FakeClock, ks: KafkaSettings
) -> None:
    old_key = f"attempt:{uuid.uuid4()}"
    await queue_bare(pool, clock, old_key, "order-confirmation")
    async with kafka_publisher(ks) as pub:
        await relay(pool, pub, clock, ks).run_once()
        clock.advance(86_400 * 31)
        new_key = f"attempt:{uuid.uuid4()}"
        await queue_bare(pool, clock, new_key, "order-confirmation")
        await relay(pool, pub, clock, ks).run_once()
    pending_key = f"attempt:{uuid.uuid4()}"
    await queue_bare(pool, clock, pending_key, "order-confirmation")
    result = await outbox_admin.purge_dispatched(pool, now=clock.now(), older_than=timedelta(days=30))
    assert (result.deleted, result.archived) == (1, 1)
    left = {r["dedup_key"] for r in await pool.fetch("SELECT dedup_key FROM outbox_messages")}
    assert left == {f"{new_key}:order-confirmation", f"{pending_key}:order-confirmation"}
    # A late replay of the deleted row's cause is still recognised as a duplicate.
    async with pool.acquire() as conn:
        again = await outbox.enqueue(conn, dedup_key=f"{old_key}:order-confirmation",
                                     kind="order-confirmation", payload={}, now=clock.now(), ordering=old_key)
    assert again is None
    assert await pool.fetchval("SELECT count(*) FROM outbox_messages WHERE ordering_key = $1", old_key) == 0
