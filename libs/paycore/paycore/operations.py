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
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

import asyncpg

from paycore import queries
from paycore.config import ProviderAccountConfig
from paycore.domain import (
    AttemptState,
    HeldAmount,
    OperationDecision,
    OperationKind,
    OperationRefusal,
    OperationState,
    headroom,
    refuse_operation,
)
from paycore.errors import AttemptNotFound, NotFound

__all__ = [
    "HOLD_STATUS", "OPERATIONS", "Operation", "OperationNotFound", "OperationRequests", "Recorded",
    "Refused", "apply", "get_operation", "operations_of", "record_operation", "start",
]

OPERATIONS = queries.load("payment_operations")  # every statement on the operations table

# The provider status of a payment authorized for manual capture (a hold): Succeeded, nothing
# charged yet. Any other Succeeded payment charged its whole amount when it succeeded.
HOLD_STATUS = "requires_capture"
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
                             reference: str, reason: str | None = None) -> str: ...


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
            held = [HeldAmount(OperationKind(r["kind"]), OperationState(r["state"]), r["amount_minor"])
                    for r in await OPERATIONS.holding_amounts.fetch(conn, attempt_id=attempt_id)]
            succeeded = payment["state"] == AttemptState.SUCCEEDED.value
            authorized = payment["amount_minor"] if succeeded else 0
            upfront = authorized if payment["provider_status"] != HOLD_STATUS else 0
            room = headroom(authorized_minor=authorized, captured_upfront_minor=upfront, operations=held)
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
                    reference=reference, reason=reason),
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


def _reference(payment_reference: str, kind: OperationKind, number: int, operation_id: UUID) -> str:
    """The operation's reference: the payment's, the kind and the operation's number on the payment
    (numbered under the payment's lock), or, when that is too long, the kind and the operation id."""
    derived = f"{payment_reference}-{kind.value}{number}"
    return derived if len(derived) <= MAX_REFERENCE_LEN else f"{kind.value}-{operation_id.hex}"


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
                actor: str) -> Operation | None:
    """NotStarted -> Started for ``operation`` as read (its version), with a ``send_intent`` event
    naming it; ``None``: it moved meanwhile (or is not NotStarted), and nothing was written."""
    row = await OPERATIONS.mark_started.fetchrow(
        conn, operation_id=operation.operation_id, version=operation.version, now=now,
        next_check_at=next_check_at, actor=actor,
        detail={"operation_id": str(operation.operation_id), "operation": operation.kind.value,
                "idempotency_key": operation.idempotency_key})
    return None if row is None else Operation.from_record(row)


async def apply(conn: asyncpg.Connection, operation: Operation, decision: OperationDecision, now: datetime,
                *, actor: str = "paycore") -> Operation | None:
    """Write ``decision`` for ``operation``: the conditional UPDATE on the version and state it was
    decided against, with its ``transition`` event. ``None``: nothing to write (the decision
    writes nothing or refused) or the row moved meanwhile, and nothing was written."""
    write = decision.write
    if write is None:
        return None
    row = await OPERATIONS.apply_outcome.fetchrow(
        conn, operation_id=operation.operation_id, version=write.version, state=decision.from_state.value,
        target=write.target.value, provider_status=write.provider_status,
        outcome_reason=write.outcome_reason, provider_operation_id=write.provider_operation_id,
        next_check_at=write.next_check_at, now=now, actor=actor,
        detail={"operation_id": str(operation.operation_id), "operation": operation.kind.value,
                "from": decision.from_state.value, "to": write.target.value,
                "reason": write.outcome_reason,
                **({"escalation": decision.escalation.value} if decision.escalation else {})})
    return None if row is None else Operation.from_record(row)
