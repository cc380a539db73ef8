"""Who is asking, and may they: session cookies and CSRF for browsers, bearer tokens for scripts.

A browser carries the signed session (:mod:`paycore_console.credentials`) in a cookie that is
HttpOnly, SameSite=Strict and Secure (unless ``PAYCORE_CONSOLE_INSECURE_COOKIES`` for http on
loopback). Every POST of a browser carries the CSRF token bound to its session: a form field on
pages, the ``X-CSRF-Token`` header on the API. A script sends ``Authorization: Bearer`` with an
identity-provider token and no CSRF token: nothing a browser sends on its own carries one.

The sign-in form itself is a POST before any session exists; it carries a token bound to a
random pre-sign-in cookie instead, so another site cannot sign a browser in as someone else.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import asyncpg
from starlette.requests import Request
from starlette.responses import Response

from paycore.operators import Role
from paycore_console.credentials import (
    ConsoleAuth,
    CsrfRefused,
    Principal,
    Session,
    require,
)

SESSION_COOKIE = "paycore_console_session"
LOGIN_COOKIE = "paycore_console_login"
FLASH_COOKIE = "paycore_console_flash"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
LOGIN_NONCE_BYTES = 16


@dataclass(frozen=True)
class Caller:
    """An authenticated request: who, and the session when it came with one (for its CSRF token)."""

    principal: Principal
    session: Session | None

    @property
    def can_act(self) -> bool:
        return self.principal.role.allows(Role.OPERATOR)

    @property
    def can_refund(self) -> bool:
        return self.principal.role.allows(Role.REFUNDER)


def bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


async def authenticate(request: Request, auth: ConsoleAuth, db: asyncpg.Pool, now: datetime, *,
                       bearer_allowed: bool) -> Caller:
    """The caller by bearer token (the API only) or by session cookie; raises the library's refusals."""
    token = bearer_token(request) if bearer_allowed else None
    if token is not None:
        return Caller(await auth.bearer_principal(token), None)
    session = await auth.verify_session(db, request.cookies.get(SESSION_COOKIE), now)
    return Caller(session.principal, session)


def check_csrf(auth: ConsoleAuth, caller: Caller, submitted: str | None) -> None:
    """Every POST of a session carries its token; a bearer token needs none (no browser sends one)."""
    if caller.session is None:
        if caller.principal.via != "bearer":
            raise CsrfRefused("no session to check the CSRF token against")
        return
    auth.check_csrf(caller.session, submitted)


def may_act(caller: Caller) -> Principal:
    """The principal, if its role may change anything; else :class:`~.credentials.Forbidden`."""
    return require(Role.OPERATOR, caller.principal)


def may_refund(principal: Principal) -> Principal:
    """``principal``, if its role may send money back (refunds, and deciding on them); else
    :class:`~.credentials.Forbidden`."""
    return require(Role.REFUNDER, principal)


# -- the sign-in form's own token -------------------------------------------------------------


def _login_session(nonce: str, now: datetime) -> Session:
    # A stand-in session whose id is the pre-sign-in nonce: the library's CSRF token is then
    # bound to that cookie exactly as a form's token is bound to its session.
    return Session(Principal("sign-in", Role.VIEWER, "session"), nonce, now, now)


def new_login_nonce() -> str:
    return secrets.token_urlsafe(LOGIN_NONCE_BYTES)


def login_csrf_token(auth: ConsoleAuth, nonce: str, now: datetime) -> str:
    return auth.csrf_token(_login_session(nonce, now))


def check_login_csrf(auth: ConsoleAuth, request: Request, submitted: str | None, now: datetime) -> None:
    nonce = request.cookies.get(LOGIN_COOKIE)
    if not nonce:
        raise CsrfRefused("the sign-in form has expired; load it again")
    auth.check_csrf(_login_session(nonce, now), submitted)


# -- cookies ----------------------------------------------------------------------------------


def set_cookie(response: Response, name: str, value: str, *, secure: bool, max_age: int | None = None,
               samesite: Literal["strict", "lax"] = "strict") -> None:
    response.set_cookie(name, value, max_age=max_age, path="/", httponly=True, secure=secure,
                        samesite=samesite)


def clear_cookie(response: Response, name: str, *, secure: bool) -> None:
    response.delete_cookie(name, path="/", httponly=True, secure=secure, samesite="strict")


def client_address(request: Request) -> str:
    return request.client.host if request.client is not None else "?"
