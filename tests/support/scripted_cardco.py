"""A real HTTP server that plays Cardco from a script: each test queues the exact status,
body and headers the provider answers with, and reads back the exact requests it received.

For what the sandbox cannot be made to say (a payment of another account, a reply
naming another reference): it is still a real server on a free port, so the client's
whole wire path runs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from harness.servers import serve_asgi

REFERENCE = "ORD-5521-a1"


@dataclass
class Reply:
    """One scripted answer."""

    status: int = 201
    body: bytes | dict[str, Any] | list[Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    wait: asyncio.Event | None = None  # hold the answer until the test sets it
    fail_mid_stream: bool = False  # send part of the body, then break the response

    def content(self) -> bytes:
        if self.body is None:
            return b""
        if isinstance(self.body, bytes):
            return self.body
        return orjson.dumps(self.body)


@dataclass
class Received:
    method: str
    path: str
    query: bytes
    headers: dict[str, str]  # lower-case names, exactly as received
    body: bytes


class ScriptedCardco:
    """A Starlette app answering /v1/payments from a queue of replies."""

    def __init__(self) -> None:
        self.base_url = ""
        self.received: list[Received] = []
        self.replies: deque[Reply] = deque()
        self.events: list[asyncio.Event] = []
        self.app = Starlette(
            routes=[
                Route("/v1/payments", self._handle, methods=["GET", "POST"]),
                # POST: a payment's capture or cancel, answered from the script as well.
                Route("/v1/payments/{payment_id:path}", self._handle, methods=["GET", "POST"]),
            ]
        )

    def reply(self, status: int = 201, body: Any = None, **kw: Any) -> Reply:
        r = Reply(status, body, **kw)
        if r.wait is not None:
            self.events.append(r.wait)
        self.replies.append(r)
        return r

    def hang(self) -> asyncio.Event:
        """The next request is received, then held until the returned event is set."""
        event = asyncio.Event()
        self.reply(201, payment_object(), wait=event)
        return event

    async def _handle(self, request: Request) -> Response:
        body = await request.body()
        self.received.append(
            Received(
                method=request.method,
                path=request.scope["raw_path"].decode("latin-1"),
                query=request.scope["query_string"],
                headers={k.decode("latin-1"): v.decode("latin-1") for k, v in request.scope["headers"]},
                body=body,
            )
        )
        reply = self.replies.popleft() if self.replies else Reply(500, {"error": {"code": "unscripted"}})
        if reply.wait is not None:
            await reply.wait.wait()
        content = reply.content()
        if reply.fail_mid_stream:

            async def broken() -> AsyncIterator[bytes]:
                yield content[: len(content) // 2]
                raise RuntimeError("scripted: the response breaks mid-stream")

            return StreamingResponse(broken(), status_code=reply.status, headers=reply.headers,
                                     media_type="application/json")
        return Response(content, status_code=reply.status, headers=reply.headers,
                        media_type="application/json")


def payment_object(status: str = "succeeded", **overrides: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "id": "pay_3f9c", "object": "payment", "account": "acct_store", "livemode": False,
        "amount": 4999, "currency": "EUR", "reference": REFERENCE, "status": status,
        "decline_code": None, "amount_refunded": 0, "next_action": None, "created": 1795900000,
    }
    obj.update(overrides)
    return obj


@contextlib.asynccontextmanager
async def running_scripted_cardco() -> AsyncIterator[ScriptedCardco]:
    """A :class:`ScriptedCardco` served on a free loopback port until the block ends."""
    server = ScriptedCardco()
    async with serve_asgi(server.app) as base_url:
        server.base_url = base_url
        try:
            yield server
        finally:
            for event in server.events:  # release held handlers so the server stops promptly
                event.set()
