"""EXPLAIN (ANALYZE, BUFFERS) of the hot statements, as the code sends them, on a grown database.

Each statement is the code's own constant with realistic parameters, run inside a transaction
that is rolled back (a write's plan is measured by doing the write). Every statement is
explained twice: with its parameters bound (the plan asyncpg's first executions get) and as a
generic plan (``PREPARE`` + ``plan_cache_mode = force_generic_plan``: what a prepared statement
settles on after five executions), because a generic plan cannot see the parameter values
and is where a claim's ``LIMIT $n`` or ``next_check_at <= $3`` could turn into a scan.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import orjson

from paycore import (
    notifications,
)
from paycore.attempt_row import ATTEMPTS as A
from paycore.escalations import ESCALATIONS
from paycore.events import HISTORY
from paycore.orders import ORDERS
from paycore.outbox import OUTBOX
from paycore.queries import Query
from paycore.webhook_replays import SEEN

# A sequential scan of one of these, past a few thousand rows, is a plan that grows with the data.
GROWING = frozenset({"payment_attempts", "payment_attempt_events", "outbox_messages", "orders"})


@dataclass(frozen=True)
class Plan:
    summary: str  # every scan node, outermost first: "Index Scan using <index> on <table>"
    ms: float  # execution time, as EXPLAIN ANALYZE measured it
    buffers: int  # shared blocks hit + read by the whole statement
    seq_scans: tuple[str, ...]  # growing tables read by a Seq Scan


@dataclass
class Plans:
    by_statement: dict[str, Plan] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def summarize(plan_json: Any) -> Plan:
    root = plan_json[0]
    scans: list[str] = []
    seq: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        rel = node.get("Relation Name")
        kind = node["Node Type"]
        if rel is not None or "Index Name" in node:
            index = f" using {node['Index Name']}" if "Index Name" in node else ""
            on = f" on {rel}" if rel is not None else ""
            if kind not in ("ModifyTable",):
                scans.append(f"{kind}{index}{on}")
            if kind == "Seq Scan" and rel in GROWING:
                seq.append(rel)
        for child in node.get("Plans", []):
            walk(child)

    walk(root["Plan"])
    top = root["Plan"]
    buffers = int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0))
    return Plan(summary="; ".join(scans) or top["Node Type"], ms=float(root.get("Execution Time", 0.0)),
                buffers=buffers, seq_scans=tuple(seq))


EXPLAIN = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "


async def explain_query(conn: asyncpg.Connection, plans: Plans, name: str, query: Query,
                        **params: Any) -> None:
    """:func:`explain` for a named query, its parameters by name."""
    await explain(conn, plans, name, query.sql, *query.args(**params))


async def explain(conn: asyncpg.Connection, plans: Plans, name: str, sql: str, *args: Any) -> None:
    """The statement's bound-parameter plan as ``name`` and its generic plan as ``name[generic]``."""
    for generic in (False, True):
        label = f"{name}[generic]" if generic else name
        try:
            async with conn.transaction():
                if generic:
                    await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
                    await conn.execute("PREPARE growth_plan AS " + sql)
                    try:
                        # EXECUTE takes no bound parameters: its arguments are literals.
                        values = ", ".join(literal(a) for a in args)
                        raw = await conn.fetchval(EXPLAIN + f"EXECUTE growth_plan({values})")
                    finally:
                        await conn.execute("DEALLOCATE growth_plan")
                else:
                    raw = await conn.fetchval(EXPLAIN + sql, *args)
                plans.by_statement[label] = summarize(orjson.loads(raw))
                raise _Rollback
        except _Rollback:
            pass
        except (asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            plans.errors[label] = f"{type(exc).__name__}: {exc}"


def literal(value: Any) -> str:
    """``value`` as an SQL literal for EXECUTE (typed by the prepared statement's parameter)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, datetime):
        value = value.isoformat()
    if isinstance(value, list):
        items = ",".join('"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"' for v in value)
        value = "{" + items + "}"
    return "'" + str(value).replace("'", "''") + "'"


class _Rollback(Exception):
    """Leaves the explained statement's transaction without keeping its writes."""


@dataclass(frozen=True)
class Sample:
    """Existing rows to aim the lookups at (in the middle of the table, not a cached edge)."""

    attempt_id: uuid.UUID
    order_id: str
    reference: str
    payment_id: str
    notification_key: str


SELECT_SAMPLE = """
SELECT a.attempt_id, a.order_id, a.client_reference, a.provider_payment_id, e.notification_key
FROM payment_attempts a
JOIN payment_attempt_events e ON e.attempt_id = a.attempt_id AND e.kind = 'notification'
WHERE a.client_reference = $1
LIMIT 1
"""


async def sample(conn: asyncpg.Connection, seeded_orders: int) -> Sample:
    # g-<n> orders are seeded in order; one from the middle whose first attempt was answered.
    for n in range(seeded_orders // 2, seeded_orders):
        row = await conn.fetchrow(SELECT_SAMPLE, f"g-{n}-a1")
        if row is not None and row["provider_payment_id"] is not None:
            return Sample(row["attempt_id"], row["order_id"], row["client_reference"],
                          row["provider_payment_id"], row["notification_key"])
    raise RuntimeError("no answered attempt to sample")


async def checkout_and_intake(conn: asyncpg.Connection, plans: Plans, s: Sample, account: str,
                              now: datetime) -> None:
    """Checkout's create / mark started / record outcome statements and the intake's lookups."""
    order_id = f"plan-{uuid.uuid4().hex[:12]}"
    # The order the explained checkout statements pay: committed, so every statement finds it
    # (each explain rolls back its own write); it stays Open with no attempt, harmless.
    await ORDERS.insert.execute(conn, order_id=order_id, customer_id="cus_plan", amount_minor=4999,
                                currency="EUR", now=now, provider_account=account)
    attempt_id = uuid.uuid4()
    await explain_query(conn, plans, "checkout.lock_order", ORDERS.lock_order, order_id=order_id)
    await explain(conn, plans, "checkout.select_live_attempt", A.live_of_order.sql, order_id)
    await explain(conn, plans, "checkout.next_attempt_number", A.next_attempt_number.sql, order_id)
    insert_args = A.insert_live.args(
        attempt_id=attempt_id, order_id=order_id, customer_id="cus_plan", attempt_number=1, account=account,
        endpoint="/v1/payments", api_version="2026-11-01", reference=f"{order_id}-a1",
        idempotency_key=str(uuid.uuid4()), request_body="{}", amount_minor=4999, currency="EUR", now=now,
        next_check_at=now + timedelta(seconds=60))
    await explain(conn, plans, "checkout.insert_live_attempt", A.insert_live.sql, *insert_args)
    # The statements after the insert need the attempt: insert it for real, then delete it
    # with its order at the end (no history is written for it, so nothing append-only is left).
    await conn.execute(A.insert_live.sql, *insert_args)
    try:
        await explain_query(conn, plans, "checkout.insert_event", HISTORY.insert, attempt_id=attempt_id,
                            now=now, kind="transition", actor="endpoint",
                            detail='{"from": null, "to": "NotStarted"}')
        await explain_query(conn, plans, "checkout.lock_order_of_attempt", ORDERS.lock_order_of_attempt,
                            attempt_id=attempt_id)
        started = A.mark_started.args(attempt_id=attempt_id, version=0, now=now,
                                      next_check_at=now + timedelta(seconds=50))
        await explain(conn, plans, "checkout.mark_started", A.mark_started.sql, *started)
        await conn.execute(A.mark_started.sql, *started)
        await explain_query(conn, plans, "checkout.payment_id_owner", A.payment_id_owner, account=account,
                            payment_id=f"pay_plan_{attempt_id.hex[:8]}", attempt_id=attempt_id)
        await explain_query(
            conn, plans, "checkout.apply_outcome", A.apply_outcome, attempt_id=attempt_id, version=1,
            state="Started", target="Succeeded", provider_status="succeeded", next_action=None,
            next_action_expires_at=None, outcome_reason=None, payment_id=f"pay_plan_{attempt_id.hex[:8]}",
            next_check_at=now, owner=None, token=None)
        await explain_query(conn, plans, "checkout.resolve_escalations", ESCALATIONS.resolve_for_attempt,
                            attempt_id=attempt_id, now=now)
        await explain_query(conn, plans, "checkout.mark_order_paid", ORDERS.mark_paid, order_id=order_id)
        await explain_query(conn, plans, "checkout.enqueue", OUTBOX.enqueue,
                            dedup_key=f"attempt:{attempt_id}:order-confirmation", attempt_id=attempt_id,
                            ordering_key=f"attempt:{attempt_id}", kind="order-confirmation", payload="{}",
                            now=now, traceparent=None)
    finally:
        await conn.execute("DELETE FROM payment_attempts WHERE attempt_id = $1", attempt_id)
        await conn.execute("DELETE FROM orders WHERE order_id = $1", order_id)

    await explain_query(conn, plans, "intake.notification_recorded", HISTORY.notification_recorded,
                        account=account, notification_key=s.notification_key)
    await explain_query(conn, plans, "intake.insert_seen", SEEN.insert_seen, account=account,
                        webhook_id_sha256="0" * 64, webhook_timestamp=int(now.timestamp()), now=now)
    await explain_query(conn, plans, "intake.by_reference_or_payment_id", A.by_reference_or_payment_id,
                        account=account, reference=s.reference, payment_id=s.payment_id)
    await explain_query(conn, plans, "intake.insert_notification", HISTORY.insert_keyed_notification,
                        attempt_id=s.attempt_id, now=now, actor=notifications.HANDLER_ACTOR, account=account,
                        notification_key=f"evt_plan_{uuid.uuid4().hex}", detail="{}")
    await explain_query(conn, plans, "intake.lock_order_of_attempt", ORDERS.lock_order_of_attempt,
                        attempt_id=s.attempt_id)
    await explain_query(conn, plans, "recovery.history", HISTORY.history, attempt_id=s.attempt_id)
    await explain_query(conn, plans, "recovery.pass_facts", HISTORY.pass_facts, attempt_id=s.attempt_id,
                        scope=account, now=now)


async def claim(conn: asyncpg.Connection, plans: Plans, batch: int, now: datetime, lease_s: float) -> None:
    """Recovery's claim (``claim_due``), as ``leases.claim_due`` sends it for a batch."""
    tokens = [uuid.uuid4() for _ in range(batch)]
    await explain_query(conn, plans, "recovery.claim_due", A.claim_due, owner="growth-plan", tokens=tokens,
                        now=now, expires_at=now + timedelta(seconds=lease_s))


PENDING_OF_KEYS = """
SELECT message_id FROM outbox_messages WHERE ordering_key = ANY($1::text[]) AND dispatched_at IS NULL
"""


async def relay_statements(conn: asyncpg.Connection, plans: Plans, batch: int, now: datetime,
                           keys: Sequence[str]) -> None:
    """The relay's claims (alerts, heads), its followers read and its mark, with rows pending."""
    await explain_query(conn, plans, "relay.claim_alerts", OUTBOX.claim_alerts, now=now, limit=batch)
    await explain_query(conn, plans, "relay.claim_heads", OUTBOX.claim_heads, now=now, limit=batch)
    await explain_query(conn, plans, "relay.followers", OUTBOX.followers, ordering_keys=list(keys), now=now)
    ids = [r["message_id"] for r in await conn.fetch(PENDING_OF_KEYS, list(keys))]
    await explain_query(conn, plans, "relay.mark_dispatched", OUTBOX.mark_dispatched, message_ids=ids,
                        now=now)
