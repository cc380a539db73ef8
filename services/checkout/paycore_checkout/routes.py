"""Checkout's HTTP surface.

``POST /orders/{id}/payment`` answers as the reference's endpoint does: 200 for
Succeeded, Failed and NotApplied and for a current customer action; 202 with the
status URL while confirmation is pending; 503 + Retry-After only when the
recorded attempt could not be moved to Started (nothing was sent). The status
GET is observation only and never sends.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from paycore import currencies
from paycore.domain import FINAL_STATES, AttemptState
from paycore.errors import InvalidPaymentMethod
from paycore.http.bodies import read_json_object
from paycore.http.outage import not_ready
from paycore.http.problems import Problem, problem_response
from paycore.orders import Order, OrderNotFound, OrderNotPayable, cancel_order, create_order, get_order
from paycore.payment_methods import checked_payment_method
from paycore.providers.base import PaymentMethod
from paycore_checkout import inbound_idempotency as idem
from paycore_checkout.payments import PaymentStatus

MAX_BODY = 64 * 1024
ORDER_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
START_RETRY_AFTER_S = 2
PAY_ENDPOINT = "POST /orders/{order_id}/payment"
CREATE_ENDPOINT = "POST /orders"


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


def strict_fields(body: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise Problem(400, "invalid-body", "Unknown fields", f"Unknown fields: {', '.join(unknown)}.",
                      errors=[{"field": f, "message": "unknown field"} for f in unknown])


def order_id_of(request: Request) -> str:
    order_id: str = request.path_params["order_id"]
    if not ORDER_ID.match(order_id):
        raise Problem(404, "order-not-found", "Order not found")
    return order_id


def _order_json(order: Order) -> dict[str, Any]:
    return {
        "order_id": order.order_id,
        "amount_minor": order.amount_minor,
        "currency": order.currency,
        "currency_exponent": currencies.exponent(order.currency),
        "status": order.status.value,
        "cancel_requested": order.cancel_requested_at is not None,
        "provider_account": order.provider_account,
        "capture": order.capture,
    }


def status_response(status: PaymentStatus, *, posted: bool) -> Response:
    """Map the attempt's durable status to the page's next step."""
    body = status.to_json()
    if posted and status.state is AttemptState.NOT_STARTED:
        return problem_response(
            503, "payment-not-started", "Payment not started; retry",
            "The payment was recorded but could not be started. Nothing was sent; retry shortly.",
            headers={"Retry-After": str(START_RETRY_AFTER_S)}, **body,
        )
    if status.state in FINAL_STATES:
        return _json(body, 200)
    if status.state is AttemptState.STARTED and status.next_action is not None:
        return _json(body, 200)  # the customer's step, while it is current
    return _json(body, 202, headers={"Location": status.status_url})


async def create_order_route(request: Request) -> Response:
    services = request.app.state.services
    customer = await services.auth.customer_id(request)
    body = await read_json_object(request, MAX_BODY)
    strict_fields(body, {"amount_minor", "currency", "provider_account", "capture"})
    amount, currency = body.get("amount_minor"), body.get("currency")
    account, capture = body.get("provider_account"), body.get("capture", "automatic")
    errors = []
    if capture not in ("automatic", "manual"):
        errors.append({"field": "capture", "message": "automatic (charged when it succeeds, the default) "
                                                      "or manual (held, for a capture or a void later)"})
    if account is not None and (not isinstance(account, str) or services.settings.account(account) is None):
        configured = ", ".join(a.provider_account for a in services.settings.accounts)
        errors.append({"field": "provider_account",
                       "message": f"one of this checkout's configured accounts: {configured}"})
    known = isinstance(currency, str) and currencies.exponent(currency) is not None
    if not known:
        errors.append({"field": "currency", "message": "an active ISO 4217 currency code with a minor "
                                                       "unit, in upper case, e.g. EUR"})
    if type(amount) is not int or amount <= 0:
        errors.append({"field": "amount_minor", "message": "a positive integer number of minor units"})
    elif known and amount > currencies.max_amount_minor(str(currency)):
        errors.append({"field": "amount_minor",
                       "message": f"at most {currencies.MAX_MAJOR_UNITS} major units of {currency} "
                                  f"({currencies.max_amount_minor(str(currency))} minor units)"})
    if errors:
        raise Problem(400, "invalid-body", "Invalid order", "See errors.", errors=errors)
    assert isinstance(amount, int) and isinstance(currency, str)
    assert account is None or isinstance(account, str)
    assert isinstance(capture, str)

    async def create() -> Response:
        order = await create_order(services.pool, customer_id=customer, amount_minor=amount,
                                   currency=currency, now=services.clock.now(), provider_account=account,
                                   capture=capture)
        return _json(_order_json(order), 201, headers={"Location": f"/orders/{order.order_id}"})

    # A retried create (a lost 201) with its Idempotency-Key gets the same order, not a second one.
    return await idempotent(request, customer, CREATE_ENDPOINT, {"body": body}, create)


async def get_order_route(request: Request) -> Response:
    services = request.app.state.services
    customer = await services.auth.customer_id(request)
    try:
        order = await get_order(services.pool, order_id_of(request), customer)
    except OrderNotFound:
        raise Problem(404, "order-not-found", "Order not found") from None
    return _json(_order_json(order))


async def cancel_order_route(request: Request) -> Response:
    services = request.app.state.services
    customer = await services.auth.customer_id(request)
    try:
        order = await cancel_order(services.pool, order_id_of(request), customer, services.clock.now())
    except OrderNotFound:
        raise Problem(404, "order-not-found", "Order not found") from None
    except OrderNotPayable:
        raise Problem(409, "order-paid", "Order already paid",
                      "A paid order is not cancelled here; a refund is its own operation.") from None
    return _json(_order_json(order))


async def payment_status_route(request: Request) -> Response:
    services = request.app.state.services
    customer = await services.auth.customer_id(request)
    status = await services.payments.status(order_id_of(request), customer)
    if status is None:
        raise Problem(404, "payment-not-found", "No payment for this order")
    return status_response(status, posted=False)


async def pay_route(request: Request) -> Response:
    services = request.app.state.services
    customer = await services.auth.customer_id(request)
    order_id = order_id_of(request)
    body = await read_json_object(request, MAX_BODY)
    strict_fields(body, {"payment_method"})
    try:
        method = checked_payment_method(body.get("payment_method"))
    except InvalidPaymentMethod as exc:
        raise _invalid_payment_method(exc) from None

    return await idempotent(request, customer, PAY_ENDPOINT, {"order_id": order_id, "body": body},
                             lambda: _pay(request, order_id, customer, method))


async def idempotent(request: Request, customer: str, endpoint: str, identity: Any,
                     run: Callable[[], Awaitable[Response]], *, required: bool = False) -> Response:
    """Run ``run`` under the request's Idempotency-Key (scoped to endpoint and ``customer``: a
    customer id, or the back office's credential), optional unless ``required``.

    A repeat of a completed request replays its stored response; one still in
    flight is 409; the key with a different ``identity`` (what decides the
    outcome) is 422. A 5xx is not the request's result and is not stored.
    """
    services = request.app.state.services
    key = request.headers.get("idempotency-key")
    if key is None:
        if required:
            raise Problem(400, "idempotency-key-required", "Idempotency-Key required",
                          "Send an Idempotency-Key header (1 to 255 visible ASCII characters), the same "
                          "on every retry of this request.")
        return await run()

    key = key.strip().strip('"')
    if not idem.valid_key(key):
        raise Problem(400, "invalid-idempotency-key", "Invalid Idempotency-Key",
                      "1 to 255 visible ASCII characters.")
    scope = idem.KeyScope(key, endpoint, customer)
    fingerprint = idem.fingerprint(identity)
    # No request holds its key longer than a payment can take (start, the client's
    # ceiling, record); twice that, and the claim's request died without releasing it.
    budgets = services.settings.budgets
    claimed_at = services.clock.now()
    claim, stored = await idem.claim(
        services.pool, scope, fingerprint, now=claimed_at,
        ttl_s=services.settings.inbound_idempotency_ttl_s,
        stale_after_s=2 * (budgets.start_s + budgets.max_call_duration_s + budgets.record_s),
    )
    if claim is idem.Claim.MISMATCH:
        raise Problem(422, "idempotency-key-reused", "Idempotency-Key reused",
                      "This key was used with a different request.")
    if claim is idem.Claim.IN_PROGRESS:
        raise Problem(409, "request-in-progress", "Request in progress",
                      "The original request with this key is still being processed.",
                      headers={"Retry-After": "1"})
    if claim is idem.Claim.REPLAY and stored is not None:
        return Response(stored.body, status_code=stored.status,
                        headers={**stored.headers, "Idempotent-Replayed": "true"})

    try:
        response = await run()
    except Problem as problem:
        response = problem.to_response()
    except BaseException:
        await asyncio.shield(idem.release(services.pool, scope, claimed_at=claimed_at))
        raise
    if response.status_code >= 500:
        # A retryable answer is not the request's result: let the retry run again.
        await asyncio.shield(idem.release(services.pool, scope, claimed_at=claimed_at))
    else:
        headers = {k: v for k, v in response.headers.items()
                   if k.lower() in ("content-type", "location", "retry-after")}
        stored_response = idem.StoredResponse(response.status_code, headers, bytes(response.body))
        await asyncio.shield(idem.complete(services.pool, scope, stored_response, claimed_at=claimed_at))
    return response


def _invalid_payment_method(exc: InvalidPaymentMethod) -> Problem:
    # Never echo the value: a client bug could have put card data here.
    return Problem(400, "invalid-body", "Invalid payment method", str(exc),
                   errors=[{"field": "payment_method", "message": str(exc)}])


async def _pay(request: Request, order_id: str, customer: str, method: PaymentMethod) -> Response:
    services = request.app.state.services
    # The payment runs as its own task: a customer closing the tab cancels this
    # handler at most, never the provider call or the recording of its outcome.
    task = services.spawn(services.payments.pay(order_id, customer, method))
    try:
        status = await asyncio.shield(task)
    except OrderNotFound:
        raise Problem(404, "order-not-found", "Order not found") from None
    except OrderNotPayable as exc:
        raise Problem(409, f"order-{exc.why}", f"Order is {exc.why}",
                      "This order cannot take a new payment.") from None
    except InvalidPaymentMethod as exc:  # the order's provider refused it; nothing was recorded
        raise _invalid_payment_method(exc) from None
    return status_response(status, posted=True)


async def healthz(request: Request) -> Response:
    return _json({"status": "ok"})


async def readyz(request: Request) -> Response:
    services = request.app.state.services
    problem = await not_ready(services.outage, services.pool, request.url.path)
    return problem or _json({"status": "ready"})


def routes() -> list[Route]:
    return [
        Route("/orders", create_order_route, methods=["POST"]),
        Route("/orders/{order_id}", get_order_route, methods=["GET"]),
        Route("/orders/{order_id}/payment", pay_route, methods=["POST"]),
        Route("/orders/{order_id}/payment/status", payment_status_route, methods=["GET"]),
        Route("/orders/{order_id}/cancel", cancel_order_route, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
    ]
