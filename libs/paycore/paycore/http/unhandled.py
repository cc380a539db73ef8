"""What a request that raised past every exception handler is answered: one middleware, every service.

An unreachable database is the 503 of :mod:`paycore.http.outage` (``database-unavailable``
problem+json with ``Retry-After``, or a service's own page), said once per outage; anything
else is a 500 ``internal`` problem, its traceback logged once. Either way the keep-alive
connection survives. A response already started cannot be replaced, so that case is re-raised
for the server to end the connection.

Errors a service expects (:class:`~paycore.http.problems.Problem`, the router's 404 and 405,
the console's refusals) stay Starlette ``exception_handlers``: they are chosen by class. These
two are not: a database outage is known by an exception's chain (a closed connection's
``InterfaceError`` raised from the socket's error), not its class, and Starlette hands a handler
for ``Exception`` to its outermost error middleware, which re-raises after answering, so the
server logs a second traceback and closes a connection the client did nothing wrong on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from paycore.http.outage import DatabaseOutage, is_database_unavailable, problem_answer
from paycore.http.problems import problem_response


class UnhandledErrorMiddleware:
    """A database outage's 503 or one logged 500, for any exception no handler answered (pure ASGI).

    Added first (``app.add_middleware``), so it sits inside Starlette's own error middleware and
    outside everything a route runs. ``outage`` is the service's view of its database;
    ``answer`` makes the outage's 503 (:func:`~paycore.http.outage.problem_answer` unless a
    service serves people pages too: it must keep the status and Retry-After).
    """

    def __init__(self, app: ASGIApp, logger: logging.Logger, outage: DatabaseOutage,
                 answer: Callable[[Scope], Response] = problem_answer) -> None:
        self.app = app
        self.log = logger
        self.outage = outage
        self.answer = answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watch_start(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watch_start)
        except Exception as exc:
            if started:
                raise
            if is_database_unavailable(exc):
                self.outage.seen(exc)
                answer = self.answer(scope)
            else:
                self.log.exception("unhandled error on %s %s", scope.get("method"), scope.get("path"))
                answer = problem_response(500, "internal", "Internal error",
                                          "The request failed; it is safe to retry.",
                                          instance=scope.get("path"))
            await answer(scope, receive, send)
