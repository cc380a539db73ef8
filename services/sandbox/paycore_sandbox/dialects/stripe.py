"""The Stripe dialect: PaymentIntents, Stripe events and ``Stripe-Signature``.

Routes (:mod:`.stripe_api`): ``POST /v1/payment_intents``,
``GET /v1/payment_intents/search``, ``GET /v1/payment_intents/{intent}``; after the
payment (:mod:`.stripe_after_payment`): ``POST /v1/payment_intents/{intent}/capture|cancel``,
``POST /v1/refunds``, ``GET /v1/refunds``, ``GET /v1/refunds/{id}`` (the refund paths are
Cardco's too: a request carrying ``Stripe-Version`` is Stripe's); the settlement book
(:mod:`.stripe_balance`): ``GET /v1/balance_transactions``, ``GET /v1/charges/{charge}`` and the
sandbox-only ``GET /_sandbox/stripe/payout_reconciliation.csv``.
Objects, errors and signatures: :mod:`.stripe_wire`. Webhooks: a Stripe event
(``evt_…``; ``payment_intent.*``, ``charge.refunded``, ``refund.created|updated|failed``)
signed ``Stripe-Signature: t=<unix>,v1=<hex>`` with the account's ``whsec_`` secret,
sent to the ``stripe`` endpoints only. A capture has no Stripe object and no event of its
own (the intent's ``payment_intent.succeeded`` tells it): its core events are recorded, never
sent.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any, Final

import orjson
from starlette.routing import BaseRoute, Route

from paycore_sandbox.dialects import (
    ClaimedRoute,
    UnknownPayment,
    UnsolicitedWebhook,
    WebhookMessage,
    answered_2xx,
)
from paycore_sandbox.dialects import stripe_after_payment as after_payment
from paycore_sandbox.dialects import stripe_api as handlers
from paycore_sandbox.dialects import stripe_balance as balance
from paycore_sandbox.dialects import stripe_wire as wire
from paycore_sandbox.ledger import Payment
from paycore_sandbox.settings import SandboxAccount
from paycore_sandbox.webhooks import Event


class StripeDialect:
    name = wire.NAME
    batches = False

    def routes(self) -> Sequence[BaseRoute]:
        return [
            Route("/v1/payment_intents", handlers.create_intent, methods=["POST"]),
            # Before /{intent}: "search" is not an intent id.
            Route("/v1/payment_intents/search", handlers.search_intents, methods=["GET"]),
            Route("/v1/payment_intents/{intent}", handlers.retrieve_intent, methods=["GET"]),
            Route("/v1/payment_intents/{intent}/capture", after_payment.capture_intent,
                  methods=["POST"]),
            Route("/v1/payment_intents/{intent}/cancel", after_payment.cancel_intent,
                  methods=["POST"]),
            # The settlement book as Stripe shows it (balance transactions, their charges).
            Route("/v1/balance_transactions", balance.list_balance_transactions, methods=["GET"]),
            Route("/v1/charges/{charge}", balance.retrieve_charge, methods=["GET"]),
            Route("/_sandbox/stripe/payout_reconciliation.csv", balance.payout_reconciliation,
                  methods=["GET"]),
            # Cardco's paths too: the SDK always sends Stripe-Version, Cardco's clients never do.
            ClaimedRoute("/v1/refunds", after_payment.create_refund, methods=["POST"],
                         header="stripe-version"),
            ClaimedRoute("/v1/refunds", after_payment.list_refunds, methods=["GET"],
                         header="stripe-version"),
            ClaimedRoute("/v1/refunds/{refund}", after_payment.get_refund, methods=["GET"],
                         header="stripe-version"),
        ]

    def render_payment(self, payment: Payment) -> dict[str, Any]:
        return wire.render_intent(payment)

    def render_event(self, payment: Payment, core_type: str) -> tuple[str, dict[str, Any]]:
        return wire.render_event(payment, core_type)

    def event_json(self, event: Event) -> dict[str, Any]:
        event_type, data = event.type, dict(event.payment)
        if event.object_id is not None and event.type.startswith("refund."):
            # A refund's core event carries the contract's object: Stripe's Refund from it.
            event_type = wire.refund_event_type(event.type, event.sequence)
            data = wire.render_refund(data)
        return {"id": event.id, "object": "event", "api_version": wire.DEFAULT_API_VERSION,
                "created": event.created, "data": {"object": data},
                "livemode": event.livemode, "pending_webhooks": 1,
                "request": {"id": None, "idempotency_key": event.idempotency_key},
                "type": event_type}

    def credentials(self, account: SandboxAccount) -> dict[str, str]:
        return {"api_key": account.api_key, "webhook_secret": account.webhook_secret}

    def notifies(self, event: Event) -> bool:
        # Stripe has no capture object: the intent's own events tell of a capture.
        return not (event.object_id is not None and event.type.startswith("capture."))

    def unstable_message_id(self) -> str:
        return "evt_" + secrets.token_hex(12)

    def webhook_message(self, events: Sequence[Event], account: SandboxAccount, *,
                        message_id: str, unstable: bool, timestamp: int) -> WebhookMessage:
        [event] = events  # one event per delivery: the dialect does not batch
        body = self.event_json(event)
        if unstable:
            body["id"] = message_id  # a fresh evt_ per attempt: nothing to deduplicate on
        raw = orjson.dumps(body)
        return WebhookMessage(raw, {
            "Stripe-Signature": wire.signature_header(account.webhook_secret, timestamp, raw),
            "Content-Type": "application/json; charset=utf-8",
            "User-Agent": wire.WEBHOOK_USER_AGENT,
        })

    def accepted(self, status: int, body: bytes) -> bool:
        return answered_2xx(status, body)

    def unknown_payment_webhook(self, payment: UnknownPayment, *, webhook_secret: str,
                                basic_auth: tuple[str, str] | None) -> UnsolicitedWebhook:
        del basic_auth  # its webhooks are signed only
        live = payment.environment == "live"
        event_type, status = UNKNOWN_PAYMENT_EVENTS[payment.status]
        declined = {"type": "card_error", "code": "card_declined", "decline_code": "generic_decline"}
        intent = {
            "id": f"pi_unknown{payment.nonce}", "object": "payment_intent", "amount": payment.amount_minor,
            "currency": payment.currency.lower(), "status": status, "livemode": live,
            "created": payment.created, "metadata": {"paycore_reference": payment.reference},
            "next_action": None, "last_payment_error": declined if payment.status == "declined" else None,
        }
        event_id = f"evt_unknown{payment.nonce}"
        body = orjson.dumps({"id": event_id, "object": "event", "type": event_type,
                             "created": payment.created, "livemode": live, "data": {"object": intent}})
        return UnsolicitedWebhook(event_id, str(intent["id"]), body, lambda at: {
            "Stripe-Signature": wire.signature_header(webhook_secret, at, body),
            "Content-Type": "application/json"})


# An unknown payment's status -> its event's type and its PaymentIntent's status.
UNKNOWN_PAYMENT_EVENTS: Final = {
    "succeeded": ("payment_intent.succeeded", "succeeded"),
    "declined": ("payment_intent.payment_failed", "requires_payment_method"),
    "processing": ("payment_intent.processing", "processing")}


DIALECT = StripeDialect()
