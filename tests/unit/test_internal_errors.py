"""An unexpected error is one 500 problem, logged once, and the keep-alive connection survives."""

from __future__ import annotations

import logging

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from harness.servers import serve_asgi
from paycore.http.outage import DatabaseOutage
from paycore.http.unhandled import UnhandledErrorMiddleware

log = logging.getLogger("paycore.test-internal-errors")


async def broken(request: Request) -> Response:
    raise RuntimeError("a bug, not a provider outcome")


async def fine(request: Request) -> Response:
    return JSONResponse({"ok": True})


async def test_an_unexpected_error_is_one_500_problem_logged_once_and_the_connection_is_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = Starlette(routes=[Route("/broken", broken), Route("/fine", fine)])
    app.add_middleware(UnhandledErrorMiddleware, logger=log, outage=DatabaseOutage(log))
    caplog.set_level(logging.INFO)
    peers: list[tuple[str, int]] = []

    async def remember_peer(response: httpx.Response) -> None:
        stream = response.extensions["network_stream"]
        peers.append(stream.get_extra_info("client_addr"))

    async with serve_asgi(app) as url, httpx.AsyncClient(
            base_url=url, event_hooks={"response": [remember_peer]}) as client:
        failed = await client.get("/broken")
        after = await client.get("/fine")
    assert failed.status_code == 500 and failed.headers["content-type"] == "application/problem+json"
    assert failed.json()["type"].endswith("/internal") and failed.json()["instance"] == "/broken"
    assert after.status_code == 200
    assert peers[0] == peers[1]  # the same keep-alive connection: the server did not close it
    tracebacks = [r for r in caplog.records if r.exc_info is not None]
    assert len(tracebacks) == 1 and tracebacks[0].name == log.name
