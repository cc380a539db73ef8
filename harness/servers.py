"""Real servers on free loopback ports: run an ASGI app in-process, wait for one to answer.

Tests talk to services over real sockets: the sandbox, checkout and webhooks are
exercised exactly as a storefront or provider would reach them. Benchmarks start
them as child processes and wait for them here.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import uvicorn

# The library's own port picker (``paycore up`` and the chaos run use it): one way to choose a port.
from paycore_devstack._process import free_port

__all__ = ["free_port", "serve_asgi", "stop_process", "wait_http"]


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


async def wait_http(url: str, within_s: float = 30) -> None:
    """Poll ``url`` until the server behind it answers at all (any status); a deadline, no fixed sleep."""
    deadline = time.monotonic() + within_s
    async with httpx.AsyncClient() as http:
        while True:
            try:
                await http.get(url)
                return
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)


def stop_process(proc: subprocess.Popen[bytes], within_s: float = 10) -> None:
    """SIGTERM ``proc`` and reap it; SIGKILL if it has not exited within ``within_s``."""
    proc.terminate()
    try:
        proc.wait(timeout=within_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=within_s)
