"""The webhook intake's OpenAPI 3.1 document, served at ``GET /openapi.json``.

One ``POST /webhooks/<provider>`` per provider this intake is configured for, so the
document lists exactly the routes the app serves (``tests/openapi`` checks both ways).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paycore.http.openapi import json_response, operation, operational_paths, problem, shared_components
from paycore.providers.base import NotificationReceiver
from paycore_webhooks.handler import DeliveryResult

# How each provider signs a delivery: the security schemes below, and the headers it sends.
SIGNATURES: dict[str, tuple[list[dict[str, list[str]]], list[dict[str, Any]]]] = {
    "cardco": ([{"webhookSignature": []}], [
        {"name": "webhook-id", "in": "header", "required": True, "schema": {"type": "string"},
         "description": "the delivery's id (Standard Webhooks)"},
        {"name": "webhook-timestamp", "in": "header", "required": True, "schema": {"type": "string"},
         "description": "integer seconds since the epoch; outside the tolerance is refused"},
    ]),
    "stripe": ([{"stripeSignature": []}], []),
    "adyen": ([{"adyenBasic": []}], []),
}
RESULT = {"type": "string", "enum": [r.value for r in DeliveryResult]}
ACK_JSON = {"type": "object", "required": ["result"], "properties": {"result": {
    "description": "what was done with the notification (one per notification of a batch)",
    "oneOf": [RESULT, {"type": "array", "items": RESULT}]}}}


def _notification_operation(name: str, receiver: NotificationReceiver) -> dict[str, Any]:
    security, headers = SIGNATURES.get(name, ([], []))
    if receiver.acknowledgement is not None:
        content, media_type = receiver.acknowledgement
        ok = json_response("recorded; the provider's expected acknowledgement", {
            "type": "string", "const": content.decode()}, media_type=media_type)
    else:
        ok = json_response("recorded (or recognised as a duplicate), committed before this answer", ACK_JSON)
    return operation(
        f"Receive a {name} notification: verify, record, acknowledge after commit", {
            "200": ok,
            "400": problem("signature headers missing or malformed; nothing stored"),
            "401": problem("signature does not verify, or is outside the tolerance; nothing stored"),
            "413": problem("the body is over 256 KiB"),
            "500": problem("not recorded; the provider redelivers"),
            "503": problem("the database cannot be reached; the provider redelivers", retry_after=True),
        },
        security=security, parameters=headers,
        requestBody={"required": True, "description": "the provider's signed notification, as it sent it",
                     "content": {"application/json": {"schema": {"type": "object"}}}},
    )


def document(receivers: Mapping[str, NotificationReceiver]) -> dict[str, Any]:
    paths: dict[str, Any] = {f"/webhooks/{name}": {"post": _notification_operation(name, receiver)}
                             for name, receiver in receivers.items()}
    paths.update(operational_paths())
    components = shared_components()
    components["securitySchemes"] = {
        "webhookSignature": {"type": "apiKey", "in": "header", "name": "webhook-signature",
                             "description": "Standard Webhooks: `v1,<base64 HMAC-SHA256>` of "
                                            "`id.timestamp.body` with the account's webhook secret"},
        "stripeSignature": {"type": "apiKey", "in": "header", "name": "Stripe-Signature",
                            "description": "`t=<timestamp>,v1=<hex HMAC-SHA256>` with the endpoint secret"},
        "adyenBasic": {"type": "http", "scheme": "basic",
                       "description": "the webhook's Basic credentials; each item also carries its HMAC "
                                      "signature in additionalData.hmacSignature"},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "paycore webhook intake", "version": "1",
                 "description": "Provider notifications, verified and recorded before they are acknowledged. "
                                "Refusals are RFC 9457 problem details (application/problem+json)."},
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": components,
    }
