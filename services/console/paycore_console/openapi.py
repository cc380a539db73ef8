"""The OpenAPI 3.1 document of the console's API, made from the same table as its routes."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from paycore.http.openapi import json_response, problem, shared_components
from paycore_console.ids import MAX_ID
from paycore_console.schemas import Components

if TYPE_CHECKING:
    from paycore_console.api import Endpoint

PARAM = re.compile(r"\{(\w+)(?::(\w+))?\}")
CONVERTER_SCHEMA: dict[str | None, dict[str, Any]] = {
    "id": {"type": "integer", "minimum": 0, "maximum": MAX_ID},
    "uuid": {"type": "string", "format": "uuid"}, None: {"type": "string"}}
PROBLEM = problem("RFC 9457 problem details")


def openapi_path(path: str) -> str:
    """``/a/{id:int}`` -> ``/a/{id}``."""
    return PARAM.sub(lambda m: "{" + m.group(1) + "}", path)


def _operation_id(method: str, path: str) -> str:
    """``get_escalations_escalation_id``; a route outside /api/v1 (the root /openapi.json) says so."""
    api = path.startswith("/api/v1/")
    words = re.sub(r"\W+", "_", openapi_path(path).removeprefix("/api/v1/")).strip("_")
    return f"{method.lower()}_{words}" if api else f"{method.lower()}_root_{words}"


def _query_schema(json_type: str) -> dict[str, Any]:
    return CONVERTER_SCHEMA["uuid"] if json_type == "uuid" else {"type": json_type}


def _operation(e: Endpoint, components: Components) -> dict[str, Any]:
    params: list[dict[str, Any]] = [{"$ref": "#/components/parameters/RequestId"}]
    params += [
        {"name": m.group(1), "in": "path", "required": True, "schema": CONVERTER_SCHEMA[m.group(2)]}
        for m in PARAM.finditer(e.path)]
    params += [{"name": n, "in": "query", "required": n in e.required_query, "description": d,
                "schema": _query_schema(t)} for n, t, d in e.query]
    answer = e.answer(components) if e.answer is not None else {"type": "object"}
    op: dict[str, Any] = {
        "summary": e.summary,
        "operationId": _operation_id(e.method, e.path),
        "responses": {"200": json_response("OK", answer), "default": PROBLEM},
        "parameters": params,
    }
    if e.public:
        op["security"] = []
    if e.method == "POST":
        op["requestBody"] = {"required": bool(e.body), "content": {"application/json": {"schema": {
            "type": "object",
            "properties": {n: ({"type": [t, "null"]} if n == "owner_attempt_id" else {"type": t})
                           | {"description": a} for n, (t, a, _) in e.body.items()},
            "required": [n for n, (_, _, req) in e.body.items() if req]}}}}
        op["responses"] |= {"403": PROBLEM, "409": PROBLEM, "422": PROBLEM}
    return op


def document(endpoints: Iterable[Endpoint]) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    components = Components()  # the answers' dataclasses, one schema each
    for e in endpoints:
        paths.setdefault(openapi_path(e.path), {})[e.method.lower()] = _operation(e, components)
    shared = shared_components()
    return {
        "openapi": "3.1.0",
        "info": {"title": "paycore operator console API", "version": "1",
                 "description": "The reads and actions of the operator console. Every action is recorded "
                                "with the operator who took it. Browsers: the session cookie and its CSRF "
                                "token in X-CSRF-Token on every POST; scripts: an operator's bearer token."},
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}, {"session": []}],
        "paths": paths,
        "components": {
            **shared,
            "schemas": {**shared["schemas"], **dict(sorted(components.schemas.items()))},
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT",
                           "description": "an identity-provider token for PAYCORE_CONSOLE_AUDIENCE with the "
                                          "role claim (viewer, operator or refunder)"},
                "session": {"type": "apiKey", "in": "cookie", "name": "paycore_console_session",
                            "description": "the console's session; POSTs also need X-CSRF-Token"},
            },
        },
    }
