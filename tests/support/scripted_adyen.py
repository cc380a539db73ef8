"""A real HTTP server that plays Adyen's Checkout API from a script: each test queues the exact
status, body and headers Adyen answers with, and reads back the exact requests it received.

Modelled on :mod:`tests.support.scripted_cardco` (its :class:`Reply` and :class:`Received`):
it is still a real server on a free port, so the client's whole wire path runs. Every
path is recorded, so a test can assert that nothing at all was sent.
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
MERCHANT_ACCOUNT = "PaycoreECOM"
PSP_REFERENCE = "NC6HT9CRT65ZGN82"


class ScriptedAdyen:
    """A Starlette app answering every path (``/v71/payments`` and anything else) from a queue."""

    def __init__(self) -> None:
        self.base_url = ""
        self.received: list[Received] = []
        self.replies: deque[Reply] = deque()
        self.events: list[asyncio.Event] = []
        methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
        self.app = Starlette(routes=[Route("/{path:path}", self._handle, methods=methods)])

    def reply(self, status: int = 200, body: Any = None, **kw: Any) -> Reply:
        r = Reply(status, body, **kw)
        if r.wait is not None:
            self.events.append(r.wait)
        self.replies.append(r)
        return r

    async def _handle(self, request: Request) -> Response:
        body = await request.body()
        self.received.append(Received(
            method=request.method, path=request.scope["raw_path"].decode("latin-1"),
            query=request.scope["query_string"],
            headers={k.decode("latin-1"): v.decode("latin-1") for k, v in request.scope["headers"]},
            body=body,
        ))
        reply = self.replies.popleft() if self.replies else Reply(
            500, {"status": 500, "errorCode": "unscripted", "message": "unscripted", "errorType": "internal"})
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


def payment_response(result_code: str = "Authorised", **overrides: Any) -> dict[str, Any]:
    """A ``/payments`` answer about the scripted attempt (override any field; ``None`` drops it)."""
    obj: dict[str, Any] = {
        "pspReference": PSP_REFERENCE, "resultCode": result_code, "merchantReference": REFERENCE,
        "amount": {"value": 4999, "currency": "EUR"},
    }
    if result_code in ("RedirectShopper", "IdentifyShopper", "ChallengeShopper"):
        obj["action"] = {"type": "threeDS2", "paymentMethodType": "scheme", "token": "scripted-token"}
    if result_code == "PresentToShopper":  # a voucher or QR code the shopper completes elsewhere
        obj["action"] = {"type": "voucher", "paymentMethodType": "multibanco", "reference": "501 422 652"}
    if result_code in ("Refused", "Error"):
        obj["refusalReason"] = "Refused"
        obj["refusalReasonCode"] = "2"
    obj.update(overrides)
    return {k: v for k, v in obj.items() if v is not None}


def error_body(status: int, code: str, error_type: str = "validation",
               message: str = "scripted") -> dict[str, Any]:
    return {"status": status, "errorCode": code, "message": message, "errorType": error_type}


@contextlib.asynccontextmanager
async def running_scripted_adyen() -> AsyncIterator[ScriptedAdyen]:
    """A :class:`ScriptedAdyen` served on a free loopback port until the block ends."""
    server = ScriptedAdyen()
    async with serve_asgi(server.app) as base_url:
        server.base_url = base_url
        try:
            yield server
        finally:
            for event in server.events:  # release held handlers so the server stops promptly
                event.set()
