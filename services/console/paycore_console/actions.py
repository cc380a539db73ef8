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

from paycore import conflicts, dead_ends, escalations, notifications, outbox_admin
from paycore.errors import NotFound
from paycore.operator_actions import InvalidOperatorAction, OperatorAction
from paycore_console import inspection
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
    notifications.AttachRefused, outbox_admin.OutboxActionRefused,
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
