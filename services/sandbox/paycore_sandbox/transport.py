"""How arrival and response faults wrap the processing of a ``/v1`` request.

``process(delay_s)`` is the server's real work; it receives the ``delay``
fault's duration so that a create can hold its key in progress for it (which
is what makes a concurrent same-key request see 409).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from paycore_sandbox.capture import CapturedRequest
from paycore_sandbox.errors import CARDCO_ANSWERS, FaultAnswers
from paycore_sandbox.faults import TRANSPORT_FAULTS, FaultContext, HoldGate
from paycore_sandbox.state import Sandbox, SandboxState

Process = Callable[[float], Awaitable[Response]]


class AbortedResponse(Response):
    """Starts a response and never finishes it, so the server drops the connection.

    Used only when a held request outlives ``hang_limit_s`` or a reset while its
    client is still waiting: the client must get no usable answer, not an
    error it could mistake for a contract status.
    """

    def __init__(self) -> None:
        super().__init__(b"", status_code=504)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 504,
                    "headers": [(b"content-length", b"1")]})


async def _until_disconnect(request: Request) -> None:
    # After the body is read, the server's receive() blocks until the client goes.
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def hold_open(request: Request, gate: HoldGate, limit_s: float) -> Response:
    """Hold the request open until the client gives up, a reset, or ``limit_s``."""
    gone = asyncio.ensure_future(_until_disconnect(request))
    released = asyncio.ensure_future(gate.sleep(limit_s))
    try:
        await asyncio.wait({gone, released}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        released.cancel()
    return AbortedResponse()


async def _half_of_first(body: AsyncIterable[str | bytes | memoryview]) -> AsyncIterator[bytes]:
    async for chunk in body:
        data = chunk.encode() if isinstance(chunk, str) else bytes(chunk)
        yield data[: max(1, len(data) // 2)]
        return


async def with_faults(request: Request, sandbox: Sandbox, state: SandboxState,
                      entry: CapturedRequest, ctx: FaultContext, raw_process: Process,
                      ok_status: int, answers: FaultAnswers = CARDCO_ANSWERS) -> Response:
    rule = state.faults.take(ctx, TRANSPORT_FAULTS)
    fault = rule.fault if rule is not None else None
    entry.fault = fault
    limit_s = sandbox.settings.hang_limit_s

    async def process(delay_s: float) -> Response:
        response = await raw_process(delay_s)
        entry.processed(response.status_code, answers.replayed(response))
        return response

    if rule is not None and fault == "drop_request":
        return await hold_open(request, state.gate, limit_s)
    if rule is not None and fault == "late_arrival":
        delay_s = rule.delay_s

        async def arrive_later() -> None:
            await state.late_arrivals.sleep(delay_s)  # the delay, or until released
            await process(0.0)

        sandbox.spawn(arrive_later())
        return await hold_open(request, state.gate, limit_s)
    if fault == "not_processed_503":
        answer = answers.not_processed().response()
        entry.processed(answer.status_code, False)
        return answer
    if fault == "rate_limit":
        answer = answers.rate_limited(1).response()
        entry.processed(answer.status_code, False)
        return answer

    response = await process(rule.delay_s if rule is not None and fault == "delay" else 0.0)

    if fault == "lose_response":
        return await hold_open(request, state.gate, limit_s)
    if fault == "malformed_body" and isinstance(response, StreamingResponse):
        # A streamed body (a settlement CSV): half of its first chunk, then nothing.
        return StreamingResponse(_half_of_first(response.body_iterator), status_code=ok_status,
                                 media_type=response.media_type)
    if fault == "malformed_body":
        # Half a JSON document: the status claims success, the body cannot parse.
        body = bytes(response.body)
        return Response(body[: max(1, len(body) // 2)], status_code=ok_status,
                        media_type="application/json")
    if fault == "empty_body":
        return Response(b"", status_code=ok_status, media_type="application/json")
    return response
