"""The webhook intake's OpenAPI 3.1 document, served at ``GET /openapi.json``.

One ``POST /webhooks/<provider>`` per provider this intake is configured for, so the
document lists exactly the routes the app serves (``tests/openapi`` checks both ways).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paycore.http.openapi import json_response, operation, operational_paths, problem, shared_components
from paycore.providers.base import NotificationReceiver
from paycore.providers.registry import PACKAGES, PROVIDER_PACKAGES
from paycore_webhooks.handler import DeliveryResult

RESULT = {"type": "string", "enum": [r.value for r in DeliveryResult]}
ACK_JSON = {"type": "object", "required": ["result"], "properties": {"result": {
    "description": "what was done with the notification (one per notification of a batch)",
    "oneOf": [RESULT, {"type": "array", "items": RESULT}]}}}


def _notification_operation(name: str, receiver: NotificationReceiver) -> dict[str, Any]:
    # How the provider signs a delivery (its package says): the security scheme, the headers it sends.
    package = PACKAGES.get(name)
    signed = package.webhook_security if package is not None else None
    security: list[dict[str, list[str]]] = [{signed.scheme_name: []}] if signed is not None else []
    headers = list(signed.headers) if signed is not None else []
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
    components["securitySchemes"] = {p.webhook_security.scheme_name: dict(p.webhook_security.scheme)
                                     for p in PROVIDER_PACKAGES}
    return {
        "openapi": "3.1.0",
        "info": {"title": "paycore webhook intake", "version": "1",
                 "description": "Provider notifications, verified and recorded before they are acknowledged. "
                                "Refusals are RFC 9457 problem details (application/problem+json)."},
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": components,
    }
