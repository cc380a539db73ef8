"""The workers ``paycore up`` does not start log JSON lines without secrets, tokens or cards.

tests/checkout/test_log_hygiene.py scans what ``paycore up`` runs; this runs the rest as
the processes an operator starts, at DEBUG in JSON: the dispatcher, both reference
consumers, the incident agent and alert delivery behind it (PagerDuty format, its routing
key and a webhook URL with a token in its path as the secrets). Through them: an
escalation of a real attempt, relayed to ops.alerts, passed through the agent and
delivered to a real HTTP receiver, and the attempt's effects handled by the consumers.
Every line each process writes is parsed and scanned with the same rule.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from harness.servers import free_port, serve_asgi
from paycore import escalations
from paycore.clock import FakeClock
from paycore.domain import EscalationReason
from paycore.kafka import KafkaSettings
from paycore_incidents.app import Topics
from paycore_incidents.commands import ensure_topics
from tests.checkout.test_log_hygiene import leaks
from tests.dispatcher.conftest import kafka_bootstrap, ks  # noqa: F401 -- the session's broker, own topics
from tests.dispatcher.support import queue_effect
from tests.dispatcher.test_worker_and_operators import worker_env
from tests.matrix.helpers import seed_account, started_attempt
from tests.support.timings import REMINDER_INTERVAL

ROOT = Path(__file__).resolve().parents[2]
ROUTING_KEY = "R0UTINGkey" + uuid.uuid4().hex  # PagerDuty's integration key
HOOK_TOKEN = "T0KEN" + uuid.uuid4().hex  # as a Slack or PagerDuty webhook URL carries one


async def until(check: Callable[[], Awaitable[bool]], what: str, deadline_s: float = 60.0) -> None:
    try:
        async with asyncio.timeout(deadline_s):
            while not await check():  # noqa: ASYNC110 -- polls; the check is the condition
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"{what} within {deadline_s} s") from None


class Process:
    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.args, self.env, self.log = args, env, log
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        with self.log.open("wb") as out:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "paycore_cli", *self.args, cwd=ROOT, env=self.env,
                stdout=out, stderr=subprocess.STDOUT)

    def assert_running(self) -> None:
        assert self.proc is not None and self.proc.returncode is None, \
            f"{' '.join(self.args)} exited:\n{self.log.read_text()[-3000:]}"

    async def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), 30)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()

    def records(self) -> list[dict[str, Any]]:
        records = []
        for line in self.log.read_text().splitlines():
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                raise AssertionError(f"{self.args[1]}: not a JSON log line: {line[:300]!r}") from None
            assert isinstance(record, dict), line
            records.append(record)
        return records


@asynccontextmanager
async def running(processes: list[Process]) -> AsyncIterator[None]:
    async with AsyncExitStack() as stack:
        for process in processes:
            await process.start()
            stack.push_async_callback(process.stop)
        yield


def receiver() -> tuple[Starlette, list[dict[str, Any]], list[bytes]]:
    """The alert webhook (its token in its path), and an OTLP collector for every worker's spans."""
    posts: list[dict[str, Any]] = []
    exported: list[bytes] = []

    async def hook(request: Request) -> JSONResponse:
        posts.append(orjson.loads(await request.body()))
        return JSONResponse({"status": "success"}, status_code=202)

    async def traces(request: Request) -> JSONResponse:
        exported.append(await request.body())  # OTLP protobuf: its strings appear as they are
        return JSONResponse({})

    return Starlette(routes=[Route(f"/hooks/{HOOK_TOKEN}", hook, methods=["POST"]),
                             Route("/v1/traces", traces, methods=["POST"])]), posts, exported


async def test_consumers_alerts_and_the_incident_agent_log_json_lines_without_secrets(
    pool: asyncpg.Pool, db_dsn: str, ks: KafkaSettings, tmp_path: Path  # noqa: F811
) -> None:
    clock = FakeClock(current=datetime.now(UTC))
    suffix = uuid.uuid4().hex[:8]
    pages_topic, app_id = f"ops.pages.h{suffix}", f"inc-h{suffix}"
    await ensure_topics(ks, Topics(ks.alerts_topic, pages_topic, ks.alerts_partitions), app_id)
    app, posts, exported = receiver()
    async with serve_asgi(app) as base:
        env = {**worker_env(db_dsn, ks), "PAYCORE_LOG_LEVEL": "DEBUG", "PAYCORE_LOG_FORMAT": "json",
               "PAYCORE_KAFKA_PAGES_TOPIC": pages_topic, "PAYCORE_INCIDENTS_APP_ID": app_id,
               "PAYCORE_INCIDENTS_UNBATCHED": "true", "PAYCORE_INCIDENTS_SESSION_TIMEOUT_S": "2",
               "PAYCORE_INCIDENTS_TICK_S": "0.5", "PAYCORE_KAFKA_REPLICATION_FACTOR": "1",
               "PAYCORE_KAFKA_MIN_INSYNC_REPLICAS": "1",
               "PAYCORE_ALERT_WEBHOOK_URL": f"{base}/hooks/{HOOK_TOKEN}", "PAYCORE_ALERT_FORMAT": "pagerduty",
               "PAYCORE_PAGERDUTY_ROUTING_KEY": ROUTING_KEY, "PAYCORE_ALERT_INCIDENT_GROUPING": "true",
               "PAYCORE_REMINDER_INTERVAL_S": str(REMINDER_INTERVAL.total_seconds()),
               # Traced too, exporting here: a span may carry what a log line must not.
               "OTEL_EXPORTER_OTLP_ENDPOINT": base, "OTEL_BSP_SCHEDULE_DELAY": "200"}
        incidents_admin = free_port()
        workers = {name: Process(["run", *args, "--metrics-port", str(port)], env, tmp_path / f"{name}.log")
                   for name, args, port in [
                       ("dispatcher", ["dispatcher"], free_port()),
                       ("consumer-fulfillment", ["consumer", "fulfillment"], free_port()),
                       ("consumer-email", ["consumer", "email"], free_port()),
                       ("incidents", ["incidents"], incidents_admin),
                       ("alerts", ["alerts"], free_port())]}
        async with running(list(workers.values())), httpx.AsyncClient(timeout=5) as http:
            async def agent_ready() -> bool:
                for worker in workers.values():
                    worker.assert_running()
                try:
                    return (await http.get(f"http://127.0.0.1:{incidents_admin}/readyz")).status_code == 200
                except httpx.TransportError:
                    return False

            await until(agent_ready, "the incident agent ready")
            account = await seed_account(pool, clock)
            attempt = await started_attempt(pool, clock, account)
            async with pool.acquire() as conn, conn.transaction():
                escalation_id = await escalations.raise_escalation(
                    conn, key=escalations.attempt_key(attempt.attempt_id, "deadline"),
                    reason=EscalationReason.DEADLINE, now=clock.now(), attempt_id=attempt.attempt_id,
                    reminder_interval=REMINDER_INTERVAL)
            for effect in ("fulfillment-request", "order-confirmation"):
                await queue_effect(pool, clock, attempt.attempt_id, effect)

            async def delivered() -> bool:
                for worker in workers.values():
                    worker.assert_running()
                paged = any(p.get("dedup_key") == f"escalation:{escalation_id}:initial" for p in posts)
                fulfilled = await pool.fetchval("SELECT count(*) FROM demo_fulfillments")
                emailed = await pool.fetchval("SELECT count(*) FROM demo_emails")
                return paged and fulfilled == 1 and emailed == 1

            await until(delivered, "the escalation paged and both effects handled")
            assert posts[0]["routing_key"] == ROUTING_KEY  # the secret was there to leak

    records = {name: worker.records() for name, worker in workers.items()}
    for name, lines in records.items():
        assert lines, f"{name} wrote nothing"
        assert {r["service"] for r in lines} == {name}, name
        assert {"DEBUG", "INFO"} <= {r["level"] for r in lines}, name
    assert any(r.get("attempt_id") == str(attempt.attempt_id) for r in records["alerts"])  # its page, bound
    secrets = {"the PagerDuty routing key": ROUTING_KEY, "the alert webhook's token": HOOK_TOKEN}
    found = leaks([line for worker in workers.values() for line in worker.log.read_text().splitlines()],
                  secrets)
    assert found == []
    spans = b"".join(exported)
    assert b"paycore-alerts" in spans and b"POST" in spans  # the alert delivery's client span was exported
    assert [what for what, secret in secrets.items() if secret.encode() in spans] == []
