"""RFC 9457 problem details (``application/problem+json``).

Every 4xx and 5xx a paycore service returns is one of these, so a client can
tell "fix your request" from "retry later" without parsing prose.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from paycore.errors import PaycoreError

PROBLEM_JSON = "application/problem+json"
PROBLEM_BASE = "https://paycore.dev/problems/"


class Problem(PaycoreError):
    """Raise to answer with a problem document; caught by :func:`problem_handler`."""

    def __init__(
        self,
        status: int,
        slug: str,
        title: str,
        detail: str | None = None,
        *,
        headers: dict[str, str] | None = None,
        **extensions: Any,
    ) -> None:
        super().__init__(title)
        self.status = status
        self.slug = slug
        self.title = title
        self.detail = detail
        self.headers = headers or {}
        self.extensions = extensions

    def to_response(self, instance: str | None = None) -> Response:
        return problem_response(
            self.status, self.slug, self.title, self.detail, instance=instance,
            headers=self.headers, **self.extensions,
        )


def problem_response(
    status: int,
    slug: str,
    title: str,
    detail: str | None = None,
    *,
    instance: str | None = None,
    headers: dict[str, str] | None = None,
    **extensions: Any,
) -> Response:
    body: dict[str, Any] = {"type": PROBLEM_BASE + slug, "title": title, "status": status}
    if detail is not None:
        body["detail"] = detail
    if instance is not None:
        body["instance"] = instance
    body.update(extensions)
    return Response(orjson.dumps(body), status_code=status, media_type=PROBLEM_JSON, headers=headers)


async def problem_handler(request: Request, exc: Exception) -> Response:
    """Starlette exception handler for :class:`Problem`."""
    assert isinstance(exc, Problem)
    return exc.to_response(instance=request.url.path)


# The router's own answers, named like every other problem.
_HTTP_SLUGS = {404: "not-found", 405: "method-not-allowed"}


async def http_exception_handler(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (no route 404, wrong method 405) as problem+json, headers kept (Allow)."""
    assert isinstance(exc, HTTPException)
    status = exc.status_code
    try:
        title = HTTPStatus(status).phrase
    except ValueError:
        title = "HTTP error"
    return problem_response(status, _HTTP_SLUGS.get(status, "http-error"), title,
                            instance=request.url.path, headers=dict(exc.headers or {}))

