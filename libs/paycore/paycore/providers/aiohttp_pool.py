"""aiohttp's connection pool under httpx's transport: the wire every provider call leaves by.

The adapters build ``httpx`` requests and read ``httpx`` responses; what moves the bytes is
this pool in place of httpcore's. Measured with the same sandbox (``docs/performance.md``,
sixth pass), httpcore cost ~1 ms of CPU per call and this pool ~0.3 ms, and a checkout makes
one such call per payment. Everything above the pool is httpx's own: the request it builds,
its mapping of transport failures to ``httpx.TransportError`` (so :func:`paycore.providers.http.send_once`
reads every failure as before), the OpenTelemetry client span, which wraps
``httpx.AsyncHTTPTransport.handle_async_request``.

What a payment request needs from a pool, and how this one keeps it:

- **No retry, ever.** aiohttp resends a GET, HEAD, PUT or DELETE once when a kept-alive
  connection turns out closed; that is switched off (``_retry_connection``), so a request is
  sent at most once, as with httpcore's ``retries=0``;
- **No bytes of its own.** aiohttp adds ``User-Agent``, ``Accept``, ``Accept-Encoding`` and
  ``Content-Type`` when a request lacks them, and decompresses bodies: both are off, so what
  is sent is what httpx built and what is read is what the provider sent;
- **No answer for another request.** The whole body is read here before the connection goes
  back; a response cut short, or a read cancelled by the call's budget, closes the connection
  instead (aiohttp releases a connection with unread bytes only by closing it);
- **Every failure a transport error**, named as httpcore would name it, so outcome reasons
  (``provider.transport.ReadError``, ...) stay what they were: see :func:`_transport_error`.
  The call's deadline is not the pool's: it sets no timeout unless the request carries one.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from types import TracebackType

import aiohttp
import httpcore
import httpx
from multidict import CIMultiDict
from yarl import URL

# Headers aiohttp would add to a request that lacks them.
_NO_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")


def _transport_error(exc: aiohttp.ClientError) -> httpcore.NetworkError | httpcore.TimeoutException | \
        httpcore.ProtocolError | httpcore.UnsupportedProtocol:
    """The httpcore exception httpx maps to the ``httpx.TransportError`` it would have raised."""
    message = str(exc) or type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpcore.ConnectTimeout(message)
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return httpcore.ReadTimeout(message)
    if isinstance(exc, aiohttp.ClientConnectorError):  # refused, DNS, TLS handshake, certificate
        return httpcore.ConnectError(message)
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError
                  | aiohttp.ClientResponseError):
        # Closed before a whole answer, a body cut short, a status line or header aiohttp cannot parse.
        return httpcore.RemoteProtocolError(message)
    if isinstance(exc, aiohttp.InvalidURL | aiohttp.NonHttpUrlClientError):
        return httpcore.UnsupportedProtocol(message)
    # A reset or another socket error once connected, and anything else aiohttp raises.
    return httpcore.ReadError(message)


async def _single_chunk(body: bytes) -> AsyncIterator[bytes]:
    yield body


class AiohttpPool:
    """The httpcore connection-pool interface httpx's transport calls, answered by aiohttp.

    :param max_connections: Connections open at once, as ``httpx.Limits.max_connections``.
    :param keepalive_expiry: Seconds an idle connection is kept for reuse.
    :param verify: The TLS trust for ``https`` origins, as httpx's ``verify`` (``False``: none, tests only).
    """

    def __init__(self, *, max_connections: int, keepalive_expiry: float,
                 verify: ssl.SSLContext | bool = True) -> None:
        self._max_connections = max_connections
        self._keepalive_expiry = keepalive_expiry
        # The trust httpx's own transport would have used (certifi's bundle for ``True``).
        self._ssl = httpx.create_ssl_context(verify=verify)
        self._session: aiohttp.ClientSession | None = None

    def _session_now(self) -> aiohttp.ClientSession:
        # Created on first use: a session belongs to the running event loop.
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._max_connections, limit_per_host=0,
                                             keepalive_timeout=self._keepalive_expiry, ssl=self._ssl)
            session = aiohttp.ClientSession(
                connector=connector, auto_decompress=False, trust_env=False,
                skip_auto_headers=_NO_AUTO_HEADERS, cookie_jar=aiohttp.DummyCookieJar(),
                timeout=aiohttp.ClientTimeout(total=None))
            session._retry_connection = False  # sent at most once: see the module's docstring
            self._session = session
        return self._session

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        """Send ``request`` once and read its whole answer; raises httpcore's exceptions only."""
        url = request.url
        host = url.host.decode("ascii")
        if ":" in host:
            host = f"[{host}]"  # an IPv6 literal
        scheme, path = url.scheme.decode("ascii"), url.target.decode("ascii")
        target = URL(f"{scheme}://{host}:{url.port}{path}", encoded=True)  # as httpx encoded it
        headers = CIMultiDict((name.decode("latin-1"), value.decode("latin-1"))
                              for name, value in request.headers)
        body = b"".join([chunk async for chunk in request.stream])  # type: ignore[union-attr]
        limits = request.extensions.get("timeout", {})
        try:
            async with self._session_now().request(
                request.method.decode("ascii"), target, headers=headers, data=body or None,
                allow_redirects=False, compress=None, chunked=None,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=limits.get("connect"),
                                              sock_read=limits.get("read")),
            ) as response:
                content = await response.read()
                raw_headers = list(response.raw_headers)
                status, reason = response.status, response.reason or ""
        except aiohttp.ClientError as exc:
            raise _transport_error(exc) from exc
        extensions = {"http_version": b"HTTP/1.1", "reason_phrase": reason.encode("latin-1")}
        return httpcore.Response(status, headers=raw_headers, content=_single_chunk(content),
                                 extensions=extensions)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> AiohttpPool:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None = None,
                        exc_value: BaseException | None = None,
                        traceback: TracebackType | None = None) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return (f"AiohttpPool(max_connections={self._max_connections},"
                f" keepalive_expiry={self._keepalive_expiry})")


def aiohttp_transport(*, max_connections: int, keepalive_expiry: float,
                      verify: ssl.SSLContext | bool = True) -> httpx.AsyncHTTPTransport:
    """httpx's own ``AsyncHTTPTransport`` with :class:`AiohttpPool` in place of httpcore's pool."""
    transport = httpx.AsyncHTTPTransport(http1=True, http2=False, retries=0, verify=verify)
    transport._pool = AiohttpPool(max_connections=max_connections,  # type: ignore[assignment]
                                  keepalive_expiry=keepalive_expiry, verify=verify)
    return transport
