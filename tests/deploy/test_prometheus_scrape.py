"""A real Prometheus (the Debian package's binary) with deploy/prometheus/rules scrapes a running
stack on real PostgreSQL: the recovery worker and the dispatcher as the CLI runs them, and
checkout's /metrics. With an attempt Unknown for an hour and a dead-lettered outbox row, the
raw gauges, the recording rules and the alerts come out of Prometheus's HTTP API."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import asyncpg
import httpx
import yaml

from harness.servers import free_port
from paycore import outbox
from paycore.attempts import record_outcome
from paycore.clock import FakeClock
from paycore.domain import ProviderOutcome
from paycore.kafka import KafkaSettings
from tests.support.attempts import started_attempt
from tests.support.stack import Stack
from tests.support.timings import REMINDER_INTERVAL
from tests.support.webhooks import TEST

from .monitoring import PROMETHEUS, RULES, alert_rules, recording_rules

T = TypeVar("T")
HOUR = timedelta(hours=1)

DEAD_LETTER = """
UPDATE outbox_messages SET dead_lettered_at = $2, delivery_attempts = 10, last_error = 'test'
WHERE message_id = $1
"""


def scrape_targets(recovery_port: int, dispatcher_port: int, checkout_url: str) -> dict[str, str]:
    """Job -> the URL of its /metrics. The one place to change when a service's metrics move
    (checkout's to an admin port, say)."""
    return {
        "recovery": f"http://127.0.0.1:{recovery_port}/metrics",
        "dispatcher": f"http://127.0.0.1:{dispatcher_port}/metrics",
        "checkout": f"{checkout_url}/metrics",
    }


def prometheus_config(targets: dict[str, str]) -> dict[str, Any]:
    """deploy/prometheus/prometheus.yml's shape with these targets, 1 s intervals, the real rules."""
    jobs = [{"job_name": job, "metrics_path": urlsplit(url).path,
             "static_configs": [{"targets": [urlsplit(url).netloc]}]} for job, url in targets.items()]
    return {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)], "scrape_configs": jobs}


def worker_env(db_dsn: str, ks: KafkaSettings, sandbox_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAYCORE_")}
    env.update({
        "PAYCORE_DATABASE_URL": db_dsn, "PAYCORE_KAFKA_BOOTSTRAP": ks.bootstrap,
        "PAYCORE_KAFKA_IDEMPOTENT": "true" if ks.idempotent else "false",
        "PAYCORE_KAFKA_EFFECTS_TOPIC": ks.effects_topic, "PAYCORE_KAFKA_ALERTS_TOPIC": ks.alerts_topic,
        "PAYCORE_KAFKA_EFFECTS_PARTITIONS": str(ks.effects_partitions),
        "PAYCORE_KAFKA_ALERTS_PARTITIONS": str(ks.alerts_partitions),
        "PAYCORE_CARDCO_BASE_URL": sandbox_url, "PAYCORE_CARDCO_ACCOUNT": "acct_store",
        "PAYCORE_CARDCO_ENVIRONMENT": "test", "PAYCORE_CARDCO_API_KEY": "sk_test_acct_store_local",
        "PAYCORE_LOG_LEVEL": "WARNING",
    })
    return env


@asynccontextmanager
async def process(*argv: str, log: Path, env: dict[str, str] | None = None
                  ) -> AsyncIterator[asyncio.subprocess.Process]:
    """A child process writing to ``log``, stopped (SIGTERM, then SIGKILL) by its pid when the block ends."""
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(*argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def until(check: Callable[[], Awaitable[T | None]], what: str, deadline_s: float = 25) -> T:
    """Poll ``check`` until it returns a truthy value (Prometheus scrapes and evaluates every second)."""
    deadline = time.monotonic() + deadline_s
    last: T | None = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.2)  # poll interval; the condition is the API's answer
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


async def _unknown_for_an_hour(stack: Stack) -> None:
    """An attempt sent an hour ago whose answer was lost (Unknown), as checkout records it."""
    then = FakeClock(current=datetime.now(UTC) - HOUR)
    account = stack.settings.account(TEST)
    assert account is not None
    order = await stack.shop.create_order()
    attempt = await started_attempt(stack.pool, then, account, order, "cus_alice")
    lost = ProviderOutcome.unknown("provider.no-response.caller")
    await record_outcome(stack.pool, attempt.attempt_id, lost, now=then.now(), actor="endpoint",
                         recheck_after_s=0, reminder_interval=REMINDER_INTERVAL)


async def _dead_lettered_row(pool: asyncpg.Pool) -> None:
    key = f"attempt:{uuid.uuid4()}"
    now = datetime.now(UTC)
    async with pool.acquire() as conn:
        mid = await outbox.enqueue(conn, dedup_key=f"{key}:order-confirmation", kind="order-confirmation",
                                   payload={}, now=now, ordering=key)
        assert mid is not None
        await conn.execute(DEAD_LETTER, mid, now)


async def test_prometheus_scrapes_the_stack_and_evaluates_the_rules(
    stack: Stack, db_dsn: str, ks: KafkaSettings, tmp_path: Path
) -> None:
    await _unknown_for_an_hour(stack)
    await stack.sandbox.fault("not_processed_503")  # every lookup and resend fails: it stays Unknown
    await _dead_lettered_row(stack.pool)
    recovery_port, dispatcher_port, prometheus_port = free_port(), free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus_config(
        scrape_targets(recovery_port, dispatcher_port, stack.checkout_url))), encoding="utf-8")
    cli = (sys.executable, "-m", "paycore_cli", "run")
    env = worker_env(db_dsn, ks, stack.sandbox.url)
    api = f"http://127.0.0.1:{prometheus_port}/api/v1"
    async with (
        process(*cli, "recovery", "--metrics-host", "127.0.0.1", "--metrics-port", str(recovery_port),
                log=tmp_path / "recovery.log", env=env),
        process(*cli, "dispatcher", "--metrics-host", "127.0.0.1", "--metrics-port", str(dispatcher_port),
                log=tmp_path / "dispatcher.log", env=env),
        process(PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{prometheus_port}", "--log.level=warn",
                log=tmp_path / "prometheus.log") as prometheus,
        httpx.AsyncClient(timeout=5) as http,
    ):
        async def ready() -> bool:
            assert prometheus.returncode is None, "prometheus exited"
            try:
                return (await http.get(f"http://127.0.0.1:{prometheus_port}/-/ready")).status_code == 200
            except httpx.TransportError:
                return False

        await until(ready, "prometheus ready")

        async def query(expr: str) -> list[dict[str, Any]] | None:
            body = (await http.get(f"{api}/query", params={"query": expr})).json()
            assert body["status"] == "success", body
            result: list[dict[str, Any]] = body["data"]["result"]
            return result

        async def value(expr: str) -> float | None:
            result = await query(expr)
            return float(result[0]["value"][1]) if result else None

        async def targets() -> dict[str, str]:
            body = (await http.get(f"{api}/targets")).json()
            active = body["data"]["activeTargets"]
            return {t["labels"]["job"]: f"{t['health']} {t['lastError']}" for t in active}

        async def all_up() -> bool:
            health = await targets()
            return len(health) == 3 and all(h.startswith("up") for h in health.values())

        try:
            await until(all_up, "recovery, dispatcher and checkout scraped")
        except AssertionError as e:  # say why: the targets' last scrape errors, and the logs' paths
            raise AssertionError(f"{e}: {await targets()} (logs in {tmp_path})") from None
        age = await until(lambda: value("paycore_recovery_oldest_unknown_age_seconds"), "the raw gauge")
        assert age > HOUR.total_seconds() - 60
        recorded = await until(lambda: value("paycore:recovery_oldest_unknown_age_seconds:max"), "recorded")
        assert recorded > HOUR.total_seconds() - 60
        assert await until(lambda: value("paycore:outbox_dead_lettered:sum"), "dead letters recorded") == 1

        async def alerts() -> dict[str, str] | None:
            body = (await http.get(f"{api}/alerts")).json()
            states = {a["labels"]["alertname"]: a["state"] for a in body["data"]["alerts"]}
            wanted = {"PaycoreOutboxDeadLetters", "PaycoreUnknownAttemptTooOld"}
            return states if wanted <= states.keys() else None

        states = await until(alerts, "the dead-letter and old-Unknown alerts")
        assert states["PaycoreOutboxDeadLetters"] == "firing"  # no `for`
        assert states["PaycoreUnknownAttemptTooOld"] == "pending"  # `for: 5m`

        async def rules_healthy() -> list[dict[str, Any]] | None:
            body = (await http.get(f"{api}/rules")).json()
            rules = [r for g in body["data"]["groups"] for r in g["rules"]]
            return rules if rules and all(r["health"] == "ok" for r in rules) else None

        rules = await until(rules_healthy, "every rule evaluated without error")
        assert len(rules) == len(recording_rules()) + len(alert_rules())

