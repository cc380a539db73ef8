"""Refusals as answers: RFC 9457 problem+json under ``/api/``, an HTML page (or a redirect) elsewhere.

A refusal is never a 500: not signed in (401, or the sign-in page), a CSRF token or a role that
does not allow the action (403), what the library refused (409 when the state changed or the
action does not apply, 422 for bad input, 404 for nothing by that id).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import asyncpg
import jinja2
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import Scope

from paycore.http.outage import RETRY_AFTER_S, unavailable_response
from paycore.http.problems import problem_response
from paycore_console.actions import ActionRefused, BadQuery
from paycore_console.auth import CSRF_FIELD, Caller, authenticate
from paycore_console.context import console_of
from paycore_console.credentials import (
    AuthKeysUnavailable,
    ConsoleAuthError,
    CsrfRefused,
    Forbidden,
    OperatorTokenRefused,
    SessionRefused,
)
from paycore_console.inspection import InvalidCursor

ACTION_STATUS = {"conflict": 409, "invalid": 422, "not-found": 404}


class BadRequest(ValueError):
    """A query or form value the console cannot use (a limit, an id that is not a number)."""


def is_api(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def _status_and_slug(exc: Exception) -> tuple[int, str, str]:
    if isinstance(exc, SessionRefused | OperatorTokenRefused):
        return 401, "unauthenticated", "Sign in first"
    if isinstance(exc, CsrfRefused):
        return 403, "csrf", "The CSRF token is missing or not valid for this session"
    if isinstance(exc, Forbidden):
        return 403, "forbidden", "Your role does not allow this"
    if isinstance(exc, AuthKeysUnavailable):
        return 503, "auth-unavailable", "The identity provider's keys could not be fetched; retry shortly"
    if isinstance(exc, ActionRefused):
        status = ACTION_STATUS[exc.kind]
        titles = {409: "Refused: the state does not allow this (it may have changed underneath)",
                  422: "The request is not valid", 404: "Not found"}
        return status, {409: "refused", 422: "invalid", 404: "not-found"}[status], titles[status]
    if isinstance(exc, InvalidCursor | BadRequest | BadQuery):
        return 400, "bad-request", "Bad request"
    return 500, "internal", "Internal error"


def render_error(templates: jinja2.Environment, status: int, title: str, detail: str | None,
                 headers: dict[str, str] | None = None, *, caller: Any = None,
                 csrf: str | None = None) -> Response:
    page = templates.get_template("error.html").render(
        title=title, detail=detail, status=status, caller=caller, csrf=csrf, csrf_field=CSRF_FIELD,
        flash=None, nav=None)
    return HTMLResponse(page, status_code=status, headers=headers)


async def error_page(request: Request, status: int, title: str, detail: str | None) -> Response:
    """The error as a page; a signed-in operator keeps the navigation and the Sign out button."""
    c = console_of(request)
    caller: Caller | None = None
    try:
        caller = await authenticate(request, c.auth, c.pool, c.clock.now(), bearer_allowed=False)
    except (ConsoleAuthError, asyncpg.PostgresError, OSError):  # no session, or no database: a plain page
        caller = None
    csrf = c.auth.csrf_token(caller.session) if caller is not None and caller.session is not None else None
    return render_error(c.templates, status, title, detail, caller=caller, csrf=csrf)


DATABASE_UNAVAILABLE = (
    "The console cannot reach its database, so this page cannot be shown, and an action you just sent "
    "may or may not have been applied. Wait a few seconds, reload the page, and look at the record before "
    "acting again.")


def outage_answer(templates: jinja2.Environment) -> Callable[[Scope], Response]:
    """The 503 while the database is unreachable: problem+json under ``/api/``; for a person, a page
    that says what is known (nothing was shown; an action may or may not have been applied)."""

    def answer(scope: Scope) -> Response:
        path = str(scope.get("path", ""))
        if path.startswith("/api/"):
            return unavailable_response(path)
        return render_error(templates, 503, "Database unavailable", DATABASE_UNAVAILABLE,
                            headers={"Retry-After": str(RETRY_AFTER_S)})

    return answer


async def refused(request: Request, exc: Exception) -> Response:
    status, slug, title = _status_and_slug(exc)
    detail = exc.message if isinstance(exc, ActionRefused) else str(exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    if is_api(request):
        return problem_response(status, slug, title, detail, instance=request.url.path, headers=headers)
    if status == 401:
        # A page without a (valid) session: the sign-in page, then back here.
        target = request.url.path if request.method == "GET" else "/"
        return RedirectResponse(f"/login?next={quote(target, safe='/')}", status_code=303)
    return await error_page(request, status, title, detail)


async def http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    try:
        title = HTTPStatus(exc.status_code).phrase
    except ValueError:
        title = "HTTP error"
    if is_api(request):
        slug = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http-error")
        return problem_response(exc.status_code, slug, title, exc.detail if exc.detail != title else None,
                                instance=request.url.path, headers=dict(exc.headers or {}))
    return await error_page(request, exc.status_code, title, exc.detail if exc.detail != title else None)


HANDLERS: dict[type[Exception], Callable[[Request, Exception], Awaitable[Response]]] = {
    cls: refused for cls in (SessionRefused, OperatorTokenRefused, CsrfRefused, Forbidden,
                             AuthKeysUnavailable, ActionRefused, InvalidCursor, BadRequest, BadQuery)
}
