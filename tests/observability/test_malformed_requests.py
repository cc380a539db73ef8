"""What `paycore serve` answers to bytes that are not HTTP/1.1 its parser accepts.

httptools (C) parses every request; what it refuses never reaches the app, so the answer
comes from ``paycore.http.protocol``: a problem document with a fresh request id, the
connection closed, nothing of the request in the logs. The same server then goes on
answering well-formed requests.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import httpx
import orjson

from harness.servers import free_port
from tests.observability.test_admin_ports import CARDCO, answered
from tests.support.stack import JWT_SECRET

SECRET_IN_HEADER = "sk_live_must_never_be_logged"

CONTROL_BYTE = f"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-Id: a\x01{SECRET_IN_HEADER}\r\n\r\n"
MALFORMED = {
    "control byte in a header value": CONTROL_BYTE,
    "two conflicting Content-Length headers": (
        "POST /orders HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 5\r\n"
        f"Authorization: Bearer {SECRET_IN_HEADER}\r\n\r\n{{}}"),
    "a request line that is not one": f"NOT HTTP AT ALL {SECRET_IN_HEADER}\r\n\r\n",
}


async def raw_exchange(port: int, request: bytes) -> tuple[str, dict[str, str], bytes]:
    """Write ``request`` on a fresh connection; read until the server closes it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        async with asyncio.timeout(10):
            answer = await reader.read(-1)  # to EOF: the server must close the connection
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip()
               for name, value in (line.split(":", 1) for line in header_lines)}
    return status_line, headers, body


async def test_a_request_the_parser_refuses_gets_a_problem_document_and_a_closed_connection(
        db_dsn: str, tmp_path: Path) -> None:
    public, admin = free_port(), free_port()
    log_path = tmp_path / "checkout.log"
    env = {**os.environ, "PAYCORE_LOG_LEVEL": "INFO", "PAYCORE_DATABASE_URL": db_dsn,
           "PAYCORE_JWT_SECRET": JWT_SECRET, "PAYCORE_CARDCO_BASE_URL": "http://127.0.0.1:9", **CARDCO,
           "PAYCORE_METRICS_PORT": str(admin)}
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "paycore_cli", "serve", "checkout",
                                                    "--port", str(public), env=env, stdout=log, stderr=log)
        try:
            async with httpx.AsyncClient(timeout=5) as http:
                await answered(http, f"http://127.0.0.1:{public}/healthz", proc)
                await answered(http, f"http://127.0.0.1:{admin}/healthz", proc)
                for port in (public, admin):
                    for what, request in MALFORMED.items():
                        status_line, headers, body = await raw_exchange(port, request.encode("latin-1"))
                        assert status_line == "HTTP/1.1 400 Bad Request", (port, what, status_line)
                        assert headers["content-type"] == "application/problem+json", (port, what)
                        assert headers["connection"] == "close", (port, what)
                        assert re.fullmatch(r"[0-9a-f]{32}", headers["x-request-id"]), (port, what)
                        assert int(headers["content-length"]) == len(body), (port, what)
                        problem = orjson.loads(body)
                        assert problem["type"] == "https://paycore.dev/problems/malformed-request", what
                        assert problem["status"] == 400 and problem["title"] == "Malformed HTTP request"
                        assert SECRET_IN_HEADER not in body.decode(), what
                    # The server goes on answering well-formed requests.
                    assert (await http.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200
                # Each refusal has a request id of its own.
                ids = {(await raw_exchange(public, CONTROL_BYTE.encode("latin-1")))[1]["x-request-id"]
                       for _ in range(2)}
                assert len(ids) == 2
        finally:
            proc.terminate()
            async with asyncio.timeout(20):
                await proc.wait()
    logged = log_path.read_text(errors="replace")
    assert "Invalid HTTP request received." in logged  # the refusal is logged ...
    assert SECRET_IN_HEADER not in logged  # ... and nothing of what was refused
