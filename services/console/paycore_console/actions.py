"""The console's actions, each one call of a library function, shared by the pages and the API.

Every action is done by the signed-in principal (their name, or ``oidc:<sub>``), which the
library records in ``operator_actions`` with the reason, before and after. A refusal --
the state changed underneath, or the action does not apply -- is :class:`ActionRefused` with
the library's own words; nothing was changed or recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from paycore import conflicts, dead_ends, escalations, notifications, operator_refunds, outbox_admin
from paycore.attempt_row import get_attempt
from paycore.currencies import AmountNotReadable, format_amount, parse_amount
from paycore.errors import NotFound
from paycore.operation_sends import OperationSender
from paycore.operations import Operation
from paycore.operator_actions import InvalidOperatorAction, OperatorAction
from paycore.operator_refunds import RefundPending, RefundSent
from paycore_console import inspection, settlements
from paycore_console.credentials import Principal
from paycore_console.inspection import jsonable

if TYPE_CHECKING:
    from paycore_console.context import Console


class ActionRefused(Exception):
    """The library refused: ``kind`` is ``conflict`` (state), ``invalid`` (input) or ``not-found``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class Done:
    """What an action did: a sentence for the page, and the record for the API."""

    message: str
    recorded: OperatorAction
    result: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {"message": self.message, "operator_action": self.recorded.as_json(), **jsonable(self.result)}


REFUSALS: tuple[type[Exception], ...] = (
    escalations.EscalationActionRefused, conflicts.ConflictResolutionRefused, dead_ends.CloseRefused,
    notifications.AttachRefused, outbox_admin.OutboxActionRefused, operator_refunds.RefundRefused,
)


async def _run(call: Any) -> Any:
    try:
        return await call
    except NotFound as exc:
        raise ActionRefused("not-found", str(exc)) from None
    except REFUSALS as exc:
        raise ActionRefused("conflict", str(exc)) from None
    except InvalidOperatorAction as exc:
        raise ActionRefused("invalid", str(exc)) from None


def parse_attempt_id(text: str | None) -> UUID:
    try:
        return UUID((text or "").strip())
    except ValueError:
        raise ActionRefused("invalid", f"{text!r} is not an attempt id (a UUID)") from None


async def acknowledge(c: Console, who: Principal, escalation_id: int, reason: str | None) -> Done:
    recorded = await _run(escalations.acknowledge(
        c.pool, escalation_id, operator=who.name, reason=reason or None, now=c.clock.now(),
        reminder_interval=c.settings.reminder_ack_interval))
    return Done(f"Escalation {escalation_id} acknowledged; reminders start again from now.", recorded,
                {"escalation_id": escalation_id})


async def resolve(c: Console, who: Principal, escalation_id: int, reason: str | None) -> Done:
    recorded = await _run(escalations.resolve(c.pool, escalation_id, operator=who.name, reason=reason or "",
                                              now=c.clock.now()))
    return Done(f"Escalation {escalation_id} resolved. No attempt was changed.", recorded,
                {"escalation_id": escalation_id})


async def resolve_conflict(c: Console, who: Principal, escalation_id: int, owner: UUID | None,
                           reason: str | None) -> Done:
    done = await _run(conflicts.resolve_conflict(
        c.pool, escalation_id=escalation_id, owner_attempt_id=owner, operator=who.name, reason=reason or "",
        now=c.clock.now(), reminder_interval=c.settings.reminder_interval,
        recheck_after_s=c.settings.recheck_after_s))
    if done.owner is None:
        message = (f"Escalation {escalation_id} resolved: neither attempt owns the payment; "
                   "no attempt changed.")
        state = None
    else:
        state = done.owner.state.value
        message = (f"Escalation {escalation_id} resolved: attempt {done.owner.attempt_id} owns the payment "
                   f"(now {state}).")
    return Done(message, done.recorded, {"escalation_id": escalation_id,
                                         "owner_attempt_id": owner, "owner_state": state})


async def close_attempt(c: Console, who: Principal, attempt_id: UUID, reason: str | None, checked: str | None,
                        expected_version: int | None) -> Done:
    done = await _run(dead_ends.close_as_not_charged(
        c.pool, attempt_id=attempt_id, operator=who.name, reason=reason or "",
        checked_at_provider=checked or "", now=c.clock.now(), expected_version=expected_version))
    return Done(f"Attempt {attempt_id} closed as not charged (now {done.attempt.state.value}); the order can "
                f"be paid again.", done.recorded,
                {"attempt_id": attempt_id, "state": done.attempt.state.value,
                 "resolved_escalations": done.resolved_escalations})


async def attach(c: Console, who: Principal, event_id: int, attempt_id: UUID, reason: str | None) -> Done:
    done = await _run(notifications.attach_notification(
        c.pool, event_id=event_id, attempt_id=attempt_id, operator=who.name, reason=reason or "",
        now=c.clock.now(), reminder_interval=c.settings.reminder_interval,
        recheck_after_s=c.settings.recheck_after_s))
    return Done(f"Notification {event_id} attached to attempt {attempt_id} (now {done.attempt.state.value}).",
                done.recorded, {"event_id": event_id, "attempt_id": attempt_id,
                                "state": done.attempt.state.value})


async def preview_attach(c: Console, event_id: int, attempt_id: UUID) -> notifications.AttachPreview:
    """What attaching would do, decided by the attach's own rules without writing; not-found refused."""
    preview: notifications.AttachPreview = await _run(
        notifications.preview_attach(c.pool, event_id=event_id, attempt_id=attempt_id, now=c.clock.now(),
                                     recheck_after_s=c.settings.recheck_after_s))
    return preview


def preview_json(event_id: int, attempt_id: UUID, preview: notifications.AttachPreview) -> dict[str, Any]:
    """The preview for scripts: the refusal, or the transition and everything the attach would do."""
    f = preview.foreseen
    return {
        "event_id": event_id, "attempt_id": attempt_id, "state": preview.attempt.state.value,
        "version": preview.attempt.version, "summary": preview.describe(), "refused": preview.refused,
        "after": None if preview.refused is not None or f is None else {
            "state": f.after.value, "written": f.written, "order_paid": f.order_paid,
            "effects": [*f.effects, *(["refund-request"] if preview.refund_request else [])],
            "escalations_raised": [e.text for e in f.escalations],
            "resolves_attempt_escalations": f.resolves_escalations,
            "resolves_escalation_id": preview.unmatched_escalation},
    }


async def requeue(c: Console, who: Principal, message_id: int, reason: str | None) -> Done:
    done = await _run(outbox_admin.requeue(c.pool, message_id, operator=who.name, reason=reason or "",
                                           now=c.clock.now()))
    return Done(f"Outbox message {message_id} requeued: the dispatcher sends it next.", done.recorded,
                {"message_id": message_id, "resolved_escalations": done.resolved_escalations})


async def skip(c: Console, who: Principal, message_id: int, reason: str | None) -> Done:
    done = await _run(outbox_admin.skip(c.pool, message_id, operator=who.name, reason=reason or "",
                                        now=c.clock.now()))
    return Done(f"Outbox message {message_id} skipped: it will never be sent; the rows after it flow.",
                done.recorded, {"message_id": message_id, "resolved_escalations": done.resolved_escalations})


async def escalation_detail(pool: Any, escalation_id: int) -> inspection.EscalationDetail:
    """One episode as the page and the API show it, or refused as not found."""
    found = await inspection.escalation_detail(pool, escalation_id)
    if found is None:
        raise ActionRefused("not-found", f"escalation {escalation_id} does not exist")
    return found


async def attempt_detail(pool: Any, attempt_id: UUID) -> inspection.AttemptDetail:
    """One attempt as the page and the API show it, or refused as not found."""
    found = await inspection.attempt_detail(pool, attempt_id)
    if found is None:
        raise ActionRefused("not-found", f"no attempt {attempt_id}")
    return found


async def settlement_batch(pool: Any, batch_id: int) -> settlements.BatchDetail:
    """One settlement batch as the page and the API show it, or refused as not found."""
    found = await settlements.batch_detail(pool, batch_id)
    if found is None:
        raise ActionRefused("not-found", f"settlement batch {batch_id} does not exist")
    return found


async def list_attempts(c: Console, *, state: str | None, account: str | None, older_than_s: int | None,
                        search: str | None, limit: int, cursor: str | None,
                        ) -> tuple[list[inspection.AttemptItem], str | None]:
    """One page of attempts, newest first, as the page and the API list them; a state that is not
    one is bad input (400), as is a cursor this listing did not make."""
    before = c.clock.now() - timedelta(seconds=older_than_s) if older_than_s is not None else None
    try:
        return await inspection.list_attempts(c.pool, state=state, provider_account=account,
                                              created_before=before, search=search, limit=limit,
                                              cursor=cursor)
    except inspection.InvalidCursor:
        raise
    except ValueError as exc:
        raise BadQuery(str(exc)) from None


class BadQuery(ValueError):
    """A listing's filter that is not one (answered 400 like any bad query)."""


# -- refunds -----------------------------------------------------------------------------------


def _sender(c: Console) -> OperationSender:
    if c.sender is None:
        raise ActionRefused("conflict", "this console sends no refunds: no provider account is configured "
                                        "for it (docs/operators.md, \"Refunds\")")
    return c.sender


async def payment_currency(c: Console, attempt_id: UUID) -> str:
    """The payment's currency (what a typed amount is in), or refused as not found."""
    payment = await _run(get_attempt(c.pool, attempt_id))
    currency: str = payment.currency
    return currency


def parse_refund_amount(typed: str | None, currency: str) -> int:
    """A form's amount, typed in major units of the payment's currency, in minor units."""
    try:
        return parse_amount(typed or "", currency)
    except AmountNotReadable as exc:
        raise ActionRefused("invalid", str(exc)) from None


def refund_sent_message(op: Operation) -> str:
    """What became of a refund sent once, in words: its state as recorded after the send."""
    amount = format_amount(op.amount_minor, op.currency)
    state = op.state.value
    if state == "Succeeded":
        return f"Refund of {amount} succeeded (operation {op.operation_id})."
    if state in ("Started", "Unknown"):
        return (f"Refund of {amount} sent; it is {state}: the provider has not confirmed it yet, and "
                f"recovery will establish it (operation {op.operation_id}). Do not send it again.")
    return (f"Refund of {amount} was not made: it is {state} ({op.outcome_reason or 'no reason given'}; "
            f"operation {op.operation_id}).")


async def refund(c: Console, who: Principal, attempt_id: UUID, amount_minor: int, reason: str | None) -> Done:
    """Refund ``amount_minor`` of the payment as ``who``: sent at once up to the approval threshold,
    else left for a second refunder. Runs to its end even if the browser goes away."""
    sender = _sender(c)
    done = await _run(c.finish(operator_refunds.request_refund(
        sender, attempt_id, amount_minor, operator=who.name, reason=reason or "",
        approval_above_minor=c.settings.refund_approval_above_minor)))
    if isinstance(done, RefundPending):
        a = done.approval
        threshold = format_amount(c.settings.refund_approval_above_minor, a.currency)
        return Done(f"Refund of {format_amount(a.amount_minor, a.currency)} is above {threshold}: it waits "
                    f"for another refunder's approval (request {a.approval_id}). Nothing was sent.",
                    done.recorded, _pending_result(a))
    assert isinstance(done, RefundSent)
    return Done(refund_sent_message(done.operation), done.recorded, _sent_result(done))


def _sent_result(done: RefundSent) -> dict[str, Any]:
    op = done.operation
    return {"status": "sent", "approval_id": done.approval.approval_id if done.approval else None,
            "operation_id": op.operation_id, "state": op.state.value, "amount_minor": op.amount_minor,
            "currency": op.currency, "provider_status": op.provider_status,
            "provider_operation_id": op.provider_operation_id}


def _pending_result(a: operator_refunds.RefundApproval) -> dict[str, Any]:
    return {"status": "pending", "approval_id": a.approval_id, "operation_id": None, "state": None,
            "amount_minor": a.amount_minor, "currency": a.currency, "provider_status": None,
            "provider_operation_id": None}


async def approve_refund(c: Console, who: Principal, approval_id: int, reason: str | None) -> Done:
    """Approve another operator's refund: recorded and sent once (a second approval is refused)."""
    sender = _sender(c)
    done: RefundSent = await _run(c.finish(operator_refunds.approve_refund(
        sender, approval_id, operator=who.name, reason=reason or None)))
    return Done(f"Approved request {approval_id}. {refund_sent_message(done.operation)}", done.recorded,
                {**_sent_result(done), "attempt_id": done.operation.attempt_id})


async def reject_refund(c: Console, who: Principal, approval_id: int, reason: str | None) -> Done:
    done = await _run(operator_refunds.reject_refund(c.pool, approval_id, operator=who.name,
                                                     reason=reason or "", now=c.clock.now()))
    a = done.approval
    return Done(f"Rejected request {approval_id}: the refund of {format_amount(a.amount_minor, a.currency)} "
                "will not be sent.", done.recorded,
                {**_pending_result(a), "status": "rejected", "attempt_id": a.attempt_id})
