"""Sampling, settling and the money invariants of a chaos run.

- :func:`sample_loop` records the system's state every second on its own small
  connection; it outlives the database's death (a sample then says ``db_up=False``).
- :func:`settle` waits, within a bound, until nothing is moving any more: webhooks
  delivered, live attempts resolved or escalated, the outbox drained, the consumers done.
- :func:`check` reads the sandbox's ledger and request log and one snapshot of the
  database into :class:`Facts`, and every invariant is a pure function of those facts
  (or of the run's record), so each can be tested on hand-made data.

Nothing here prints: the results go into the record, and the report shows them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

import asyncpg
import httpx
from aiokafka import TopicPartition

from paycore import kafka
from paycore.db import DATABASE_ERRORS
from paycore.domain import AttemptState, can_transition
from paycore.kafka import KafkaSettings
from paycore.providers.registry import DEFAULT_PACKAGE
from paycore_devstack.chaos.kills import not_carried_out
from paycore_devstack.chaos.model import (
    ChaosOptions,
    ClientAnswer,
    Endpoints,
    InvariantResult,
    RunRecord,
    Sample,
)
from paycore_devstack.chaos.providers import provider as chaos_provider

log = logging.getLogger("paycore.chaos")

SAMPLE_INTERVAL_S = 1.0
SETTLE_POLL_S = 1.0
SETTLE_LOG_EVERY_S = 5.0
CONNECT_TIMEOUT_S = 2.0
QUERY_TIMEOUT_S = 10.0
SAMPLE_TIMEOUT_S = 2.0  # a sample later than this is no longer "this second"
HTTP_TIMEOUT_S = 120.0  # the request log of a 10,000-order run is tens of megabytes
WIRE_READ_S = 60.0
MAX_EXAMPLES = 5
# A worker sweeps every few seconds and a pass can take a call budget: an attempt
# whose deadline passed less than this ago may be in a sweep right now.
DEADLINE_GRACE = timedelta(seconds=15)
# The demo consumers' groups (paycore_dispatcher.demo_consumers; the library does
# not import a service): the effects each must have applied before the run is settled.
CONSUMER_GROUPS = ("paycore-demo-fulfillment", "paycore-demo-email")
FULFILLMENT = "fulfillment-request"
LIVE = (AttemptState.NOT_STARTED.value, AttemptState.STARTED.value, AttemptState.UNKNOWN.value)
# What a failed sample or settle poll may raise while the database is down or restarting.
DB_DOWN = DATABASE_ERRORS


class _Db:
    """One small connection of our own that reconnects after the database died."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._conn: asyncpg.Connection | None = None

    async def conn(self) -> asyncpg.Connection:
        if self._conn is None or self._conn.is_closed():
            self._conn = await asyncpg.connect(self.dsn, timeout=CONNECT_TIMEOUT_S,
                                               command_timeout=QUERY_TIMEOUT_S)
        return self._conn

    def drop(self) -> None:
        """Forget a connection that failed; terminate() never waits on a dead server."""
        if self._conn is not None:
            self._conn.terminate()
            self._conn = None

    async def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(*DB_DOWN):
                await asyncio.wait_for(self._conn.close(), CONNECT_TIMEOUT_S)
            self.drop()


# -- sampling ------------------------------------------------------------------------------

# The live states through the partial index payment_attempts_due; cheap on a big run.
SAMPLE = """
SELECT (SELECT count(*) FROM orders) AS orders_created,
       (SELECT count(*) FROM orders WHERE status = 'Paid') AS orders_paid,
       a.started AS attempts_started,
       a.unknown AS attempts_unknown,
       (SELECT count(*) FROM payment_escalations WHERE resolved_at IS NULL) AS open_escalations
FROM (SELECT count(*) FILTER (WHERE state = 'Started') AS started,
             count(*) FILTER (WHERE state = 'Unknown') AS unknown
      FROM payment_attempts
      WHERE state IN ('NotStarted', 'Started', 'Unknown')) AS a
"""


async def sample_loop(endpoints: Endpoints, record: RunRecord, stop: asyncio.Event) -> None:
    """Append a :class:`Sample` every second until ``stop`` is set; never raises.

    A sample the database cannot answer keeps the last values with ``db_up=False``,
    so the timeline stays continuous through the outage.
    """
    db = _Db(endpoints.dsn)
    last = (0, 0, 0, 0, 0)
    down_since: float | None = None
    try:
        while not stop.is_set():
            tick = time.monotonic()
            up = True
            try:
                row = await (await db.conn()).fetchrow(SAMPLE, timeout=SAMPLE_TIMEOUT_S)
                assert row is not None
                last = (row["orders_created"], row["orders_paid"], row["attempts_started"],
                        row["attempts_unknown"], row["open_escalations"])
            except Exception as exc:  # a sampler must never end the run
                up = False
                db.drop()
                if down_since is None:
                    down_since = record.now()
                    log.info("sampling: database not answering (%s)", type(exc).__name__)
            if up and down_since is not None:
                log.info("sampling: database answering again after %.1f s", record.now() - down_since)
                down_since = None
            record.samples.append(Sample(record.now(), *last, db_up=up))
            wait = SAMPLE_INTERVAL_S - (time.monotonic() - tick)
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), wait)
    finally:
        await db.close()


# -- settling ------------------------------------------------------------------------------

# Live attempts that may still move. Two kinds may legitimately stay live: one past
# its escalation deadline with an open escalation (a person has it), and one waiting
# for a customer action that has not expired (an abandoned 3-D Secure step stays
# Started until the provider cancels it at expiry, far beyond a run).
UNSETTLED_ATTEMPTS = """
SELECT a.attempt_id::text AS attempt_id, a.state
FROM payment_attempts a
WHERE a.state IN ('NotStarted', 'Started', 'Unknown')
  AND NOT (a.escalation_deadline IS NOT NULL AND a.escalation_deadline <= $1
           AND EXISTS (SELECT 1 FROM payment_escalations e
                       WHERE e.attempt_id = a.attempt_id AND e.resolved_at IS NULL))
  AND NOT (a.state = 'Started' AND a.next_action IS NOT NULL
           AND (a.next_action_expires_at IS NULL OR a.next_action_expires_at > $1))
ORDER BY a.created_at
"""

# Live captures, voids and refunds neither resolved nor escalated (an operation past its deadline
# with an open episode of its own has a person on it).
UNSETTLED_OPERATIONS = """
SELECT o.operation_id::text AS operation_id, o.state
FROM payment_operations o
WHERE o.state IN ('NotStarted', 'Started', 'Unknown')
  AND NOT (o.escalation_deadline IS NOT NULL AND o.escalation_deadline <= $1
           AND EXISTS (SELECT 1 FROM payment_escalations e
                       WHERE e.escalation_key LIKE 'operation:' || o.operation_id || ':%'
                         AND e.resolved_at IS NULL))
ORDER BY o.created_at
"""

PENDING_OUTBOX = """
SELECT count(*) FROM outbox_messages WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL
"""

# Dispatched business effects each demo consumer has not (yet) taken into its inbox.
UNCONSUMED_EFFECTS = """
SELECT g.consumer_group, count(m.message_id) AS missing
FROM unnest($1::text[]) AS g(consumer_group)
LEFT JOIN outbox_messages m
  ON m.ordering_key IS NOT NULL AND m.dispatched_at IS NOT NULL
 AND NOT EXISTS (SELECT 1 FROM consumer_inbox i
                 WHERE i.consumer_group = g.consumer_group AND i.dedup_key = m.dedup_key)
GROUP BY g.consumer_group
ORDER BY g.consumer_group
"""

# Whether the consumers are still applying: compared between two polls.
CONSUMER_ACTIVITY = """
SELECT (SELECT count(*) FROM consumer_inbox WHERE consumer_group = ANY($1::text[])) AS inbox,
       (SELECT count(*) FROM demo_fulfillments) AS fulfillments,
       (SELECT count(*) FROM demo_emails) AS emails
"""


async def _pending_webhooks(http: httpx.AsyncClient) -> int:
    r = await http.get("/_sandbox/webhooks/pending")
    r.raise_for_status()
    return int(r.json()["pending"])


async def _what_remains(http: httpx.AsyncClient, db: _Db,
                        activity: list[tuple[int, ...]]) -> list[str]:
    """What keeps the system from being settled now; empty when it is."""
    remains: list[str] = []
    try:
        pending = await _pending_webhooks(http)
        if pending:
            remains.append(f"{pending} webhook deliveries pending")
    except (httpx.HTTPError, KeyError, ValueError) as exc:
        remains.append(f"sandbox not answering ({type(exc).__name__})")
    try:
        conn = await db.conn()
        now = await conn.fetchval("SELECT now()")
        unsettled = await conn.fetch(UNSETTLED_ATTEMPTS, now)
        if unsettled:
            states = Counter(r["state"] for r in unsettled)
            shown = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
            remains.append(f"{len(unsettled)} live attempts neither resolved nor escalated ({shown}; "
                           f"e.g. {', '.join(r['attempt_id'] for r in unsettled[:3])})")
        operations = await conn.fetch(UNSETTLED_OPERATIONS, now)
        if operations:
            states = Counter(r["state"] for r in operations)
            shown = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
            remains.append(f"{len(operations)} live operations neither resolved nor escalated ({shown}; "
                           f"e.g. {', '.join(r['operation_id'] for r in operations[:3])})")
        outbox = int(await conn.fetchval(PENDING_OUTBOX))
        if outbox:
            remains.append(f"{outbox} outbox rows not dispatched")
        for row in await conn.fetch(UNCONSUMED_EFFECTS, list(CONSUMER_GROUPS)):
            if row["missing"]:
                remains.append(f"{row['missing']} dispatched effects not yet in "
                               f"{row['consumer_group']}'s inbox")
        current = tuple((await conn.fetchrow(CONSUMER_ACTIVITY, list(CONSUMER_GROUPS))) or ())
        if activity and activity[-1] != current:
            remains.append("consumers still applying effects")
        activity[:] = [current]
    except DB_DOWN as exc:
        db.drop()
        remains.append(f"database not answering ({type(exc).__name__})")
    return remains


async def settle(endpoints: Endpoints, options: ChaosOptions, record: RunRecord) -> None:
    """Wait until the system is settled, or ``options.settle_within_s`` has passed; never raises.

    Records a ``settled`` incident either way; when the bound passes its detail is
    ``not settled: <what remains>``, and the invariants then show what is wrong.
    """
    started = time.monotonic()
    deadline = started + options.settle_within_s
    last_log = started
    activity: list[tuple[int, ...]] = []  # the consumers' counts at the previous poll
    polls = 0
    db = _Db(endpoints.dsn)
    try:
        async with httpx.AsyncClient(base_url=endpoints.sandbox_url, timeout=HTTP_TIMEOUT_S) as http:
            while True:
                try:
                    remains = await _what_remains(http, db, activity)
                except Exception as exc:  # settling reports what it saw; it never ends the run
                    log.exception("settle: a poll failed")
                    remains = [f"a poll failed ({type(exc).__name__}: {exc})"]
                polls += 1
                waited = time.monotonic() - started
                # Two polls at least: "the consumers stopped changing" needs a comparison.
                if not remains and polls >= 2:
                    log.info("settled after %.1f s", waited)
                    record.incident("settled", "system", f"settled after {waited:.1f} s")
                    record.extra["settled"] = True
                    record.extra["settle_remains"] = []
                    return
                if time.monotonic() >= deadline:
                    what = "; ".join(remains)
                    log.warning("not settled within %.0f s: %s", options.settle_within_s, what)
                    record.incident("settled", "system", f"not settled: {what}")
                    record.extra["settled"] = False
                    record.extra["settle_remains"] = remains
                    return
                if time.monotonic() - last_log >= SETTLE_LOG_EVERY_S:
                    last_log = time.monotonic()
                    log.info("settling (%.0f s of %.0f s): %s", waited, options.settle_within_s,
                             "; ".join(remains) or "checking the consumers are done")
                await asyncio.sleep(SETTLE_POLL_S)
    finally:
        await db.close()


# -- the facts the invariants are computed from -----------------------------------------------


@dataclass(frozen=True)
class OrderFacts:
    order_id: str
    status: str
    cancel_requested_at: datetime | None = None


@dataclass(frozen=True)
class AttemptFacts:
    attempt_id: str
    order_id: str
    state: str
    provider_account: str = f"{DEFAULT_PACKAGE.name}:acct_store:test"
    client_reference: str = ""
    idempotency_key: str = ""
    request_body: str = ""
    api_version: str = ""
    escalation_deadline: datetime | None = None
    provider_payment_id: str | None = None


@dataclass(frozen=True)
class OperationFacts:
    operation_id: str
    attempt_id: str
    kind: str
    state: str
    client_reference: str
    amount_minor: int
    escalation_deadline: datetime | None = None


@dataclass(frozen=True)
class WireCopies:
    """The fulfillment messages on the effects topic, as the consumers received them."""

    messages: int
    keys_repeated: int  # dedup keys on the wire more than once
    extra_copies: int  # records beyond the first of those keys


@dataclass
class Facts:
    """The sandbox's ledger and request log, and one snapshot of the database."""

    now: datetime
    orders: dict[str, OrderFacts] = field(default_factory=dict)
    attempts: dict[str, AttemptFacts] = field(default_factory=dict)
    transitions: dict[str, list[tuple[str | None, str]]] = field(default_factory=dict)  # by event id
    send_intents: dict[str, int] = field(default_factory=dict)
    open_escalations: dict[str, list[str]] = field(default_factory=dict)  # attempt -> reasons
    escalation_reasons: dict[str, set[str]] = field(default_factory=dict)  # attempt -> open or resolved
    fulfillments: dict[str, int] = field(default_factory=dict)  # dedup key -> rows the consumer wrote
    dead_lettered_fulfillments: int = 0
    ledger: list[dict[str, Any]] = field(default_factory=list)  # GET /_sandbox/payments
    creates: list[dict[str, Any]] = field(default_factory=list)  # the provider's creates in the request log
    wire: WireCopies | str | None = None  # str: why the wire could not be read
    provider: str = DEFAULT_PACKAGE.name  # whose wire the creates speak (chaos.providers)
    # After the payment (issue 29): paycore's operations, and what the provider made of them.
    operations: dict[str, OperationFacts] = field(default_factory=dict)
    operation_escalations: set[str] = field(default_factory=set)  # operations with an open episode
    operation_effects: dict[str, int] = field(default_factory=dict)  # dedup key -> rows applied
    refunds: list[dict[str, Any]] = field(default_factory=list)  # GET /_sandbox/refunds
    captures: list[dict[str, Any]] = field(default_factory=list)  # GET /_sandbox/captures

    @cached_property
    def by_reference(self) -> dict[tuple[str, str], AttemptFacts]:
        return {(a.provider_account, a.client_reference): a for a in self.attempts.values()}

    @cached_property
    def by_key(self) -> dict[str, AttemptFacts]:
        return {a.idempotency_key: a for a in self.attempts.values()}

    @cached_property
    def attempts_of_order(self) -> dict[str, list[AttemptFacts]]:
        found: dict[str, list[AttemptFacts]] = defaultdict(list)
        for a in self.attempts.values():
            found[a.order_id].append(a)
        return found

    def attempt_of_payment(self, payment: Mapping[str, Any]) -> AttemptFacts | None:
        return self.by_reference.get((str(payment.get("provider_account")), str(payment.get("reference"))))

    def order_of_payment(self, payment: Mapping[str, Any]) -> str:
        attempt = self.attempt_of_payment(payment)
        if attempt is not None:
            return attempt.order_id
        # No attempt carries it: paycore's references are "<order>-a<n>", so name the order anyway.
        return str(payment.get("reference") or "").rsplit("-a", 1)[0] or f"?{payment.get('id')}"

    @cached_property
    def held_by_order(self) -> dict[str, list[Mapping[str, Any]]]:
        """Payments held for a capture (``requires_capture``), by order."""
        found: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
        for p in self.ledger:
            if p.get("status") == "requires_capture":
                found[self.order_of_payment(p)].append(p)
        return found

    @cached_property
    def succeeded_by_order(self) -> dict[str, list[Mapping[str, Any]]]:
        found: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
        for p in self.ledger:
            if p.get("status") == "succeeded":
                found[self.order_of_payment(p)].append(p)
        return found


SELECT_ORDERS = "SELECT order_id, status, cancel_requested_at FROM orders"

SELECT_ATTEMPTS = """
SELECT attempt_id::text AS attempt_id, order_id, state, provider_account, client_reference,
       idempotency_key, request_body, api_version, escalation_deadline, provider_payment_id
FROM payment_attempts
"""

# Transitions in the order they were written: every writer holds the order lock,
# so event ids follow the attempt's history (occurred_at is each writer's own clock).
# An operator's attachment record carries no from/to and is not a transition of state; a
# capture's, cancel's or refund's events (operation_id set) are the operation's, not the attempt's.
SELECT_TRANSITIONS = """
SELECT attempt_id::text AS attempt_id, detail ->> 'from' AS from_state, detail ->> 'to' AS to_state
FROM payment_attempt_events
WHERE kind = 'transition' AND attempt_id IS NOT NULL AND operation_id IS NULL AND detail ? 'to'
ORDER BY attempt_id, event_id
"""

SELECT_SEND_INTENTS = """
SELECT attempt_id::text AS attempt_id, count(*) AS intents
FROM payment_attempt_events
WHERE kind = 'send_intent' AND attempt_id IS NOT NULL AND operation_id IS NULL
GROUP BY attempt_id
"""

SELECT_ESCALATIONS = """
SELECT attempt_id::text AS attempt_id, reason, resolved_at IS NULL AS open
FROM payment_escalations
WHERE attempt_id IS NOT NULL
"""

SELECT_FULFILLMENTS = """
SELECT dedup_key, count(*) AS applied FROM demo_fulfillments WHERE kind = $1 GROUP BY dedup_key
"""

SELECT_OPERATIONS = """
SELECT operation_id::text AS operation_id, attempt_id::text AS attempt_id, kind, state, client_reference,
       amount_minor, escalation_deadline
FROM payment_operations
"""

SELECT_OPERATION_ESCALATIONS = """
SELECT DISTINCT split_part(escalation_key, ':', 2) AS operation_id
FROM payment_escalations
WHERE escalation_key LIKE 'operation:%' AND resolved_at IS NULL
"""

# What the fulfillment consumer applied of the operations' effects (operation:<id>:<effect>).
SELECT_OPERATION_EFFECTS = """
SELECT dedup_key, count(*) AS applied FROM demo_fulfillments WHERE dedup_key LIKE 'operation:%'
GROUP BY dedup_key
"""

SELECT_DEAD_LETTERED = """
SELECT count(*) FROM outbox_messages WHERE kind = $1 AND dead_lettered_at IS NOT NULL
"""


async def _database_facts(conn: asyncpg.Connection, facts: Facts) -> None:
    # One snapshot, so every table is read as of the same moment.
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        facts.now = await conn.fetchval("SELECT now()")
        facts.orders = {r["order_id"]: OrderFacts(r["order_id"], r["status"], r["cancel_requested_at"])
                        for r in await conn.fetch(SELECT_ORDERS)}
        facts.attempts = {r["attempt_id"]: AttemptFacts(**dict(r)) for r in await conn.fetch(SELECT_ATTEMPTS)}
        transitions: dict[str, list[tuple[str | None, str]]] = defaultdict(list)
        for r in await conn.fetch(SELECT_TRANSITIONS):
            transitions[r["attempt_id"]].append((r["from_state"], r["to_state"]))
        facts.transitions = dict(transitions)
        facts.send_intents = {r["attempt_id"]: int(r["intents"])
                              for r in await conn.fetch(SELECT_SEND_INTENTS)}
        open_: dict[str, list[str]] = defaultdict(list)
        reasons: dict[str, set[str]] = defaultdict(set)
        for r in await conn.fetch(SELECT_ESCALATIONS):
            reasons[r["attempt_id"]].add(r["reason"])
            if r["open"]:
                open_[r["attempt_id"]].append(r["reason"])
        facts.open_escalations, facts.escalation_reasons = dict(open_), dict(reasons)
        facts.fulfillments = {r["dedup_key"]: int(r["applied"])
                              for r in await conn.fetch(SELECT_FULFILLMENTS, FULFILLMENT)}
        facts.dead_lettered_fulfillments = int(await conn.fetchval(SELECT_DEAD_LETTERED, FULFILLMENT))
        facts.operations = {r["operation_id"]: OperationFacts(**dict(r))
                            for r in await conn.fetch(SELECT_OPERATIONS)}
        facts.operation_escalations = {r["operation_id"]
                                       for r in await conn.fetch(SELECT_OPERATION_ESCALATIONS)}
        facts.operation_effects = {r["dedup_key"]: int(r["applied"])
                                   for r in await conn.fetch(SELECT_OPERATION_EFFECTS)}


async def _sandbox_list(http: httpx.AsyncClient, path: str) -> list[dict[str, Any]]:
    r = await http.get(path)
    r.raise_for_status()
    body = r.json()
    return list(body["data"])


async def wire_copies(endpoints: Endpoints) -> WireCopies | str:
    """Read the effects topic from the beginning and count fulfillment keys seen more than once."""
    if endpoints.kafka_bootstrap is None:
        return "not visible (no broker address)"
    consumer = kafka.consumer(KafkaSettings(bootstrap=endpoints.kafka_bootstrap, idempotent=False),
                              group_id=None)
    try:
        async with asyncio.timeout(WIRE_READ_S):
            await consumer.start()
            await consumer.topics()  # fetches the metadata partitions_for_topic answers from
            parts = [TopicPartition(endpoints.effects_topic, p)
                     for p in sorted(consumer.partitions_for_topic(endpoints.effects_topic) or ())]
            if not parts:
                return WireCopies(0, 0, 0)
            consumer.assign(parts)
            await consumer.seek_to_beginning(*parts)
            ends = await consumer.end_offsets(parts)
            seen: Counter[str] = Counter()
            while [tp for tp in parts if await consumer.position(tp) < ends[tp]]:
                batch = await consumer.getmany(timeout_ms=500, max_records=2000)
                for records in batch.values():
                    for record in records:
                        headers = {k: v.decode("utf-8", "replace") if v else "" for k, v in record.headers}
                        if headers.get("kind") == FULFILLMENT and headers.get("dedup_key"):
                            seen[headers["dedup_key"]] += 1
    except Exception as exc:  # the wire is extra evidence, never the verdict
        return f"not visible ({type(exc).__name__}: {exc})"
    finally:
        with contextlib.suppress(Exception):
            await consumer.stop()
    repeated = [n for n in seen.values() if n > 1]
    return WireCopies(sum(seen.values()), len(repeated), sum(n - 1 for n in repeated))


async def gather_facts(endpoints: Endpoints) -> Facts:
    """The ledger, the create requests, the database snapshot and the wire, read once."""
    provider = chaos_provider(endpoints.provider)
    facts = Facts(now=datetime.now().astimezone(), provider=provider.name)
    async with httpx.AsyncClient(base_url=endpoints.sandbox_url, timeout=HTTP_TIMEOUT_S) as http:
        # Every dialect's payments are in the one ledger (even one without lookups:
        # but the sandbox, being the provider, lists what it holds).
        facts.ledger = await _sandbox_list(http, "/_sandbox/payments")
        facts.creates = [q for q in await _sandbox_list(http, "/_sandbox/requests") if provider.is_create(q)]
        facts.refunds = await _sandbox_list(http, "/_sandbox/refunds")
        facts.captures = await _sandbox_list(http, "/_sandbox/captures")
    conn = await asyncpg.connect(endpoints.dsn, timeout=CONNECT_TIMEOUT_S, command_timeout=120)
    try:
        await _database_facts(conn, facts)
    finally:
        await conn.close()
    facts.wire = await wire_copies(endpoints)
    return facts


# -- the invariants: each a pure function ---------------------------------------------------------


def _result(name: str, bad: Sequence[str], note: str = "", examined: int | None = None) -> InvariantResult:
    return InvariantResult(name, len(bad), tuple(bad[:MAX_EXAMPLES]), note, examined)


def orders_with_more_than_one_succeeded_payment(f: Facts) -> InvariantResult:
    bad = sorted(o for o, paid in f.succeeded_by_order.items() if len(paid) > 1)
    return _result("orders with more than one succeeded provider payment", bad)


def provider_payments_not_linked_to_one_attempt(f: Facts) -> InvariantResult:
    """Each ledger payment's (account, reference) is one attempt, which recorded its id.

    A payment whose attempt recorded no or another id is allowed only while that
    attempt has an open escalation: a person has it (a second payment under one
    reference, evidence that contradicted the record). An attempt that recorded an
    id the ledger does not have is counted too: it links a payment that does not exist.
    """
    bad: list[str] = []
    escalated: list[str] = []
    known = {str(p.get("id")) for p in f.ledger}
    for p in f.ledger:
        attempt = f.attempt_of_payment(p)
        if attempt is None:
            bad.append(f"{p.get('id')} (no attempt has reference {p.get('reference')})")
        elif attempt.provider_payment_id != p.get("id"):
            if f.open_escalations.get(attempt.attempt_id):
                escalated.append(str(p.get("id")))
            else:
                bad.append(f"{p.get('id')} (attempt {attempt.attempt_id} recorded "
                           f"{attempt.provider_payment_id})")
    for a in f.attempts.values():
        if a.provider_payment_id is not None and a.provider_payment_id not in known:
            bad.append(f"{a.attempt_id} (recorded {a.provider_payment_id}, not in the ledger)")
    note = f"{len(f.ledger)} ledger payments"
    if escalated:
        note += (f"; {len(escalated)} unrecorded by an attempt with an open escalation (allowed: "
                 f"a person has it), e.g. {', '.join(escalated[:3])}")
    return _result("provider payments not linked to exactly one attempt", bad, note)


def expected_order_status(payment: Mapping[str, Any]) -> str:
    """What an order whose one payment is ``payment`` (as the provider's ledger has it) must say:
    a hold Authorized, a charge Paid, then PartiallyRefunded and Refunded by what was given back."""
    if payment.get("status") == "requires_capture":
        return "Authorized"
    captured = int(payment.get("amount_captured") or payment.get("amount") or 0)
    refunded = int(payment.get("amount_refunded") or 0)
    if refunded <= 0:
        return "Paid"
    return "Refunded" if refunded >= captured else "PartiallyRefunded"


PAID_STATUSES = frozenset({"Paid", "PartiallyRefunded", "Refunded", "Authorized"})


def orders_disagreeing_with_the_ledger(f: Facts) -> InvariantResult:
    """An order says what its one charged (or held) payment at the provider says: Paid,
    PartiallyRefunded or Refunded by what it gave back, Authorized while held; and an order with
    none is not paid.

    An order with a succeeded payment that is not paid is a lost payment, unless the customer
    cancelled after the send intent and the success was escalated ``succeeded-after-cancel``
    (the charge stands, and paycore refunds it: decision 0008). An order whose capture, void or
    refund is still in flight or in a person's hands may not say it yet.
    """
    bad: list[str] = []
    after_cancel: list[str] = []
    undecided = {o.attempt_id for o in f.operations.values()
                 if o.state in LIVE or o.operation_id in f.operation_escalations}
    for order in f.orders.values():
        attempts = f.attempts_of_order.get(order.order_id, ())
        if any(a.attempt_id in undecided for a in attempts):
            continue
        charged = list(f.succeeded_by_order.get(order.order_id, ())) + list(
            f.held_by_order.get(order.order_id, ()))
        if order.status in PAID_STATUSES:
            if len(charged) != 1:
                bad.append(f"{order.order_id} ({order.status}, {len(charged)} charged or held payments)")
            elif expected_order_status(charged[0]) != order.status:
                bad.append(f"{order.order_id} ({order.status}, the provider says "
                           f"{expected_order_status(charged[0])})")
            continue
        kept = [p for p in charged if not p.get("amount_refunded")]
        if kept:
            if order.cancel_requested_at is not None and any(
                    "succeeded-after-cancel" in f.escalation_reasons.get(a.attempt_id, ()) for a in attempts):
                after_cancel.append(order.order_id)
            else:
                bad.append(f"{order.order_id} ({order.status}, {len(kept)} succeeded payments)")
    orphans = sorted(set(f.succeeded_by_order) - set(f.orders))
    bad.extend(f"{o} (no such order, succeeded payment)" for o in orphans)
    note = f"{len(f.orders)} orders"
    if after_cancel:
        note += f"; {len(after_cancel)} succeeded after a cancellation, escalated (allowed)"
    return _result("orders whose final state disagrees with the ledger", bad, note)


def orders_with_more_than_one_live_attempt(f: Facts) -> InvariantResult:
    bad = sorted(o for o, attempts in f.attempts_of_order.items()
                 if sum(a.state in LIVE for a in attempts) > 1)
    return _result("orders with more than one live attempt", bad)


def attempts_past_deadline_without_escalation(f: Facts) -> InvariantResult:
    cutoff = f.now - DEADLINE_GRACE
    bad = sorted(a.attempt_id for a in f.attempts.values()
                 if a.state in (AttemptState.STARTED.value, AttemptState.UNKNOWN.value)
                 and a.escalation_deadline is not None and a.escalation_deadline < cutoff
                 and not f.open_escalations.get(a.attempt_id))
    live = sum(a.state in LIVE for a in f.attempts.values())
    return _result("attempts Unknown/Started past their deadline without an open escalation", bad,
                   f"{live} attempts still live; deadlines passed less than "
                   f"{DEADLINE_GRACE.total_seconds():.0f} s ago not counted")


def fulfillment_key(attempt_id: str) -> str:
    return f"attempt:{attempt_id}:{FULFILLMENT}"


def fulfillments_not_applied_once(f: Facts) -> InvariantResult:
    """A paid order's fulfillment is applied exactly once; any other order's never.

    Paid here is every status a succeeded payment leaves: Paid, and what its operations made of
    it since (PartiallyRefunded, Refunded; a hold's Authorized, and Voided after it: a hold is
    fulfilled when authorized, then captured or released). An order whose cancellation was
    requested before the success is not fulfilled (attempts.py queues no fulfillment then).
    """
    bad: list[str] = []
    for order in f.orders.values():
        applied = sum(f.fulfillments.get(fulfillment_key(a.attempt_id), 0)
                      for a in f.attempts_of_order.get(order.order_id, ()))
        paid = order.status in PAID_STATUSES or order.status == "Voided"
        expected = 1 if paid and order.cancel_requested_at is None else 0
        if applied != expected:
            bad.append(f"{order.order_id} ({order.status}, applied {applied}x)")
    if isinstance(f.wire, WireCopies):
        wire = (f"on the wire: {f.wire.messages} fulfillment messages, {f.wire.keys_repeated} of them "
                f"more than once ({f.wire.extra_copies} extra copies), deduplicated by the consumer's inbox")
    else:
        wire = f"duplicates on the wire {f.wire or 'not counted'}"
    note = wire
    if f.dead_lettered_fulfillments:
        note += f"; {f.dead_lettered_fulfillments} fulfillment rows dead-lettered"
    return _result("paid orders whose fulfillment effect was applied other than exactly once", bad, note)


def history_gap(transitions: Sequence[tuple[str | None, str]], state: str) -> str | None:
    """Why an attempt's transitions do not chain from None -> NotStarted to ``state``; None if they do."""
    if not transitions:
        return "no transitions"
    expected: str | None = None
    for i, (before, after) in enumerate(transitions):
        if before != expected:
            return f"transition {i + 1} starts at {before}, the history was at {expected}"
        if before is None:
            if after != AttemptState.NOT_STARTED.value:
                return f"the first transition goes to {after}, not NotStarted"
        elif not _allowed(before, after):
            return f"transition {i + 1} {before} -> {after} is not allowed"
        expected = after
    if expected != state:
        return f"the history ends at {expected}, the attempt is {state}"
    return None


def _allowed(before: str, after: str) -> bool:
    try:
        return can_transition(AttemptState(before), AttemptState(after))
    except ValueError:  # not a state at all
        return False


def attempts_with_history_gaps(f: Facts) -> InvariantResult:
    bad: list[str] = []
    for a in f.attempts.values():
        gap = history_gap(f.transitions.get(a.attempt_id, ()), a.state)
        if gap is not None:
            bad.append(f"{a.attempt_id} ({gap})")
    return _result("attempts whose history misses a transition", bad)


def idempotency_key_of(header: str | None) -> str | None:
    """The key an ``Idempotency-Key`` header carries: a Structured Field String or a bare token."""
    if header is None:
        return None
    text = header.strip()
    if len(text) >= 2 and text.startswith('"') and text.endswith('"'):
        out: list[str] = []
        escaped = False
        for ch in text[1:-1]:
            if escaped or ch != "\\":
                out.append(ch)
                escaped = False
            else:
                escaped = True
        return "".join(out)
    return text or None


def provider_requests_without_send_intent(f: Facts) -> InvariantResult:
    """Per attempt, create requests under its key are at most its send intents."""
    sent: Counter[str | None] = Counter(
        idempotency_key_of((q.get("headers") or {}).get("idempotency-key")) for q in f.creates)
    bad: list[str] = []
    strangers = 0
    for key, n in sorted(sent.items(), key=lambda kv: str(kv[0])):
        attempt = f.by_key.get(key) if key is not None else None
        if attempt is None:
            strangers += n
            bad.append(f"key {key} ({n} requests, no attempt has it)")
        elif n > f.send_intents.get(attempt.attempt_id, 0):
            bad.append(f"{attempt.attempt_id} ({n} requests, "
                       f"{f.send_intents.get(attempt.attempt_id, 0)} send intents)")
    note = f"{len(f.creates)} create requests, {sum(f.send_intents.values())} send intents"
    if strangers:
        note += f"; {strangers} requests under keys no attempt has"
    return _result("provider requests without a recorded send intent", bad, note)


def resends_not_under_original_key_and_bytes(f: Facts) -> InvariantResult:
    """Every create request carrying an attempt's reference is that attempt's stored request.

    Same idempotency key, byte-identical body, and the same API version, account and key
    mode as the attempt was recorded with, where the provider's wire carries them
    (chaos.providers, from each package's sandbox contract: a version header or the
    version in the path, an account header or a body field such as ``merchantAccount``).
    The note says how many resends (creates after an attempt's first) were examined:
    a run without any proves nothing about them.
    """
    provider = chaos_provider(f.provider)
    by_reference = {a.client_reference: a for a in f.attempts.values()}
    wrong: dict[str, set[str]] = defaultdict(set)
    sends: Counter[str] = Counter()
    for q in f.creates:
        body = str(q.get("body") or "")
        headers: Mapping[str, str] = q.get("headers") or {}
        reference = provider.reference_of(body)
        attempt = by_reference.get(reference) if reference is not None else None
        if attempt is None:
            continue  # no attempt's reference: provider_requests_without_send_intent counts it
        sends[attempt.attempt_id] += 1
        if idempotency_key_of(headers.get("idempotency-key")) != attempt.idempotency_key:
            wrong[attempt.attempt_id].add("key")
        if body != attempt.request_body:
            wrong[attempt.attempt_id].add("body")
        if provider.version_of(q) != attempt.api_version:
            wrong[attempt.attempt_id].add("version")
        parts = attempt.provider_account.split(":")  # <provider>:<account>:<environment>
        if len(parts) != 3 or (provider.names_account and provider.account_of(q) != parts[1]):
            wrong[attempt.attempt_id].add("account")
        if provider.key_mode_of(q) != _mode(attempt.provider_account):
            wrong[attempt.attempt_id].add("api key mode")
    bad = [f"{a} ({', '.join(sorted(what))})" for a, what in sorted(wrong.items())]
    resends = sum(n - 1 for n in sends.values())
    resent = sum(1 for n in sends.values() if n > 1)
    note = (f"{resends} resends of {resent} attempts examined, with {sum(sends.values())} creates "
            f"of {len(sends)} attempts" if resends else
            f"no resend was examined ({sum(sends.values())} creates, each an attempt's first): "
            "this run proves nothing about resends")
    return _result("resends not under the original key and bytes", bad, note, examined=resends)


def _mode(provider_account: str) -> str:
    return "sk_live" if provider_account.endswith(":live") else "sk_test"


def server_errors_without_retry_after(answers: Iterable[ClientAnswer]) -> InvariantResult:
    """Client answers 5xx other than 503 with ``Retry-After``."""
    bad: list[str] = []
    allowed = unanswered = 0
    for a in answers:
        if a.status is None:
            unanswered += 1
        elif a.status >= 500:
            if a.status == 503 and a.retry_after:
                allowed += 1
            else:
                bad.append(f"{a.route} {a.status}{' ' + a.problem_type if a.problem_type else ''}"
                           f"{' ' + a.order_id if a.order_id else ''} at {a.at:.1f} s")
    return _result("client answers 5xx other than 503 with Retry-After", bad,
                   f"{allowed} answers 503 with Retry-After (allowed); {unanswered} unanswered")


def processes_exited_on_their_own(exited: Iterable[tuple[str, int]]) -> InvariantResult:
    bad = [f"{name} (exit {code})" for name, code in exited]
    return _result("processes that exited on their own", bad)


def unsettled_when_the_bound_passed(record: RunRecord) -> InvariantResult:
    """What still moved when ``--settle-within`` passed: a run that does not settle proves nothing.

    The invariants after it are read from a system still at work, so a run that did
    not settle is not clean, whatever they say.
    """
    bound = f"{record.options.settle_within_s:g} s"
    settled = record.extra.get("settled")
    if settled is True:
        took = record.phases.get("settle")
        return _result("things not settled within the bound", [],
                       f"settled after {took:.1f} s of {bound}" if took is not None else f"within {bound}")
    if settled is None:
        return _result("things not settled within the bound", ["settling was never checked"])
    remains = [str(r) for r in record.extra.get("settle_remains") or ["(not recorded)"]]
    return _result("things not settled within the bound", remains, f"after {bound}")


def planned_kills_not_carried_out(record: RunRecord) -> InvariantResult:
    """Every kill the plan drew happened: a run that skipped its kills did not test what it says."""
    plan = record.extra.get("kill_plan", [])
    bad = [f"{k.get('target')}@{float(k.get('at', 0)):.2f} ({k.get('outcome')})"
           for k in not_carried_out(record)]
    return _result("planned kills not carried out", bad,
                   f"{len(plan) - len(bad)} of {len(plan)} planned kills carried out")


# -- after the payment (issue 29): refunds, captures and voids -------------------------------------


def provider_refunds_per_operation_above_one(f: Facts) -> InvariantResult:
    """Each refund paycore sent is at most one refund at the provider (by its own reference)."""
    ours = {o.client_reference for o in f.operations.values() if o.kind == "refund"}
    made = Counter(str(r.get("reference")) for r in f.refunds if r.get("reference") in ours)
    bad = sorted(ref for ref, n in made.items() if n > 1)
    return _result("provider refunds per operation more than one", bad,
                   f"{len(f.refunds)} provider refunds, {len(ours)} refund operations", len(ours))


def _captured_at_provider(f: Facts) -> dict[str, int]:
    """What each payment had charged at the provider: a capture's amount for a hold, else its amount."""
    captured: dict[str, int] = {}
    for p in f.ledger:
        if p.get("status") == "succeeded" or p.get("amount_captured"):
            captured[str(p.get("id"))] = int(p.get("amount_captured") or p.get("amount") or 0)
    for c in f.captures:
        if c.get("status") == "succeeded":
            captured[str(c.get("payment"))] = int(c.get("amount") or 0)
    return captured


def provider_refunds_exceeding_the_capture(f: Facts) -> InvariantResult:
    """What the provider gave back of a payment (refunds not failed or canceled) never exceeds
    what it charged."""
    given: Counter[str] = Counter()
    for r in f.refunds:
        if r.get("status") not in ("failed", "canceled"):
            given[str(r.get("payment"))] += int(r.get("amount") or 0)
    captured = _captured_at_provider(f)
    bad = sorted(f"{pid} ({n} > {captured.get(pid, 0)})" for pid, n in given.items()
                 if n > captured.get(pid, 0))
    return _result("provider refunds of a payment exceeding its capture", bad,
                   f"{len(given)} payments refunded", len(given))


def captures_above_the_hold(f: Facts) -> InvariantResult:
    amounts = {str(p.get("id")): int(p.get("amount") or 0) for p in f.ledger}
    per_payment: Counter[str] = Counter()
    for c in f.captures:
        if c.get("status") != "failed":
            per_payment[str(c.get("payment"))] += 1
    bad = sorted({str(c.get("payment")) for c in f.captures
                  if int(c.get("amount") or 0) > amounts.get(str(c.get("payment")), 0)}
                 | {pid for pid, n in per_payment.items() if n > 1})
    return _result("captures above the hold (or more than one)", bad, f"{len(f.captures)} captures",
                   len(f.captures))


def operations_neither_resolved_nor_escalated(f: Facts) -> InvariantResult:
    """A live operation past its deadline has a person on it (an open episode of its own)."""
    bad = sorted(o.operation_id for o in f.operations.values()
                 if o.state in LIVE and o.escalation_deadline is not None
                 and o.escalation_deadline + DEADLINE_GRACE < f.now
                 and o.operation_id not in f.operation_escalations)
    live = sum(1 for o in f.operations.values() if o.state in LIVE)
    states = Counter(o.state for o in f.operations.values())
    shown = ", ".join(f"{n} {s}" for s, n in sorted(states.items())) or "none"
    return _result("operations neither resolved nor escalated", bad,
                   f"{len(f.operations)} operations ({shown}); {live} still live", len(f.operations))


def operation_effects_applied_twice(f: Facts) -> InvariantResult:
    bad = sorted(key for key, n in f.operation_effects.items() if n > 1)
    return _result("operation effects applied twice", bad,
                   f"{len(f.operation_effects)} operation effects applied", len(f.operation_effects))


def evaluate(f: Facts, record: RunRecord) -> list[InvariantResult]:
    """Every invariant, in the issue's order; then whether the run did what it says (settled, killed)."""
    return [
        orders_with_more_than_one_succeeded_payment(f),
        provider_payments_not_linked_to_one_attempt(f),
        orders_disagreeing_with_the_ledger(f),
        orders_with_more_than_one_live_attempt(f),
        attempts_past_deadline_without_escalation(f),
        fulfillments_not_applied_once(f),
        attempts_with_history_gaps(f),
        provider_requests_without_send_intent(f),
        resends_not_under_original_key_and_bytes(f),
        server_errors_without_retry_after(record.answers),
        processes_exited_on_their_own(record.exited_on_own),
        unsettled_when_the_bound_passed(record),
        planned_kills_not_carried_out(record),
        # After the payment (issue 29): refunds, captures and voids.
        provider_refunds_per_operation_above_one(f),
        provider_refunds_exceeding_the_capture(f),
        captures_above_the_hold(f),
        operations_neither_resolved_nor_escalated(f),
        operation_effects_applied_twice(f),
    ]


async def check(endpoints: Endpoints, record: RunRecord) -> list[InvariantResult]:
    """Every money invariant against the sandbox's ledger and the database; count 0 is clean."""
    return evaluate(await gather_facts(endpoints), record)
