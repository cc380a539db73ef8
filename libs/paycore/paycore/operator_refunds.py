"""Refunds an operator asks for, and a second operator's approval above a threshold.

An operator's refund is a payment operation like any other (:mod:`paycore.operation_sends`:
recorded before sent, one key, Unknown when unanswered), requested by ``operator:<name>``.
Above ``approval_above_minor`` it is not recorded as an operation yet: it waits in
``refund_approvals`` for another operator, who approves it (then it is recorded and sent,
requested by ``operator:<requester> approved by operator:<approver>``) or rejects it. Whoever
asked never decides: checked here, in the decision's SQL and by a CHECK.

Each step is an operator action, recorded in the transaction that does it: the request
(``refund-request``: the operation it recorded, or the approval it left pending), the approval
(``refund-approve``, with the operation) and the rejection (``refund-reject``). The operation
is recorded in that same transaction, under the payment's lock, through
:func:`paycore.operations.record_operation` -- step 1 of the sender's, with the sender's own
requests and settings -- and sent after it commits by :meth:`OperationSender.send` (steps 2-4),
so the record of who asked commits with the refund or not at all.

An approval is decided under a row lock, in the lock order of every writer (the payment's
attempt row, then the approval's) and only while still pending, so approving twice -- a double
click, two operators at once -- records and sends one refund; the second is refused.

A refusal (:class:`RefundRefused`) records and sends nothing: the payment cannot give that much
back, the approval was decided already, the approver asked for it, the payment's provider
account is not configured here. The operator's reason is theirs, for the record: it is not sent
to the provider (whose refund reasons, where it has any, are codes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from paycore import queries
from paycore.attempt_row import get_attempt
from paycore.currencies import format_amount
from paycore.db import transaction_on
from paycore.domain import (
    Headroom,
    OperationKind,
    OperationRefusal,
    refuse_operation,
)
from paycore.errors import AttemptNotFound, NotFound, PaycoreError
from paycore.operation_sends import OperationSender
from paycore.operations import OPERATIONS, Operation, Refused, headroom_of, record_operation
from paycore.operator_actions import (
    ActionKind,
    OperatorAction,
    record_action,
    validate_operator,
    validate_reason,
)

__all__ = [
    "APPROVALS",
    "RefundApproval",
    "RefundApprovalNotFound",
    "RefundPending",
    "RefundRefused",
    "RefundRejected",
    "RefundSent",
    "approvals_of",
    "approve_refund",
    "payment_headroom",
    "pending_approvals",
    "reject_refund",
    "request_refund",
]

APPROVALS = queries.load("refund_approvals")
REFUND = OperationKind.REFUND
PENDING_SHOWN = 500  # far more than ever wait at once


class RefundRefused(PaycoreError):
    """Nothing was recorded or sent; ``refusal`` is the domain's word for it, when it has one."""

    def __init__(self, message: str, refusal: OperationRefusal | None = None) -> None:
        super().__init__(message)
        self.refusal = refusal


class RefundApprovalNotFound(NotFound):
    """No refund approval has this id."""


@dataclass(frozen=True)
class RefundApproval:
    """A ``refund_approvals`` row: a refund asked for above the threshold, and its decision."""

    approval_id: int
    attempt_id: UUID
    amount_minor: int
    currency: str
    reason: str
    requested_by: str
    requested_at: datetime
    decided_by: str | None
    decided_at: datetime | None
    decision: str | None  # None while pending; "approved" or "rejected"
    decision_reason: str | None
    operation_id: UUID | None  # the refund an approval recorded

    @classmethod
    def from_record(cls, row: Mapping[str, Any]) -> RefundApproval:
        return cls(**dict(row))

    @property
    def status(self) -> str:
        return self.decision or "pending"


@dataclass(frozen=True)
class RefundSent:
    """The refund recorded and sent once: the operation as durably recorded after the send (any
    state: Succeeded, Unknown, Started while the provider settles it, …), and the action."""

    operation: Operation
    recorded: OperatorAction
    approval: RefundApproval | None = None  # the approval it came from


@dataclass(frozen=True)
class RefundPending:
    """Above the threshold: nothing sent; waiting for a second operator."""

    approval: RefundApproval
    recorded: OperatorAction


@dataclass(frozen=True)
class RefundRejected:
    approval: RefundApproval
    recorded: OperatorAction


# -- what a payment can still give ------------------------------------------------------------


async def payment_headroom(conn: asyncpg.Connection | asyncpg.Pool, attempt_id: UUID) -> Headroom:
    """What the payment ``attempt_id`` has captured and can still refund and capture, counted as
    :func:`paycore.operations.record_operation` counts it (an Unknown refund holds its amount).

    :raises AttemptNotFound: No such payment.
    """
    payment = await get_attempt(conn, attempt_id)
    return await _room(conn, attempt_id, payment.state.value, payment.amount_minor, payment.provider_status)


async def _room(conn: asyncpg.Connection | asyncpg.Pool, attempt_id: UUID, state: str, amount_minor: int,
                provider_status: str | None) -> Headroom:
    # As record_operation decides (paycore.operations.payment_headroom, the one rule).
    return await headroom_of(conn, {"attempt_id": attempt_id, "state": state, "amount_minor": amount_minor,
                                    "provider_status": provider_status})


async def _locked_room(conn: asyncpg.Connection, payment: asyncpg.Record) -> Headroom:
    return await _room(conn, payment["attempt_id"], payment["state"], payment["amount_minor"],
                       payment["provider_status"])


def _refusal_text(refusal: OperationRefusal, amount_minor: int, currency: str, room: Headroom,
                  state: str) -> str:
    asked = format_amount(amount_minor, currency)
    if refusal is OperationRefusal.EXCEEDS_REFUNDABLE:
        return (f"{asked} is more than this payment can still refund "
                f"({format_amount(room.refundable_minor, currency)}; refunds sent or not yet settled count)")
    if refusal is OperationRefusal.NOT_CAPTURED:
        return (f"this payment has nothing captured to refund (it is {state})" if state != "Succeeded"
                else "this payment is an uncaptured hold: nothing was charged to refund")
    if refusal is OperationRefusal.AMOUNT_NOT_POSITIVE:
        return "the amount must be more than zero"
    return str(refusal.value)


def _refuse(refusal: OperationRefusal, amount_minor: int, currency: str, room: Headroom,
            state: str) -> RefundRefused:
    return RefundRefused(f"refund refused ({refusal.value}): "
                         f"{_refusal_text(refusal, amount_minor, currency, room, state)}", refusal)


async def _lock_payment(conn: asyncpg.Connection, sender: OperationSender,
                        attempt_id: UUID) -> asyncpg.Record:
    """The payment's row under the lock every recorder of its operations takes, checked to be
    one this console can send for."""
    payment: asyncpg.Record | None = await OPERATIONS.lock_payment.fetchrow(conn, attempt_id=attempt_id)
    if payment is None:
        raise AttemptNotFound(f"attempt {attempt_id} not found")
    if sender.settings.account(payment["provider_account"]) is None:
        raise RefundRefused(f"provider account {payment['provider_account']} is not configured here: "
                            "nothing can be sent to it")
    return payment


async def _record_refund(conn: asyncpg.Connection, sender: OperationSender, payment: asyncpg.Record,
                         amount_minor: int, requested_by: str, now: datetime) -> Operation:
    """Step 1 of the sender's, inside the caller's transaction (the payment locked already)."""
    account = sender.settings.account(payment["provider_account"])
    assert account is not None  # _lock_payment checked
    try:
        recorded = await record_operation(
            conn, attempt_id=payment["attempt_id"], kind=REFUND, amount_minor=amount_minor,
            requested_by=requested_by, account=account, requests=sender.calls(account.provider_account),
            now=now, abandonment_threshold_s=sender.settings.abandonment_threshold_s)
    except ValueError as exc:  # the provider's contract refuses a value: nothing recorded
        raise RefundRefused(f"refund refused: {exc}") from None
    if isinstance(recorded, Refused):  # decided against what _room read under the same lock
        raise RefundRefused(f"refund refused ({recorded.reason.value})", recorded.reason)
    return recorded.operation


async def _send(sender: OperationSender, operation: Operation, payment: asyncpg.Record) -> Operation:
    return await sender.send(operation, provider_payment_id=payment["provider_payment_id"] or "")


# -- asking ------------------------------------------------------------------------------------


async def request_refund(sender: OperationSender, attempt_id: UUID, amount_minor: int, *, operator: str,
                         reason: str, approval_above_minor: int) -> RefundSent | RefundPending:
    """Refund ``amount_minor`` of the payment ``attempt_id`` for ``operator``, who says why.

    Up to ``approval_above_minor`` (in the payment's minor units) it is recorded and sent at
    once; above it, it waits for a second operator (:func:`approve_refund`). Either way it is
    refused first when the payment cannot give it back now.

    :raises RefundRefused: Nothing recorded or sent.
    :raises AttemptNotFound: No such payment.
    :raises InvalidOperatorAction: No reason, or an operator handle that is not one.
    """
    handle = validate_operator(operator)
    why = validate_reason(ActionKind.REFUND_REQUEST, reason)
    now = sender.clock.now()
    async with sender.pool.acquire() as conn:
        async with conn.transaction():
            payment = await _lock_payment(conn, sender, attempt_id)
            currency = payment["currency"]
            room = await _locked_room(conn, payment)
            refusal = refuse_operation(REFUND, amount_minor, room)
            if refusal is not None:
                raise _refuse(refusal, amount_minor, currency, room, payment["state"])
            before = {"refundable_minor": room.refundable_minor, "currency": currency}
            if amount_minor > approval_above_minor:
                row = await APPROVALS.insert.fetchrow(conn, attempt_id=attempt_id, amount_minor=amount_minor,
                                                      currency=currency, reason=why, requested_by=handle,
                                                      now=now)
                assert row is not None
                approval = RefundApproval.from_record(row)
                recorded = await record_action(
                    conn, action=ActionKind.REFUND_REQUEST, operator=handle, reason=why, now=now,
                    before=before, after={**before, "approval_id": approval.approval_id, "status": "pending",
                                          "amount_minor": amount_minor},
                    attempt_id=attempt_id,
                    detail={"approval_id": approval.approval_id, "amount_minor": amount_minor,
                            "currency": currency, "approval_above_minor": approval_above_minor})
                return RefundPending(approval, recorded)
            operation = await _record_refund(conn, sender, payment, amount_minor, f"operator:{handle}", now)
            recorded = await record_action(
                conn, action=ActionKind.REFUND_REQUEST, operator=handle, reason=why, now=now, before=before,
                after={"refundable_minor": room.refundable_minor - amount_minor, "currency": currency,
                       "operation_id": str(operation.operation_id), "amount_minor": amount_minor},
                attempt_id=attempt_id,
                detail={"operation_id": str(operation.operation_id), "amount_minor": amount_minor,
                        "currency": currency})
    return RefundSent(await _send(sender, operation, payment), recorded)


# -- deciding ----------------------------------------------------------------------------------


def _already(approval: RefundApproval) -> RefundRefused:
    when = approval.decided_at.isoformat() if approval.decided_at else "?"
    return RefundRefused(f"refund approval {approval.approval_id} was {approval.decision} already, "
                         f"by {approval.decided_by} at {when}")


def _own(approval: RefundApproval) -> RefundRefused:
    return RefundRefused(f"{approval.requested_by} asked for refund approval {approval.approval_id}: "
                         "another operator must decide it")


async def approve_refund(sender: OperationSender, approval_id: int, *, operator: str,
                         reason: str | None = None) -> RefundSent:
    """Approve a pending refund as ``operator`` (never its requester): it is recorded and sent
    once, requested by both. Decided under the payment's lock and the approval's, conditional
    on it still pending, so a second approval of the same request is refused.

    :raises RefundRefused: Decided already, asked for by ``operator``, or the payment cannot
        give it back now (the request stays pending: reject it).
    :raises RefundApprovalNotFound: No such approval.
    """
    handle = validate_operator(operator)
    why = validate_reason(ActionKind.REFUND_APPROVE, reason)
    now = sender.clock.now()
    async with sender.pool.acquire() as conn:
        async with conn.transaction():
            first = await APPROVALS.by_id.fetchrow(conn, approval_id=approval_id)
            if first is None:
                raise RefundApprovalNotFound(f"no refund approval {approval_id}")
            payment = await _lock_payment(conn, sender, first["attempt_id"])  # the payment first
            locked = await APPROVALS.lock.fetchrow(conn, approval_id=approval_id)
            assert locked is not None  # rows are never removed (refund_approvals_decide_once)
            approval = RefundApproval.from_record(locked)
            if approval.decision is not None:
                raise _already(approval)
            if approval.requested_by == handle:
                raise _own(approval)
            room = await _locked_room(conn, payment)
            refusal = refuse_operation(REFUND, approval.amount_minor, room)
            if refusal is not None:
                raise _refuse(refusal, approval.amount_minor, approval.currency, room, payment["state"])
            operation = await _record_refund(
                conn, sender, payment, approval.amount_minor,
                f"operator:{approval.requested_by} approved by operator:{handle}", now)
            row = await APPROVALS.decide.fetchrow(conn, approval_id=approval_id, decision="approved",
                                                  operator=handle, now=now, reason=why,
                                                  operation_id=operation.operation_id)
            assert row is not None  # pending and not the requester's, under the lock just taken
            decided = RefundApproval.from_record(row)
            recorded = await record_action(
                conn, action=ActionKind.REFUND_APPROVE, operator=handle, reason=why, now=now,
                before={"status": "pending", "refundable_minor": room.refundable_minor,
                        "currency": approval.currency},
                after={"status": "approved", "currency": approval.currency,
                       "refundable_minor": room.refundable_minor - approval.amount_minor,
                       "operation_id": str(operation.operation_id), "amount_minor": approval.amount_minor},
                attempt_id=approval.attempt_id,
                detail={"approval_id": approval_id, "requested_by": approval.requested_by,
                        "operation_id": str(operation.operation_id), "amount_minor": approval.amount_minor,
                        "currency": approval.currency})
    return RefundSent(await _send(sender, operation, payment), recorded, decided)


async def reject_refund(db: asyncpg.Pool | asyncpg.Connection, approval_id: int, *, operator: str,
                        reason: str, now: datetime) -> RefundRejected:
    """Reject a pending refund as ``operator`` (never its requester), saying why; nothing is sent.

    :raises RefundRefused: Decided already, or asked for by ``operator``.
    :raises RefundApprovalNotFound: No such approval.
    """
    handle = validate_operator(operator)
    why = validate_reason(ActionKind.REFUND_REJECT, reason)
    async with transaction_on(db) as conn:
        locked = await APPROVALS.lock.fetchrow(conn, approval_id=approval_id)
        if locked is None:
            raise RefundApprovalNotFound(f"no refund approval {approval_id}")
        approval = RefundApproval.from_record(locked)
        if approval.decision is not None:
            raise _already(approval)
        if approval.requested_by == handle:
            raise _own(approval)
        row = await APPROVALS.decide.fetchrow(conn, approval_id=approval_id, decision="rejected",
                                              operator=handle, now=now, reason=why, operation_id=None)
        assert row is not None  # pending and not the requester's, under the lock just taken
        decided = RefundApproval.from_record(row)
        recorded = await record_action(
            conn, action=ActionKind.REFUND_REJECT, operator=handle, reason=why, now=now,
            before={"status": "pending"}, after={"status": "rejected"}, attempt_id=approval.attempt_id,
            detail={"approval_id": approval_id, "requested_by": approval.requested_by,
                    "amount_minor": approval.amount_minor, "currency": approval.currency})
    return RefundRejected(decided, recorded)


# -- reading -----------------------------------------------------------------------------------


async def approvals_of(conn: asyncpg.Connection | asyncpg.Pool, attempt_id: UUID) -> list[RefundApproval]:
    """A payment's refund approvals, pending and decided, newest first."""
    rows = await APPROVALS.of_attempt.fetch(conn, attempt_id=attempt_id)
    return [RefundApproval.from_record(r) for r in rows]


async def pending_approvals(conn: asyncpg.Connection | asyncpg.Pool,
                            limit: int = PENDING_SHOWN) -> list[RefundApproval]:
    """Refunds waiting for a second operator, oldest first."""
    return [RefundApproval.from_record(r) for r in await APPROVALS.pending.fetch(conn, limit=limit)]
