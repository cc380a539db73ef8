"""The notification handler: one transaction per delivery, in the reference's order.

0. A redelivery of an already committed notification answers "duplicate" from
   one indexed read, without opening the transaction (a shortcut only). In the
   transaction, a byte-identical replay of a delivery already handled (same
   webhook-id and timestamp, inside the signature tolerance) is a duplicate too.
1. Match by account + client reference and by account + provider payment id,
   independently (one query, two answers); :func:`paycore.evidence.identify` says
   which attempt they name, or that they name two.
2. Record the notification first (``ON CONFLICT … DO NOTHING``); a duplicate
   returns before any transition, alert or outbox row.
3. Identity conflict -> escalation naming both attempts, applied to neither.
4. Unmatched -> escalation keyed by notification, payment id or reference.
5. Otherwise apply it through the one writer of outcomes, which judges the evidence
   first (:mod:`paycore.evidence`): another account, mode, amount or currency is
   escalated ``mismatch``, another payment id ``provider-id-conflict``, and
   nothing is resolved; else the same conditional transition every writer uses.

A verified event PostgreSQL cannot store as parsed takes :func:`record_unparseable`
instead: its raw bytes are recorded and a person is alerted; it is never applied.

The caller acknowledges with 2xx only after this commits.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import logging
from datetime import datetime, timedelta

import asyncpg

from paycore import escalations
from paycore.attempts import find_by_reference_and_payment_id
from paycore.config import ProviderAccountConfig
from paycore.domain import EscalationReason
from paycore.evidence import identify
from paycore.logs import bind, bind_log_context
from paycore.notifications import apply_notification, event_detail, is_recorded, record_notification
from paycore.orders import lock_order
from paycore.pgtext import MAX_INDEXED_CHARS, json_problem
from paycore.providers.base import Notification
from paycore.webhook_replays import SignedDelivery, first_sight

log = logging.getLogger("paycore.webhooks")


class DeliveryResult(enum.StrEnum):
    APPLIED = "applied"
    DUPLICATE = "duplicate"
    UNMATCHED = "unmatched"
    MISMATCH = "mismatch"
    CONFLICT = "conflict"
    UNPARSEABLE = "unparseable"


async def handle_notification(
    pool: asyncpg.Pool, *, account: ProviderAccountConfig, n: Notification, key: str | None, now: datetime,
    reminder_interval: timedelta, recheck_after_s: float, delivery: SignedDelivery | None = None,
) -> DeliveryResult:
    """Handle one verified notification in one transaction; ``key`` is its provider's deduplication
    key (``Provider.notification_key``), ``delivery`` arms the replay window."""
    provider_account = account.provider_account
    async with pool.acquire() as conn:
        # A redelivery of a committed notification is answered by one indexed read
        # (history is append-only, so a recorded key stays recorded); the insert
        # below remains the arbiter between concurrent deliveries.
        if key is not None and await is_recorded(conn, provider_account=provider_account, key=key):
            return DeliveryResult.DUPLICATE
        with bind_log_context():  # what _handle binds lasts for this delivery only
            async with conn.transaction():
                if delivery is not None and not await first_sight(conn, provider_account, delivery, now):
                    return DeliveryResult.DUPLICATE  # a replay of a delivery already handled
                result = await _handle(conn, account=account, n=n, key=key, now=now,
                                       reminder_interval=reminder_interval, recheck_after_s=recheck_after_s)
            # Committed: one line per handled notification, naming the order and attempt it matched.
            log.info("%s notification %.64s: %s", provider_account, n.event_type, result.value)
            return result


async def _handle(
    conn: asyncpg.Connection, *, account: ProviderAccountConfig, n: Notification, key: str | None,
    now: datetime, reminder_interval: timedelta, recheck_after_s: float,
) -> DeliveryResult:
    provider_account = account.provider_account
    by_reference, by_payment_id = await find_by_reference_and_payment_id(
        conn, provider_account, n.reference or None, n.payment_id or None)
    identified = identify(by_reference, by_payment_id)
    attempt = identified.attempt
    if attempt is not None:
        # The fixed lock order (order, then attempt, then event rows) holds here too.
        await lock_order(conn, attempt.order_id)
        bind(order_id=attempt.order_id, attempt_id=attempt.attempt_id)

    recorded = await record_notification(
        conn, provider_account=provider_account, key=key,
        attempt_id=attempt.attempt_id if attempt else None, detail=event_detail(n, key), now=now,
    )
    if recorded.is_duplicate:
        return DeliveryResult.DUPLICATE

    if not identified.verdict.accepted:  # an identity conflict (paycore.evidence.identify)
        assert by_reference is not None and identified.verdict.reason is not None
        await escalations.raise_escalation(
            conn, key=escalations.identity_conflict_key(provider_account, key, n.payment_id),
            reason=identified.verdict.reason,
            attempt_id=by_reference.attempt_id, now=now, reminder_interval=reminder_interval,
            detail={
                **identified.verdict.detail,  # both attempts
                "provider_account": provider_account,
                "client_reference": n.reference,
                "provider_payment_id": n.payment_id,
                "notification_event_id": recorded.event_id,
            },
        )
        return DeliveryResult.CONFLICT

    if attempt is None:
        # Never silently ignored: stored for reconciliation, one episode per subject.
        await escalations.raise_escalation(
            conn, key=escalations.unmatched_key(provider_account, key, n.payment_id, n.reference),
            reason=EscalationReason.UNMATCHED_PAYMENT,
            attempt_id=None, now=now, reminder_interval=reminder_interval,
            detail={"provider_account": provider_account, "provider_payment_id": n.payment_id,
                    "client_reference": n.reference, "notification_event_id": recorded.event_id},
        )
        return DeliveryResult.UNMATCHED

    if by_reference is None:
        n = n.identified_otherwise()  # by the payment id it recorded
    # The one writer of outcomes judges the evidence first (paycore.evidence): a payment of
    # another account, mode, amount or currency, or another payment id, is escalated and
    # resolves nothing.
    applied = await apply_notification(conn, attempt=attempt, n=n, key=key, now=now,
                                       reminder_interval=reminder_interval, recheck_after_s=recheck_after_s)
    if applied.verdict.reason is EscalationReason.MISMATCH:
        return DeliveryResult.MISMATCH
    if applied.verdict.reason is not None:
        return DeliveryResult.CONFLICT
    return DeliveryResult.APPLIED


# -- poison: verified, but not storable as parsed -----------------------------------------

def storage_problem(n: Notification) -> str | None:
    """Why a verified event cannot be handled as parsed: text PostgreSQL refuses, or an
    identifier (event id, payment id, reference) too long for the index it lands in."""
    why = json_problem(n.event)
    if why is not None:
        return why
    if any(v is not None and len(v) > MAX_INDEXED_CHARS for v in (n.event_id, n.payment_id, n.reference)):
        return "identifier-too-long"
    return None


async def record_unparseable(
    pool: asyncpg.Pool, *, account: ProviderAccountConfig, webhook_id: str | None, body: bytes, why: str,
    now: datetime, reminder_interval: timedelta, delivery: SignedDelivery | None = None,
) -> DeliveryResult:
    """Keep a verified body PostgreSQL cannot store as parsed (NUL, lone surrogates), as received.

    The notification row holds the bytes in base64 and the reason, keyed by the
    verified webhook-id (when short enough to index) so a redelivery is a duplicate; an
    ``unparseable-notification`` escalation (one per body) asks a person to
    read it. Nothing is matched or applied: the text that would identify the
    attempt is the text that cannot be stored.
    """
    provider_account = account.provider_account
    # A webhook-id too long to index is no key: each delivery is then its own row (one episode).
    key = webhook_id if webhook_id and len(webhook_id) <= MAX_INDEXED_CHARS else None
    digest = hashlib.sha256(body).hexdigest()
    async with pool.acquire() as conn:
        if key is not None and await is_recorded(conn, provider_account=provider_account, key=key):
            return DeliveryResult.DUPLICATE
        async with conn.transaction():
            if delivery is not None and not await first_sight(conn, provider_account, delivery, now):
                return DeliveryResult.DUPLICATE  # a replay of a delivery already handled
            recorded = await record_notification(
                conn, provider_account=provider_account, key=key, attempt_id=None, now=now,
                detail={"key_basis": "webhook-id" if key else "none", "unparseable": why,
                        "body_sha256": digest, "body_base64": base64.b64encode(body).decode("ascii")},
            )
            if recorded.is_duplicate:
                return DeliveryResult.DUPLICATE
            await escalations.raise_escalation(
                conn, key=escalations.unparseable_key(provider_account, digest),
                reason=EscalationReason.UNPARSEABLE_NOTIFICATION, attempt_id=None, now=now,
                reminder_interval=reminder_interval,
                detail={"provider_account": provider_account, "webhook_id": key, "why": why,
                        "body_sha256": digest, "notification_event_id": recorded.event_id},
            )
    return DeliveryResult.UNPARSEABLE
