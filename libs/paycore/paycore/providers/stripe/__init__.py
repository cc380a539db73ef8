"""Stripe (PaymentIntents), behind :class:`paycore.providers.base.Provider`, on the official SDK.

- :mod:`.request`: what is sent (the form body stored on the attempt, read back for the SDK);
- :mod:`.wire`: the PaymentIntent and Charge objects, error bodies, key modes;
- :mod:`.client`: :class:`StripeProvider` (create and classify, lookups, budgets);
- :mod:`.operations`: its captures, cancels and refunds (:class:`StripeOperations`);
- :mod:`.events`: ``Stripe-Signature`` verification and events, parsed into a neutral notification
  (a payment's, or an operation's).

The contract is ``docs/providers/stripe.md``.
"""

from paycore.providers.stripe.client import (
    CAPABILITIES,
    DEFAULT_API_BASE,
    DEFAULT_API_VERSION,
    StripeProvider,
)
from paycore.providers.stripe.events import (
    STRIPE_EVENTS,
    parse_event,
    parse_operation_notification,
    signature_header,
)
from paycore.providers.stripe.operations import StripeOperations
from paycore.providers.stripe.request import build_operation_body, build_request_body
from paycore.providers.stripe.wire import NAME, PaymentIntent, key_environment, parse_intent

__all__ = [
    "CAPABILITIES",
    "DEFAULT_API_BASE",
    "DEFAULT_API_VERSION",
    "NAME",
    "STRIPE_EVENTS",
    "PaymentIntent",
    "StripeOperations",
    "StripeProvider",
    "build_operation_body",
    "build_request_body",
    "key_environment",
    "parse_event",
    "parse_intent",
    "parse_operation_notification",
    "signature_header",
]
