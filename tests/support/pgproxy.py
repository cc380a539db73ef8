"""A TCP proxy in front of the real PostgreSQL that a test can cut and restore: a database outage.

``cut()`` closes every open connection and stops listening, so new connections
are refused, as when PostgreSQL is killed; ``restore()`` listens again on the
same port. The port is chosen by the OS when the proxy first starts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit


class CuttableProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.accepted = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    def dsn(self, dsn: str) -> str:
        """``dsn`` with its host and port replaced by the proxy's."""
        parts = urlsplit(dsn)
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = (userinfo + "@" if userinfo else "") + f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    async def cut(self) -> None:
        """Refuse new connections and close the open ones (both directions)."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()  # an RST, like a dead server's kernel would send
        self._writers.clear()

    async def restore(self) -> None:
        await self.start()

    @property
    def is_cut(self) -> bool:
        return self._server is None

    async def restore_if_cut(self) -> None:
        if self.is_cut:
            await self.restore()

    async def close(self) -> None:
        await self.cut()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(self.target_host,
                                                                             self.target_port)
        except OSError:
            client_writer.transport.abort()
            return
        self._writers.update((client_writer, upstream_writer))
        pumps = [asyncio.create_task(self._pump(client_reader, upstream_writer)),
                 asyncio.create_task(self._pump(upstream_reader, client_writer))]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
                self._tasks.discard(task)
            for writer in (client_writer, upstream_writer):
                self._writers.discard(writer)
                writer.transport.abort()

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()


@contextlib.asynccontextmanager
async def proxy_to(dsn: str) -> AsyncIterator[CuttableProxy]:
    """A started proxy in front of the server ``dsn`` names (closed on exit)."""
    parts = urlsplit(dsn)
    proxy = CuttableProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()
