"""``paycore_http_request_duration_seconds``: every HTTP service's latency by route template.

A pure ASGI middleware (no body buffering, streaming untouched). The ``route``
label is the matched Starlette route's path template (``/orders/{order_id}/payment``),
never the raw path, so order and attempt ids never become label values; a request
no route matched is ``<unmatched>``. The method label is bounded the same way.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Histogram
from starlette.applications import Starlette
from starlette.types import ASGIApp, Message, Receive, Scope, Send

UNMATCHED = "<unmatched>"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# From a fast cached read to a payment that used its whole provider call budget.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def route_template(scope: Scope) -> str:
    """The matched route's path template (a Mount's prefix for what it serves), else ``<unmatched>``."""
    path = getattr(scope.get("route"), "path", None)
    return path if isinstance(path, str) and path else UNMATCHED


class RequestDurations:
    """Observes each HTTP request's duration, labelled by service, method, route template, status."""

    def __init__(self, app: ASGIApp, histogram: Histogram, service: str) -> None:
        self.app = app
        self.histogram = histogram
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # an exception before the response started is answered 500 by the server

        async def capture(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, capture)
        finally:
            method = scope["method"] if scope["method"] in METHODS else "other"
            self.histogram.labels(self.service, method, route_template(scope), str(status)).observe(
                time.perf_counter() - started)


def instrument(app: Starlette, service: str, registry: CollectorRegistry | None = None) -> CollectorRegistry:
    """Add the request-duration middleware (outermost) and keep ``registry`` for the admin server.

    Call last in an app factory so the histogram also times what the other
    middleware answer (503s of a database outage, 500s). Returns the registry
    the admin port's ``/metrics`` serves (``app.state.metrics_registry``).
    """
    registry = registry or CollectorRegistry()
    histogram = Histogram("paycore_http_request_duration_seconds",
                          "HTTP request duration by route template and status",
                          ["service", "method", "route", "status"], registry=registry, buckets=BUCKETS)
    app.add_middleware(RequestDurations, histogram=histogram, service=service)
    app.state.metrics_registry = registry
    return registry
