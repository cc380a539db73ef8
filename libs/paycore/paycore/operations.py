"""The operations repository: where a capture, cancel or refund is recorded before it is sent.

Recording is the payment's "recorded before sent" step for what follows a payment
(docs/architecture.md, "The next operations"): in one short transaction,
:func:`record_operation` locks the payment's attempt row, reads what its operations already
hold, asks :func:`paycore.domain.refuse_operation` (against :func:`paycore.domain.headroom`)
and, when nothing refuses it, inserts the operation NotStarted with its exact request and a
key generated once, here. Two recorders of one payment decide one after the other, so two
concurrent partial refunds cannot both pass.

:func:`start` moves one to Started with its send intent, :func:`apply` writes what
:func:`paycore.domain.decide_operation_outcome` decided; each is one conditional statement with
its history event. Sending and recovery are not here yet.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

import asyncpg

from paycore import escalations, outbox, queries
from paycore.config import ProviderAccountConfig
from paycore.domain import (
    FINAL_OPERATION_STATES,
    HOLD_STATUS,
    OPERATION_EFFECTS,
    AttemptState,
    EscalationReason,
    Headroom,
    HeldAmount,
    OperationDecision,
    OperationKind,
    OperationRefusal,
    OperationState,
    OrderStatus,
    headroom,
    order_status_after_operation,
    refuse_operation,
)
from paycore.errors import AttemptNotFound, NotFound
from paycore.leases import Lease
from paycore.orders import lock_order_of_attempt, set_status_after_operation
from paycore.providers.base import StoredRequest

__all__ = [
    "HOLD_STATUS",
    "OPERATIONS",
    "Operation",
    "OperationNotFound",
    "OperationRequests",
    "Recorded",
    "Refused",
    "apply",
    "claim_due",
    "close_never_sent",
    "effect_key",
    "escalate_and_finish",
    "find_for_notification",
    "finish",
    "get_operation",
    "operations_of",
    "record_operation",
    "refunds_of_ours",
    "start",
]

OPERATIONS = queries.load("payment_operations")  # every statement on the operations table

# The database's half of "one capture or one cancel per payment" (migrations/0014).
ONE_CAPTURE_OR_CANCEL = "one_capture_or_cancel_per_payment"
MAX_REFERENCE_LEN = 64  # what every provider's reference field takes (Cardco's limit)


class OperationNotFound(NotFound):
    """No operation has this id."""


class OperationRequests(Protocol):
    """What recording needs from a provider: the request, built once to be stored
    (:class:`paycore.providers.base.OperationCalls` has it)."""

    def operation_endpoint(self, account: ProviderAccountConfig, kind: OperationKind,
                           provider_payment_id: str) -> str: ...

    def build_operation_body(self, kind: OperationKind, *, provider_payment_id: str, amount_minor: int,
                             reference: str, reason: str | None = None, currency: str | None = None,
                             account: ProviderAccountConfig | None = None) -> str: ...


@dataclass(frozen=True)
class Operation:
    """A ``payment_operations`` row: the operation, its stored request and what was seen of it."""

    operation_id: UUID
    attempt_id: UUID
    kind: OperationKind
    requested_by: str
    provider_account: str
    endpoint: str
    api_version: str
    client_reference: str
    idempotency_key: str
    request_body: str
    amount_minor: int
    currency: str
    state: OperationState
    provider_status: str | None
    outcome_reason: str | None
    provider_operation_id: str | None
    created_at: datetime
    first_sent_at: datetime | None
    escalation_deadline: datetime | None
    recovery_owner: str | None
    lease_token: UUID | None
    lease_acquired_at: datetime | None
    lease_expires_at: datetime | None
    next_check_at: datetime
    version: int

    def stored_request(self) -> StoredRequest:
        """What every send of this operation transmits: its stored bytes under its key."""
        return StoredRequest(
            attempt_id=self.operation_id, provider_account=self.provider_account, endpoint=self.endpoint,
            api_version=self.api_version, idempotency_key=self.idempotency_key,
            request_body=self.request_body, client_reference=self.client_reference,
            amount_minor=self.amount_minor, currency=self.currency)

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_OPERATION_STATES

    @classmethod
    def from_record(cls, row: Mapping[str, Any]) -> Operation:
        """From a row (every column of the table), as :meth:`paycore.domain.Attempt.from_record`."""
        values = dict(row)
        values["kind"] = OperationKind(values["kind"])
        values["state"] = OperationState(values["state"])
        return cls(**values)


@dataclass(frozen=True)
class Recorded:
    """The operation was recorded NotStarted (committed) and may be sent."""

    operation: Operation


@dataclass(frozen=True)
class Refused:
    """Nothing was recorded: the payment cannot give what was asked."""

    reason: OperationRefusal


async def record_operation(
    conn: asyncpg.Connection,
    *,
    attempt_id: UUID,
    kind: OperationKind,
    amount_minor: int,
    requested_by: str,
    account: ProviderAccountConfig,
    requests: OperationRequests,
    now: datetime,
    abandonment_threshold_s: float,
    reason: str | None = None,
) -> Recorded | Refused:
    """Record a capture, cancel or refund of the payment ``attempt_id``, or refuse it.

    One transaction (a savepoint inside the caller's): the payment's row is locked
    (``lock_payment``), then the operations it holds are read and
    :func:`~paycore.domain.refuse_operation` decides. A payment that is not Succeeded can give
    nothing (its headroom is zero, so a refund is ``NOT_CAPTURED``, a capture
    ``NOT_CAPTURABLE``, a cancel ``NOT_CANCELABLE``). Allowed, the operation is inserted
    NotStarted with a new idempotency key, a reference derived from the payment's, the body and
    endpoint ``requests`` builds, and a ``transition`` event in the payment's history naming
    it; ``next_check_at`` is ``now + abandonment_threshold_s`` (recovery closes one never sent).

    A capture or cancel that loses ``one_capture_or_cancel_per_payment`` to a writer that
    skipped the lock is refused as the rule would have refused it, not raised.

    :param account: The payment's provider account (its configuration in force now).
    :raises AttemptNotFound: No such payment attempt.
    :raises ValueError: ``account`` is not the payment's, or ``requests`` refuses a value (an
        :class:`~paycore.errors.InvalidPaymentMethod`); nothing is recorded.
    """
    try:
        async with conn.transaction():
            payment = await OPERATIONS.lock_payment.fetchrow(conn, attempt_id=attempt_id)
            if payment is None:
                raise AttemptNotFound(f"attempt {attempt_id} not found")
            held = await _holding(conn, attempt_id)
            room = payment_headroom(payment, held)
            refusal = refuse_operation(kind, amount_minor, room)
            if refusal is not None:
                return Refused(refusal)
            if payment["provider_account"] != account.provider_account:
                raise ValueError(f"attempt {attempt_id} is {payment['provider_account']}'s, "
                                 f"not {account.provider_account}'s")
            provider_payment_id: str | None = payment["provider_payment_id"]
            if not provider_payment_id:
                raise ValueError(f"attempt {attempt_id} succeeded without a provider payment id")
            operation_id = uuid.uuid4()
            reference = _reference(payment["client_reference"], kind, len(held) + 1, operation_id)
            row = await OPERATIONS.insert.fetchrow(
                conn, operation_id=operation_id, attempt_id=attempt_id, kind=kind.value,
                requested_by=requested_by, account=account.provider_account,
                endpoint=requests.operation_endpoint(account, kind, provider_payment_id),
                api_version=account.api_version, reference=reference,
                idempotency_key=str(uuid.uuid4()),  # the operation's key: generated once, here
                request_body=requests.build_operation_body(
                    kind, provider_payment_id=provider_payment_id, amount_minor=amount_minor,
                    reference=reference, reason=reason, currency=payment["currency"], account=account),
                amount_minor=amount_minor, currency=payment["currency"], now=now,
                next_check_at=now + timedelta(seconds=abandonment_threshold_s),
                detail={"operation": kind.value, "from": None, "to": OperationState.NOT_STARTED.value,
                        "amount_minor": amount_minor})
            assert row is not None  # an INSERT … RETURNING that did not raise returned its row
            return Recorded(Operation.from_record(row))
    except asyncpg.UniqueViolationError as exc:
        if exc.constraint_name != ONE_CAPTURE_OR_CANCEL:
            raise
        # Only a capture or a cancel is in that index; the rule's own answer for each.
        return Refused(OperationRefusal.NOT_CAPTURABLE if kind is OperationKind.CAPTURE
                       else OperationRefusal.NOT_CANCELABLE)


async def _holding(conn: asyncpg.Connection | asyncpg.Pool, attempt_id: UUID) -> list[HeldAmount]:
    return [HeldAmount(OperationKind(r["kind"]), OperationState(r["state"]), r["amount_minor"])
            for r in await OPERATIONS.holding_amounts.fetch(conn, attempt_id=attempt_id)]


def payment_headroom(payment: Mapping[str, Any], held: Sequence[HeldAmount]) -> Headroom:
    """What ``payment`` (its ``state``, ``amount_minor`` and ``provider_status``, as
    ``lock_payment`` reads them) can still give, its operations holding ``held``: a Succeeded
    payment is authorized for its amount, captured whole when it succeeded unless it is a hold
    (:data:`~paycore.domain.HOLD_STATUS`); one that did not succeed can give nothing."""
    succeeded = payment["state"] == AttemptState.SUCCEEDED.value
    authorized = payment["amount_minor"] if succeeded else 0
    upfront = authorized if payment["provider_status"] != HOLD_STATUS else 0
    return headroom(authorized_minor=authorized, captured_upfront_minor=upfront, operations=held)


async def headroom_of(conn: asyncpg.Connection | asyncpg.Pool, payment: Mapping[str, Any]) -> Headroom:
    """:func:`payment_headroom` of ``payment`` with the operations it holds now (under the
    payment's lock when the answer decides anything)."""
    return payment_headroom(payment, await _holding(conn, payment["attempt_id"]))


def _reference(payment_reference: str, kind: OperationKind, number: int, operation_id: UUID) -> str:
    """The operation's reference: the payment's, the kind and the operation's number on the payment
    (numbered under the payment's lock), or, when that is too long, the kind and the operation id."""
    derived = f"{payment_reference}-{kind.value}{number}"
    return derived if len(derived) <= MAX_REFERENCE_LEN else f"{kind.value}-{operation_id.hex}"


async def refunds_of_ours(conn: asyncpg.Connection | asyncpg.Pool, attempt_id: UUID) -> int:
    """What the payment's own refunds add up to (live, Succeeded, or Returned since), in minor units."""
    held: int = await OPERATIONS.refunds_of_ours.fetchval(conn, attempt_id=attempt_id)
    return held


async def charged_after_cancel(conn: asyncpg.Connection | asyncpg.Pool, batch: int) -> list[UUID]:
    """Payments charged after their order was cancelled that paycore has not refunded yet."""
    return [row["attempt_id"] for row in await OPERATIONS.charged_after_cancel.fetch(conn, batch=batch)]


async def get_operation(conn: asyncpg.Connection | asyncpg.Pool, operation_id: UUID) -> Operation:
    row = await OPERATIONS.by_id.fetchrow(conn, operation_id=operation_id)
    if row is None:
        raise OperationNotFound(f"operation {operation_id} not found")
    return Operation.from_record(row)


async def operations_of(conn: asyncpg.Connection | asyncpg.Pool, attempt_id: UUID) -> list[Operation]:
    """A payment's operations, oldest first."""
    rows = await OPERATIONS.by_attempt.fetch(conn, attempt_id=attempt_id)
    return [Operation.from_record(row) for row in rows]


async def start(conn: asyncpg.Connection, operation: Operation, *, now: datetime, next_check_at: datetime,
                actor: str, key_retention_cap_s: float | None = None) -> Operation | None:
    """NotStarted -> Started for ``operation`` as read (its version), with a ``send_intent`` event
    naming it, its key window stamped (the account's retention, or ``key_retention_cap_s`` when
    the provider keeps an operation's key for less); ``None``: it moved meanwhile (or is not
    NotStarted), and nothing was written."""
    row = await OPERATIONS.mark_started.fetchrow(
        conn, operation_id=operation.operation_id, version=operation.version, now=now,
        next_check_at=next_check_at, actor=actor, key_retention_cap_s=key_retention_cap_s,
        detail={"operation_id": str(operation.operation_id), "operation": operation.kind.value,
                "idempotency_key": operation.idempotency_key})
    return None if row is None else Operation.from_record(row)


async def apply(conn: asyncpg.Connection, operation: Operation, decision: OperationDecision, now: datetime,
                *, reminder_interval: timedelta, actor: str = "paycore") -> Operation | None:
    """Write ``decision`` for ``operation``, the one writer of operation outcomes, in one
    transaction (a savepoint inside the caller's) and in the lock order (the order row, then the
    operation's): the conditional UPDATE on the version and state it was decided against with
    its ``transition`` event; for a final state, the order's status
    (:func:`~paycore.domain.order_status_after_operation`) and the effect
    (:data:`~paycore.domain.OPERATION_EFFECTS`) queued in the payment's order, once by its key
    ``operation:<id>:<effect>``; and the decision's escalation, ``operation:<id>:<reason>``.

    ``None``: nothing was written -- the decision writes nothing (an escalation alone is still
    opened), refused, or the row moved meanwhile (read it again and decide again).
    """
    if decision.refused is not None:
        return None
    async with conn.transaction():
        order = await lock_order_of_attempt(conn, operation.attempt_id)
        updated: Operation | None = None
        write = decision.write
        if write is not None:
            row = await OPERATIONS.apply_outcome.fetchrow(
                conn, operation_id=operation.operation_id, version=write.version,
                state=decision.from_state.value, target=write.target.value,
                provider_status=write.provider_status, outcome_reason=write.outcome_reason,
                provider_operation_id=write.provider_operation_id, next_check_at=write.next_check_at,
                now=now, actor=actor,
                detail={"operation_id": str(operation.operation_id), "operation": operation.kind.value,
                        "from": decision.from_state.value, "to": write.target.value,
                        "reason": write.outcome_reason,
                        **({"escalation": decision.escalation.value} if decision.escalation else {})})
            if row is None:
                return None
            updated = Operation.from_record(row)
            effect = OPERATION_EFFECTS.get((updated.kind, updated.state))
            if effect is not None:
                status = await _order_status_after(conn, order.status, updated)
                await outbox.enqueue(
                    conn, dedup_key=effect_key(updated.operation_id, effect), kind=effect,
                    payload=_effect_payload(updated, order.order_id, status), now=now,
                    attempt_id=updated.attempt_id, ordering=outbox.ordering_key(updated.attempt_id))
        if decision.escalation is not None:
            await _escalate(conn, operation, decision.escalation, now=now,
                            reminder_interval=reminder_interval,
                            detail={"from": decision.from_state.value, "to": decision.to_state.value})
        return updated


async def _escalate(conn: asyncpg.Connection, operation: Operation, reason: EscalationReason, *,
                    now: datetime, reminder_interval: timedelta, detail: Mapping[str, Any]) -> None:
    """Open ``operation``'s episode ``operation:<id>:<reason>`` (its alert only if new), in the
    caller's transaction, naming the operation and what it moves."""
    await escalations.raise_escalation(
        conn, key=escalations.operation_key(operation.operation_id, reason.value), reason=reason,
        attempt_id=operation.attempt_id, now=now, reminder_interval=reminder_interval,
        detail={"operation_id": str(operation.operation_id), "operation": operation.kind.value,
                "amount_minor": operation.amount_minor, "currency": operation.currency, **detail})


def effect_key(operation_id: UUID, effect: str) -> str:
    """The dedup key of an operation's effect: the operation's, so evidence arriving twice (a
    webhook and a lookup) queues it once."""
    return f"operation:{operation_id}:{effect}"


async def _order_status_after(conn: asyncpg.Connection, current: OrderStatus, op: Operation) -> OrderStatus:
    """The order's status once ``op`` ended, written when it changes (under the order's lock)."""
    totals = await OPERATIONS.settled_amounts.fetchrow(conn, attempt_id=op.attempt_id)
    assert totals is not None  # the operation's payment exists (a foreign key)
    held = totals["provider_status"] == HOLD_STATUS
    captured = totals["captured_later"] if held else totals["payment_amount"]
    status = order_status_after_operation(current, op.kind, op.state, captured_minor=captured,
                                          refunded_minor=totals["refunded"])
    if status is not current:
        await set_status_after_operation(conn, totals["order_id"], status)
    return status


def _effect_payload(op: Operation, order_id: str, order_status: OrderStatus) -> dict[str, Any]:
    # What the store's consumers need to act (contracts/schemas/<effect>.v1.json): no card data,
    # no requester (an operator's name is not the store's business on Kafka).
    return {"attempt_id": str(op.attempt_id), "order_id": order_id, "operation_id": str(op.operation_id),
            "operation": op.kind.value, "amount_minor": op.amount_minor, "currency": op.currency,
            "provider_account": op.provider_account, "provider_operation_id": op.provider_operation_id,
            "order_status": order_status.value, "reason": op.outcome_reason}


# -- recovery's claims on operations (a lease per operation, as for attempts) ---------------------


async def claim_due(pool: asyncpg.Pool, lease: Lease, now: datetime, lease_s: float) -> Operation | None:
    """Claim the next due live operation with ``lease`` (``None``: nothing is due and free)."""
    row = await OPERATIONS.claim_due.fetchrow(pool, owner=lease.owner, token=lease.token, now=now,
                                              expires_at=now + timedelta(seconds=lease_s))
    return None if row is None else Operation.from_record(row)


async def finish(conn: asyncpg.Connection | asyncpg.Pool, operation_id: UUID, lease: Lease, now: datetime,
                 next_check_at: datetime) -> bool:
    """Schedule the next look and release ``lease``; ``False``: the lease is not this worker's."""
    status: str = await OPERATIONS.finish.execute(conn, operation_id=operation_id, owner=lease.owner,
                                                  token=lease.token, now=now, next_check_at=next_check_at)
    return status == "UPDATE 1"


async def close_never_sent(pool: asyncpg.Pool, operation: Operation, lease: Lease, now: datetime,
                           *, actor: str) -> Operation | None:
    """NotStarted -> NotApplied (``never-sent``) under ``lease``: its sender never committed the
    send intent, so nothing was sent. ``None``: it moved, or the lease is not this worker's."""
    row = await OPERATIONS.close_never_sent.fetchrow(
        pool, operation_id=operation.operation_id, version=operation.version, owner=lease.owner,
        token=lease.token, now=now, actor=actor,
        detail={"operation_id": str(operation.operation_id), "operation": operation.kind.value,
                "from": OperationState.NOT_STARTED.value, "to": OperationState.NOT_APPLIED.value,
                "reason": "never-sent"})
    return None if row is None else Operation.from_record(row)


async def escalate_and_finish(pool: asyncpg.Pool, operation: Operation, lease: Lease,
                              reason: EscalationReason, *, now: datetime, next_check_at: datetime,
                              reminder_interval: timedelta, detail: Mapping[str, Any] | None = None) -> bool:
    """Ask a person about ``operation`` (episode ``operation:<id>:<reason>``, its alert only if
    new), schedule the next look and release the lease, in one transaction while this worker
    still owns it. ``False``: the lease is not this worker's any more (nothing is raised)."""
    async with pool.acquire() as conn, conn.transaction():
        await lock_order_of_attempt(conn, operation.attempt_id)
        if not await finish(conn, operation.operation_id, lease, now, next_check_at):
            return False
        await _escalate(conn, operation, reason, now=now, reminder_interval=reminder_interval,
                        detail={"state": operation.state.value, **(detail or {})})
        return True


async def find_for_notification(conn: asyncpg.Connection | asyncpg.Pool, provider_account: str, *,
                                provider_operation_id: str | None, reference: str | None,
                                kind: OperationKind | None = None, provider_payment_id: str | None = None
                                ) -> tuple[Operation | None, Operation | None]:
    """The operations a notification names, by the provider's id and by the operation's own
    reference, independently (either may be ``None``), for the caller to see whether they agree.
    A cancel that names neither (Stripe's) is the payment's cancel, by ``provider_payment_id``."""
    if kind is OperationKind.CANCEL and not provider_operation_id and not reference and provider_payment_id:
        row = await OPERATIONS.cancel_of_payment.fetchrow(conn, account=provider_account,
                                                          provider_payment_id=provider_payment_id)
        return (None, None) if row is None else (Operation.from_record(row), None)
    by_id = by_reference = None
    if provider_operation_id:
        row = await OPERATIONS.by_provider_operation.fetchrow(
            conn, account=provider_account, provider_operation_id=provider_operation_id)
        by_id = None if row is None else Operation.from_record(row)
    if reference:
        row = await OPERATIONS.by_reference.fetchrow(conn, account=provider_account, reference=reference)
        by_reference = None if row is None else Operation.from_record(row)
    return by_id, by_reference
