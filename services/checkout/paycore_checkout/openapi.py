"""Checkout's OpenAPI 3.1 document, served at ``GET /openapi.json``.

Kept next to :mod:`paycore_checkout.routes`; ``tests/openapi`` fails when a route is added
without its entry here, and fuzzes the live service against what this says.
"""

from __future__ import annotations

from typing import Any

from paycore import currencies
from paycore.domain import AttemptState, OperationKind, OperationRefusal, OperationState, OrderStatus
from paycore.http.openapi import json_response, operation, operational_paths, problem, shared_components

BEARER: list[dict[str, list[str]]] = [{"bearer": []}]
ORDER_ID = {"name": "order_id", "in": "path", "required": True, "description": "the order's id",
            "schema": {"type": "string"}}
IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key", "in": "header", "required": False,
    "description": "Makes a retry safe: a repeat with the same key (per endpoint and customer) replays "
                   "the first answer; the key with a different request is 422; one still running is 409.",
    "schema": {"type": "string"}}
LOCATION = {"description": "where to read the resource", "schema": {"type": "string"}}
REQUIRED_IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key", "in": "header", "required": True,
    "description": "Required: the same on every retry of this request. Scoped to the endpoint and the "
                   "credential (the same key at /refunds and /captures is two requests); a repeat replays "
                   "the first answer, the key with a different request is 422, one still running is 409.",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255}}
OPERATION_ID = {"name": "operation_id", "in": "path", "required": True, "description": "the operation's id",
                "schema": {"type": "string", "format": "uuid"}}
REPLAYED = {"description": "`true` when this is the stored answer to an earlier request with this "
                           "Idempotency-Key", "schema": {"type": "string", "enum": ["true"]}}

ORDER = {
    "type": "object",
    "required": ["order_id", "amount_minor", "currency", "currency_exponent", "status", "cancel_requested",
                 "provider_account", "capture"],
    "properties": {
        "order_id": {"type": "string"},
        "amount_minor": {"type": "integer", "minimum": 1},
        "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "currency_exponent": {"type": "integer", "minimum": 0},
        "status": {"type": "string", "enum": [s.value for s in OrderStatus]},
        "cancel_requested": {"type": "boolean"},
        "provider_account": {"type": ["string", "null"]},
        "capture": {"type": "string", "enum": ["automatic", "manual"]},
    },
}
NEW_ORDER = {
    "type": "object", "additionalProperties": False, "required": ["amount_minor", "currency"],
    "properties": {
        "amount_minor": {"type": "integer", "minimum": 1,
                         "description": f"minor units; at most {currencies.MAX_MAJOR_UNITS} major units"},
        "currency": {"type": "string", "pattern": "^[A-Z]{3}$",
                     "description": "an active ISO 4217 code with a minor unit"},
        "provider_account": {"type": "string", "description": "one of this checkout's configured accounts "
                                                              "(default: the first)"},
        "capture": {"type": "string", "enum": ["automatic", "manual"], "default": "automatic",
                    "description": "manual: the payment holds the amount (the order is Authorized) for a "
                                   "capture or a void later"},
    },
}
PAYMENT_REQUEST = {
    "type": "object", "additionalProperties": False, "required": ["payment_method"],
    "properties": {"payment_method": {
        "description": "a provider token (tok_…, pm_…) or the provider's encrypted payment-method object; "
                       "never card details",
        "oneOf": [{"type": "string"}, {"type": "object"}]}},
}
PAYMENT_STATUS = {
    "type": "object",
    "required": ["order_id", "attempt_id", "state", "provider_status", "provider_payment_id", "next_action",
                 "outcome_reason", "status_url"],
    "properties": {
        "order_id": {"type": "string"},
        "attempt_id": {"type": "string", "format": "uuid"},
        "state": {"type": "string", "enum": [s.value for s in AttemptState]},
        "provider_status": {"type": ["string", "null"]},
        "provider_payment_id": {"type": ["string", "null"]},
        "next_action": {"type": ["object", "null"], "description": "the customer's step, while current"},
        "outcome_reason": {"type": ["string", "null"]},
        "status_url": {"type": "string"},
    },
}

OPERATION = {
    "type": "object",
    "description": "A capture, cancel (void) or refund of the order's payment, and its timeline.",
    "required": ["operation_id", "kind", "order_id", "attempt_id", "amount_minor", "currency", "state",
                 "provider_status", "provider_operation_id", "outcome_reason", "requested_by", "created_at",
                 "timeline"],
    "properties": {
        "operation_id": {"type": "string", "format": "uuid"},
        "kind": {"type": "string", "enum": [k.value for k in OperationKind],
                 "description": "`cancel` is a void"},
        "order_id": {"type": "string"},
        "attempt_id": {"type": "string", "format": "uuid", "description": "the order's payment"},
        "amount_minor": {"type": "integer", "minimum": 1},
        "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "state": {"type": "string", "enum": [s.value for s in OperationState],
                  "description": "NotStarted, Started and Unknown are live: evidence will settle them"},
        "provider_status": {"type": ["string", "null"]},
        "provider_operation_id": {"type": ["string", "null"]},
        "outcome_reason": {"type": ["string", "null"]},
        "requested_by": {"type": "string",
                         "description": "`backoffice:<credential name>`, `operator:<name>`, `cli:<user>` "
                                        "or `paycore`"},
        "created_at": {"type": "string", "format": "date-time"},
        "timeline": {"type": "array", "items": {
            "type": "object", "required": ["kind", "occurred_at", "from", "to"],
            "properties": {"kind": {"type": "string",
                                    "description": "send_intent, transition, notification, …"},
                           "occurred_at": {"type": "string", "format": "date-time"},
                           "from": {"type": ["string", "null"]}, "to": {"type": ["string", "null"]}}}},
    },
}
OPERATIONS = {
    "type": "object", "required": ["order_id", "items"],
    "properties": {"order_id": {"type": "string"},
                   "items": {"type": "array", "items": {"$ref": "#/components/schemas/Operation"},
                             "description": "oldest first; empty while the order has no payment that "
                                            "succeeded"}},
}
REFUND_REQUEST = {
    "type": "object", "additionalProperties": False, "required": ["amount_minor"],
    "properties": {
        "amount_minor": {"type": "integer", "minimum": 1,
                         "description": "minor units of the payment's currency"},
        "reason": {"type": "string", "minLength": 1, "maxLength": 200, "description": "sent to the provider"},
    },
}
CAPTURE_REQUEST = {
    "type": "object", "additionalProperties": False, "required": ["amount_minor"],
    "properties": {"amount_minor": {"type": "integer", "minimum": 1,
                                    "description": "at most the hold; the rest of it is released"}},
}
VOID_REQUEST = {"type": "object", "additionalProperties": False, "properties": {},
                "description": "nothing: a void releases the whole hold"}

UNAUTHENTICATED = problem("no bearer token, or one that is not valid",
                          headers={"WWW-Authenticate": {"schema": {"type": "string"}}})
UNAVAILABLE = problem("the database or the identity provider's keys cannot be reached; retry later",
                      retry_after=True)
INTERNAL = problem("unexpected error; safe to retry")
BAD_BODY = problem("the body is not what this endpoint takes (see `errors`), or an invalid Idempotency-Key")
TOO_LARGE = problem("the body is over 64 KiB")
NOT_JSON = problem("the body is not declared application/json")
KEY_REUSED = problem("the Idempotency-Key was used with a different request")
NOT_FOUND = problem("no such order for this customer")
FORBIDDEN = problem("the credential lacks this route's scope, or the token is a customer's",
                    headers={"WWW-Authenticate": {"schema": {"type": "string"}}})
REFUSED = problem("refused, nothing recorded: `code` (and `type`) is one of "
                  + ", ".join(f"`{r.value}`" for r in OperationRefusal)
                  + ", or `account-not-configured`; or a request with this Idempotency-Key is still running",
                  retry_after=True)


def _body(schema: str, *examples: dict[str, Any]) -> dict[str, Any]:
    media: dict[str, Any] = {"schema": {"$ref": f"#/components/schemas/{schema}"}}
    if examples:
        media["examples"] = {f"example{i}": {"value": e} for i, e in enumerate(examples, 1)}
    return {"required": True, "content": {"application/json": media}}


def _ref(schema: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{schema}"}


def _guarded(responses: dict[str, Any]) -> dict[str, Any]:
    """Every customer route can also answer 401, 500 and 503."""
    return {**responses, "401": UNAUTHENTICATED, "500": INTERNAL, "503": UNAVAILABLE}


def _backoffice(kind: str, scope: str, request: str, example: dict[str, Any]) -> dict[str, Any]:
    created = {"Location": LOCATION, "Idempotent-Replayed": REPLAYED}
    return {"post": operation(
        f"Ask for a {kind} of the order's payment (back office)", _guarded({
            "201": json_response(f"the {kind}, in a final state (Succeeded, Failed, NotApplied)",
                                 _ref("Operation"), headers=created),
            "202": json_response(f"the {kind}, live (Started, Unknown): evidence will settle it; read the "
                                 "Location", _ref("Operation"), headers=created),
            "400": BAD_BODY, "403": FORBIDDEN, "404": problem("no such order"), "409": REFUSED,
            "413": TOO_LARGE, "415": NOT_JSON, "422": KEY_REUSED}),
        security=[{"serviceCredential": [scope]}], parameters=[ORDER_ID, REQUIRED_IDEMPOTENCY_KEY],
        requestBody={**_body(request, example), "required": kind != "void"})}


def _read(what: str) -> dict[str, Any]:
    return {"get": operation(f"Read one {what} (back office)", _guarded({
        "200": json_response(f"the {what}", _ref("Operation")), "403": FORBIDDEN,
        "404": problem(f"no such {what}")}), security=[{"serviceCredential": ["read"]}],
        parameters=[OPERATION_ID])}


def document() -> dict[str, Any]:
    status_pending = json_response("confirmation pending: poll the Location", _ref("PaymentStatus"),
                                   headers={"Location": LOCATION})
    paths: dict[str, Any] = {
        "/orders": {"post": operation("Create an order", _guarded({
            "201": json_response("the order", _ref("Order"),
                                 headers={"Location": LOCATION, "Idempotent-Replayed": REPLAYED}),
            "400": BAD_BODY, "409": problem("a request with this Idempotency-Key is still running",
                                            retry_after=True),
            "413": TOO_LARGE, "415": NOT_JSON, "422": KEY_REUSED}),
            parameters=[IDEMPOTENCY_KEY],
            requestBody=_body("NewOrder", {"amount_minor": 4999, "currency": "EUR"}))},
        "/orders/{order_id}": {"get": operation("Read an order", _guarded({
            "200": json_response("the order", _ref("Order")), "404": NOT_FOUND}), parameters=[ORDER_ID])},
        "/orders/{order_id}/cancel": {"post": operation("Cancel an order (a paid one is not cancelled here)",
                                                        _guarded({
            "200": json_response("the order, cancel requested", _ref("Order")), "404": NOT_FOUND,
            "409": problem("the order is paid")}), parameters=[ORDER_ID])},
        "/orders/{order_id}/payment": {"post": operation(
            "Pay for an order, at most once", _guarded({
                "200": json_response("an outcome (Succeeded, Failed, NotApplied) or the customer's step",
                                     _ref("PaymentStatus"), headers={"Idempotent-Replayed": REPLAYED}),
                "202": status_pending,
                "400": BAD_BODY, "404": NOT_FOUND,
                "409": problem("the order cannot take a new payment (paid, cancelled, …), or a request with "
                               "this Idempotency-Key is still running", retry_after=True),
                "413": TOO_LARGE, "415": NOT_JSON, "422": KEY_REUSED,
                "503": problem("the database or the identity provider's keys cannot be reached, or the "
                               "payment was recorded but not started (nothing was sent; its status is in the "
                               "body): retry later", retry_after=True)}),
            parameters=[ORDER_ID, IDEMPOTENCY_KEY],
            requestBody=_body("PaymentRequest", {"payment_method": "tok_visa"}))},
        "/orders/{order_id}/payment/status": {"get": operation(
            "The payment's status (never sends anything)", _guarded({
                "200": json_response("an outcome or the customer's step", _ref("PaymentStatus")),
                "202": status_pending,
                "404": problem("no such order, or no payment for it yet")}), parameters=[ORDER_ID])},
        "/orders/{order_id}/refunds": _backoffice("refund", "refunds", "RefundRequest",
                                                  {"amount_minor": 1500}),
        "/orders/{order_id}/captures": _backoffice("capture", "captures", "CaptureRequest",
                                                   {"amount_minor": 4999}),
        "/orders/{order_id}/voids": _backoffice("void", "voids", "VoidRequest", {}),
        "/orders/{order_id}/operations": {"get": operation(
            "The order's refunds, captures and voids (back office)", _guarded({
                "200": json_response("its payment's operations, oldest first", _ref("OperationList")),
                "403": FORBIDDEN, "404": problem("no such order")}),
            security=[{"serviceCredential": ["read"]}], parameters=[ORDER_ID])},
        "/refunds/{operation_id}": _read("refund"),
        "/captures/{operation_id}": _read("capture"),
        "/voids/{operation_id}": _read("void"),
        **operational_paths(),
    }
    components = shared_components()
    components["schemas"].update({"Order": ORDER, "NewOrder": NEW_ORDER, "PaymentRequest": PAYMENT_REQUEST,
                                  "PaymentStatus": PAYMENT_STATUS, "Operation": OPERATION,
                                  "OperationList": OPERATIONS, "RefundRequest": REFUND_REQUEST,
                                  "CaptureRequest": CAPTURE_REQUEST, "VoidRequest": VOID_REQUEST})
    components["securitySchemes"] = {"bearer": {
        "type": "http", "scheme": "bearer", "bearerFormat": "JWT",
        "description": "the customer's token: HS256 with PAYCORE_JWT_SECRET or a key from PAYCORE_JWKS_URL; "
                       "`sub` is the customer id"},
        "serviceCredential": {
            "type": "http", "scheme": "bearer",
            "description": "the store's back office: a service credential `pcsc_…` issued by `paycore "
                           "credentials issue NAME --scope …` (refunds, captures, voids, read); each route "
                           "names the scope it needs. Revoked: 401 at once. Never a customer's token (403)."}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "paycore checkout", "version": "1",
                 "description": "Orders and their payment, at most once; the store's back office asks for "
                                "refunds, captures and voids of a paid order. Errors are RFC 9457 problem "
                                "details (application/problem+json)."},
        "servers": [{"url": "/"}],
        "security": BEARER,
        "paths": paths,
        "components": components,
    }
