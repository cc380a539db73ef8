"""The faust application: ``ops.alerts`` → (re-keyed by group) → table → ``ops.pages``.

Two agents and a timer:

- ``rekey`` reads ``ops.alerts`` (keyed by escalation) and forwards each record to the
  internal ``<app id>-by-group`` topic keyed by ``<account>|<reason>``, carrying the
  record's payload, headers and Kafka timestamp. A table is sharded by the partitions of
  the stream that writes it, so the stream must be keyed like the table.
- ``group`` reads that topic and owns the table ``incidents`` (memory store, changelog
  topic ``<app id>-incidents-changelog``): :func:`.grouping.observe` per alert, and
  :func:`.grouping.expire` per tick.
- the timer sends a tick for every key with state to the same internal topic, so the
  partition's one agent closes incidents in order with that key's alerts (a timer that
  wrote the table itself would write outside any event's partition).

Delivery of what lands on ``ops.pages`` is ``paycore run alerts`` with
``PAYCORE_ALERT_INCIDENT_GROUPING=true``: its inbox drops a page whose dedup key it has
seen, which is what makes faust's at-least-once processing safe here
(docs/decisions/0004-incident-grouping.md).
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faust
import orjson
from faust.types.auth import CredentialsT
from prometheus_client import CollectorRegistry, Counter

from paycore.kafka import KafkaSettings, ssl_context
from paycore.liveness import SLACK_S
from paycore_incidents import grouping
from paycore_incidents.admin import AdminServer, TimerLiveness
from paycore_incidents.recovery import faust_app, recovered
from paycore_incidents.settings import IncidentSettings

log = logging.getLogger("paycore.incidents")

TABLE = "incidents"


@dataclass(frozen=True)
class Agent:
    """The faust app and what its worker starts before it (the admin server, when asked for)."""

    app: faust.App
    admin: AdminServer | None


@dataclass(frozen=True)
class Topics:
    alerts: str
    pages: str
    partitions: int  # of ops.alerts; the internal topic and the changelog get as many


def internal_topic(app_id: str) -> str:
    return f"{app_id}-by-group"


def changelog_topic(app_id: str) -> str:
    return f"{app_id}-{TABLE}-changelog"


def _headers(raw: Any) -> tuple[tuple[str, str], ...]:
    items = raw.items() if isinstance(raw, dict) else (raw or ())
    return tuple((str(k), v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v or ""))
                 for k, v in items)


def _ungrouped(value: dict[str, Any], key: str) -> grouping.Page:
    """A re-keyed alert paged as it came (its grouping failed)."""
    return grouping.Page(key=str(value.get("key") or key), payload=dict(value.get("payload") or {}),
                         headers=tuple((str(h), str(v)) for h, v in value.get("headers") or ()),
                         passthrough=True)


def liveness_bound_s(settings: IncidentSettings) -> float:
    """How long ``/healthz`` lets the timer go without a beat: three ticks and the slack."""
    return 3 * settings.tick_s + SLACK_S


def broker_credentials(ks: KafkaSettings) -> CredentialsT | None:
    """faust's form of the Kafka security settings every paycore client uses (paycore.kafka)."""
    security = ks.security
    context = ssl_context(security)
    if security.sasl:
        assert security.sasl_password is not None  # the settings require it with SASL
        # With a TLS context faust's SASL credentials are SASL_SSL, without one SASL_PLAINTEXT.
        return faust.SASLCredentials(username=security.sasl_username,
                                     password=security.sasl_password.reveal(), ssl_context=context,
                                     mechanism=security.mechanism)
    if context is not None:
        return faust.SSLCredentials(context)
    return None


def build(ks: KafkaSettings, topics: Topics, settings: IncidentSettings, *,
          admin_host: str = "127.0.0.1", admin_port: int | None = None) -> Agent:
    """The faust app, agents and timer registered; run it with :func:`run`.

    With ``admin_port``, ``/healthz``, ``/readyz`` and ``/metrics`` (pages by what they are)
    are served there from before faust starts (:mod:`.admin`).
    """
    session_s = settings.session_timeout_s
    app = faust_app(  # whose end of recovery loses nothing it re-reads (paycore_incidents.recovery)
        settings.app_id,
        broker=f"kafka://{ks.bootstrap}",
        broker_credentials=broker_credentials(ks),
        store="memory://",
        # faust makes a data directory at start even for a memory store; the default is relative to
        # the working directory, which is `/` in the image: read-only, and not the user's.
        datadir=Path(tempfile.gettempdir()) / f"{settings.app_id}-data",
        web_enabled=False,
        autodiscover=False,
        topic_partitions=topics.partitions,
        topic_replication_factor=ks.replication_factor,
        table_standby_replicas=0,  # the changelog is the copy; a standby would double the timer's ticks
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=session_s,
        broker_heartbeat_interval=max(0.3, session_s / 10),
        broker_rebalance_timeout=max(session_s, 10.0),
        broker_commit_interval=1.0,
        producer_acks=-1,
        table_cleanup_interval=3600.0,
        # One record per batch when asked (PAYCORE_INCIDENTS_UNBATCHED): aiokafka always
        # admits a batch's first record, so a 1-byte limit makes every batch a single record.
        producer_max_batch_size=1 if settings.unbatched else 16_384,  # faust's default otherwise
    )
    policy = grouping.Policy(threshold=settings.threshold, window_s=settings.window_s,
                             quiet_s=settings.quiet_s, console_url=settings.console_url)
    alerts = app.topic(topics.alerts, key_serializer="raw", value_serializer="raw")
    by_group = app.topic(internal_topic(settings.app_id), key_serializer="raw", value_serializer="json",
                         partitions=topics.partitions, internal=True)
    pages = app.topic(topics.pages, key_serializer="raw", value_serializer="raw")
    # JSON keys and values; every write happens in the ``group`` agent, so it goes to the
    # changelog partition of the event being processed.
    table = app.Table(TABLE, default=None, partitions=topics.partitions)
    registry = CollectorRegistry()
    pages_sent = Counter("paycore_incident_pages", "Records written to the pages topic, by what they are",
                         ["page"], registry=registry)
    first_tick: list[float] = []

    def waiting_for() -> str | None:
        """Readiness: faust recovers the table, then starts its timers; not while rebalancing."""
        if not recovered(app):
            return "faust is joining its group and recovering the incidents table"
        if not first_tick:
            return "the incident timer has not run yet"
        return "the consumer group is rebalancing" if app.rebalancing else None

    liveness = TimerLiveness(liveness_bound_s(settings), waiting_for)

    @app.agent(alerts, name="rekey")
    async def rekey(stream: Any) -> AsyncIterator[None]:
        async for event in stream.events():
            message = event.message
            try:
                payload = orjson.loads(event.value) if event.value is not None else {}
            except orjson.JSONDecodeError:
                payload = {}
            if not isinstance(payload, dict):
                payload = {}
            account, reason = grouping.group_of(payload)
            key = grouping.group_key(account, reason).encode()
            await by_group.send(key=key, value={
                "payload": payload, "headers": list(_headers(message.headers)),
                "key": event.key.decode("utf-8", "replace") if event.key else "",
                "at": float(message.timestamp)})
            yield None

    @app.agent(by_group, name="group")
    async def group(stream: Any) -> AsyncIterator[None]:
        async for event in stream.events():
            key = event.key.decode() if isinstance(event.key, bytes) else str(event.key)
            value = event.value
            state = table.get(key)
            try:
                if "tick" in value:
                    new_state, out = grouping.expire(state, key, float(value["tick"]), policy)
                else:
                    headers = tuple((str(h), str(v)) for h, v in value["headers"])
                    new_state, out = grouping.observe(state, value["payload"], headers, value["key"],
                                                      float(value["at"]), policy)
            except (KeyError, TypeError, ValueError) as exc:
                # Fail open: a record the grouping cannot read is paged as it came, never dropped
                # (and never crashes the agent into a restart loop on the same record).
                log.error("incident grouping cannot read a record of %s (%s); paging it ungrouped", key, exc)
                new_state, out = state, ([] if "tick" in value else [_ungrouped(value, key)])
            for page in out:
                await pages.send(key=page.key.encode(), value=orjson.dumps(page.payload),
                                 headers=[(h, v.encode()) for h, v in page.headers])
                pages_sent.labels("alert" if page.passthrough else page.payload["alert"]).inc()
                if not page.passthrough:
                    log.warning("%s: %s (%d alerts, %d folded)", page.payload["alert"],
                                page.payload["dedup_key"], page.payload["count"], page.payload["folded"])
            if new_state is None:
                if state is not None:
                    del table[key]
            elif new_state != state:
                table[key] = new_state
            yield None

    @app.timer(interval=settings.tick_s)  # type: ignore[untyped-decorator]
    async def tick() -> None:
        liveness.beat()
        now = time.time()
        first_tick[:] = first_tick or [now]
        if now - first_tick[0] < settings.quiet_s:
            # A grace period after start: alerts produced while no agent ran are still queued
            # behind the restored table, and a tick must not close an incident they continue.
            return
        for key, state in list(table.items()):
            if state is not None:
                await by_group.send(key=key.encode() if isinstance(key, str) else key,
                                    value={"tick": now})

    admin = None if admin_port is None else AdminServer(registry, liveness, admin_host, admin_port)
    return Agent(app, admin)


def run(agent: Agent) -> None:
    """Run the worker until SIGINT/SIGTERM (faust's own signal handling).

    ``override_logging=False``: left to itself, mode's worker replaces the root logger's
    handlers with its own coloured text on stdout (and redirects stdout into the log), so
    every line after start-up would stop being paycore's JSON (or text) line. No spinner
    either: it writes terminal escapes to stdout even when that is not a terminal. The admin
    server is a service of the worker, started before the app.
    """
    from faust.worker import Worker

    services = () if agent.admin is None else (agent.admin,)
    worker = Worker(agent.app, *services, quiet=True, override_logging=False)
    worker.spinner = None
    worker.execute_from_commandline()
