"""Serving a service's OpenAPI 3.1 document at ``GET /openapi.json``, and the parts every
service's document shares (problem details, the request id header, the operational routes).

Each service builds its document in Python next to its routes (no YAML at run time); the
document is serialised once, when the app is made. ``tests/openapi`` checks that each is valid
OpenAPI 3.1, names exactly the app's routes, and that the live service answers as it says.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from paycore.http.problems import PROBLEM_JSON
from paycore.http.request_id import KEPT_PATTERN

OPENAPI_PATH = "/openapi.json"
REQUEST_ID = "X-Request-Id"

PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "RFC 9457 problem details; extension members may follow.",
    "required": ["type", "title", "status"],
    "properties": {
        "type": {"type": "string", "format": "uri"},
        "title": {"type": "string"},
        "status": {"type": "integer", "minimum": 400, "maximum": 599},
        "detail": {"type": "string"},
        "instance": {"type": "string"},
        "errors": {"type": "array", "items": {
            "type": "object", "required": ["field", "message"],
            "properties": {"field": {"type": "string"}, "message": {"type": "string"}}}},
    },
}
RETRY_AFTER_HEADER: dict[str, Any] = {
    "description": "seconds to wait before retrying", "schema": {"type": "string", "pattern": "^[0-9]+$"}}
REQUEST_ID_HEADER: dict[str, Any] = {
    "description": "the request's id: the caller's X-Request-Id when it was kept, else a new one",
    "required": False, "schema": {"type": "string", "pattern": f"^{KEPT_PATTERN}$"}}
REQUEST_ID_PARAMETER: dict[str, Any] = {
    "name": REQUEST_ID, "in": "header", "required": False,
    "description": "an id for the request, echoed in the response and written to the logs; one that does not "
                   "match is replaced by a fresh id (32 hex digits)",
    "schema": {"type": "string", "pattern": f"^{KEPT_PATTERN}$"}}


def problem(description: str, *, retry_after: bool = False,
            headers: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A response that is an ``application/problem+json`` document."""
    all_headers: dict[str, Any] = {REQUEST_ID: {"$ref": "#/components/headers/RequestId"}}
    if retry_after:
        all_headers["Retry-After"] = {"$ref": "#/components/headers/RetryAfter"}
    all_headers.update(headers or {})
    return {"description": description, "headers": all_headers,
            "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}}


def json_response(description: str, schema: Mapping[str, Any], *, media_type: str = "application/json",
                  headers: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {"description": description,
            "headers": {REQUEST_ID: {"$ref": "#/components/headers/RequestId"}, **(headers or {})},
            "content": {media_type: {"schema": dict(schema)}}}


def operation(summary: str, responses: Mapping[str, Any], *, security: list[Any] | None = None,
              parameters: list[Any] | None = None, **more: Any) -> dict[str, Any]:
    """One operation; every one takes the optional X-Request-Id header."""
    op: dict[str, Any] = {"summary": summary,
                          "parameters": [{"$ref": "#/components/parameters/RequestId"}, *(parameters or [])],
                          "responses": dict(responses), **more}
    if security is not None:
        op["security"] = security
    return op


def operational_paths(*, readiness: bool = True) -> dict[str, Any]:
    """``/healthz``, ``/readyz`` and ``/openapi.json``, as every paycore service serves them
    (``/metrics`` is on the admin port, not in the public API)."""
    status = {"type": "object", "required": ["status"], "properties": {"status": {"type": "string"}}}
    paths: dict[str, Any] = {
        "/healthz": {"get": operation("The process answers", {
            "200": json_response("alive", status), "500": problem("unexpected error")}, security=[])},
        OPENAPI_PATH: {"get": operation("This document", {
            "200": json_response("the OpenAPI 3.1 document", {"type": "object"}),
            "500": problem("unexpected error")}, security=[])},
    }
    if readiness:
        paths["/readyz"] = {"get": operation("Ready: the database answers", {
            "200": json_response("ready", status),
            "500": problem("unexpected error"),
            "503": problem("the database does not answer", retry_after=True)}, security=[])}
    return paths


def shared_components() -> dict[str, Any]:
    """The components the helpers above refer to; a service adds its own to these."""
    return {
        "schemas": {"Problem": PROBLEM_SCHEMA},
        "headers": {"RequestId": REQUEST_ID_HEADER, "RetryAfter": RETRY_AFTER_HEADER},
        "parameters": {"RequestId": REQUEST_ID_PARAMETER},
    }


def openapi_route(document: Mapping[str, Any]) -> Route:
    """``GET /openapi.json`` answering ``document`` (serialised once)."""
    body = orjson.dumps(document)

    async def openapi(request: Request) -> Response:
        return Response(body, media_type="application/json")

    endpoint: Callable[[Request], Awaitable[Response]] = openapi
    return Route(OPENAPI_PATH, endpoint, methods=["GET"])
