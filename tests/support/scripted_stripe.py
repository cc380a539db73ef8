"""A real HTTP server that plays Stripe's PaymentIntents API from a script.

Like :mod:`tests.support.scripted_cardco` (whose :class:`Reply` and :class:`Received`
it shares): each test queues the exact status, body and headers Stripe answers with and
reads back the exact requests received, on a free loopback port, so the SDK's whole
wire path (StripeClient → HTTPXClient → httpx → socket) runs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from harness.servers import serve_asgi
from tests.support.scripted_cardco import Received, Reply

REFERENCE = "ORD-5521-a1"
INTENT_ID = "pi_3Pq9c2Lk"


class ScriptedStripe:
    """A Starlette app answering ``/v1/payment_intents…`` from a queue of replies."""

    def __init__(self) -> None:
        self.base_url = ""
        self.received: list[Received] = []
        self.replies: deque[Reply] = deque()
        self.events: list[asyncio.Event] = []
        self.app = Starlette(
            routes=[
                Route("/v1/payment_intents", self._handle, methods=["POST"]),
                Route("/v1/payment_intents/{rest:path}", self._handle, methods=["GET"]),
            ]
        )

    def reply(self, status: int = 200, body: Any = None, **kw: Any) -> Reply:
        r = Reply(status, body, **kw)
        if r.wait is not None:
            self.events.append(r.wait)
        self.replies.append(r)
        return r

    def hang(self) -> asyncio.Event:
        """The next request is received, then held until the returned event is set."""
        event = asyncio.Event()
        self.reply(200, intent(), wait=event)
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
        reply = (
            self.replies.popleft()
            if self.replies
            else Reply(500, {"error": {"type": "api_error", "message": "unscripted"}})
        )
        if reply.wait is not None:
            await reply.wait.wait()
        content = reply.content()
        if reply.fail_mid_stream:

            async def broken() -> AsyncIterator[bytes]:
                yield content[: len(content) // 2]
                raise RuntimeError("scripted: the response breaks mid-body")

            return StreamingResponse(
                broken(), status_code=reply.status, headers=reply.headers, media_type="application/json"
            )
        return Response(
            content, status_code=reply.status, headers=reply.headers, media_type="application/json"
        )


def intent(status: str = "succeeded", **overrides: Any) -> dict[str, Any]:
    """A PaymentIntent as Stripe answers it (the fields the adapter reads, and some it ignores)."""
    obj: dict[str, Any] = {
        "id": INTENT_ID,
        "object": "payment_intent",
        "amount": 4999,
        "currency": "eur",
        "livemode": False,
        "status": status,
        "metadata": {"paycore_reference": REFERENCE},
        "created": 1795900000,
        "client_secret": INTENT_ID + "_secret_x",
        "last_payment_error": None,
        "next_action": None,
        "latest_charge": "ch_1",
    }
    obj.update(overrides)
    return obj


def error(type_: str, code: str | None = None, **fields: Any) -> dict[str, Any]:
    """A Stripe error body (https://docs.stripe.com/api/errors)."""
    err: dict[str, Any] = {"type": type_, "message": "scripted"}
    if code is not None:
        err["code"] = code
    err.update(fields)
    return {"error": err}


@contextlib.asynccontextmanager
async def running_scripted_stripe() -> AsyncIterator[ScriptedStripe]:
    """A :class:`ScriptedStripe` served on a free loopback port until the block ends."""
    server = ScriptedStripe()
    async with serve_asgi(server.app) as base_url:
        server.base_url = base_url
        try:
            yield server
        finally:
            for event in server.events:
                event.set()
