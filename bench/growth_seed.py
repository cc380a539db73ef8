"""A bench database grown to a size of payment attempts, with COPY, as production would hold it.

Each order gets a deterministic pattern (from its number): mostly one Succeeded attempt,
some Failed then Succeeded, Failed only, never-sent (NotApplied), cancelled, and a small
share whose latest attempt is Unknown with its next check due in the future. Every attempt
has the history the real code would have written (about ten events: transitions, send
intent and result, lookups, keyed provider notifications), every Succeeded attempt its two
business effects in the outbox (dispatched, except a few backing off), and some attempts an
escalation episode with its alert row. Growing is cumulative: :func:`grow` continues from
the :class:`Progress` it is given, so 10k, then 100k, then 1M attempts is one database.

Nothing here goes around a constraint: rows are COPY'd into the migrated schema with every
CHECK, unique index and foreign key in force (the foreign keys are checked per COPY).
:data:`INVARIANTS` says what the real code relies on; the growth bench and its test check them.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import orjson

from paycore import contracts
from paycore.providers.cardco.request import build_request_body

ACCOUNT = "cardco:acct_store:test"
ENDPOINT_PATH = "/v1/payments"
API_VERSION = "2026-11-01"
CHUNK_ORDERS = 10_000  # one COPY per table per chunk: ~11.5k attempts, ~110k events

ORDER_COLUMNS = ["order_id", "customer_id", "amount_minor", "currency", "status", "cancel_requested_at",
                 "created_at", "version", "provider_account"]
ATTEMPT_COLUMNS = ["attempt_id", "order_id", "customer_id", "attempt_number", "provider_account", "endpoint",
                   "api_version", "client_reference", "idempotency_key", "request_body", "amount_minor",
                   "currency", "state", "provider_status", "outcome_reason", "created_at", "first_sent_at",
                   "escalation_deadline", "provider_payment_id", "next_check_at", "version"]
EVENT_COLUMNS = ["attempt_id", "occurred_at", "kind", "actor", "provider_account", "notification_key",
                 "detail"]
OUTBOX_COLUMNS = ["dedup_key", "attempt_id", "ordering_key", "kind", "payload", "created_at",
                  "next_attempt_at", "delivery_attempts", "last_error", "dispatched_at"]
ESCALATION_COLUMNS = ["escalation_id", "escalation_key", "attempt_id", "reason", "detail", "raised_at",
                      "resolved_at", "next_reminder_at"]

# Per-order patterns, by (order number hash) % 1000: the attempts' final states in order.
# Unknown ends 2.5 % of orders (about 2 % of attempts); the rest are settled.
PATTERNS: list[tuple[int, tuple[str, ...], str]] = [
    (700, ("Succeeded",), "Paid"),
    (800, ("Failed", "Succeeded"), "Paid"),
    (920, ("Failed",), "Open"),
    (940, ("Failed", "Failed"), "Open"),
    (950, ("NotApplied",), "Open"),
    (960, ("Failed",), "Cancelled"),
    (975, ("Unknown",), "Open"),
    (985, ("Failed", "Unknown"), "Open"),
    (1000, ("Succeeded",), "Paid"),
]


def pattern(order_no: int) -> tuple[tuple[str, ...], str]:
    p = (order_no * 7919 + 13) % 1000
    for bound, states, status in PATTERNS:
        if p < bound:
            return states, status
    raise AssertionError("unreachable")


@dataclass
class Progress:
    """How far a database has been seeded (what :func:`grow` continues from)."""

    orders: int = 0
    attempts: int = 0
    events: int = 0
    outbox: int = 0
    escalations: int = 0
    seconds: float = 0.0


@dataclass
class Chunk:
    orders: list[tuple[Any, ...]] = field(default_factory=list)
    attempts: list[tuple[Any, ...]] = field(default_factory=list)
    events: list[tuple[Any, ...]] = field(default_factory=list)
    outbox: list[tuple[Any, ...]] = field(default_factory=list)
    escalations: list[tuple[Any, ...]] = field(default_factory=list)


@dataclass(frozen=True)
class Window:
    """The registered account's key window (the Unknown attempts' deadlines must lie ahead)."""

    retention: timedelta
    margin: timedelta

    @property
    def deadline_after_send(self) -> timedelta:
        return self.retention - self.margin


SELECT_WINDOW = """
SELECT key_retention, escalation_margin FROM provider_accounts WHERE provider_account = $1
"""


def _detail(obj: dict[str, Any]) -> str:
    return orjson.dumps(obj).decode()


# History details, written once: the same keys the real writers use.
T_CREATED = _detail({"from": None, "to": "NotStarted"})
T_STARTED = _detail({"from": "NotStarted", "to": "Started", "reason": None, "provider_status": None})
SEND_INTENT = _detail({"first_send": True})
SENT_OK = _detail({"outcome": "succeeded", "provider_status": "succeeded"})
SENT_DECLINED = _detail({"outcome": "failed", "provider_status": "failed", "reason": "card_declined"})
SENT_NO_ANSWER = _detail({"outcome": "unknown", "reason": "provider.no-response.caller"})
T_UNKNOWN = _detail({"from": "Started", "to": "Unknown", "reason": "provider.no-response.caller",
                     "provider_status": None})
LOOKUP_NONE = _detail({"outcome": "unknown", "reason": "provider.not-found"})
ABANDONED = _detail({"reason": "never-sent"})
T_NOT_APPLIED = _detail({"from": "NotStarted", "to": "NotApplied", "reason": "never-sent",
                         "provider_status": None})


def _final_transition(previous: str, state: str) -> str:
    reason = "card_declined" if state == "Failed" else None
    status = "succeeded" if state == "Succeeded" else "failed"
    return _detail({"from": previous, "to": state, "reason": reason, "provider_status": status})


T_FINAL = {(p, s): _final_transition(p, s) for p in ("Started", "Unknown") for s in ("Succeeded", "Failed")}
LOOKUP_FOUND = {s: _detail({"outcome": s.lower(), "provider_status": s.lower()})
                for s in ("Succeeded", "Failed")}


def _notification(kind: str, event_id: str, payment_id: str, reference: str) -> str:
    return _detail({"key_basis": "event-id", "event_id": event_id, "type": kind, "sequence": 1,
                    "provider_payment_id": payment_id, "reference": reference,
                    "status": kind.removeprefix("payment."), "currency": "EUR"})


def _payload_template(kind: str) -> dict[str, Any]:
    sample = contracts.example(kind)
    sample.pop("reminder", None)  # the operator-alert example is a reminder; seeded alerts are initial
    return sample


class Generator:
    """Rows for orders ``[start, stop)``; deterministic in the order numbers."""

    def __init__(self, now: datetime, window: Window, progress: Progress) -> None:
        self.now = now
        self.window = window
        self.progress = progress
        self.templates = {k: _payload_template(k)
                          for k in ("order-confirmation", "fulfillment-request", "operator-alert")}

    def chunk(self, start: int, stop: int) -> Chunk:
        c = Chunk()
        rng = random.Random(start)
        for o in range(start, stop):
            self._order(c, rng, o)
        return c

    def _order(self, c: Chunk, rng: random.Random, o: int) -> None:
        states, status = pattern(o)
        order_id = f"g-{o}"
        customer = f"cus_g{o % 50_000}"
        amount = 500 + (o * 37) % 20_000
        live = states[-1] == "Unknown"
        # Unknown orders are recent (their key window is still open); the rest up to 90 days old.
        if live:
            age = timedelta(seconds=rng.uniform(3600, self.window.deadline_after_send.total_seconds() * 0.7))
        else:
            age = timedelta(seconds=rng.uniform(86_400, 90 * 86_400))
        created = self.now - age
        at = created + timedelta(seconds=3)
        for number, state in enumerate(states, start=1):
            at = self._attempt(c, rng, order_id, customer, amount, number, state, at)
            at += timedelta(seconds=rng.uniform(30, 900))  # the customer tries again a while later
        cancel_at = at if status == "Cancelled" else None
        version = 1 if status != "Open" else 0
        c.orders.append((order_id, customer, amount, "EUR", status, cancel_at, created, version, ACCOUNT))

    def _attempt(self, c: Chunk, rng: random.Random, order_id: str, customer: str, amount: int,
                 number: int, state: str, created: datetime) -> datetime:
        """Appends one attempt, its history, effects and escalation; returns when it settled."""
        serial = self.progress.attempts
        self.progress.attempts += 1
        attempt_id = uuid.UUID(bytes=rng.randbytes(16), version=4)
        reference = f"{order_id}-a{number}"
        body = build_request_body(amount_minor=amount, currency="EUR", payment_method="tok_visa",
                                  reference=reference)
        payment_id = None if state in ("Unknown", "NotApplied") else f"pay_g{serial}"
        events = c.events
        t = created
        step = timedelta(seconds=1)

        def event(kind: str, actor: str, detail: str, key: str | None = None) -> None:
            nonlocal t
            t += step
            account = ACCOUNT if kind == "notification" else None
            events.append((attempt_id, t, kind, actor, account, key, detail))

        event("transition", "endpoint", T_CREATED)
        if state == "NotApplied":
            event("send_abandoned", "recovery", ABANDONED)
            event("transition", "recovery", T_NOT_APPLIED)
            c.attempts.append((attempt_id, order_id, customer, number, ACCOUNT, ENDPOINT_PATH, API_VERSION,
                               reference, str(uuid.UUID(bytes=rng.randbytes(16), version=4)), body, amount,
                               "EUR", state, None, "never-sent", created, None, None, None, t, 1))
            return t
        event("send_intent", "endpoint", SEND_INTENT)
        event("transition", "endpoint", T_STARTED)
        first_sent = t
        deadline = first_sent + self.window.deadline_after_send
        # Half the settled attempts went through Unknown first (no answer, then lookups).
        via_unknown = state == "Unknown" or (serial * 2654435761 >> 7) & 1 == 1
        escalation: tuple[str, bool] | None = None
        if via_unknown:
            event("send_result", "endpoint", SENT_NO_ANSWER)
            event("transition", "endpoint", T_UNKNOWN)
            went_unknown = t
            step = timedelta(seconds=rng.uniform(20, 120))  # recovery's cadence
            event("lookup", "recovery", LOOKUP_NONE)
            event("lookup", "recovery", LOOKUP_NONE)
            if state == "Unknown":
                if serial % 4 == 0:
                    escalation = ("resend-rejected", True)
                version = 2
            else:
                if serial % 50 == 0:
                    escalation = ("resend-rejected", False)
                event("lookup", "recovery", LOOKUP_FOUND[state])
                event("transition", "recovery", T_FINAL["Unknown", state])
                version = 3
        else:
            event("send_result", "endpoint", SENT_OK if state == "Succeeded" else SENT_DECLINED)
            event("transition", "endpoint", T_FINAL["Started", state])
            version = 2
        settled = t
        if state != "Unknown":
            step = timedelta(seconds=2)
            kind = "payment.succeeded" if state == "Succeeded" else "payment.failed"
            assert payment_id is not None
            for n, k in enumerate(("payment.created", kind, "payment.updated")):
                event("notification", "notification-handler",
                      _notification(k, f"evt_g{serial}_{n}", payment_id, reference), f"evt_g{serial}_{n}")
            next_check = settled
            status, reason = ("succeeded", None) if state == "Succeeded" else ("failed", "card_declined")
        else:
            next_check = self.now + timedelta(seconds=rng.uniform(600, 6 * 3600))
            status, reason = None, "provider.no-response.caller"
        c.attempts.append((attempt_id, order_id, customer, number, ACCOUNT, ENDPOINT_PATH, API_VERSION,
                           reference, str(uuid.UUID(bytes=rng.randbytes(16), version=4)), body, amount, "EUR",
                           state, status, reason, created, first_sent, deadline, payment_id, next_check,
                           version))
        if state == "Succeeded":
            self._effects(c, rng, attempt_id, order_id, amount, payment_id or "", settled, serial)
        if escalation is not None:
            self._escalation(c, attempt_id, escalation[0], went_unknown + timedelta(seconds=1),
                             settled if not escalation[1] else None)
        return settled

    def _effects(self, c: Chunk, rng: random.Random, attempt_id: uuid.UUID, order_id: str, amount: int,
                 payment_id: str, at: datetime, serial: int) -> None:
        key = f"attempt:{attempt_id}"
        for kind in ("order-confirmation", "fulfillment-request"):
            dedup = f"{key}:{kind}"
            payload = {**self.templates[kind], "dedup_key": dedup, "attempt_id": str(attempt_id),
                       "order_id": order_id, "amount_minor": amount, "provider_payment_id": payment_id}
            # A realistic few still pending: the broker refused them; they are backing off (at most 300 s).
            if kind == "fulfillment-request" and serial % 997 == 0:
                c.outbox.append((dedup, attempt_id, key, kind, orjson.dumps(payload).decode(), at,
                                 self.now + timedelta(seconds=rng.uniform(60, 300)), 3,
                                 "KafkaTimeoutError: no acknowledgement", None))
            else:
                dispatched = at + timedelta(milliseconds=rng.uniform(50, 1500))
                c.outbox.append((dedup, attempt_id, key, kind, orjson.dumps(payload).decode(), at, at, 0,
                                 None, dispatched))

    def _escalation(self, c: Chunk, attempt_id: uuid.UUID, reason: str, raised: datetime,
                    resolved: datetime | None) -> None:
        self.progress.escalations += 1
        escalation_id = self.progress.escalations
        key = f"attempt:{attempt_id}:{reason}"
        # An open episode's next reminder is ahead; a resolved one has none.
        reminder = None if resolved is not None else self.now + timedelta(minutes=5 + escalation_id % 25)
        c.escalations.append((escalation_id, key, attempt_id, reason, "{}", raised, resolved, reminder))
        dedup = f"escalation:{escalation_id}:initial"
        payload = {**self.templates["operator-alert"], "dedup_key": dedup, "escalation_id": escalation_id,
                   "escalation_key": key, "reason": reason, "attempt_id": str(attempt_id),
                   "alert": "initial", "provider_account": ACCOUNT}
        c.outbox.append((dedup, attempt_id, None, "operator-alert", orjson.dumps(payload).decode(), raised,
                         raised, 0, None, raised + timedelta(seconds=1)))


SET_ESCALATION_SEQUENCE = """
SELECT setval(pg_get_serial_sequence('payment_escalations', 'escalation_id'),
              GREATEST((SELECT max(escalation_id) FROM payment_escalations), 1))
"""


async def copy_chunk(conn: asyncpg.Connection, c: Chunk) -> None:
    """One chunk, parents first, in one transaction (the foreign keys are checked per COPY)."""
    async with conn.transaction():
        await conn.copy_records_to_table("orders", records=c.orders, columns=ORDER_COLUMNS)
        await conn.copy_records_to_table("payment_attempts", records=c.attempts, columns=ATTEMPT_COLUMNS)
        await conn.copy_records_to_table("payment_attempt_events", records=c.events, columns=EVENT_COLUMNS)
        await conn.copy_records_to_table("outbox_messages", records=c.outbox, columns=OUTBOX_COLUMNS)
        if c.escalations:
            await conn.copy_records_to_table("payment_escalations", records=c.escalations,
                                             columns=ESCALATION_COLUMNS)


async def grow(conn: asyncpg.Connection, progress: Progress, target_attempts: int, *, now: datetime,
               report: Callable[[str], None] = print) -> Progress:
    """Add orders until the database holds at least ``target_attempts`` seeded attempts; VACUUM (ANALYZE).

    ``progress`` is updated in place (and returned): pass the same one to grow further.
    """
    row = await conn.fetchrow(SELECT_WINDOW, ACCOUNT)
    if row is None:
        raise RuntimeError(f"register {ACCOUNT} before seeding (bench.common.seed_provider_account)")
    gen = Generator(now, Window(row["key_retention"], row["escalation_margin"]), progress)
    await conn.execute("SET synchronous_commit = off")  # a bench database: the last chunk may be redone
    started = time.perf_counter()
    first_attempt, first_event = progress.attempts, progress.events
    last_report = started
    while progress.attempts < target_attempts:
        # Roughly 1.15 attempts per order: size the last chunk so the target is not overshot by much.
        orders = max(1, min(CHUNK_ORDERS, int((target_attempts - progress.attempts) / 1.15) + 1))
        c = gen.chunk(progress.orders, progress.orders + orders)
        await copy_chunk(conn, c)
        progress.orders += orders
        progress.events += len(c.events)
        progress.outbox += len(c.outbox)
        if time.perf_counter() - last_report > 10 or progress.attempts >= target_attempts:
            last_report = time.perf_counter()
            elapsed = last_report - started
            report(f"    seeded {progress.attempts:>9,} attempts, {progress.events:>10,} events"
                   f"  ({(progress.attempts - first_attempt) / elapsed:,.0f} attempts/s,"
                   f" {(progress.events - first_event) / elapsed:,.0f} events/s)")
    await conn.execute(SET_ESCALATION_SEQUENCE)
    # A table this size in production has been vacuumed many times over: its pages carry hint
    # bits and are in the visibility map. Freshly COPYed pages are not, so the first statements
    # to read them would write them, and insert-driven autovacuum of the history would start in
    # the middle of a measure; the 1M step's p99 read that, not the table's size (fifth pass).
    vacuumed = time.perf_counter()
    await conn.execute("VACUUM (ANALYZE)")
    await conn.execute("CHECKPOINT")  # the pages VACUUM dirtied are written before, not during, a measure
    report(f"    VACUUM (ANALYZE), CHECKPOINT {time.perf_counter() - vacuumed:.1f} s")
    progress.seconds += time.perf_counter() - started
    return progress


# What the real code relies on, each a query counting the rows that break it (0 = holds).
INVARIANTS: dict[str, str] = {
    "state matches the history's last transition": """
        SELECT count(*) FROM payment_attempts a
        LEFT JOIN LATERAL (SELECT detail ->> 'to' AS last_to FROM payment_attempt_events e
                           WHERE e.attempt_id = a.attempt_id AND e.kind = 'transition'
                           ORDER BY e.occurred_at DESC, e.event_id DESC LIMIT 1) h ON true
        WHERE h.last_to IS DISTINCT FROM a.state""",
    "at most one Succeeded attempt per order": """
        SELECT count(*) FROM (SELECT order_id FROM payment_attempts WHERE state = 'Succeeded'
                              GROUP BY order_id HAVING count(*) > 1) x""",
    "an order is Paid exactly when it has a Succeeded attempt": """
        SELECT count(*) FROM orders o
        WHERE (o.status = 'Paid') <> EXISTS (SELECT 1 FROM payment_attempts a
                                             WHERE a.order_id = o.order_id AND a.state = 'Succeeded')""",
    "at most one live attempt per order": """
        SELECT count(*) FROM (SELECT order_id FROM payment_attempts
                              WHERE state IN ('NotStarted', 'Started', 'Unknown')
                              GROUP BY order_id HAVING count(*) > 1) x""",
    "attempt numbers are 1..n per order": """
        SELECT count(*) FROM (SELECT order_id FROM payment_attempts GROUP BY order_id
                              HAVING max(attempt_number) <> count(*) OR min(attempt_number) <> 1) x""",
    "every sent attempt has a send intent before its first send": """
        SELECT count(*) FROM payment_attempts a
        WHERE a.first_sent_at IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM payment_attempt_events e WHERE e.attempt_id = a.attempt_id
                          AND e.kind = 'send_intent' AND e.occurred_at <= a.first_sent_at)""",
    "every Succeeded attempt has its order confirmation and fulfillment queued": """
        SELECT count(*) FROM payment_attempts a
        WHERE a.state = 'Succeeded'
          AND (SELECT count(*) FROM outbox_messages m WHERE m.attempt_id = a.attempt_id
               AND m.kind IN ('order-confirmation', 'fulfillment-request')) <> 2""",
    "an open escalation is about a live attempt": """
        SELECT count(*) FROM payment_escalations s JOIN payment_attempts a USING (attempt_id)
        WHERE s.resolved_at IS NULL AND a.state NOT IN ('NotStarted', 'Started', 'Unknown')""",
    "every escalation has its alert queued": """
        SELECT count(*) FROM payment_escalations s
        WHERE NOT EXISTS (SELECT 1 FROM outbox_messages m
                          WHERE m.dedup_key = 'escalation:' || s.escalation_id || ':initial')""",
    "an Unknown attempt's key window is still open": """
        SELECT count(*) FROM payment_attempts
        WHERE state = 'Unknown' AND (escalation_deadline <= now() OR next_check_at IS NULL)""",
    "no event precedes its attempt": """
        SELECT count(*) FROM payment_attempt_events e JOIN payment_attempts a USING (attempt_id)
        WHERE e.occurred_at < a.created_at""",
}


async def broken_invariants(conn: asyncpg.Connection) -> dict[str, int]:
    """Each invariant's count of rows that break it (all zero when the data is sound)."""
    return {name: int(await conn.fetchval(sql)) for name, sql in INVARIANTS.items()}
