"""A capture's, cancel's or refund's notification: one transaction, in the payment handler's order.

0. A redelivery of a committed notification answers "duplicate" from one indexed read; in the
   transaction, a byte-identical replay of a delivery already handled is a duplicate too.
1. Match by the provider's id of the refund or capture and by the operation's own reference,
   independently; two different operations named is an identity conflict.
2. Lock the payment's order (the lock order of every writer), then record the notification
   first, marked with the operation; a duplicate returns before anything else.
3. Identity conflict -> escalation naming both, applied to neither.
4. Unmatched -> escalation keyed by the notification: never silently ignored (a refund made
   outside paycore, or another system's).
5. Judge it as evidence about the operation (:func:`paycore.evidence.judge_operation`): another
   account, mode, amount or currency is escalated ``mismatch``, another payment or refund id
   ``provider-id-conflict``, and nothing is resolved; else the one writer of operation outcomes
   applies it (:func:`paycore.domain.decide_operation_outcome`): a succeeded refund reported
   failed is Returned and a person is told.

The caller acknowledges with 2xx only after this commits.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import asyncpg

from paycore import escalations, operations
from paycore.attempts import get_attempt
from paycore.config import ProviderAccountConfig
from paycore.domain import EscalationReason, decide_operation_outcome
from paycore.evidence import judge_operation
from paycore.logs import bind, bind_log_context
from paycore.notifications import is_recorded, record_notification
from paycore.orders import lock_order_of_attempt
from paycore.providers.base import OperationNotification
from paycore.webhook_replays import SignedDelivery, first_sight
from paycore_webhooks.handler import DeliveryResult

log = logging.getLogger("paycore.webhooks")

HANDLER_ACTOR = "webhook"


async def handle_operation_notification(
    pool: asyncpg.Pool, *, account: ProviderAccountConfig, n: OperationNotification, key: str | None,
    now: datetime, reminder_interval: timedelta, recheck_after_s: float,
    delivery: SignedDelivery | None = None,
) -> DeliveryResult:
    """Handle one verified operation notification in one transaction (steps 0-5)."""
    provider_account = account.provider_account
    async with pool.acquire() as conn:
        # 0. A committed key stays committed (history is append-only): one indexed read.
        if key is not None and await is_recorded(conn, provider_account=provider_account, key=key):
            return DeliveryResult.DUPLICATE
        with bind_log_context():
            async with conn.transaction():
                if delivery is not None and not await first_sight(conn, provider_account, delivery, now):
                    return DeliveryResult.DUPLICATE
                result = await _handle(conn, provider_account=provider_account, n=n, key=key, now=now,
                                       reminder_interval=reminder_interval, recheck_after_s=recheck_after_s)
            log.info("%s notification %.64s: %s", provider_account, n.event_type, result.value)
            return result


def _detail(n: OperationNotification, key: str | None) -> dict[str, object]:
    # Identifiers only (the event as received is kept too: no card data or secrets in it).
    o = n.outcome
    return {"event_type": n.event_type, "notification_key": key, "operation": o.operation.value,
            "ending": o.ending.value, "provider_status": o.provider_status,
            "provider_operation_id": o.provider_operation_id, "provider_payment_id": o.provider_payment_id,
            "claim": o.claim.as_detail() if o.claim else None, "event": n.event}


async def _handle(conn: asyncpg.Connection, *, provider_account: str, n: OperationNotification,
                  key: str | None, now: datetime, reminder_interval: timedelta,
                  recheck_after_s: float) -> DeliveryResult:
    outcome = n.outcome
    reference = outcome.claim.reference if outcome.claim else None
    # 1. Two independent answers: by the provider's id, and by the operation's own reference.
    by_id, by_reference = await operations.find_for_notification(
        conn, provider_account, provider_operation_id=outcome.provider_operation_id, reference=reference,
        kind=outcome.operation, provider_payment_id=outcome.provider_payment_id)
    conflict = (by_id is not None and by_reference is not None
                and by_id.operation_id != by_reference.operation_id)
    op = by_reference or by_id
    # 2. The order's lock first, then the notification recorded before anything else.
    if op is not None:
        await lock_order_of_attempt(conn, op.attempt_id)
        # Read again under the lock every outcome writer takes: the version decided on is current.
        op = await operations.get_operation(conn, op.operation_id)
        bind(attempt_id=op.attempt_id, operation_id=op.operation_id)
    recorded = await record_notification(
        conn, provider_account=provider_account, key=key, attempt_id=op.attempt_id if op else None,
        operation_id=op.operation_id if op else None, detail=_detail(n, key), now=now, actor=HANDLER_ACTOR)
    if recorded.is_duplicate:
        return DeliveryResult.DUPLICATE
    # 3. Two operations named: applied to neither.
    if conflict:
        assert by_id is not None and by_reference is not None
        await escalations.raise_escalation(
            conn, key=escalations.identity_conflict_key(provider_account, key, outcome.provider_operation_id),
            reason=EscalationReason.IDENTITY_CONFLICT, attempt_id=by_reference.attempt_id, now=now,
            reminder_interval=reminder_interval,
            detail={"by_reference": str(by_reference.operation_id), "by_provider_id": str(by_id.operation_id),
                    "provider_account": provider_account, "notification_event_id": recorded.event_id})
        return DeliveryResult.CONFLICT
    # 4. Nothing of ours: kept, and a person told.
    if op is None:
        await escalations.raise_escalation(
            conn, reason=EscalationReason.UNMATCHED_OPERATION,
            key=escalations.unmatched_key(provider_account, key, outcome.provider_operation_id, reference),
            attempt_id=None, now=now, reminder_interval=reminder_interval,
            detail={"provider_account": provider_account, "operation": outcome.operation.value,
                    "provider_operation_id": outcome.provider_operation_id,
                    "provider_payment_id": outcome.provider_payment_id, "client_reference": reference,
                    "notification_event_id": recorded.event_id})
        return DeliveryResult.UNMATCHED
    # 5. Evidence about this operation, or escalated; then the one writer.
    payment = await get_attempt(conn, op.attempt_id)
    verdict = judge_operation(
        op, outcome.claim, reported_payment_id=outcome.provider_payment_id,
        payment_id=payment.provider_payment_id, reported_operation_id=outcome.provider_operation_id,
        recorded_operation_id=op.provider_operation_id)
    if verdict.reason is not None:
        await escalations.raise_escalation(
            conn, key=escalations.operation_key(op.operation_id, f"{verdict.reason.value}:{key}"),
            reason=verdict.reason, attempt_id=op.attempt_id, now=now,
            reminder_interval=reminder_interval,
            detail={**verdict.detail, "operation_id": str(op.operation_id),
                    "notification_event_id": recorded.event_id})
        mismatch = verdict.reason is EscalationReason.MISMATCH
        return DeliveryResult.MISMATCH if mismatch else DeliveryResult.CONFLICT
    decision = decide_operation_outcome(op.kind, op.state, op.version, outcome,
                                        provider_status=op.provider_status, now=now,
                                        recheck_after_s=recheck_after_s)
    await operations.apply(conn, op, decision, now, reminder_interval=reminder_interval, actor=HANDLER_ACTOR)
    return DeliveryResult.APPLIED

