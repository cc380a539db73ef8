"""The HTTP/1.1 parser every paycore server runs: httptools (C), its refusals as problem+json.

uvicorn's pure-Python parser (h11) cost the webhook intake about a sixth of its CPU per
delivery (docs/performance.md, "Fourth pass"); httptools, the C parser (llhttp) that
Node.js uses, does the same work for a fraction. It is also the stricter of the two: a
request it cannot parse (a control byte in a header value, a bad request line, a
conflicting ``Content-Length``) is refused before any application code runs, which is
what a payment service wants of a request it would otherwise have to guess about.

uvicorn answers such a request with a bare ``text/plain`` 400. :class:`ProblemHttpToolsProtocol`
answers it like every other paycore error instead: an RFC 9457 document
(``malformed-request``), a fresh ``X-Request-Id`` (there is no trustworthy one to echo),
and ``Connection: close``, since the rest of the stream cannot be framed. Nothing of the
request is logged or echoed: it may carry a secret in the header that broke it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any, Final

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from paycore.http.problems import PROBLEM_BASE, PROBLEM_JSON

MALFORMED_SLUG: Final = "malformed-request"
MALFORMED_TITLE: Final = "Malformed HTTP request"
MALFORMED_DETAIL: Final = ("The request could not be parsed as HTTP/1.1 (for example a control character "
                           "in a header value); it was not processed. The connection is closed.")


def malformed_request_answer(request_id: str, default_headers: Iterable[tuple[bytes, bytes]] = ()) -> bytes:
    """The whole HTTP/1.1 response to a request the parser refused (``default_headers``: the
    server's own, e.g. ``date``)."""
    body = orjson.dumps({"type": PROBLEM_BASE + MALFORMED_SLUG, "title": MALFORMED_TITLE, "status": 400,
                         "detail": MALFORMED_DETAIL})
    head = [b"HTTP/1.1 400 Bad Request\r\n"]
    head += [name + b": " + value + b"\r\n" for name, value in default_headers]
    head.append(f"content-type: {PROBLEM_JSON}\r\ncontent-length: {len(body)}\r\n"
                f"x-request-id: {request_id}\r\nconnection: close\r\n\r\n".encode("ascii"))
    return b"".join(head) + body


class ProblemHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, answering what it cannot parse with a problem document.

    Pass the class as ``uvicorn.Config(http=...)``; uvicorn already logs the refusal
    (``Invalid HTTP request received.``, nothing of the request) before calling this.
    """

    def send_400_response(self, msg: str) -> None:
        self.transport.write(malformed_request_answer(uuid.uuid4().hex, self.server_state.default_headers))
        self.transport.close()


class AdminHttpToolsProtocol(ProblemHttpToolsProtocol):
    """The admin port's: no access line per request (every scrape would be one). Set per
    connection: uvicorn's ``access_log=False`` would silence the ``uvicorn.access`` logger for the
    whole process, the service's own request lines with it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.access_log = False
