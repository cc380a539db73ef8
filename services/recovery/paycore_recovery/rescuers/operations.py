"""Recovery's task for stuck captures, cancels and refunds: one claimed operation at a time.

The payment's loop for what follows it (:func:`paycore.domain.decide_operation_step` decides,
the library's one writer of operation outcomes writes): a NotStarted operation whose sender
died is closed as never sent; a Started or Unknown one is looked up by its own reference, and
exactly one object found is the evidence; not found (or a provider with no lookup) inside the
key window, the stored request is sent again under the same key, whose answer is the
evidence; past the window, or when a lookup finds several, a person is asked. Nothing here
creates an operation or sends anything but the stored bytes under the stored key.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from uuid import UUID

import asyncpg

from paycore import leases, operations
from paycore.attempts import get_attempt
from paycore.clock import Clock
from paycore.config import Settings
from paycore.domain import (
    EscalationReason,
    OperationKind,
    OperationState,
    OperationStep,
    decide_operation_step,
)
from paycore.evidence import judge_operation
from paycore.logs import bind_log_context
from paycore.operation_sends import OperationSender
from paycore.operations import Operation, Refused
from paycore.providers.base import OperationEnding, OperationLookup, OperationOutcome, PaymentCalls
from paycore_recovery.settings import RecoverySettings

__all__ = ["OperationRescuer"]

log = logging.getLogger("paycore.recovery.operations")

AUTOMATIC = "paycore"  # requested_by of what paycore itself asks for (decision 0008)


class OperationRescuer:
    """Works due operations (claims them one by one, each under its own lease)."""

    def __init__(self, *, pool: asyncpg.Pool, client: PaymentCalls, clock: Clock, settings: Settings,
                 recovery: RecoverySettings, owner: str) -> None:
        self.pool = pool
        self.clock = clock
        self.settings = settings
        self.recovery = recovery
        self.owner = owner
        self.actor = f"recovery-{owner}"
        self.sender = OperationSender(pool=pool, client=client, clock=clock, settings=settings)

    async def refund_charged_after_cancel(self) -> list[UUID]:
        """Decision 0008: refund each payment charged after its order was cancelled, whole, as its
        own operation (``requested_by = 'paycore'``), once: a second pass finds it recorded, and
        the payment's headroom refuses a second refund whatever happens. With
        ``PAYCORE_SUCCEEDED_AFTER_CANCEL=escalate`` nothing is done (the episode asks a person).
        Returns the payments refunded (recorded and sent) in this pass."""
        if self.recovery.succeeded_after_cancel != "refund":
            return []
        refunded: list[UUID] = []
        for attempt_id in await operations.charged_after_cancel(self.pool, self.recovery.batch):
            with bind_log_context(attempt_id=attempt_id):
                try:
                    payment = await get_attempt(self.pool, attempt_id)
                    if payment.provider_status == operations.HOLD_STATUS:
                        continue  # a hold is voided, not refunded: manual capture's part
                    amount = payment.amount_minor - await operations.refunds_of_ours(self.pool, attempt_id)
                    if amount <= 0:
                        continue
                    done = await self.sender.request(attempt_id, OperationKind.REFUND, amount,
                                                     requested_by=AUTOMATIC, reason="succeeded-after-cancel")
                    log.warning("payment %s was charged after its order was cancelled: refund %s",
                                attempt_id, done if isinstance(done, Refused) else done.state.value)
                    if not isinstance(done, Refused):
                        refunded.append(attempt_id)
                except Exception:
                    log.exception("automatic refund of payment %s failed; the next pass tries again",
                                  attempt_id)
        return refunded

    async def run_pass(self) -> list[OperationStep]:
        """Every due operation once, up to ``batch``; how each was worked."""
        steps: list[OperationStep] = []
        for _ in range(self.recovery.batch):
            lease = leases.new_lease(self.owner)
            claimed = await operations.claim_due(self.pool, lease, self.clock.now(), self.recovery.lease_s)
            if claimed is None:
                break
            with bind_log_context(attempt_id=claimed.attempt_id, operation_id=claimed.operation_id):
                try:
                    steps.append(await self.rescue(claimed, lease))
                except Exception:
                    # One operation's failure must not stop the others: surfaced, never an
                    # outcome; its lease expires and a later pass starts again from durable state.
                    log.exception("recovery pass over operation %s failed", claimed.operation_id)
        return steps

    async def rescue(self, op: Operation, lease: leases.Lease) -> OperationStep:
        now = self.clock.now()
        payment_id = (await get_attempt(self.pool, op.attempt_id)).provider_payment_id
        calls = self.sender.calls(op.provider_account)
        budget = self.settings.budgets.call_s
        lookup = OperationLookup("not_found")
        if op.state is not OperationState.NOT_STARTED:  # never sent: nothing to find
            lookup = await calls.find_operation_by_reference(
                op.provider_account, op.kind, op.client_reference, budget_s=budget,
                provider_payment_id=payment_id)
        found = lookup.found  # each judged as evidence before it is applied
        step = decide_operation_step(op.state, provider_status=op.provider_status,
                                     escalation_deadline=op.escalation_deadline, lookup=lookup.outcome_kind,
                                     found=len(found), now=now,
                                     found_pending=any(f.ending is OperationEnding.PENDING for f in found))
        if step is OperationStep.CLOSE_NEVER_SENT:
            await operations.close_never_sent(self.pool, op, lease, now, actor=self.actor)
        elif step is OperationStep.APPLY_FOUND:
            await self._apply(op, found[0], lease, payment_id)
        elif step is OperationStep.RESEND:
            outcome = await calls.send_operation(op.stored_request(), op.kind, budget_s=budget,
                                                 provider_payment_id=payment_id or "", first_send=False)
            await self._apply(op, outcome, lease, payment_id)
        elif step is OperationStep.WAIT:
            delay = lookup.retry_after_s or self.settings.recheck_after_s
            await operations.finish(self.pool, op.operation_id, lease, now, now + timedelta(seconds=delay))
        else:
            reason = (EscalationReason.MULTIPLE_PAYMENTS if step is OperationStep.ESCALATE_MULTIPLE
                      else EscalationReason.DEADLINE)
            await self._escalate(op, lease, reason, {"lookup": lookup.outcome_kind, "found": len(found)})
        log.info("operation %s (%s %s): %s", op.operation_id, op.kind.value, op.state.value, step.value)
        return step

    async def _apply(self, op: Operation, outcome: OperationOutcome, lease: leases.Lease,
                     payment_id: str | None) -> None:
        """Judge ``outcome`` as evidence about ``op``; apply it, or escalate what it says about
        another payment or refund; then schedule the next look if it is still live."""
        verdict = judge_operation(op, outcome.claim, reported_payment_id=outcome.provider_payment_id,
                                  payment_id=payment_id, reported_operation_id=outcome.provider_operation_id,
                                  recorded_operation_id=op.provider_operation_id)
        if verdict.reason is not None:
            await self._escalate(op, lease, verdict.reason, verdict.detail)
            return
        recorded = await self.sender.record(op, outcome, actor=self.actor)
        now = self.clock.now()
        # Final: the lease goes with the look it no longer needs; live: the write scheduled the
        # next look (recheck), and the lease is released keeping it.
        await operations.finish(self.pool, op.operation_id, lease, now, recorded.next_check_at)

    async def _escalate(self, op: Operation, lease: leases.Lease, reason: EscalationReason,
                        detail: dict[str, object]) -> None:
        now = self.clock.now()
        await operations.escalate_and_finish(
            self.pool, op, lease, reason, now=now,
            next_check_at=now + timedelta(seconds=self.settings.recheck_after_s),
            reminder_interval=self.settings.reminder_interval, detail=detail)
