"""The JSON API behind the pages: ``/api/v1/…``, the same reads and actions, for scripts.

Authentication: ``Authorization: Bearer`` with an operator's identity-provider token (no CSRF
token: a browser never sends one on its own), or the browser's session cookie with its CSRF
token in ``X-CSRF-Token`` on every POST. Listings return ``{"items": [...], "next_cursor": ...}``;
pass ``cursor`` back for the next page. Errors are RFC 9457 problem+json. The routes and their
description come from one table, :data:`ENDPOINTS`, so the OpenAPI document cannot miss one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import date
from typing import Any
from uuid import UUID

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from paycore.domain import AttemptState
from paycore.operator_actions import OperatorAction
from paycore.operator_refunds import RefundApproval
from paycore_console import (
    actions,
    ids,  # noqa: F401  (registers the {name:id} route convertor)
    inspection,
    settlements,
)
from paycore_console.actions import Done
from paycore_console.auth import CSRF_HEADER, Caller, authenticate, check_csrf, may_act, may_refund
from paycore_console.context import Console, console_of
from paycore_console.credentials import Principal
from paycore_console.errors import BadRequest
from paycore_console.openapi import document
from paycore_console.schemas import Components, Schema, page, with_fields

BODY_MAX_BYTES = 64 * 1024


def json_response(value: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(inspection.jsonable(value)), status_code=status,
                    media_type="application/json")


async def reading(request: Request) -> tuple[Console, Caller]:
    c = console_of(request)
    return c, await authenticate(request, c.auth, c.pool, c.clock.now(), bearer_allowed=True)


async def acting(request: Request) -> tuple[Console, Principal, dict[str, Any]]:
    """The checks of every API POST, in order: who (bearer or session), CSRF for a session, the role."""
    c, caller = await reading(request)
    check_csrf(c.auth, caller, request.headers.get(CSRF_HEADER))
    who = may_act(caller)
    body = await request.body()
    if len(body) > BODY_MAX_BYTES:
        raise BadRequest("the body is too large")
    try:
        parsed = orjson.loads(body) if body.strip() else {}
    except orjson.JSONDecodeError:
        raise BadRequest("the body is not JSON") from None
    if not isinstance(parsed, dict):
        raise BadRequest("the body must be a JSON object")
    return c, who, parsed


async def refunding(request: Request) -> tuple[Console, Principal, dict[str, Any]]:
    """An action POST's checks (:func:`acting`), and then the role that may send money back."""
    c, who, body = await acting(request)
    return c, may_refund(who), body


def _text(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"{name} must be a string")
    return value


def _limit(request: Request) -> int:
    raw = request.query_params.get("limit", str(inspection.DEFAULT_PAGE))
    try:
        limit = int(raw)
    except ValueError:
        raise BadRequest("limit must be a whole number") from None
    if not 0 < limit <= inspection.MAX_PAGE:
        raise BadRequest(f"limit must be between 1 and {inspection.MAX_PAGE}")
    return limit


def _flag(request: Request, name: str) -> bool | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if raw in ("true", "false"):
        return raw == "true"
    raise BadRequest(f"{name} must be true or false")


async def _done(action: Awaitable[Done]) -> Response:
    return json_response((await action).as_json())


# -- reads ----------------------------------------------------------------------------------


async def get_overview(request: Request) -> Response:
    c, _ = await reading(request)
    return json_response(await inspection.overview(c.pool, c.clock.now()))


async def get_escalations(request: Request) -> Response:
    c, _ = await reading(request)
    q = request.query_params
    items, more = await inspection.list_escalations(
        c.pool, reason=q.get("reason") or None, provider_account=q.get("account") or None,
        acknowledged=_flag(request, "acknowledged"), open_only=not _flag(request, "include_resolved"),
        limit=_limit(request), cursor=q.get("cursor") or None)
    return json_response({"items": [{**inspection.jsonable(i), "status": i.status} for i in items],
                          "next_cursor": more})


async def get_escalation(request: Request) -> Response:
    c, _ = await reading(request)
    eid: int = request.path_params["escalation_id"]
    return json_response(await actions.escalation_detail(c.pool, eid))


async def get_attempts(request: Request) -> Response:
    c, _ = await reading(request)
    q = request.query_params
    raw_age = q.get("older_than_s") or None
    try:
        older_than_s = int(raw_age) if raw_age is not None else None
    except ValueError:
        raise BadRequest("older_than_s must be a whole number of seconds") from None
    if older_than_s is not None and older_than_s < 0:
        raise BadRequest("older_than_s must not be negative")
    items, more = await actions.list_attempts(c, state=q.get("state") or None,
                                              account=q.get("account") or None,
                                              older_than_s=older_than_s, search=q.get("q") or None,
                                              limit=_limit(request), cursor=q.get("cursor") or None)
    return json_response({"items": items, "next_cursor": more})


async def get_attempt(request: Request) -> Response:
    c, _ = await reading(request)
    attempt_id: UUID = request.path_params["attempt_id"]
    return json_response(await actions.attempt_detail(c.pool, attempt_id))


async def get_unmatched(request: Request) -> Response:
    c, _ = await reading(request)
    items, more = await inspection.unmatched_notifications(c.pool, limit=_limit(request),
                                                           cursor=request.query_params.get("cursor") or None)
    return json_response({"items": items, "next_cursor": more})


async def get_attach_preview(request: Request) -> Response:
    c, _ = await reading(request)
    event_id: int = request.path_params["event_id"]
    attempt_id = actions.parse_attempt_id(request.query_params.get("attempt_id"))
    preview = await actions.preview_attach(c, event_id, attempt_id)
    return json_response(actions.preview_json(event_id, attempt_id, preview))


async def get_dead_letters(request: Request) -> Response:
    c, _ = await reading(request)
    items, more = await inspection.dead_letters(c.pool, kind=request.query_params.get("kind") or None,
                                                limit=_limit(request),
                                                cursor=request.query_params.get("cursor") or None)
    return json_response({"items": items, "next_cursor": more})


def _date(request: Request, name: str, default: date) -> date:
    raw = request.query_params.get(name) or None
    if raw is None:
        return default
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise BadRequest(f"{name} must be a date, YYYY-MM-DD") from None


def _range(request: Request, c: Console) -> tuple[date, date]:
    first, today = settlements.default_range(c.clock.now())
    date_from, date_to = _date(request, "from", first), _date(request, "to", today)
    try:
        settlements.check_range(date_from, date_to)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    return date_from, date_to


async def get_settlement_batches(request: Request) -> Response:
    c, _ = await reading(request)
    date_from, date_to = _range(request, c)
    items, more = await settlements.list_batches(
        c.pool, provider_account=request.query_params.get("account") or None, date_from=date_from,
        date_to=date_to, limit=_limit(request), cursor=request.query_params.get("cursor") or None)
    return json_response({"items": items, "next_cursor": more})


async def get_settlement_batch(request: Request) -> Response:
    c, _ = await reading(request)
    return json_response(await actions.settlement_batch(c.pool, request.path_params["batch_id"]))


async def get_settlement_batch_exceptions(request: Request) -> Response:
    c, _ = await reading(request)
    batch_id: int = request.path_params["batch_id"]
    await actions.settlement_batch(c.pool, batch_id)  # 404 for a batch that does not exist
    items, more = await settlements.batch_exceptions(c.pool, batch_id, limit=_limit(request),
                                                     cursor=request.query_params.get("cursor") or None)
    return json_response({"items": items, "next_cursor": more})


async def get_unbatched_exceptions(request: Request) -> Response:
    c, _ = await reading(request)
    date_from, date_to = _range(request, c)
    items, more = await settlements.unbatched_exceptions(
        c.pool, provider_account=request.query_params.get("account") or None, date_from=date_from,
        date_to=date_to, limit=_limit(request), cursor=request.query_params.get("cursor") or None)
    return json_response({"items": items, "next_cursor": more})


async def get_settlement_days(request: Request) -> Response:
    c, _ = await reading(request)
    raw = request.query_params.get("days") or str(settlements.DEFAULT_DAYS)
    if raw not in {str(d) for d in settlements.CHART_WINDOWS}:
        raise BadRequest(f"days must be one of {', '.join(map(str, settlements.CHART_WINDOWS))}")
    days = await settlements.daily(c.pool, provider_account=request.query_params.get("account") or None,
                                   now=c.clock.now(), days=int(raw))
    return json_response({"items": days, "next_cursor": None})


async def get_openapi(request: Request) -> Response:
    return Response(orjson.dumps(document(ENDPOINTS)), media_type="application/json")


# -- actions --------------------------------------------------------------------------------


async def post_ack(request: Request) -> Response:
    c, who, body = await acting(request)
    eid = request.path_params["escalation_id"]
    return await _done(actions.acknowledge(c, who, eid, _text(body, "reason")))


async def post_resolve(request: Request) -> Response:
    c, who, body = await acting(request)
    return await _done(actions.resolve(c, who, request.path_params["escalation_id"], _text(body, "reason")))


async def post_resolve_conflict(request: Request) -> Response:
    c, who, body = await acting(request)
    if "owner_attempt_id" not in body:
        raise BadRequest("owner_attempt_id is required: an attempt id, or null for neither")
    raw = _text(body, "owner_attempt_id")
    owner = None if raw is None else actions.parse_attempt_id(raw)
    return await _done(actions.resolve_conflict(c, who, request.path_params["escalation_id"], owner,
                                                _text(body, "reason")))


async def post_close(request: Request) -> Response:
    c, who, body = await acting(request)
    expected = body.get("expected_version")
    if expected is not None and type(expected) is not int:
        raise BadRequest("expected_version must be an integer")
    return await _done(actions.close_attempt(c, who, request.path_params["attempt_id"], _text(body, "reason"),
                                             _text(body, "checked_at_provider"), expected))


async def post_attach(request: Request) -> Response:
    c, who, body = await acting(request)
    attempt_id = actions.parse_attempt_id(_text(body, "attempt_id"))
    return await _done(actions.attach(c, who, request.path_params["event_id"], attempt_id,
                                      _text(body, "reason")))


async def post_requeue(request: Request) -> Response:
    c, who, body = await acting(request)
    return await _done(actions.requeue(c, who, request.path_params["message_id"], _text(body, "reason")))


async def post_skip(request: Request) -> Response:
    c, who, body = await acting(request)
    return await _done(actions.skip(c, who, request.path_params["message_id"], _text(body, "reason")))


async def post_refund(request: Request) -> Response:
    c, who, body = await refunding(request)
    amount = body.get("amount_minor")
    if type(amount) is not int:
        raise BadRequest("amount_minor is required: a whole number of the payment's minor units")
    attempt_id: UUID = request.path_params["attempt_id"]
    return await _done(actions.refund(c, who, attempt_id, amount, _text(body, "reason")))


async def get_refund_approvals(request: Request) -> Response:
    c, _ = await reading(request)
    return json_response({"items": await inspection.pending_refunds(c.pool), "next_cursor": None})


async def post_refund_approve(request: Request) -> Response:
    c, who, body = await refunding(request)
    approval_id: int = request.path_params["approval_id"]
    return await _done(actions.approve_refund(c, who, approval_id, _text(body, "reason")))


async def post_refund_reject(request: Request) -> Response:
    c, who, body = await refunding(request)
    approval_id: int = request.path_params["approval_id"]
    return await _done(actions.reject_refund(c, who, approval_id, _text(body, "reason")))


# -- the table ------------------------------------------------------------------------------


Answer = Callable[[Components], Schema]  # the 200's body schema, its dataclasses made components


@dataclass(frozen=True)
class Endpoint:
    """One API route and what the OpenAPI document says about it."""

    method: str
    path: str  # Starlette's, with converters: {id:id}
    handler: Callable[[Request], Awaitable[Response]]
    summary: str
    query: tuple[tuple[str, str, str], ...] = ()  # (name, JSON type or "uuid", description)
    required_query: tuple[str, ...] = ()  # which of those a request must carry
    body: dict[str, tuple[str, str, bool]] = field(default_factory=dict)  # name -> (type, about, required)
    public: bool = False
    answer: Answer | None = None  # None: any JSON object (the OpenAPI document itself)


def _one(cls: type) -> Answer:
    return lambda c: c.of(cls)


def _page_of(cls: type, **extra: Schema) -> Answer:
    return lambda c: page(with_fields(c.of(cls), extra) if extra else c.of(cls))


def _recorded(**result: Schema) -> Answer:
    """What an action answers (:meth:`Done.as_json`): its message, its record, and ``result``."""
    return lambda c: {"type": "object", "required": ["message", "operator_action", *result],
                      "properties": {"message": {"type": "string"}, "operator_action": c.of(OperatorAction),
                                     **result}}


INTEGER: Schema = {"type": "integer"}
UUID_TEXT: Schema = {"type": "string", "format": "uuid"}
STATE: Schema = {"type": "string", "enum": [s.value for s in AttemptState]}
IDS: Schema = {"type": "array", "items": INTEGER}
ESCALATION_STATUS: Schema = {"type": "string", "enum": ["open", "acknowledged", "resolved"]}
PREVIEW: Schema = {  # actions.preview_json
    "type": "object",
    "required": ["event_id", "attempt_id", "state", "version", "summary", "refused", "after"],
    "properties": {
        "event_id": INTEGER, "attempt_id": UUID_TEXT, "state": STATE, "version": INTEGER,
        "summary": {"type": "string",
                    "description": "in words: the transition and its effects, or the refusal"},
        "refused": {"type": ["string", "null"],
                    "description": "the message the attach would be refused with"},
        "after": {"anyOf": [{"type": "null"}, {
            "type": "object",
            "required": ["state", "written", "order_paid", "effects", "escalations_raised",
                         "resolves_attempt_escalations", "resolves_escalation_id"],
            "properties": {"state": STATE, "written": {"type": "boolean"}, "order_paid": {"type": "boolean"},
                           "effects": {"type": "array", "items": {"type": "string"}},
                           "escalations_raised": {"type": "array", "items": {"type": "string"}},
                           "resolves_attempt_escalations": {"type": "boolean"},
                           "resolves_escalation_id": {"type": ["integer", "null"]}}}]},
    },
}


REFUND_RESULT: dict[str, Schema] = {  # actions._sent_result / _pending_result
    "status": {"type": "string", "enum": ["sent", "pending", "rejected"]},
    "approval_id": {"type": ["integer", "null"]},
    "operation_id": {"type": ["string", "null"], "format": "uuid"},
    "state": {"type": ["string", "null"], "description": "the refund's state as recorded after its one send"},
    "amount_minor": INTEGER, "currency": {"type": "string"},
    "provider_status": {"type": ["string", "null"]}, "provider_operation_id": {"type": ["string", "null"]},
}
PAGE = (("limit", "integer", f"page size, 1..{inspection.MAX_PAGE}"),
        ("cursor", "string", "next_cursor of the previous page"))
SETTLEMENT_RANGE = (("account", "string", "only this provider account"),
                    ("from", "string", "first date, YYYY-MM-DD (default: 29 days before today, UTC)"),
                    ("to", "string", "last date, YYYY-MM-DD, inclusive (default: today, UTC); "
                                     f"at most {settlements.MAX_RANGE_DAYS} days after from"))
REASON_REQUIRED = {"reason": ("string", "why (recorded)", True)}

ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("GET", "/api/v1/openapi.json", get_openapi, "This document", public=True),
    Endpoint("GET", "/openapi.json", get_openapi,
             "This document (where every paycore service serves its own)", public=True),
    Endpoint("GET", "/api/v1/overview", get_overview,
             "Attempts by state and age, oldest Unknown, escalations by reason and account, outbox, pauses, "
             "the last 24 hours", answer=_one(inspection.Overview)),
    Endpoint("GET", "/api/v1/escalations", get_escalations, "Escalations, open first then oldest first",
             (("reason", "string", "only this reason"), ("account", "string", "only this provider account"),
              ("acknowledged", "boolean", "only (un)acknowledged episodes"),
              ("include_resolved", "boolean", "resolved episodes too, after the open ones"), *PAGE),
             answer=_page_of(inspection.EscalationItem, status=ESCALATION_STATUS)),
    Endpoint("GET", "/api/v1/escalations/{escalation_id:id}", get_escalation,
             "One escalation: its detail (identifiers only) and every operator action on it",
             answer=_one(inspection.EscalationDetail)),
    Endpoint("POST", "/api/v1/escalations/{escalation_id:id}/ack", post_ack,
             "Acknowledge: a person has seen it; reminders start again from now",
             body={"reason": ("string", "optional note (recorded)", False)},
             answer=_recorded(escalation_id=INTEGER)),
    Endpoint("POST", "/api/v1/escalations/{escalation_id:id}/resolve", post_resolve,
             "Resolve (close the alert; changes no attempt)", body=REASON_REQUIRED,
             answer=_recorded(escalation_id=INTEGER)),
    Endpoint("POST", "/api/v1/escalations/{escalation_id:id}/resolve-conflict", post_resolve_conflict,
             "Resolve an identity or provider-id conflict: the owner attempt (its notification is applied "
             "through the normal conditional path) or null for neither",
             body={"owner_attempt_id": ("string", "an attempt the conflict names, or null", True),
                   **REASON_REQUIRED},
             answer=_recorded(escalation_id=INTEGER,
                          owner_attempt_id={"type": ["string", "null"], "format": "uuid"},
                          owner_state={"anyOf": [STATE, {"type": "null"}]})),
    Endpoint("GET", "/api/v1/attempts", get_attempts, "Attempts, newest first",
             (("state", "string", "only this state"), ("account", "string", "only this provider account"),
              ("older_than_s", "integer", "only attempts created at least this many seconds ago"),
              ("q", "string", "an order id, client reference, provider payment id or attempt id, exactly"),
              *PAGE), answer=_page_of(inspection.AttemptItem)),
    Endpoint("GET", "/api/v1/attempts/{attempt_id:uuid}", get_attempt,
             "One attempt: order, amounts, deadlines, lease, history, notifications, outbox, escalations, "
             "operator actions", answer=_one(inspection.AttemptDetail)),
    Endpoint("POST", "/api/v1/attempts/{attempt_id:uuid}/close", post_close,
             "Close an escalated Unknown attempt as not charged (refused while any evidence of a payment "
             "exists)",
             body={**REASON_REQUIRED,
                   "checked_at_provider": ("string", "what was checked at the provider", True),
                   "expected_version": ("integer", "the version you looked at; refused if it changed",
                                        False)},
             answer=_recorded(attempt_id=UUID_TEXT, state=STATE, resolved_escalations=IDS)),
    Endpoint("POST", "/api/v1/attempts/{attempt_id:uuid}/refund", post_refund,
             "Refund part or all of a payment (the refunder role): recorded and sent once, right away, up "
             "to PAYCORE_CONSOLE_REFUND_APPROVAL_ABOVE_MINOR; above it, left pending for a second refunder; "
             "refused (409) when the payment cannot give it back",
             body={"amount_minor": ("integer", "how much, in the payment's minor units", True),
                   **REASON_REQUIRED},
             answer=_recorded(**REFUND_RESULT)),
    Endpoint("GET", "/api/v1/refund-approvals", get_refund_approvals,
             "Refunds waiting for a second refunder's approval, oldest first (at most "
             f"{inspection.MAX_PAGE}; next_cursor is always null)",
             answer=_page_of(RefundApproval)),
    Endpoint("POST", "/api/v1/refund-approvals/{approval_id:id}/approve", post_refund_approve,
             "Approve another operator's refund (the refunder role; never your own): recorded and sent "
             "once; approving it again is refused",
             body={"reason": ("string", "optional note (recorded)", False)},
             answer=_recorded(**REFUND_RESULT, attempt_id=UUID_TEXT)),
    Endpoint("POST", "/api/v1/refund-approvals/{approval_id:id}/reject", post_refund_reject,
             "Reject another operator's refund (the refunder role; never your own): nothing is sent",
             body=REASON_REQUIRED, answer=_recorded(**REFUND_RESULT, attempt_id=UUID_TEXT)),
    Endpoint("GET", "/api/v1/notifications/unmatched", get_unmatched,
             "Stored notifications no attempt matched and no operator attached, oldest first", PAGE,
             answer=_page_of(inspection.UnmatchedNotification)),
    Endpoint("GET", "/api/v1/notifications/{event_id:id}/attach-preview", get_attach_preview,
             "What attaching the notification to an attempt would do, decided by the attach's own rules "
             "without writing: the refusal it would give, or the transition and its effects",
             (("attempt_id", "uuid", "the attempt"),), required_query=("attempt_id",),
             answer=lambda c: PREVIEW),
    Endpoint("POST", "/api/v1/notifications/{event_id:id}/attach", post_attach,
             "Attach a stored unmatched notification to its attempt (the normal conditional transition)",
             body={"attempt_id": ("string", "the attempt", True), **REASON_REQUIRED},
             answer=_recorded(event_id=INTEGER, attempt_id=UUID_TEXT, state=STATE)),
    Endpoint("GET", "/api/v1/settlements/batches", get_settlement_batches,
             "Settlement batches dated in the range, newest first: provider status, state, counts, totals",
             (*SETTLEMENT_RANGE, *PAGE), answer=_page_of(settlements.BatchItem)),
    Endpoint("GET", "/api/v1/settlements/batches/{batch_id:id}", get_settlement_batch,
             "One settlement batch: its header, reported and computed totals, and its lines by kind",
             answer=_one(settlements.BatchDetail)),
    Endpoint("GET", "/api/v1/settlements/batches/{batch_id:id}/exceptions", get_settlement_batch_exceptions,
             "The batch's exceptions by line number, each with its escalation's state (resolve it with "
             "the escalation actions)", PAGE, answer=_page_of(settlements.ExceptionItem)),
    Endpoint("GET", "/api/v1/settlements/unbatched-exceptions", get_unbatched_exceptions,
             "Missing payments and refunds (in no batch) found in the range, newest first",
             (*SETTLEMENT_RANGE, *PAGE), answer=_page_of(settlements.ExceptionItem)),
    Endpoint("GET", "/api/v1/settlements/days", get_settlement_days,
             "Per day of the last 30 or 90 (UTC, oldest first): the batches' fees per currency and the "
             "exceptions found (next_cursor is always null)",
             (("account", "string", "only this provider account"),
              ("days", "integer", "30 (default) or 90")), answer=_page_of(settlements.Day)),
    Endpoint("GET", "/api/v1/outbox/dead-letters", get_dead_letters,
             "Dead-lettered outbox rows, oldest first",
             (("kind", "string", "only this kind"), *PAGE), answer=_page_of(inspection.DeadLetter)),
    Endpoint("POST", "/api/v1/outbox/{message_id:id}/requeue", post_requeue,
             "Requeue a dead letter: pending again, due now, sent before the rows after it",
             body=REASON_REQUIRED, answer=_recorded(message_id=INTEGER, resolved_escalations=IDS)),
    Endpoint("POST", "/api/v1/outbox/{message_id:id}/skip", post_skip,
             "Skip a dead letter: never sent; the rows after it flow", body=REASON_REQUIRED,
             answer=_recorded(message_id=INTEGER, resolved_escalations=IDS)),
)


def routes() -> list[Route]:
    return [Route(e.path, e.handler, methods=[e.method]) for e in ENDPOINTS]
