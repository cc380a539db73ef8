"""Capture of every ``/v1`` request, so tests can check what a client sent.

The Authorization header is reduced to the key's mode prefix (``sk_test`` /
``sk_live``): captured requests are served without auth and must not leak keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

_SECRET_HEADERS = frozenset({"authorization", "x-api-key"})


def redact_authorization(value: str) -> str:
    token = value.removeprefix("Bearer ").strip()
    for prefix in ("sk_test", "sk_live"):
        if token.startswith(prefix + "_"):
            return prefix
    return "REDACTED"


@dataclass
class CapturedRequest:
    seq: int
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: str
    time: float
    # Filled in as the request is handled, so tests can see what the server
    # did even when the client never got an answer (drop, lose, late arrival).
    fault: str | None = None
    status: int | None = None  # what processing produced; None: not (yet) processed
    replayed: bool = False

    def processed(self, status: int, replayed: bool) -> None:
        self.status = status
        self.replayed = replayed

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "method": self.method, "path": self.path,
                "query": self.query, "headers": self.headers, "body": self.body,
                "time": self.time, "fault": self.fault, "status": self.status,
                "replayed": self.replayed}


class RequestLog:
    def __init__(self) -> None:
        self._entries: list[CapturedRequest] = []

    def record(self, request: Request, body: bytes, now: float) -> CapturedRequest:
        headers: dict[str, str] = {}
        for name, value in request.headers.items():  # names are lower-case
            # X-API-Key is how the Adyen dialect authenticates: never captured either.
            shown = redact_authorization(value) if name in _SECRET_HEADERS else value
            headers[name] = f"{headers[name]}, {shown}" if name in headers else shown
        entry = CapturedRequest(
            seq=len(self._entries) + 1, method=request.method, path=request.url.path,
            query=request.url.query, headers=headers,
            body=body.decode("utf-8", errors="replace"), time=now,
        )
        self._entries.append(entry)
        return entry

    def all(self) -> list[CapturedRequest]:
        return list(self._entries)
