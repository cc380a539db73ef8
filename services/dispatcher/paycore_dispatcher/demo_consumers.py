"""Two reference consumers of ``payments.effects`` on the consumer helper.

Stand-ins for downstream systems (``paycore run consumer fulfillment|email``):
each writes one row per effect into its demo table in the same transaction as
its inbox row, so tests and the chaos run can count effects -- a duplicate would
show up as two rows with one ``dedup_key``.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from paycore.clock import Clock
from paycore.consumer import InboxConsumer, Message
from paycore.domain import OPERATION_EFFECTS
from paycore.kafka import KafkaSettings

# What a warehouse acts on: ship, take back, and what follows a payment (issue 29).
FULFILLMENT_KINDS = frozenset({"fulfillment-request", "refund-request", "authorization-lapsed",
                               *OPERATION_EFFECTS.values()})
EMAIL_TEMPLATES = {"order-confirmation": "payment-confirmed", "refund-request": "refund-started"}


def fulfillment_handler(clock: Clock) -> Any:
    async def handle(conn: asyncpg.Connection, message: Message) -> None:
        if message.kind not in FULFILLMENT_KINDS:
            return  # not for fulfillment; the inbox row still marks it seen
        await conn.execute(
            "INSERT INTO demo_fulfillments (dedup_key, kind, attempt_id, message_id, received_at) "
            "VALUES ($1, $2, $3, $4, $5)",
            message.dedup_key, message.kind, message.headers.get("attempt_id"), message.message_id,
            clock.now())

    return handle


def email_handler(clock: Clock) -> Any:
    async def handle(conn: asyncpg.Connection, message: Message) -> None:
        template = EMAIL_TEMPLATES.get(message.kind or "")
        if template is None:
            return
        await conn.execute(
            "INSERT INTO demo_emails (dedup_key, kind, attempt_id, template, sent_at) "
            "VALUES ($1, $2, $3, $4, $5)",
            message.dedup_key, message.kind, message.headers.get("attempt_id"), template, clock.now())

    return handle


HANDLERS = {"fulfillment": fulfillment_handler, "email": email_handler}


def demo_consumer(
    name: str, pool: asyncpg.Pool, ks: KafkaSettings, clock: Clock, **options: Any
) -> InboxConsumer:
    """The ``fulfillment`` or ``email`` demo consumer (group ``paycore-demo-<name>``)."""
    handler = HANDLERS[name](clock)
    return InboxConsumer(pool=pool, kafka_settings=ks, topics=(ks.effects_topic,),
                         group_id=options.pop("group_id", f"paycore-demo-{name}"), handler=handler,
                         clock=clock, **options)
