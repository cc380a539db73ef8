"""``X-Request-Id``: one id per request, returned on every response and bound into the log context.

A client's id is kept when it is sane (1-128 of ``A-Z a-z 0-9 . _ : -``) so a caller can
follow its own id through our logs; anything else is replaced by a fresh one, so no raw
client bytes ever reach a log line or a response header. Pure ASGI, outermost: the 503s
and 500 problems the inner middleware answer carry the id too.
"""

from __future__ import annotations

import re
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from paycore.logs import bind_log_context

HEADER = "X-Request-Id"
_HEADER_KEY = HEADER.lower().encode()
# What a caller's id may be to be kept (the OpenAPI documents say the same: paycore.http.openapi).
KEPT_PATTERN = "[A-Za-z0-9._:-]{1,128}"
_SANE = re.compile(KEPT_PATTERN.encode())


def request_id_from(headers: list[tuple[bytes, bytes]]) -> str:
    """The client's id if sane, else a new uuid4 hex."""
    for key, value in headers:
        if key.lower() == _HEADER_KEY and _SANE.fullmatch(value):
            return value.decode("ascii")
    return uuid.uuid4().hex


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_from(scope.get("headers", []))
        scope.setdefault("state", {})["request_id"] = request_id
        echoed = (_HEADER_KEY, request_id.encode("ascii"))

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", []) if h[0].lower() != _HEADER_KEY]
                message = {**message, "headers": [*headers, echoed]}
            await send(message)

        with bind_log_context(request_id=request_id):
            await self.app(scope, receive, send_with_id)
