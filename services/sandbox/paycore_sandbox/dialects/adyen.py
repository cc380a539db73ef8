"""The Adyen dialect: Checkout API v71 payments and standard notifications.

Routes: ``POST /v71/payments`` (:mod:`.adyen_api`) and the modifications
``POST /v71/payments/{pspReference}/{refunds|captures|cancels}``
(:mod:`.adyen_modifications`: always ``received``, the outcome notified) — Adyen has
no payment or modification lookup. Answers and errors: :mod:`.adyen_wire`. Notifications
(:mod:`.adyen_webhooks`): ``{"live", "notificationItems": [...]}`` with a
per-item HMAC and basic auth, sent to the ``adyen`` endpoints only, for final
states only; several events may share one notification (``batches``:
``POST /_sandbox/webhooks/batch``), and a delivery counts only when answered
2xx with exactly ``[accepted]``. Settlement details reports: :mod:`.adyen_reports`.

Adyen's notifications carry no event id or type of their own, so its events
keep the core's type (``payment.<status>``) and payment snapshot; the
notification item is derived from them when sent (``GET /_sandbox/events``
shows it, unsigned, as ``notificationItem``).
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.routing import BaseRoute, Route

from paycore_sandbox.dialects import UnknownPayment, UnsolicitedWebhook, WebhookMessage
from paycore_sandbox.dialects import adyen_api as handlers
from paycore_sandbox.dialects import adyen_modifications as modifications
from paycore_sandbox.dialects import adyen_reports as reports
from paycore_sandbox.dialects import adyen_webhooks as notifications
from paycore_sandbox.dialects import adyen_wire as wire
from paycore_sandbox.ledger import Payment
from paycore_sandbox.settings import SandboxAccount
from paycore_sandbox.webhooks import Event


class AdyenDialect:
    name = wire.NAME
    batches = True

    def routes(self) -> Sequence[BaseRoute]:
        modified = wire.PAYMENTS_PATH + "/{psp_reference}"
        return [Route(wire.PAYMENTS_PATH, handlers.create_payment, methods=["POST"]),
                Route(modified + "/refunds", modifications.create_refund, methods=["POST"]),
                Route(modified + "/captures", modifications.create_capture, methods=["POST"]),
                Route(modified + "/cancels", modifications.create_cancel, methods=["POST"]),
                # The Settlement details report (GET routes answer HEAD too).
                Route(reports.PATH, reports.download, methods=["GET"])]

    def render_payment(self, payment: Payment) -> dict[str, Any]:
        # Adyen has no payment object: the /payments answer as it would be now.
        return wire.payment_response(payment, bool(payment.dialect_data.get("native_3ds")))

    def render_event(self, payment: Payment, core_type: str) -> tuple[str, dict[str, Any]]:
        data = payment.to_public()
        # The /cancels request executing now, if any: its CANCELLATION item names it.
        modification = payment.dialect_data.get(notifications.MODIFICATION)
        if modification is not None:
            data[notifications.MODIFICATION] = dict(modification)
        return core_type, data

    def event_json(self, event: Event) -> dict[str, Any]:
        return {"id": event.id, "type": event.type, "created": event.created,
                "account": event.account, "livemode": event.livemode,
                "sequence": event.sequence, "data": {"object": dict(event.payment)},
                "notificationItem": notifications.unsigned_item(event)}

    def credentials(self, account: SandboxAccount) -> dict[str, str]:
        return {**notifications.credentials(account), "report_username": reports.report_user(),
                "report_password": reports.report_password(account)}

    def notifies(self, event: Event) -> bool:
        return notifications.unsigned_item(event) is not None

    def unstable_message_id(self) -> str:
        # Nothing in Adyen's notification carries it; the delivery log shows it.
        return "evt_" + secrets.token_hex(12)

    def webhook_message(self, events: Sequence[Event], account: SandboxAccount, *,
                        message_id: str, unstable: bool, timestamp: int) -> WebhookMessage:
        # Items are signed, not requests: no id or timestamp header to vary.
        del message_id, unstable, timestamp
        return WebhookMessage(notifications.render(events, account),
                              notifications.headers(account))

    def accepted(self, status: int, body: bytes) -> bool:
        return notifications.accepted(status, body)

    def unknown_payment_webhook(self, payment: UnknownPayment, *, webhook_secret: str,
                                basic_auth: tuple[str, str] | None) -> UnsolicitedWebhook:
        assert basic_auth is not None, "its notifications carry basic auth"
        psp = f"U{payment.nonce[:15].upper()}"  # 16 characters, as its pspReferences
        item: dict[str, Any] = {
            "amount": {"currency": payment.currency, "value": payment.amount_minor},
            "eventCode": "AUTHORISATION", "success": "true" if payment.status == "succeeded" else "false",
            "eventDate": datetime.fromtimestamp(payment.created, UTC).isoformat(),
            "merchantAccountCode": payment.account, "merchantReference": payment.reference,
            "paymentMethod": "visa", "pspReference": psp,
        }
        if payment.status != "succeeded":
            item["reason"] = "Refused"
        item["additionalData"] = {"hmacSignature": notifications.sign_item(item, webhook_secret)}
        body = orjson.dumps({"live": "true" if payment.environment == "live" else "false",
                             "notificationItems": [{"NotificationRequestItem": item}]})
        user, password = basic_auth
        basic = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        # Its items carry no event id: the pspReference is what a receiver deduplicates by.
        return UnsolicitedWebhook(psp, psp, body,
                                  lambda at: {"Authorization": basic, "Content-Type": "application/json"})


DIALECT = AdyenDialect()
