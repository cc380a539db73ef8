"""Stripe (PaymentIntents), behind :class:`paycore.providers.base.Provider`, on the official SDK.

- :mod:`.provider`: ``PROVIDER``, what paycore knows of it (settings, accounts' rules, defaults,
  how its parts are built): light, for the settings; the names below load on first use;
- :mod:`.request`: what is sent (the form body stored on the attempt, read back for the SDK);
- :mod:`.wire`: the PaymentIntent and Charge objects, error bodies, key modes;
- :mod:`.client`: :class:`StripeProvider` (create and classify, lookups, budgets);
- :mod:`.operations`: its captures, cancels and refunds (:class:`StripeOperations`);
- :mod:`.events`: ``Stripe-Signature`` verification and events, parsed into a neutral notification
  (a payment's, or an operation's).

The contract is ``docs/providers/stripe.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from paycore.providers.lazy_exports import lazy_exports

if TYPE_CHECKING:
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

# Each name this package re-exports, by its module: imported on first use, so the package's
# settings (.provider) load without its client.
_EXPORTS: Final = {
    "CAPABILITIES": ".client", "DEFAULT_API_BASE": ".client", "DEFAULT_API_VERSION": ".client",
    "StripeProvider": ".client",
    "STRIPE_EVENTS": ".events", "parse_event": ".events", "parse_operation_notification": ".events",
    "signature_header": ".events",
    "StripeOperations": ".operations",
    "build_operation_body": ".request", "build_request_body": ".request",
    "NAME": ".wire", "PaymentIntent": ".wire", "key_environment": ".wire", "parse_intent": ".wire",
}


__getattr__ = lazy_exports(__name__, _EXPORTS)
