"""The store's back office: refunds, captures and voids of an order's payment, and reading them.

Callers are authenticated by a service credential (``Authorization: Bearer pcsc_…``, issued by
``paycore credentials issue``; docs/decisions/0009-back-office-credentials.md), never a
customer's token, and each route needs its scope: ``refunds``, ``captures``, ``voids`` to ask,
``read`` to read. 401: no credential, or one that is not (unknown, wrong, revoked); 403: the
wrong scope, or a customer's token.

Every POST takes a required ``Idempotency-Key``, scoped to its endpoint and the credential
(:func:`paycore_checkout.routes.idempotent`): the same key at ``…/refunds`` and
``…/captures`` is two intents, the key again with another body is 422, one still running is
409. The operation itself is :class:`paycore.operation_sends.OperationSender`'s: recorded
under the payment's lock (a refusal records nothing: 409, its ``type`` and ``code`` naming the
rule), sent once, its outcome applied. A final state answers ``201``; a live one (Started,
Unknown) ``202``: evidence will settle it, at the ``Location`` given. The send runs as its own
task, so a client that hangs up cancels nothing.

An order's payment is its Succeeded attempt; a void (``OperationKind.CANCEL``) releases the
whole hold, so it takes no amount.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from paycore import service_credentials
from paycore.domain import OperationKind, OperationRefusal
from paycore.errors import InvalidPaymentMethod
from paycore.http.bodies import read_json_object
from paycore.http.problems import Problem
from paycore.logs import bind_log_context
from paycore.operation_sends import AccountNotConfigured
from paycore.operation_views import (
    NO_PAYMENT,
    REFUSALS,
    OperationView,
    payment_of_order,
    view_operation,
    views_of_payment,
)
from paycore.operations import OperationNotFound, Refused
from paycore.orders import OrderNotFound
from paycore.service_credentials import Credential, Scope
from paycore_checkout.routes import MAX_BODY, idempotent, order_id_of, strict_fields

log = logging.getLogger("paycore.checkout.backoffice")

MAX_REASON_CHARS = 200  # what every provider's refund reason takes (Cardco's and Adyen's limit)
# No order is larger than this in any currency (currencies.MAX_MAJOR_UNITS at the largest exponent).
MAX_AMOUNT_MINOR = 10**10 * 10**4


@dataclass(frozen=True)
class Kind:
    """One kind of operation as the back office names it: its collection, scope and body."""

    kind: OperationKind
    collection: str  # refunds, captures, voids: the path segment
    scope: Scope
    fields: frozenset[str]  # what its POST body takes

    @property
    def endpoint(self) -> str:
        """The Idempotency-Key's scope, with the credential's client (shared across rotations)."""
        return f"POST /orders/{{order_id}}/{self.collection}"

    def location(self, operation_id: uuid.UUID) -> str:
        return f"/{self.collection}/{operation_id}"


KINDS: dict[OperationKind, Kind] = {k.kind: k for k in (
    Kind(OperationKind.REFUND, "refunds", Scope.REFUNDS, frozenset({"amount_minor", "reason"})),
    Kind(OperationKind.CAPTURE, "captures", Scope.CAPTURES, frozenset({"amount_minor"})),
    Kind(OperationKind.CANCEL, "voids", Scope.VOIDS, frozenset()),
)}

def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


def refused(refusal: OperationRefusal) -> Problem:
    title, detail = REFUSALS[refusal]
    return Problem(409, refusal.value, title, detail, code=refusal.value)


# -- who is calling ----------------------------------------------------------------------------


async def authorized(request: Request, scope: Scope) -> Credential:
    """The service credential of this request, if it has ``scope``; else a 401 or 403 problem.

    A token that is not a credential's shape is judged as checkout judges a customer's: a valid
    customer token is refused (403: the back office is not the customer's), an invalid one is 401.
    """
    services = request.app.state.services
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Problem(401, "unauthenticated", "Authentication required",
                      "Send Authorization: Bearer <service credential>.",
                      headers={"WWW-Authenticate": "Bearer"})
    if not service_credentials.looks_like_secret(token):
        await services.auth.customer_id(request)  # 401 unless it is a valid customer token
        raise Problem(403, "customer-token-refused", "Customer token refused",
                      "The back office's routes take a service credential (paycore credentials issue), "
                      "not a customer's token.",
                      headers={"WWW-Authenticate": 'Bearer error="insufficient_scope"'})
    credential = await service_credentials.authenticate(services.pool, token, services.clock.now())
    if credential is None:  # the token is never logged or echoed
        raise Problem(401, "unauthenticated", "Invalid credential",
                      "The service credential is not valid (unknown, or revoked).",
                      headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})
    if not credential.allows(scope):
        raise Problem(403, "insufficient-scope", "Insufficient scope",
                      f"This route needs a credential with the scope {scope.value}.",
                      headers={"WWW-Authenticate":
                               f'Bearer error="insufficient_scope", scope="{scope.value}"'},
                      scope=scope.value)
    return credential


# -- asking for one ------------------------------------------------------------------------------


def _checked_body(kind: Kind, body: dict[str, Any]) -> tuple[int | None, str | None]:
    strict_fields(body, set(kind.fields))
    errors = []
    amount = body.get("amount_minor")
    if "amount_minor" in kind.fields and (type(amount) is not int or not 0 < amount <= MAX_AMOUNT_MINOR):
        errors.append({"field": "amount_minor", "message": "a positive integer number of minor units of the "
                                                           "payment's currency"})
    reason = body.get("reason")
    if reason is not None and (not isinstance(reason, str) or not reason.strip()
                               or len(reason) > MAX_REASON_CHARS or not reason.isprintable()):
        errors.append({"field": "reason", "message": f"printable text of 1 to {MAX_REASON_CHARS} characters"})
    if errors:
        raise Problem(400, "invalid-body", f"Invalid {kind.kind.value}", "See errors.", errors=errors)
    return (amount if isinstance(amount, int) else None), (reason if isinstance(reason, str) else None)


async def _create(request: Request, kind: Kind) -> Response:
    credential = await authorized(request, kind.scope)
    order_id = order_id_of(request)
    body = await read_json_object(request, MAX_BODY, allow_empty=not kind.fields)
    amount, reason = _checked_body(kind, body)
    return await idempotent(
        request, f"client:{credential.client}", kind.endpoint,
        {"order_id": order_id, "body": body},
        lambda: _send(request, credential, kind, order_id, amount, reason), required=True)


async def _send(request: Request, credential: Credential, kind: Kind, order_id: str, amount: int | None,
                reason: str | None) -> Response:
    services = request.app.state.services
    with bind_log_context(order_id=order_id):
        try:
            payment = await payment_of_order(services.pool, order_id)
        except OrderNotFound:
            raise Problem(404, "order-not-found", "Order not found") from None
        if payment is None:
            raise refused(NO_PAYMENT[kind.kind])
        # A void releases the whole hold: its amount is the payment's (the rule refuses any other).
        amount_minor = payment.amount_minor if amount is None else amount
        # Its own task: a client that hangs up cancels this handler at most, never the send or
        # the recording of its outcome.
        task = services.spawn(services.operations.request(
            payment.attempt_id, kind.kind, amount_minor, requested_by=credential.requester, reason=reason))
        try:
            done = await asyncio.shield(task)
        except AccountNotConfigured:
            raise Problem(409, "account-not-configured", "Provider account not configured",
                          "The payment's provider account is not configured here any more; nothing was "
                          "recorded or sent.") from None
        except InvalidPaymentMethod as exc:  # the provider's contract refused a value; nothing recorded
            raise Problem(400, "invalid-body", f"Invalid {kind.kind.value}", str(exc)) from None
        if isinstance(done, Refused):
            log.info("back office %s of %s refused: %s", kind.kind.value, credential.requester,
                     done.reason.value)
            raise refused(done.reason)
        log.info("back office %s %s by %s: %s", kind.kind.value, done.operation_id, credential.requester,
                 done.state.value)
        view = await view_operation(services.pool, done.operation_id)
    return _json(view.as_json(), 201 if done.is_final else 202,
                 headers={"Location": kind.location(done.operation_id)})


async def refunds_route(request: Request) -> Response:
    return await _create(request, KINDS[OperationKind.REFUND])


async def captures_route(request: Request) -> Response:
    return await _create(request, KINDS[OperationKind.CAPTURE])


async def voids_route(request: Request) -> Response:
    return await _create(request, KINDS[OperationKind.CANCEL])


# -- reading them ------------------------------------------------------------------------------


async def _read(request: Request, kind: Kind) -> Response:
    services = request.app.state.services
    await authorized(request, Scope.READ)
    try:
        operation_id = uuid.UUID(request.path_params["operation_id"])
        view: OperationView = await view_operation(services.pool, operation_id, kind.kind)
    except (ValueError, OperationNotFound):
        raise Problem(404, "operation-not-found", f"No such {kind.kind.value}") from None
    return _json(view.as_json())


async def refund_route(request: Request) -> Response:
    return await _read(request, KINDS[OperationKind.REFUND])


async def capture_route(request: Request) -> Response:
    return await _read(request, KINDS[OperationKind.CAPTURE])


async def void_route(request: Request) -> Response:
    return await _read(request, KINDS[OperationKind.CANCEL])


async def order_operations_route(request: Request) -> Response:
    services = request.app.state.services
    await authorized(request, Scope.READ)
    order_id = order_id_of(request)
    try:
        payment = await payment_of_order(services.pool, order_id)
    except OrderNotFound:
        raise Problem(404, "order-not-found", "Order not found") from None
    views = [] if payment is None else await views_of_payment(services.pool, payment)
    return _json({"order_id": order_id, "items": [v.as_json() for v in views]})


def routes() -> list[Route]:
    return [
        Route("/orders/{order_id}/refunds", refunds_route, methods=["POST"]),
        Route("/orders/{order_id}/captures", captures_route, methods=["POST"]),
        Route("/orders/{order_id}/voids", voids_route, methods=["POST"]),
        Route("/orders/{order_id}/operations", order_operations_route, methods=["GET"]),
        Route("/refunds/{operation_id}", refund_route, methods=["GET"]),
        Route("/captures/{operation_id}", capture_route, methods=["GET"]),
        Route("/voids/{operation_id}", void_route, methods=["GET"]),
    ]
