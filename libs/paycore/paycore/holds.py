"""Holds that lapse: where an Authorized order becomes Voided without a void.

A payment authorized for manual capture holds its amount until a capture charges it or a
cancel releases it (:mod:`paycore.operations`); left alone, the provider releases it after its
hold period (:attr:`paycore.providers.base.Capabilities.hold_lapse_s`). Recovery's hold task
(:func:`paycore.domain.decide_hold` decides) warns a person before that
(``authorization-lapsing``), and after it records the lapse here: the order Voided and
``authorization-lapsed`` queued for the store, in one transaction under the order's lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

import asyncpg

from paycore import escalations, outbox
from paycore.domain import EscalationReason
from paycore.orders import ORDERS, lock_order

__all__ = ["HeldPayment", "held_payments", "record_lapse", "warn_lapsing"]

LAPSED_EFFECT = "authorization-lapsed"


@dataclass(frozen=True)
class HeldPayment:
    attempt_id: UUID
    order_id: str
    provider_account: str
    provider_payment_id: str | None
    amount_minor: int
    currency: str
    first_sent_at: datetime
    capture_or_cancel_live: bool


async def held_payments(conn: asyncpg.Connection | asyncpg.Pool, batch: int) -> list[HeldPayment]:
    """Payments held now (their order Authorized), oldest authorization first."""
    return [HeldPayment(**dict(row)) for row in await ORDERS.held_payments.fetch(conn, batch=batch)]


async def warn_lapsing(pool: asyncpg.Pool, held: HeldPayment, *, lapses_at: datetime, now: datetime,
                       reminder_interval: timedelta) -> bool:
    """Ask a person to capture or void ``held`` before it lapses (once: the episode is keyed by
    the payment). ``False``: the episode was open already."""
    async with pool.acquire() as conn, conn.transaction():
        opened = await escalations.raise_escalation(
            conn, key=escalations.attempt_key(held.attempt_id, EscalationReason.AUTHORIZATION_LAPSING.value),
            reason=EscalationReason.AUTHORIZATION_LAPSING, attempt_id=held.attempt_id, now=now,
            reminder_interval=reminder_interval,
            detail={"order_id": held.order_id, "amount_minor": held.amount_minor, "currency": held.currency,
                    "lapses_at": lapses_at.isoformat()})
        return opened is not None


async def record_lapse(pool: asyncpg.Pool, held: HeldPayment, *, now: datetime) -> bool:
    """The hold lapsed uncaptured: the order Voided and ``authorization-lapsed`` queued after the
    payment's own effects, once (the order must still be Authorized under its lock: a capture
    or cancel that ended meanwhile decided instead). ``False``: nothing to record."""
    async with pool.acquire() as conn, conn.transaction():
        await lock_order(conn, held.order_id)
        if await ORDERS.void_lapsed.fetchval(conn, order_id=held.order_id) is None:
            return False
        await outbox.enqueue_effect(
            conn, attempt_id=held.attempt_id, effect=LAPSED_EFFECT, now=now,
            payload={"order_id": held.order_id, "amount_minor": held.amount_minor, "currency": held.currency,
                     "provider_account": held.provider_account,
                     "provider_payment_id": held.provider_payment_id, "order_status": "Voided"})
        return True
