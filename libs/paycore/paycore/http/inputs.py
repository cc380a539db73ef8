"""Text PostgreSQL cannot store, refused at the door: a NUL in the path or in a query parameter.

The bodies have this rule (:mod:`paycore.http.bodies`, :mod:`paycore.pgtext`); a query
parameter reached asyncpg as it came, and the console's ``?reason=…%00`` answered 500
(``CharacterNotInRepertoireError``). Every service refuses such a request with a 400
problem+json before any route runs. Header values need no rule: the HTTP parser already
refuses a control byte in one (:mod:`paycore.http.protocol`).
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Receive, Scope, Send

from paycore.http.problems import problem_response
from paycore.pgtext import text_problem


def unstorable_part(scope: Scope) -> str | None:
    """``"path"`` or ``"query parameter NAME"`` when that text holds what PostgreSQL refuses."""
    if text_problem(str(scope.get("path", ""))):
        return "path"
    # As Starlette reads them: percent-decoded as UTF-8, undecodable bytes replaced.
    for name, value in parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True):
        if text_problem(name) or text_problem(value):
            return f"query parameter {name!r}" if not text_problem(name) else "a query parameter's name"
    return None


class UnstorableTextRefused:
    """Answers 400 ``invalid-text`` to a request whose path or query holds a NUL character."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            where = unstorable_part(scope)
            if where is not None:
                answer = problem_response(400, "invalid-text", "Invalid text in the request",
                                          f"The {where} holds a NUL character, which no field accepts.")
                await answer(scope, receive, send)
                return
        await self.app(scope, receive, send)
