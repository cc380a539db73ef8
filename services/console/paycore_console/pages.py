"""The console's pages: server-rendered HTML, every one usable without JavaScript.

A GET renders; a POST acts (through :mod:`paycore_console.actions`) and redirects back with a
one-time message (a flash): what was done, or why the library refused. Action forms are shown
only to operators; a viewer's POST is refused 403 however it was made.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import date
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode
from uuid import UUID

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from paycore import conflicts, operator_sessions
from paycore.accounts import PROVIDER_ACCOUNTS
from paycore.conflicts import CONFLICT_REASONS
from paycore.currencies import exponent
from paycore.dead_ends import is_dead_end
from paycore.domain import LIVE_STATES, AttemptState
from paycore.operator_sessions import EndReason
from paycore.operators import AuthenticationFailed, TooManyAttempts
from paycore.operators import authenticate as sign_in
from paycore.operators import end_sessions as end_operator_sessions
from paycore_console import (
    actions,
    ids,  # noqa: F401  (registers the {name:id} route convertor)
    inspection,
    settlements,
)
from paycore_console.actions import ActionRefused, Done
from paycore_console.auth import (
    CSRF_FIELD,
    FLASH_COOKIE,
    LOGIN_COOKIE,
    SESSION_COOKIE,
    Caller,
    authenticate,
    check_csrf,
    check_login_csrf,
    clear_cookie,
    client_address,
    login_csrf_token,
    may_act,
    may_refund,
    new_login_nonce,
    set_cookie,
)
from paycore_console.chart import DailyChart, daily_chart, hourly_chart
from paycore_console.context import Console, console_of
from paycore_console.credentials import Principal
from paycore_console.errors import BadRequest

FORM_MAX_BYTES = 64 * 1024
PAGE_SIZE = 25
LOGIN_FORM_TTL_S = 3600

OUTBOX_POLICY = (
    "A dead-lettered row keeps blocking the later rows of its attempt: the dispatcher waits for a "
    "person. Requeue it when the cause is fixed (it is sent again, first); skip it, with a reason, "
    "only when it must never be sent -- the rows after it then flow. Both are recorded.")


# -- plumbing ---------------------------------------------------------------------------------


async def read_form(request: Request) -> dict[str, str]:
    """An urlencoded form (the only kind these pages send), last value of each name."""
    body = await request.body()
    if len(body) > FORM_MAX_BYTES:
        raise BadRequest("the form is too large")
    try:
        return dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
    except UnicodeDecodeError:
        raise BadRequest("the form is not UTF-8") from None


def _flash_of(request: Request) -> dict[str, str] | None:
    raw = request.cookies.get(FLASH_COOKIE)
    if not raw:
        return None
    kind, _, message = unquote(raw).partition(":")
    return {"kind": "error" if kind == "error" else "ok", "message": message}


def render(request: Request, template: str, caller: Caller | None, *, status: int = 200,
           title: str, nav: str | None = None, **context: Any) -> Response:
    c = console_of(request)
    flash = _flash_of(request)
    csrf = c.auth.csrf_token(caller.session) if caller is not None and caller.session is not None else None
    page = c.templates.get_template(template).render(
        request_path=request.url.path, caller=caller, csrf=csrf, csrf_field=CSRF_FIELD, flash=flash,
        title=title, nav=nav, **context)
    response = HTMLResponse(page, status_code=status)
    if flash is not None:
        clear_cookie(response, FLASH_COOKIE, secure=c.secure_cookies)
    return response


def redirect(request: Request, to: str, *, flash: tuple[str, str] | None = None) -> Response:
    response = RedirectResponse(to, status_code=303)
    if flash is not None:
        kind, message = flash
        set_cookie(response, FLASH_COOKIE, quote(f"{kind}:{message}"[:1500]),
                   secure=console_of(request).secure_cookies, max_age=60)
    return response


async def viewing(request: Request) -> tuple[Console, Caller]:
    c = console_of(request)
    return c, await authenticate(request, c.auth, c.pool, c.clock.now(), bearer_allowed=False)


async def acting(request: Request) -> tuple[Console, Principal, dict[str, str]]:
    """The checks of every action POST, in order: a session, its CSRF token, the operator role."""
    c, caller = await viewing(request)
    form = await read_form(request)
    check_csrf(c.auth, caller, form.get(CSRF_FIELD))
    return c, may_act(caller), form


async def refunding(request: Request) -> tuple[Console, Principal, dict[str, str]]:
    """An action POST's checks (:func:`acting`), and then the role that may send money back."""
    c, who, form = await acting(request)
    return c, may_refund(who), form


async def act(request: Request, back: str, action: Awaitable[Done]) -> Response:
    """Do it and go back with what happened; a refusal is a message on the page, never an error."""
    try:
        done = await action
    except ActionRefused as exc:
        return redirect(request, back, flash=("error", f"Refused: {exc.message}"))
    return redirect(request, back, flash=("ok", done.message))


def int_query(request: Request, name: str, default: int | None = None) -> int | None:
    raw = request.query_params.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be a whole number") from None


def text_query(request: Request, name: str) -> str | None:
    return request.query_params.get(name, "").strip() or None


def bool_query(request: Request, name: str) -> bool | None:
    raw = request.query_params.get(name, "").strip().lower()
    if raw in ("", "any"):
        return None
    if raw in ("yes", "true", "1"):
        return True
    if raw in ("no", "false", "0"):
        return False
    raise BadRequest(f"{name} must be yes, no or any")


def page_size(request: Request) -> int:
    size = int_query(request, "limit", PAGE_SIZE)
    assert size is not None
    if not 0 < size <= inspection.MAX_PAGE:
        raise BadRequest(f"limit must be between 1 and {inspection.MAX_PAGE}")
    return size


def safe_next(target: str | None) -> str:
    """Only a path of this site: never an absolute URL or a protocol-relative ``//host``."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


# -- signing in and out ---------------------------------------------------------------------


async def login_page(request: Request, *, status: int = 200, error: str | None = None,
                     headers: dict[str, str] | None = None) -> Response:
    c = console_of(request)
    nonce = new_login_nonce()
    page = c.templates.get_template("login.html").render(
        title="Sign in", caller=None, csrf=None, csrf_field=CSRF_FIELD, flash=_flash_of(request), nav=None,
        login_csrf=login_csrf_token(c.auth, nonce, c.clock.now()), error=error,
        next=safe_next(request.query_params.get("next")), request_path="/login")
    response = HTMLResponse(page, status_code=status, headers=headers)
    set_cookie(response, LOGIN_COOKIE, nonce, secure=c.secure_cookies, max_age=LOGIN_FORM_TTL_S)
    return response


async def login_get(request: Request) -> Response:
    return await login_page(request)


async def login_post(request: Request) -> Response:
    c = console_of(request)
    form = await read_form(request)
    now = c.clock.now()
    check_login_csrf(c.auth, request, form.get(CSRF_FIELD), now)
    try:
        account = await sign_in(c.pool, form.get("name", ""), form.get("password", ""),
                                client_address(request), now, throttle=c.settings.throttle)
    except AuthenticationFailed:
        return await login_page(request, status=401, error="Unknown operator or wrong password.")
    except TooManyAttempts as exc:
        return await login_page(request, status=429, headers={"Retry-After": str(exc.retry_after_s)},
                                error=f"Too many failed sign-ins; try again in {exc.retry_after_s} s.")
    token = await c.auth.issue_session(c.pool, account.name, account.role, now)
    response = redirect(request, safe_next(form.get("next")))
    set_cookie(response, SESSION_COOKIE, token, secure=c.secure_cookies,
               max_age=int(c.settings.auth.session_ttl_s))
    clear_cookie(response, LOGIN_COOKIE, secure=c.secure_cookies)
    return response


async def logout_post(request: Request) -> Response:
    c, caller = await viewing(request)
    form = await read_form(request)
    check_csrf(c.auth, caller, form.get(CSRF_FIELD))
    if caller.session is not None:  # ended server-side: the cookie, sent again, opens nothing
        await c.auth.end_session(c.pool, caller.session, c.clock.now())
    response = redirect(request, "/login", flash=("ok", "Signed out."))
    clear_cookie(response, SESSION_COOKIE, secure=c.secure_cookies)
    return response


async def sessions_page(request: Request) -> Response:
    """The signed-in operator's open sessions, each of which they may end."""
    c, caller = await viewing(request)
    assert caller.session is not None  # pages take sessions only
    now = c.clock.now()
    mine = await operator_sessions.open_sessions(c.pool, caller.principal.name, now,
                                                 c.settings.auth.session_idle_s)
    return render(request, "sessions.html", caller, title="Your sessions", nav="sessions", sessions=mine,
                  current=caller.session.hashed.hex()[:16], now=now,
                  idle=_duration(c.settings.auth.session_idle_s),
                  lifetime=_duration(c.settings.auth.session_ttl_s))


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes} minutes" if minutes < 120 else f"{minutes / 60:g} hours"


async def sessions_end(request: Request) -> Response:
    """End one of the operator's other sessions, or all of them (recorded); a viewer may too."""
    c, caller = await viewing(request)
    form = await read_form(request)
    check_csrf(c.auth, caller, form.get(CSRF_FIELD))
    assert caller.session is not None
    now, me, which = c.clock.now(), caller.principal.name, form.get("session", "").strip()
    if which == "others":
        done = await end_operator_sessions(c.pool, me, now, operator=me, keep_session=caller.session.hashed)
        return redirect(request, "/sessions", flash=("ok", f"Ended {done.sessions_ended} other session(s)."))
    mine = await operator_sessions.open_sessions(c.pool, me, now, c.settings.auth.session_idle_s)
    target = next((s for s in mine if s.handle == which and s.session_hash != caller.session.hashed), None)
    if target is None:
        return redirect(request, "/sessions", flash=("error", "Refused: no such other session of yours."))
    await operator_sessions.end_session(c.pool, target.session_hash, now, EndReason.ENDED_BY_OPERATOR)
    return redirect(request, "/sessions", flash=("ok", f"Session {which} ended."))


# -- overview -------------------------------------------------------------------------------


async def overview_page(request: Request) -> Response:
    c, caller = await viewing(request)
    ov = await inspection.overview(c.pool, c.clock.now())
    return render(request, "overview.html", caller, title="Overview", nav="overview", ov=ov,
                  chart=hourly_chart(ov.last_24h))


# -- escalations ----------------------------------------------------------------------------


def escalation_filters(request: Request) -> dict[str, Any]:
    return {"reason": text_query(request, "reason"), "provider_account": text_query(request, "account"),
            "acknowledged": bool_query(request, "acknowledged"),
            "open_only": request.query_params.get("resolved", "") not in ("yes", "include")}


async def escalations_page(request: Request) -> Response:
    c, caller = await viewing(request)
    filters = escalation_filters(request)
    items, more = await inspection.list_escalations(c.pool, **filters, limit=page_size(request),
                                                    cursor=text_query(request, "cursor"))
    kept = {k: v for k, v in request.query_params.items() if k != "cursor" and v}
    next_url = f"/escalations?{urlencode({**kept, 'cursor': more})}" if more else None
    return render(request, "escalations.html", caller, title="Escalations", nav="escalations", items=items,
                  next_url=next_url, query=dict(request.query_params), now=c.clock.now())


async def escalation_page(request: Request) -> Response:
    c, caller = await viewing(request)
    escalation_id: int = request.path_params["escalation_id"]
    found = await actions.escalation_detail(c.pool, escalation_id)
    named = conflicts.candidates({"detail": found.detail, "attempt_id": found.escalation.attempt_id})
    raw_event = found.detail.get("notification_event_id")  # the stored notification it is about, if any
    return render(request, "escalation.html", caller, title=f"Escalation {escalation_id}", nav="escalations",
                  d=found, e=found.escalation, is_conflict=found.escalation.reason in CONFLICT_REASONS,
                  candidates=[str(a) for a in named], now=c.clock.now(),
                  notification_id=raw_event if type(raw_event) is int else None)


async def escalation_ack(request: Request) -> Response:
    c, who, form = await acting(request)
    eid: int = request.path_params["escalation_id"]
    return await act(request, f"/escalations/{eid}", actions.acknowledge(c, who, eid, form.get("reason")))


async def escalation_resolve(request: Request) -> Response:
    c, who, form = await acting(request)
    eid: int = request.path_params["escalation_id"]
    return await act(request, f"/escalations/{eid}", actions.resolve(c, who, eid, form.get("reason")))


async def escalation_resolve_conflict(request: Request) -> Response:
    c, who, form = await acting(request)
    eid: int = request.path_params["escalation_id"]
    choice = form.get("owner", "").strip()
    try:
        owner = None if choice == "neither" else actions.parse_attempt_id(choice)
    except ActionRefused as exc:
        return redirect(request, f"/escalations/{eid}", flash=("error", f"Refused: {exc.message}"))
    return await act(request, f"/escalations/{eid}",
                     actions.resolve_conflict(c, who, eid, owner, form.get("reason")))


# -- attempts -------------------------------------------------------------------------------


def closable(detail: inspection.AttemptDetail) -> bool:
    """Show the close form only where the library could accept it: Unknown, with an open dead end."""
    return detail.attempt.state == "Unknown" and any(
        e.resolved_at is None and is_dead_end(e.reason)
        for e in detail.escalations)


AGES = {"": None, "1h": 3600, "24h": 86_400, "7d": 7 * 86_400}  # the list's "older than" choices


async def attempts_page(request: Request) -> Response:
    """Attempts newest first, filtered; an attempt id in ``attempt_id`` goes straight to its page."""
    c, caller = await viewing(request)
    raw = text_query(request, "attempt_id")
    if raw is not None:
        try:
            return redirect(request, f"/attempts/{UUID(raw)}")
        except ValueError:
            return redirect(request, "/attempts", flash=("error", f"{raw!r} is not an attempt id (a UUID)."))
    age = request.query_params.get("age", "")
    if age not in AGES:
        raise BadRequest(f"age must be one of {', '.join(a for a in AGES if a)}")
    filters = {"state": text_query(request, "state"), "account": text_query(request, "account"),
               "search": text_query(request, "q")}
    items, more = await actions.list_attempts(c, **filters, older_than_s=AGES[age], limit=page_size(request),
                                              cursor=text_query(request, "cursor"))
    kept = {k: v for k, v in request.query_params.items() if k != "cursor" and v}
    next_url = f"/attempts?{urlencode({**kept, 'cursor': more})}" if more else None
    accounts = [r["provider_account"] for r in await PROVIDER_ACCOUNTS.names.fetch(c.pool)]
    return render(request, "attempts.html", caller, title="Attempts", nav="attempts", items=items,
                  next_url=next_url, query=dict(request.query_params), states=[s.value for s in AttemptState],
                  accounts=accounts, ages=[a for a in AGES if a], now=c.clock.now())


async def attempt_page(request: Request) -> Response:
    c, caller = await viewing(request)
    attempt_id: UUID = request.path_params["attempt_id"]
    found = await actions.attempt_detail(c.pool, attempt_id)
    return render(request, "attempt.html", caller, title=f"Attempt {attempt_id}", nav="attempts", d=found,
                  a=found.attempt, closable=closable(found), now=c.clock.now(),
                  live_states=[s.value for s in LIVE_STATES], refunds=refund_form(c, found))


def refund_form(c: Console, d: inspection.AttemptDetail) -> dict[str, Any] | None:
    """What the refund form needs, when the payment has something left to refund; else None."""
    if d.headroom.refundable_minor <= 0:
        return None
    places = exponent(d.attempt.currency)
    return {"sends": c.sender is not None, "threshold_minor": c.settings.refund_approval_above_minor,
            "pattern": r"[0-9]+" if not places else rf"[0-9]+(\.[0-9]{{1,{places}}})?"}


async def attempt_close(request: Request) -> Response:
    c, who, form = await acting(request)
    attempt_id: UUID = request.path_params["attempt_id"]
    raw_version = form.get("expected_version", "").strip()
    expected = int(raw_version) if raw_version.isdigit() else None
    return await act(request, f"/attempts/{attempt_id}", actions.close_attempt(
        c, who, attempt_id, form.get("reason"), form.get("checked_at_provider"), expected))


async def attempt_refund(request: Request) -> Response:
    """Refund part or all of the payment: sent at once, or left for a second refunder's approval."""
    c, who, form = await refunding(request)
    attempt_id: UUID = request.path_params["attempt_id"]
    back = f"/attempts/{attempt_id}"
    try:
        currency = await actions.payment_currency(c, attempt_id)
        amount = actions.parse_refund_amount(form.get("amount"), currency)
    except ActionRefused as exc:
        if exc.kind == "not-found":
            raise
        return redirect(request, back, flash=("error", f"Refused: {exc.message}"))
    return await act(request, back, actions.refund(c, who, attempt_id, amount, form.get("reason")))


# -- refund approvals ------------------------------------------------------------------------


async def refund_approvals_page(request: Request) -> Response:
    """Refunds waiting for a second operator, oldest first; a refunder approves or rejects each."""
    c, caller = await viewing(request)
    pending = await inspection.pending_refunds(c.pool)
    return render(request, "refund_approvals.html", caller, title="Refund approvals", nav="refunds",
                  items=pending, threshold_minor=c.settings.refund_approval_above_minor)


def _back_to(form: dict[str, str], fallback: str) -> str:
    return safe_next(form.get("next") or fallback)


async def refund_approve(request: Request) -> Response:
    c, who, form = await refunding(request)
    approval_id: int = request.path_params["approval_id"]
    return await act(request, _back_to(form, "/refund-approvals"),
                     actions.approve_refund(c, who, approval_id, form.get("reason")))


async def refund_reject(request: Request) -> Response:
    c, who, form = await refunding(request)
    approval_id: int = request.path_params["approval_id"]
    return await act(request, _back_to(form, "/refund-approvals"),
                     actions.reject_refund(c, who, approval_id, form.get("reason")))


# -- unmatched notifications -----------------------------------------------------------------


async def unmatched_page(request: Request) -> Response:
    c, caller = await viewing(request)
    items, more = await inspection.unmatched_notifications(c.pool, limit=page_size(request),
                                                           cursor=text_query(request, "cursor"))
    return render(request, "unmatched.html", caller, title="Unmatched notifications", nav="notifications",
                  items=items, next_url=f"/notifications/unmatched?cursor={quote(more)}" if more else None)


async def stored_notification(c: Console, event_id: int) -> tuple[inspection.NotificationSummary, bool]:
    """The notification's identifiers (as the inspection shows them) and whether it was matched on arrival."""
    row = await inspection.READS.stored_notification.fetchrow(c.pool, event_id=event_id)
    if row is None:
        raise ActionRefused("not-found", f"no stored notification {event_id}")
    d = row["detail"]
    summary = inspection.NotificationSummary(row["event_id"], row["occurred_at"], row["provider_account"],
                                             row["notification_key"],
                                             *(d.get(f) for f in inspection.NOTIFICATION_FIELDS))
    return summary, row["attempt_id"] is not None


def attach_checks(n: inspection.NotificationSummary, a: inspection.AttemptSummary) -> list[dict[str, Any]]:
    """What the library will compare, shown before the operator confirms (it decides; this informs)."""
    checks = [{"what": "provider account", "notification": n.provider_account, "attempt": a.provider_account,
               "ok": n.provider_account == a.provider_account, "refuses": True}]
    if n.reference is not None:
        # Not a refusal: attaching is the operator saying which attempt the payment is about (a
        # mistyped reference is the usual case), so the library ignores the stated reference.
        checks.append({"what": "reference", "notification": n.reference, "attempt": a.client_reference,
                       "ok": n.reference == a.client_reference, "refuses": False})
    if n.provider_payment_id is not None and a.provider_payment_id is not None:
        checks.append({"what": "provider payment id", "notification": n.provider_payment_id,
                       "attempt": a.provider_payment_id,
                       "ok": n.provider_payment_id == a.provider_payment_id, "refuses": True})
    if n.amount_minor is not None:
        checks.append({"what": "amount", "notification": f"{n.amount_minor} {n.currency or ''}".strip(),
                       "attempt": f"{a.amount_minor} {a.currency}",
                       "ok": n.amount_minor == a.amount_minor and (n.currency or a.currency) == a.currency,
                       "refuses": True})
    return checks


async def attach_preview(request: Request) -> Response:
    c, caller = await viewing(request)
    event_id: int = request.path_params["event_id"]
    notification, matched = await stored_notification(c, event_id)
    raw = text_query(request, "attempt_id")
    detail = None
    preview = None
    problem = None
    if raw is not None:
        try:
            attempt_id = UUID(raw)
        except ValueError:
            problem = f"{raw!r} is not an attempt id (a UUID)"
        else:
            detail = await inspection.attempt_detail(c.pool, attempt_id)
            if detail is None:
                problem = f"no attempt {raw}"
            else:  # what the attach would do, by its own rules, as things stand (nothing is written)
                preview = await actions.preview_attach(c, event_id, attempt_id)
    return render(request, "attach.html", caller, title=f"Attach notification {event_id}",
                  nav="notifications",
                  n=notification, matched=matched, d=detail, preview=preview, problem=problem,
                  attempt_query=raw or "",
                  checks=attach_checks(notification, detail.attempt) if detail is not None else [])


async def attach_post(request: Request) -> Response:
    c, who, form = await acting(request)
    event_id: int = request.path_params["event_id"]
    back = f"/notifications/{event_id}/attach"
    try:
        attempt_id = actions.parse_attempt_id(form.get("attempt_id"))
    except ActionRefused as exc:
        return redirect(request, back, flash=("error", f"Refused: {exc.message}"))
    try:
        done = await actions.attach(c, who, event_id, attempt_id, form.get("reason"))
    except ActionRefused as exc:
        return redirect(request, f"{back}?attempt_id={attempt_id}",
                        flash=("error", f"Refused: {exc.message}"))
    return redirect(request, f"/attempts/{attempt_id}", flash=("ok", done.message))


# -- outbox ---------------------------------------------------------------------------------


async def outbox_page(request: Request) -> Response:
    c, caller = await viewing(request)
    ov = await inspection.overview(c.pool, c.clock.now())
    kind = text_query(request, "kind")
    items, more = await inspection.dead_letters(c.pool, kind=kind, limit=page_size(request),
                                                cursor=text_query(request, "cursor"))
    kept = {"kind": kind} if kind else {}
    next_url = f"/outbox?{urlencode({**kept, 'cursor': more})}" if more else None
    return render(request, "outbox.html", caller, title="Outbox", nav="outbox", backlog=ov.outbox,
                  items=items,
                  next_url=next_url, kind=kind or "", policy=OUTBOX_POLICY)


async def outbox_requeue(request: Request) -> Response:
    c, who, form = await acting(request)
    mid: int = request.path_params["message_id"]
    return await act(request, "/outbox", actions.requeue(c, who, mid, form.get("reason")))


async def outbox_skip(request: Request) -> Response:
    c, who, form = await acting(request)
    mid: int = request.path_params["message_id"]
    return await act(request, "/outbox", actions.skip(c, who, mid, form.get("reason")))


# -- settlements ----------------------------------------------------------------------------


def date_query(request: Request, name: str, default: date) -> date:
    raw = request.query_params.get(name, "").strip()
    if not raw:
        return default
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise BadRequest(f"{name} must be a date, YYYY-MM-DD") from None


def settlement_range(request: Request, c: Console) -> tuple[date, date]:
    """The page's ``from``/``to`` (inclusive), by default the last 30 days; refused when reversed."""
    first, today = settlements.default_range(c.clock.now())
    date_from, date_to = date_query(request, "from", first), date_query(request, "to", today)
    try:
        settlements.check_range(date_from, date_to)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    return date_from, date_to


def chart_days(request: Request) -> int:
    days = int_query(request, "days", settlements.DEFAULT_DAYS)
    if days not in settlements.CHART_WINDOWS:
        raise BadRequest(f"days must be one of {', '.join(map(str, settlements.CHART_WINDOWS))}")
    return days


async def settlement_charts(c: Console, account: str | None, days: int) -> list[DailyChart]:
    """One chart per settlement currency in the window (usually one); exceptions alone if none."""
    per_day = await settlements.daily(c.pool, provider_account=account, now=c.clock.now(), days=days)
    currencies: list[str | None] = [*sorted({cur for d in per_day for cur in d.fees_minor})]
    return [daily_chart(per_day, cur) for cur in currencies or [None]]


async def settlements_page(request: Request) -> Response:
    """Batches per account and day, the exceptions in no batch, and fees and exceptions per day."""
    c, caller = await viewing(request)
    account = text_query(request, "account")
    date_from, date_to = settlement_range(request, c)
    days, limit = chart_days(request), page_size(request)
    batches, more = await settlements.list_batches(c.pool, provider_account=account, date_from=date_from,
                                                   date_to=date_to, limit=limit,
                                                   cursor=text_query(request, "cursor"))
    missing, more_missing = await settlements.unbatched_exceptions(
        c.pool, provider_account=account, date_from=date_from, date_to=date_to, limit=limit,
        cursor=text_query(request, "missing_cursor"))
    kept = {k: v for k, v in request.query_params.items() if k not in ("cursor", "missing_cursor") and v}
    accounts = [r["provider_account"] for r in await PROVIDER_ACCOUNTS.names.fetch(c.pool)]
    return render(request, "settlements.html", caller, title="Settlements", nav="settlements",
                  batches=batches, missing=missing,
                  next_url=f"/settlements?{urlencode({**kept, 'cursor': more})}" if more else None,
                  next_missing_url=(f"/settlements?{urlencode({**kept, 'missing_cursor': more_missing})}"
                                    if more_missing else None),
                  account=account or "", accounts=accounts, date_from=date_from, date_to=date_to,
                  days=days, windows=settlements.CHART_WINDOWS,
                  charts=await settlement_charts(c, account, days))


async def settlement_batch_page(request: Request) -> Response:
    """One batch: its header, reported and computed totals, lines by kind, and its exceptions."""
    c, caller = await viewing(request)
    batch_id: int = request.path_params["batch_id"]
    batch = await actions.settlement_batch(c.pool, batch_id)
    items, more = await settlements.batch_exceptions(c.pool, batch_id, limit=page_size(request),
                                                     cursor=text_query(request, "cursor"))
    kept = {k: v for k, v in request.query_params.items() if k != "cursor" and v}
    next_url = f"/settlements/batches/{batch_id}?{urlencode({**kept, 'cursor': more})}" if more else None
    return render(request, "settlement_batch.html", caller, nav="settlements",
                  title=f"Settlement batch {batch.provider_batch_id}", b=batch, items=items,
                  next_url=next_url)


async def settlement_batch_export(request: Request) -> Response:
    """The batch's lines with what each matched, as CSV for the finance team's books."""
    c, _ = await viewing(request)
    batch_id: int = request.path_params["batch_id"]
    batch = await actions.settlement_batch(c.pool, batch_id)  # 404 for no such batch
    name = f"settlement-{batch.provider_account}-{batch.provider_batch_id}.csv".replace(":", "_")
    safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in name)
    return StreamingResponse(settlements.export_lines(c.pool, batch_id), media_type="text/csv; charset=utf-8",
                             headers={"Content-Disposition": f'attachment; filename="{safe}"'})


Handler = Callable[[Request], Awaitable[Response]]


def routes() -> list[Route]:
    return [
        Route("/login", login_get, methods=["GET"]),
        Route("/login", login_post, methods=["POST"]),
        Route("/logout", logout_post, methods=["POST"]),
        Route("/sessions", sessions_page, methods=["GET"]),
        Route("/sessions/end", sessions_end, methods=["POST"]),
        Route("/", overview_page, methods=["GET"]),
        Route("/escalations", escalations_page, methods=["GET"]),
        Route("/escalations/{escalation_id:id}", escalation_page, methods=["GET"]),
        Route("/escalations/{escalation_id:id}/ack", escalation_ack, methods=["POST"]),
        Route("/escalations/{escalation_id:id}/resolve", escalation_resolve, methods=["POST"]),
        Route("/escalations/{escalation_id:id}/resolve-conflict", escalation_resolve_conflict,
              methods=["POST"]),
        Route("/attempts", attempts_page, methods=["GET"]),
        Route("/attempts/{attempt_id:uuid}", attempt_page, methods=["GET"]),
        Route("/attempts/{attempt_id:uuid}/close", attempt_close, methods=["POST"]),
        Route("/attempts/{attempt_id:uuid}/refund", attempt_refund, methods=["POST"]),
        Route("/refund-approvals", refund_approvals_page, methods=["GET"]),
        Route("/refund-approvals/{approval_id:id}/approve", refund_approve, methods=["POST"]),
        Route("/refund-approvals/{approval_id:id}/reject", refund_reject, methods=["POST"]),
        Route("/notifications/unmatched", unmatched_page, methods=["GET"]),
        Route("/notifications/{event_id:id}/attach", attach_preview, methods=["GET"]),
        Route("/notifications/{event_id:id}/attach", attach_post, methods=["POST"]),
        Route("/settlements", settlements_page, methods=["GET"]),
        Route("/settlements/batches/{batch_id:id}", settlement_batch_page, methods=["GET"]),
        Route("/settlements/batches/{batch_id:id}/lines.csv", settlement_batch_export, methods=["GET"]),
        Route("/outbox", outbox_page, methods=["GET"]),
        Route("/outbox/{message_id:id}/requeue", outbox_requeue, methods=["POST"]),
        Route("/outbox/{message_id:id}/skip", outbox_skip, methods=["POST"]),
    ]
