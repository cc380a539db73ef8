"""Run an ASGI app as a real HTTP server (uvicorn) on a free loopback port.

Tests talk to services over real sockets: the sandbox, checkout and webhooks are
exercised exactly as a storefront or provider would reach them.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import uvicorn


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def serve_asgi(app: Any, *, port: int | None = None) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1 in the current event loop; yields its base URL."""
    port = port or free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="on",
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        # Poll with a deadline for the server to accept connections; no fixed sleep.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not server.started:
            if task.done():
                task.result()
            if loop.time() > deadline:
                raise TimeoutError("uvicorn did not start within 10 s")
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=5)
