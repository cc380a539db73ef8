"""`paycore run incidents` as a real process on the real broker, delivered by the real alerts worker.

The main scenario, in one test because each agent start pays a group join: a burst of 200
alerts of one (account, reason) opens one incident; the agent is SIGKILLed mid-incident,
more alerts arrive while it is down and while its successor starts (that one's admin port
answers before faust is ready); the new agent recovers the table from its changelog (those
alerts fold, no second incident page) and pages every other alert that waited for it; after
the quiet period the incident closes and the next alert is paged per attempt again. The
pages topic is delivered to an HTTP receiver by ``paycore_dispatcher.alerts`` throughout.

A second test restarts the agent twice with a backlog and alerts arriving during its
start-up: faust's start-up once dropped some of them (paycore_incidents.recovery).
Every line either agent writes must be a JSON object.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import orjson
import pytest
from aiokafka import TopicPartition
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from harness.servers import free_port, serve_asgi
from paycore import kafka
from paycore.clock import SystemClock
from paycore.consumer import Message, decode
from paycore.kafka import KafkaSettings
from paycore_dispatcher.alerts import AlertSender, alert_consumer
from paycore_dispatcher.relay import RelayConfig, Row, record_for
from paycore_incidents.app import Topics, internal_topic
from paycore_incidents.commands import ensure_topics
from tests.dispatcher.conftest import kafka_bootstrap  # noqa: F401 -- the session's broker
from tests.support.timings import REMINDER_INTERVAL

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 4  # of ops.alerts; more partitions, a longer end of recovery (one offset lookup each)
THRESHOLD = 20
QUIET_S = 8.0  # longer than a kill and restart of the agent, short enough for a test
ACCOUNT, REASON = "acct-burst", "provider-timeout"
FAST_GROUP = {"session_timeout_ms": 2_000, "heartbeat_interval_ms": 300, "retry_base_s": 0.05,
              "retry_max_s": 0.2}


async def until(check: Callable[[], Awaitable[bool]], deadline_s: float = 30.0) -> None:
    """Poll ``check`` until true, failing at the deadline (the check is the synchronisation)."""
    async with asyncio.timeout(deadline_s):
        while not await check():  # noqa: ASYNC110 -- polls the broker; the check is the condition
            await asyncio.sleep(0.1)


@pytest.fixture
async def ks(kafka_bootstrap: tuple[str, bool]) -> AsyncIterator[KafkaSettings]:  # noqa: F811
    bootstrap, _local = kafka_bootstrap
    suffix = uuid.uuid4().hex[:10]
    settings = KafkaSettings(bootstrap=bootstrap, idempotent=False,
                             effects_topic=f"payments.effects.i{suffix}",
                             alerts_topic=f"ops.alerts.i{suffix}",
                             effects_partitions=1, alerts_partitions=PARTITIONS, request_timeout_ms=10_000,
                             replication_factor=1, min_insync_replicas=1)
    await kafka.ensure_topics(settings)
    yield settings


class Agent:
    """``paycore run incidents`` in a subprocess: the way it runs in production, and killable."""

    def __init__(self, ks: KafkaSettings, pages: str, app_id: str, log: Path) -> None:
        self.env = {**os.environ, "PAYCORE_KAFKA_BOOTSTRAP": ks.bootstrap,
                    "PAYCORE_KAFKA_IDEMPOTENT": "false", "PAYCORE_KAFKA_ALERTS_TOPIC": ks.alerts_topic,
                    "PAYCORE_KAFKA_EFFECTS_TOPIC": ks.effects_topic,
                    "PAYCORE_KAFKA_EFFECTS_PARTITIONS": "1",
                    "PAYCORE_KAFKA_ALERTS_PARTITIONS": str(ks.alerts_partitions),
                    "PAYCORE_KAFKA_PAGES_TOPIC": pages, "PAYCORE_KAFKA_REPLICATION_FACTOR": "1",
                    "PAYCORE_KAFKA_MIN_INSYNC_REPLICAS": "1", "PAYCORE_INCIDENTS_APP_ID": app_id,
                    "PAYCORE_INCIDENTS_THRESHOLD": str(THRESHOLD), "PAYCORE_INCIDENTS_WINDOW_S": "120",
                    "PAYCORE_INCIDENTS_QUIET_S": str(QUIET_S), "PAYCORE_INCIDENTS_TICK_S": "0.5",
                    "PAYCORE_INCIDENTS_SESSION_TIMEOUT_S": "2", "PAYCORE_INCIDENTS_UNBATCHED": "true",
                    "PAYCORE_CONSOLE_URL": "https://console.test",
                    "PAYCORE_LOG_LEVEL": "INFO", "PAYCORE_METRICS_PORT": str(free_port())}
        self.admin = f"http://127.0.0.1:{self.env['PAYCORE_METRICS_PORT']}"
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "paycore_cli", "run", "incidents"], cwd=ROOT,
                                         env=self.env, stdout=out, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        """SIGKILL: nothing flushed, nothing committed on the way out."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def assert_running(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, self.log.read_text()[-4000:]

    async def status(self, path: str) -> int | None:
        """The admin port's answer to ``path``; None while nothing listens."""
        self.assert_running()
        try:
            async with httpx.AsyncClient(timeout=2) as http:
                return (await http.get(f"{self.admin}{path}")).status_code
        except httpx.TransportError:
            return None

    def assert_json_lines(self) -> None:
        """Every line the process wrote (stdout and stderr) is one JSON object of paycore's."""
        lines = self.log.read_text().splitlines()
        assert lines
        for number, line in enumerate(lines, 1):
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                pytest.fail(f"line {number} of the agent's log is not JSON: {line[:300]!r}")
            assert isinstance(record, dict) and record.get("service") == "incidents", line[:300]


@pytest.fixture
async def agent(ks: KafkaSettings, tmp_path: Path) -> AsyncIterator[Agent]:
    app_id = f"inc-{uuid.uuid4().hex[:8]}"
    a = Agent(ks, f"ops.pages.{ks.alerts_topic.rsplit('.', 1)[1]}", app_id, tmp_path / "agent.log")
    # What the command does first, done here so the test's readers never see a missing topic.
    await ensure_topics(ks, Topics(ks.alerts_topic, a.env["PAYCORE_KAFKA_PAGES_TOPIC"], ks.alerts_partitions),
                        app_id)
    try:
        yield a
    finally:
        a.kill()


async def publish(ks: KafkaSettings, first_id: int, n: int, *, account: str = ACCOUNT,
                  reason: str = REASON, spread: bool = False) -> None:
    """``n`` escalation alerts as the relay writes them (its own record format).

    ``spread``: each alert of an account of its own (``acct-one-<id>``), so none is grouped:
    every one must be paged."""
    config = RelayConfig(effects_topic=ks.effects_topic, alerts_topic=ks.alerts_topic,
                         reminder_interval=REMINDER_INTERVAL)
    # One record per batch: the local broker's end offsets count batches' first offsets.
    producer = kafka.producer(ks, max_batch_size=1)
    await producer.start()
    try:
        sends = []
        for i in range(first_id, first_id + n):
            row = Row(message_id=i, dedup_key=f"escalation:{i}:initial", attempt_id=uuid.uuid4(),
                      ordering_key=None, kind="operator-alert", delivery_attempts=0,
                      payload={"schema_version": 1, "kind": "operator-alert",
                               "dedup_key": f"escalation:{i}:initial",
                               "escalation_id": i, "escalation_key": f"attempt:x{i}:{reason}",
                               "reason": reason, "attempt_id": None, "alert": "initial",
                               "provider_account": f"acct-one-{i}" if spread else account})
            topic, key, value, headers = record_for(row, config)
            sends.append(await producer.send(topic, value=value, key=key, headers=headers))
        await asyncio.gather(*sends)
    finally:
        await producer.stop()


class Pages:
    """Everything on the pages topic so far, read incrementally."""

    def __init__(self, ks: KafkaSettings, topic: str) -> None:
        self.consumer = kafka.consumer(ks, group_id=None)
        self.tps = [TopicPartition(topic, p) for p in range(ks.alerts_partitions)]
        self.seen: list[Message] = []

    async def __aenter__(self) -> Pages:
        await self.consumer.start()
        self.consumer.assign(self.tps)
        await self.consumer.seek_to_beginning(*self.tps)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.consumer.stop()

    async def read(self) -> list[Message]:
        batch = await self.consumer.getmany(timeout_ms=100)
        self.seen += [decode(r) for records in batch.values() for r in records]
        return self.seen

    def of(self, alert: str) -> list[Message]:
        return [m for m in self.seen if m.payload.get("alert") == alert]

    def passed(self, accounts: tuple[str, ...] = (ACCOUNT, "acct-calm")) -> list[Message]:
        """Per-attempt pages of ``accounts`` (not the spread ones, not the probes)."""
        return [m for m in self.seen
                if m.payload.get("alert") == "initial" and m.payload.get("provider_account") in accounts]

    def missing(self, ids: range) -> list[int]:
        keys = {m.dedup_key for m in self.seen}
        return [i for i in ids if f"escalation:{i}:initial" not in keys]


async def caught_up(ks: KafkaSettings, group: str, topics: list[str], deadline_s: float = 30) -> None:
    """The agent's group commits past every record now in ``topics`` (so a restart re-reads none).

    Against the end offsets of the moment it is called: the timer keeps writing ticks to the
    internal topic, so its end moves on as long as a key has state."""
    consumer = kafka.consumer(ks, group_id=group)
    await consumer.start()
    try:
        tps = [TopicPartition(t, p) for t in topics for p in range(ks.alerts_partitions)]
        ends = await consumer.end_offsets(tps)
        behind: dict[TopicPartition, int] = {}

        async def past() -> bool:
            behind.clear()
            for tp in tps:
                committed = await consumer.committed(tp) or 0
                if committed < ends[tp]:
                    behind[tp] = ends[tp] - committed
            return not behind

        try:
            await until(past, deadline_s)
        except TimeoutError:
            pytest.fail(f"the agent's commits stay behind: {behind}")
    finally:
        await consumer.stop()


async def ready(ks: KafkaSettings, agent: Agent, pages: Pages, probe: int, deadline_s: float = 30) -> None:
    """The agent has joined and recovered: a probe alert of a quiet account came through."""
    await publish(ks, probe, 1, account="acct-probe", reason="probe")

    async def through() -> bool:
        await pages.read()
        agent.assert_running()
        return any(m.dedup_key == f"escalation:{probe}:initial" for m in pages.seen)

    try:
        await until(through, deadline_s)
    except TimeoutError:
        pytest.fail(f"probe {probe} not paged within {deadline_s} s; the agent's log ends:\n"
                    f"{agent.log.read_text()[-4000:]}")


async def live_before_ready(agent: Agent) -> None:
    """Right after start: /healthz answers 200 while faust is still joining its group and
    recovering the table (/readyz 503 says so; on the local broker a join alone takes half the
    session timeout), and /readyz is 200 once it is done."""
    seen_live_recovering = False

    async def ready_now() -> bool:
        nonlocal seen_live_recovering
        agent.assert_running()
        try:
            async with httpx.AsyncClient(timeout=2) as http:
                live = (await http.get(f"{agent.admin}/healthz")).status_code
                ready = await http.get(f"{agent.admin}/readyz")
        except httpx.TransportError:
            return False
        seen_live_recovering = seen_live_recovering or (
            live == 200 and ready.status_code == 503 and "recovering the incidents table" in ready.text)
        return ready.status_code == 200

    await until(ready_now, 90)
    assert seen_live_recovering, "the admin port answered only once faust had recovered its table"


async def publish_until_ready(ks: KafkaSettings, agent: Agent, first_id: int) -> int:
    """Spread alerts in small batches while the agent starts, until it is ready and once more
    (the end of faust's recovery is where records went missing); returns the next free id."""
    next_id = first_id
    async with asyncio.timeout(90):
        while True:
            ready = await agent.status("/readyz") == 200
            await publish(ks, next_id, 5, spread=True)
            next_id += 5
            if ready:
                return next_id


async def all_paged(agent: Agent, pages: Pages, ids: range, deadline_s: float = 60) -> None:
    async def paged() -> bool:
        await pages.read()
        agent.assert_running()
        return not pages.missing(ids)

    try:
        await until(paged, deadline_s)
    except TimeoutError:
        pytest.fail(f"alerts never paged: {pages.missing(ids)}")


def receiver() -> tuple[Starlette, list[dict[str, Any]]]:
    posts: list[dict[str, Any]] = []

    async def hook(request: Request) -> JSONResponse:
        posts.append(orjson.loads(await request.body()))
        return JSONResponse({"status": "ok"}, status_code=202)

    return Starlette(routes=[Route("/hook", hook, methods=["POST"])]), posts


async def test_a_burst_pages_one_incident_survives_a_restart_and_per_attempt_paging_resumes_after_quiet(
    pool: asyncpg.Pool, ks: KafkaSettings, agent: Agent
) -> None:
    pages_topic = agent.env["PAYCORE_KAFKA_PAGES_TOPIC"]
    app_id = agent.env["PAYCORE_INCIDENTS_APP_ID"]
    agent.start()
    await live_before_ready(agent)
    app, posts = receiver()
    async with serve_asgi(app) as base, httpx.AsyncClient(timeout=5) as http, Pages(ks, pages_topic) as pages:
        # The real alerts worker, delivering the pages topic (PAYCORE_ALERT_INCIDENT_GROUPING=true).
        sender = AlertSender(http, f"{base}/hook", SystemClock(), format="pagerduty", routing_key="R")
        worker = alert_consumer(pool, ks, sender, SystemClock(), topic=pages_topic,
                                group_id=f"al-{uuid.uuid4().hex[:6]}", **FAST_GROUP)
        stop = asyncio.Event()
        delivering = asyncio.create_task(worker.run(stop))
        try:
            await ready(ks, agent, pages, 9001)
            # 200 escalations of one (account, reason) in a burst, and a few of another account.
            await publish(ks, 1, 200)
            await publish(ks, 1001, 3, account="acct-calm")

            async def opened() -> bool:
                await pages.read()
                agent.assert_running()
                return len(pages.of("incident-open")) >= 1 and len(pages.passed()) >= THRESHOLD - 1 + 3

            await until(opened, 40)
            # Every alert went through the agent and its offsets are committed: a restart now
            # starts from the table its changelog holds, not by re-reading the burst.
            await caught_up(ks, app_id, [ks.alerts_topic, internal_topic(app_id)])
            agent.kill()
            # While no agent runs: more of the incident (folded once it is back) and alerts of
            # other accounts (paged once it is back). Neither may be lost.
            await publish(ks, 201, 15)
            await publish(ks, 2000, 20, spread=True)
            agent.start()
            # While it waits out the killed member's session, rejoins and restores its table.
            await publish(ks, 216, 15)
            spread_end = await publish_until_ready(ks, agent, 2020)
            await ready(ks, agent, pages, 9002, deadline_s=90)
            await all_paged(agent, pages, range(2000, spread_end))

            async def closed() -> bool:
                await pages.read()
                agent.assert_running()
                return len(pages.of("incident-closed")) >= 1

            await until(closed, 40)
            async with httpx.AsyncClient(timeout=5) as http:  # the restarted agent's admin port
                assert (await http.get(f"{agent.admin}/healthz")).status_code == 200
                metrics = (await http.get(f"{agent.admin}/metrics")).text
            assert 'paycore_incident_pages_total{page="incident-closed"} 1.0' in metrics
            [opening] = pages.of("incident-open")
            [closing] = pages.of("incident-closed")
            assert opening.payload["count"] == THRESHOLD
            assert opening.payload["provider_account"] == ACCOUNT and opening.payload["reason"] == REASON
            assert opening.payload["console_url"] == (f"https://console.test/escalations?reason={REASON}"
                                                      f"&account={ACCOUNT}")
            # The counts are a summary, not a ledger: alerts the killed agent had processed but not
            # committed are counted again (seen: 245), and the local broker's restore has come back
            # one or two records short (seen: 228). What must hold exactly is the paging below.
            assert 220 <= closing.payload["count"] <= 260
            assert closing.payload["folded"] == closing.payload["count"] - THRESHOLD + 1
            assert closing.payload["incident_key"] == opening.dedup_key
            per_attempt = pages.passed()
            assert len(per_attempt) == THRESHOLD - 1 + 3  # the pre-threshold alerts and the calm account's
            assert sum(m.payload["provider_account"] == "acct-calm" for m in per_attempt) == 3

            # After the quiet period the next alert of that account and reason is paged again.
            await publish(ks, 500, 1)

            async def resumed() -> bool:
                await pages.read()
                return any(m.dedup_key == "escalation:500:initial" for m in pages.seen)

            await until(resumed, 20)

            # Every page delivered once: compared by dedup key, the alerts worker's unit of delivery
            # (a page the broker hands the reader twice is still one delivery).
            undelivered: set[str] = set()

            async def delivered() -> bool:
                rows = await pool.fetch("SELECT dedup_key FROM alert_deliveries")
                undelivered.clear()
                undelivered.update({m.dedup_key for m in pages.seen} - {r["dedup_key"] for r in rows})
                return not undelivered

            try:
                await until(delivered, 60)
            except TimeoutError:
                pytest.fail(f"pages never delivered: {sorted(undelivered)}")
        finally:
            stop.set()
            await asyncio.wait_for(delivering, 10)
    keys = [p["dedup_key"] for p in posts]
    spread = spread_end - 2000
    # One POST per page: the per-attempt ones, open and close, the resumed one, 2 probes, the spread.
    assert len(keys) == len(set(keys)) == THRESHOLD - 1 + 3 + 2 + 1 + 2 + spread
    incident_posts = [p for p in posts if p["payload"]["custom_details"].get("kind") == "incident"]
    assert [p["dedup_key"] for p in incident_posts] == [opening.dedup_key, closing.dedup_key]
    assert "incident opened" in incident_posts[0]["payload"]["summary"]
    agent.assert_json_lines()


async def test_alerts_published_while_the_agent_is_down_or_starting_are_all_paged(
    ks: KafkaSettings, agent: Agent
) -> None:
    """Alerts that wait for the agent are all paged once it is back, and it commits past them.

    faust's start-up dropped records of the stream partitions it had paused while recovering
    its table (paycore_incidents.recovery): a partition without a committed offset lost every
    one the consumer had fetched by then (seen: 6 to 116 alerts a restart here),
    and a dropped record left a gap that stopped that partition's commits for good. Twice:
    the second restart starts from offsets the first one committed."""
    app_id = agent.env["PAYCORE_INCIDENTS_APP_ID"]
    agent.start()
    async with Pages(ks, agent.env["PAYCORE_KAFKA_PAGES_TOPIC"]) as pages:
        await ready(ks, agent, pages, 9001)
        first = 100
        for _restart in range(2):
            await caught_up(ks, app_id, [ks.alerts_topic, internal_topic(app_id)])
            agent.kill()
            await publish(ks, first, 40, spread=True)  # a backlog while no agent runs
            agent.start()
            end = await publish_until_ready(ks, agent, first + 40)
            await all_paged(agent, pages, range(first, end))
            first = end
        # And the agent commits past all of them again (a dropped record left a gap that stopped
        # its partition's commits for good).
        await caught_up(ks, app_id, [ks.alerts_topic, internal_topic(app_id)])
    agent.assert_json_lines()
