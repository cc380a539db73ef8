"""Each service's OpenAPI document is valid OpenAPI 3.1, is what ``GET /openapi.json`` serves,
and names exactly the routes the app serves: a route added without its documentation fails here,
and so does documentation of a route that is gone."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from openapi_spec_validator import OpenAPIV31SpecValidator
from starlette.applications import Starlette

from tests.openapi.apps import documented_operations, each_app, served_operations

APPS = each_app()


@pytest.mark.parametrize("service", sorted(APPS))
def test_the_document_is_valid_openapi_3_1(service: str) -> None:
    _, document, _ = APPS[service]
    assert document["openapi"] == "3.1.0"
    errors = [e.message for e in OpenAPIV31SpecValidator(document).iter_errors()]
    assert errors == []


@pytest.mark.parametrize("service", sorted(APPS))
def test_every_route_is_documented_and_every_documented_route_exists(service: str) -> None:
    app, document, only = APPS[service]
    served, documented = served_operations(app, only=only), documented_operations(document)
    assert served - documented == set(), "routes without documentation"
    assert documented - served == set(), "documentation of routes the app does not serve"


def test_the_webhook_intake_documents_one_route_per_provider() -> None:
    _, document, _ = APPS["webhooks"]
    assert {p for p in document["paths"] if p.startswith("/webhooks/")} == {
        "/webhooks/cardco", "/webhooks/stripe", "/webhooks/adyen"}


def test_every_problem_answer_is_problem_json() -> None:
    """RFC 9457: each 4xx/5xx of checkout and the intake is documented as application/problem+json."""
    for service in ("checkout", "webhooks"):
        _, document, _ = APPS[service]
        for path, ops in document["paths"].items():
            for method, op in ops.items():
                for status, response in op["responses"].items():
                    if status[0] in "45":
                        assert list(response["content"]) == ["application/problem+json"], (
                            service, method, path, status)


@pytest.mark.parametrize("service", sorted(APPS))
async def test_the_document_is_served_at_openapi_json(service: str) -> None:
    app, document, _ = APPS[service]
    served = await _get(app, "/openapi.json")
    assert served.headers["content-type"] == "application/json"
    assert served.json() == _roundtrip(document)


async def test_the_console_keeps_serving_it_under_api_v1_too() -> None:
    app, document, _ = APPS["console"]
    assert (await _get(app, "/api/v1/openapi.json")).json() == _roundtrip(document)


async def _get(app: Starlette, path: str) -> httpx.Response:
    # No lifespan: the document needs no database.
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://svc.test") as c:
        return await c.get(path)


def _roundtrip(document: dict[str, Any]) -> Any:
    import orjson

    return orjson.loads(orjson.dumps(document))


@pytest.mark.parametrize("service", sorted(APPS))
def test_the_documented_request_id_is_the_one_the_code_keeps(service: str) -> None:
    import re

    from paycore.http.request_id import request_id_from

    _, document, _ = APPS[service]
    shared = document["components"]

    def resolved(item: dict[str, Any], kind: str) -> dict[str, Any]:
        ref = item.get("$ref", "")
        return shared[kind][ref.rsplit("/", 1)[1]] if ref else item

    asked = [resolved(p, "parameters") for op in _operations(document) for p in op.get("parameters", [])]
    answered = [resolved(h, "headers") for op in _operations(document) for r in op["responses"].values()
                for name, h in r.get("headers", {}).items() if name == "X-Request-Id"]
    patterns = {p["schema"]["pattern"] for p in asked if p.get("name") == "X-Request-Id"}
    patterns |= {h["schema"]["pattern"] for h in answered}
    assert len(patterns) == 1 and asked and answered, patterns
    [pattern] = patterns
    for candidate in ("case-42.a:b_c", "a b", "x" * 129, "ünïcode", "semi;colon", "x" * 128):
        kept = request_id_from([(b"x-request-id", candidate.encode())]) == candidate
        assert bool(re.fullmatch(pattern.strip("^$"), candidate)) is kept, candidate


def _operations(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [op for ops in document["paths"].values() for op in ops.values() if isinstance(op, dict)]
