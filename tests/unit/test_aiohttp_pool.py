"""The pool under every provider call (paycore.providers.aiohttp_pool), tried against a raw TCP server.

What the provider clients' own tests cannot see from above httpx: that a request goes out
exactly as httpx built it and at most once. Transport failures, budgets and reuse after a
budget are the clients' tests (``test_cardco_client.py``, ``test_stripe_client.py``,
``test_adyen_client.py``), which run through this pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from paycore.clock import SystemClock
from paycore.providers.aiohttp_pool import AiohttpPool
from paycore.providers.http import no_retry_client, send_once
from tests.support.certificates import authority

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


@contextlib.asynccontextmanager
async def raw_server(*, answers_per_connection: int,
                     tls: ssl.SSLContext | None = None) -> AsyncIterator[tuple[str, list[bytes]]]:
    """Reads requests head by head (and their bodies); answers the first ``answers_per_connection``
    on each connection with 200 ``{}``, then closes it without answering the next one."""
    received: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            for answered in range(answers_per_connection + 1):
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                received.append(head + await reader.readexactly(length))
                if answered == answers_per_connection:
                    break
                writer.write(OK)
                await writer.drain()
        except asyncio.IncompleteReadError:
            pass  # the client closed the connection
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=tls)
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{server.sockets[0].getsockname()[1]}", received
    finally:
        server.close()
        await server.wait_closed()


def header_lines(raw: bytes) -> list[tuple[str, str]]:
    head = raw.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")[1:]
    return sorted((name.lower(), value.strip()) for name, value in (line.split(":", 1) for line in head))


async def test_provider_clients_use_the_aiohttp_pool_under_httpxs_own_transport() -> None:
    # httpxs transport class stays (the OpenTelemetry client span wraps its method).
    async with no_retry_client() as client:
        transport = client._transport
        assert type(transport) is httpx.AsyncHTTPTransport
        assert isinstance(transport._pool, AiohttpPool)


async def test_a_request_goes_out_exactly_as_httpx_built_it() -> None:
    async with raw_server(answers_per_connection=5) as (url, received), no_retry_client() as client:
        post = client.build_request("POST", f"{url}/v1/payments?x=a%2Fb", content=b'{"amount": 1}',
                                    headers={"Idempotency-Key": "k-1", "Authorization": "Bearer t"})
        get = client.build_request("GET", f"{url}/v1/payments/pay_1")
        for request in (post, get):
            response = await send_once(client, request, SystemClock(), 10, "caller")
            assert isinstance(response, httpx.Response) and response.json() == {}
    assert [r.split(b"\r\n", 1)[0] for r in received] == [b"POST /v1/payments?x=a%2Fb HTTP/1.1",
                                                           b"GET /v1/payments/pay_1 HTTP/1.1"]
    # No header of aiohttp's own (a Content-Type for bytes, a second User-Agent), none dropped.
    for raw, request in zip(received, (post, get), strict=True):
        built = sorted((name.decode().lower(), value.decode()) for name, value in request.headers.raw)
        assert header_lines(raw) == built
    assert received[0].endswith(b'\r\n\r\n{"amount": 1}')


async def test_a_lookup_on_a_connection_the_provider_closed_is_not_resent() -> None:
    # aiohttp resends an idempotent request once when a kept-alive connection turns out closed;
    # a provider call is sent at most once, whatever its method.
    async with raw_server(answers_per_connection=1) as (url, received), no_retry_client() as client:
        first = await send_once(client, client.build_request("GET", f"{url}/v1/payments/pay_1"),
                                SystemClock(), 10, "caller")
        assert isinstance(first, httpx.Response) and first.status_code == 200
        again = await send_once(client, client.build_request("GET", f"{url}/v1/payments/pay_1"),
                                SystemClock(), 10, "caller")
    assert again == "provider.transport.RemoteProtocolError"
    assert len(received) == 2  # the second was sent once, on the kept-alive connection, not again


async def test_tls_is_verified_against_the_trust_given_and_refused_otherwise(tmp_path: Path) -> None:
    ca = authority(tmp_path)
    issued = ca.issue(tmp_path, "provider")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(issued.certificate, issued.key)
    trust = ssl.create_default_context(cafile=str(ca.certificate))
    async with raw_server(answers_per_connection=5, tls=tls) as (url, received):
        async with no_retry_client(verify=trust) as client:
            trusted = await send_once(client, client.build_request("GET", f"{url}/v1/payments/pay_1"),
                                      SystemClock(), 10, "caller")
        assert isinstance(trusted, httpx.Response) and trusted.status_code == 200
        async with no_retry_client() as client:  # the default trust does not know this CA
            untrusted = await send_once(client, client.build_request("GET", f"{url}/v1/payments/pay_1"),
                                        SystemClock(), 10, "caller")
    assert untrusted == "provider.transport.ConnectError"
    assert len(received) == 1  # nothing was sent to the server it could not verify
