"""The ASGI application: routes, error handlers and lifespan."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from paycore_sandbox import control, settlement_api, settlement_control
from paycore_sandbox.dialects import DIALECT_NAMES, ClaimedRoute, dialect_named
from paycore_sandbox.errors import ApiError
from paycore_sandbox.settings import SandboxSettings
from paycore_sandbox.state import Sandbox


async def _http_error(request: Request, exc: Exception) -> Response:
    # Unknown paths and methods get contract-shaped errors too.
    assert isinstance(exc, HTTPException)
    code = {404: "resource_missing", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return ApiError(exc.status_code, "invalid_request", code, str(exc.detail),
                    headers=exc.headers).response()


def create_app(settings: SandboxSettings | None = None) -> Starlette:
    """The sandbox as an ASGI app; ``app.state.sandbox`` is its runtime."""
    sandbox = Sandbox(settings or SandboxSettings.default())

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        # Release held requests, stop timers and webhook deliveries, close the
        # webhook client, so shutdown never hangs.
        await sandbox.aclose()

    # Every dialect's provider API (Cardco's /v1/payments, Stripe's /v1/payment_intents,
    # Adyen's /v71/payments). A route that takes only the requests carrying its wire's header
    # (Stripe's /v1/refunds, a path Cardco's wire has too) is tried before the others.
    routes: list[BaseRoute] = sorted(
        (route for name in DIALECT_NAMES for route in dialect_named(name).routes()),
        key=lambda route: not isinstance(route, ClaimedRoute))
    routes += [
        # Cardco's settlements (the other dialects' reports are in their own routes).
        Route("/v1/settlements", settlement_api.list_settlements, methods=["GET"]),
        Route("/v1/settlements/{settlement_id}/lines", settlement_api.settlement_lines,
              methods=["GET"]),
        Route("/_sandbox/settlements", settlement_control.list_batches, methods=["GET"]),
        Route("/_sandbox/settlements/close", settlement_control.close, methods=["POST"]),
        Route("/_sandbox/settlements/lines", settlement_control.add_lines, methods=["POST"]),
        Route("/_sandbox/settlements/raw", settlement_control.add_raw, methods=["POST"]),
        Route("/_sandbox/settlements/totals", settlement_control.set_totals, methods=["POST"]),
        Route("/_sandbox/accounts", control.accounts, methods=["GET"]),
        Route("/_sandbox/payments", control.ledger, methods=["GET"]),
        Route("/_sandbox/payments/{payment_id}/action", control.payment_action,
              methods=["POST"]),
        Route("/_sandbox/payments/{payment_id}/refund", control.payment_refund,
              methods=["POST"]),
        Route("/_sandbox/refunds", control.refunds, methods=["GET"]),
        Route("/_sandbox/refunds/{movement_id}/fail", control.refund_fail, methods=["POST"]),
        Route("/_sandbox/refunds/{movement_id}/settle", control.refund_settle,
              methods=["POST"]),
        Route("/_sandbox/captures", control.captures, methods=["GET"]),
        Route("/_sandbox/captures/{movement_id}/settle", control.capture_settle,
              methods=["POST"]),
        Route("/_sandbox/faults", control.add_faults, methods=["POST"]),
        Route("/_sandbox/faults", control.list_faults, methods=["GET"]),
        Route("/_sandbox/faults", control.clear_faults, methods=["DELETE"]),
        Route("/_sandbox/late-arrivals/release", control.release_late_arrivals, methods=["POST"]),
        Route("/_sandbox/clock", control.advance_clock, methods=["POST"]),
        Route("/_sandbox/clock", control.get_clock, methods=["GET"]),
        Route("/_sandbox/reset", control.reset, methods=["POST"]),
        Route("/_sandbox/requests", control.captured_requests, methods=["GET"]),
        Route("/_sandbox/events", control.events, methods=["GET"]),
        Route("/_sandbox/webhooks/endpoints", control.list_endpoints, methods=["GET"]),
        Route("/_sandbox/webhooks/endpoints", control.add_endpoint, methods=["POST"]),
        Route("/_sandbox/webhooks/endpoints", control.clear_endpoints, methods=["DELETE"]),
        Route("/_sandbox/webhooks/deliveries", control.webhook_deliveries, methods=["GET"]),
        Route("/_sandbox/webhooks/pending", control.webhook_pending, methods=["GET"]),
        Route("/_sandbox/webhooks/events/{event_id}/redeliver", control.redeliver_event,
              methods=["POST"]),
        Route("/_sandbox/webhooks/batch", control.batch_events, methods=["POST"]),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={ApiError: control.api_error_handler, HTTPException: _http_error},
        lifespan=lifespan,
    )
    app.state.sandbox = sandbox
    return app
