"""The Cardco dialect: ``docs/providers/cardco.md``, the sandbox's native wire.

Its payments' data objects are the core payment as the contract shows it, its
event types are the core's (and, for captures and refunds, which only this wire
has, ``capture.<status>`` / ``refund.<status>`` with the contract's objects), and
its webhooks are Standard Webhooks signed with the account's ``whsec_`` secret
(:func:`paycore.webhook_signatures.signed_headers`).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

import orjson
from starlette.routing import BaseRoute, Route

from paycore.webhook_signatures import signed_headers
from paycore_sandbox import api, captures, refunds
from paycore_sandbox.dialects import UnknownPayment, UnsolicitedWebhook, WebhookMessage, answered_2xx
from paycore_sandbox.ledger import Payment
from paycore_sandbox.settings import SandboxAccount
from paycore_sandbox.webhooks import Event


class CardcoDialect:
    name = "cardco"
    batches = False

    def routes(self) -> Sequence[BaseRoute]:
        return [
            Route("/v1/payments", api.create_payment, methods=["POST"]),
            Route("/v1/payments", api.list_payments, methods=["GET"]),
            Route("/v1/payments/{payment_id}", api.get_payment, methods=["GET"]),
            Route("/v1/payments/{payment_id}/captures", captures.create_capture,
                  methods=["POST"]),
            Route("/v1/payments/{payment_id}/cancel", captures.cancel_payment,
                  methods=["POST"]),
            Route("/v1/captures", captures.list_captures, methods=["GET"]),
            Route("/v1/refunds", refunds.create_refund, methods=["POST"]),
            Route("/v1/refunds", refunds.list_refunds, methods=["GET"]),
            Route("/v1/refunds/{movement_id}", refunds.get_refund, methods=["GET"]),
        ]

    def render_payment(self, payment: Payment) -> dict[str, Any]:
        return payment.to_public()

    def render_event(self, payment: Payment, core_type: str) -> tuple[str, dict[str, Any]]:
        return core_type, payment.to_public()

    def event_json(self, event: Event) -> dict[str, Any]:
        return {"id": event.id, "type": event.type, "created": event.created,
                "account": event.account, "livemode": event.livemode,
                "sequence": event.sequence, "data": {"object": dict(event.payment)}}

    def credentials(self, account: SandboxAccount) -> dict[str, str]:
        return {"api_key": account.api_key, "webhook_secret": account.webhook_secret}

    def notifies(self, event: Event) -> bool:
        return True

    def unstable_message_id(self) -> str:
        return "msg_" + secrets.token_hex(12)

    def webhook_message(self, events: Sequence[Event], account: SandboxAccount, *,
                        message_id: str, unstable: bool, timestamp: int) -> WebhookMessage:
        [event] = events  # one event per delivery: the dialect does not batch
        body = self.event_json(event)
        if unstable:
            body["id"] = None  # the receiver has only the per-attempt webhook-id
        raw = orjson.dumps(body)
        return WebhookMessage(raw, signed_headers(account.webhook_secret, message_id,
                                                  timestamp, raw))

    def accepted(self, status: int, body: bytes) -> bool:
        return answered_2xx(status, body)

    def unknown_payment_webhook(self, payment: UnknownPayment, *, webhook_secret: str,
                                basic_auth: tuple[str, str] | None) -> UnsolicitedWebhook:
        del basic_auth  # its webhooks are signed only
        live = payment.environment == "live"
        data = {
            "id": f"pay_unknown{payment.nonce}", "object": "payment", "account": payment.account,
            "livemode": live, "amount": payment.amount_minor, "currency": payment.currency,
            "reference": payment.reference, "status": payment.status,
            "decline_code": "card_declined" if payment.status == "declined" else None,
            "amount_refunded": 0, "next_action": None, "created": payment.created,
        }
        event_id = f"evt_unknown{payment.nonce}"
        body = orjson.dumps({"id": event_id, "type": f"payment.{payment.status}", "created": payment.created,
                             "account": payment.account, "livemode": live, "sequence": 1,
                             "data": {"object": data}})
        return UnsolicitedWebhook(event_id, str(data["id"]), body,
                                  lambda at: signed_headers(webhook_secret, event_id, at, body))


DIALECT = CardcoDialect()
