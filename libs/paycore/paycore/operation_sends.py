"""Sending a capture, cancel or refund: the payment's numbered steps, for what follows it.

1. Record it under the payment's lock (:func:`paycore.operations.record_operation`): refused,
   or NotStarted with its exact request and its key, committed before anything is sent.
2. NotStarted -> Started with its send intent, under the start budget. An unconfirmed commit
   reloads the durable state (NotStarted means nobody sends; recovery closes it).
3. Send once, under the call budget. Every ending without an answer is Unknown.
4. Record the outcome under the record budget, through the one writer of operation outcomes
   (:func:`paycore.operations.apply`). An unconfirmed write leaves the operation Started, for
   recovery to establish from evidence.

Each step is its own short transaction; none stays open across the provider call. The store's
back office, the operator console, the CLI and the automatic refund of decision 0008 all come
here; recovery resends with the same stored request under the same key.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from uuid import UUID

import asyncpg

from paycore import operations
from paycore.attempts import get_attempt
from paycore.clock import Clock
from paycore.config import Settings
from paycore.domain import OperationKind, decide_operation_outcome
from paycore.errors import MAY_HAVE_COMMITTED, PaycoreError
from paycore.logs import bind_log_context
from paycore.operations import Operation, Refused
from paycore.providers.base import OperationCalls, OperationOutcome, PaymentCalls
from paycore.providers.registry import operations_of

__all__ = ["AccountNotConfigured", "OperationSender"]

log = logging.getLogger("paycore.operations")


class AccountNotConfigured(PaycoreError):
    """The payment's provider account is not configured here any more: nothing can be sent."""


class OperationSender:
    """Records and sends captures, cancels and refunds (steps 1-4), one call at a time."""

    def __init__(self, *, pool: asyncpg.Pool, client: PaymentCalls, clock: Clock, settings: Settings) -> None:
        self.pool = pool
        self.client = client
        self.clock = clock
        self.settings = settings

    def calls(self, provider_account: str) -> OperationCalls:
        return operations_of(self.client, provider_account)

    async def request(self, attempt_id: UUID, kind: OperationKind, amount_minor: int, *, requested_by: str,
                      reason: str | None = None) -> Operation | Refused:
        """Record an operation on the payment ``attempt_id`` and send it once; returns the
        operation as durably recorded after the send (any state), or why it was refused.

        :raises AttemptNotFound: No such payment.
        :raises AccountNotConfigured: The payment's account is not configured.
        :raises ValueError: The provider's contract refuses a value (nothing is recorded).
        """
        with bind_log_context(attempt_id=attempt_id):
            payment = await get_attempt(self.pool, attempt_id)
            account = self.settings.account(payment.provider_account)
            if account is None:
                raise AccountNotConfigured(f"provider account {payment.provider_account} is not configured")
            # 1. Recorded before sent: committed here, with its request and key, or refused.
            async with self.pool.acquire() as conn:
                recorded = await operations.record_operation(
                    conn, attempt_id=attempt_id, kind=kind, amount_minor=amount_minor,
                    requested_by=requested_by, account=account, requests=self.calls(account.provider_account),
                    now=self.clock.now(), abandonment_threshold_s=self.settings.abandonment_threshold_s,
                    reason=reason)
            if isinstance(recorded, Refused):
                return recorded
            return await self.send(recorded.operation, provider_payment_id=payment.provider_payment_id or "")

    async def send(self, operation: Operation, *, provider_payment_id: str) -> Operation:
        """Steps 2-4 for a NotStarted ``operation``: start it, send it once, record the outcome.
        Returns the operation as durably recorded (reloaded whenever a write is unconfirmed or
        another writer moved it first)."""
        budgets = self.settings.budgets
        with bind_log_context(operation_id=operation.operation_id):
            # 2. The send intent commits before the call, under its own budget.
            try:
                async with self.clock.budget(budgets.start_s):
                    now = self.clock.now()
                    # Recovery looks first after the call and its record could have ended.
                    due = now + timedelta(seconds=budgets.call_s + budgets.record_s
                                          + self.settings.processing_allowance_s)
                    cap = self.client.capabilities_of(operation.provider_account).operation_key_retention_s
                    async with self.pool.acquire() as conn:
                        started = await operations.start(conn, operation, now=now, next_check_at=due,
                                                         actor="endpoint", key_retention_cap_s=cap)
            except MAY_HAVE_COMMITTED as exc:
                log.warning("start of operation %s not confirmed (%s); reporting durable state",
                            operation.operation_id, type(exc).__name__)
                return await self.reload(operation)
            if started is None:
                return await self.reload(operation)  # someone else started it: only report

            # 3. One send of the stored bytes under the stored key.
            outcome = await self.calls(started.provider_account).send_operation(
                started.stored_request(), started.kind, provider_payment_id=provider_payment_id,
                budget_s=budgets.call_s, first_send=True)

            # 4. The outcome, through the one writer.
            try:
                async with self.clock.budget(budgets.record_s):
                    recorded = await self.record(started, outcome, actor="endpoint")
            except MAY_HAVE_COMMITTED as exc:
                log.error("outcome %s of operation %s not recorded (%s); recovery will establish it",
                          outcome.ending.value, started.operation_id, type(exc).__name__)
                return await self.reload(started)
            return recorded

    async def record(self, operation: Operation, outcome: OperationOutcome, *, actor: str) -> Operation:
        """Decide ``outcome`` against ``operation`` as read and write it; when the row moved
        meanwhile, read it again and decide again (at most a few times: each miss is another
        writer's progress). Returns the operation as recorded."""
        current = operation
        for _ in range(5):
            now = self.clock.now()
            decision = decide_operation_outcome(
                current.kind, current.state, current.version, outcome,
                provider_status=current.provider_status, now=now,
                recheck_after_s=self.settings.recheck_after_s)
            async with self.pool.acquire() as conn:
                written = await operations.apply(conn, current, decision, now, actor=actor,
                                                 reminder_interval=self.settings.reminder_interval)
            if written is not None:
                return written
            fresh = await self.reload(current)
            if fresh.version == current.version:  # nothing to write, and nobody moved it
                return fresh
            current = fresh
        return current

    async def reload(self, operation: Operation) -> Operation:
        return await operations.get_operation(self.pool, operation.operation_id)

