"""Prometheus metrics endpoint for a service-local registry."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import Response


def metrics_endpoint(registry: CollectorRegistry) -> Callable[[Request], Awaitable[Response]]:
    """A Starlette endpoint exposing ``registry`` in the Prometheus text format."""

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return metrics
