"""Adyen (Checkout API v71), behind :class:`paycore.providers.base.Provider`.

- :mod:`.provider`: ``PROVIDER``, what paycore knows of it (settings, accounts' rules, defaults,
  how its parts are built): light, for the settings; the names below load on first use;
- :mod:`.request`: what is sent (the stored ``/payments`` body, the create request);
- :mod:`.wire`: the ``/payments`` answer, error bodies, ``Transient-Error``, headers;
- :mod:`.answers`: what every answer but a success means, for the create and the modifications;
- :mod:`.client`: :class:`AdyenProvider` (create and classify; no lookups exist);
- :mod:`.operations`: :class:`AdyenOperations`, captures, cancels and refunds ("received" is pending);
- :mod:`.notifications`: basic auth, per-item HMAC, batches, items as neutral notifications (a
  payment's, or a capture's, cancel's or refund's).

The contract is ``docs/providers/adyen.md``; the choices behind it ``docs/decisions/0002-adyen-client.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from paycore.providers.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from paycore.providers.adyen.client import CAPABILITIES, AdyenProvider
    from paycore.providers.adyen.notifications import (
        ACKNOWLEDGEMENT,
        ADYEN_EVENTS,
        OPERATION_EVENT_CODES,
        InvalidItem,
        NotificationVerifier,
        item_signature,
        parse_notification,
        parse_operation_item,
        parse_operation_notification,
    )
    from paycore.providers.adyen.operations import AdyenOperations
    from paycore.providers.adyen.request import build_request_body
    from paycore.providers.adyen.wire import NAME, AdyenPayment, parse_payment

__all__ = [
    "ACKNOWLEDGEMENT", "ADYEN_EVENTS", "CAPABILITIES", "NAME", "OPERATION_EVENT_CODES", "AdyenOperations",
    "AdyenPayment", "AdyenProvider", "InvalidItem", "NotificationVerifier", "build_request_body",
    "item_signature", "parse_notification", "parse_operation_item", "parse_operation_notification",
    "parse_payment",
]

# Each name this package re-exports, by its module: imported on first use, so the package's
# settings (.provider) load without its client.
_EXPORTS: Final = {
    "CAPABILITIES": ".client", "AdyenProvider": ".client",
    "ACKNOWLEDGEMENT": ".notifications", "ADYEN_EVENTS": ".notifications",
    "OPERATION_EVENT_CODES": ".notifications", "InvalidItem": ".notifications",
    "NotificationVerifier": ".notifications", "item_signature": ".notifications",
    "parse_notification": ".notifications", "parse_operation_item": ".notifications",
    "parse_operation_notification": ".notifications",
    "AdyenOperations": ".operations",
    "build_request_body": ".request",
    "NAME": ".wire", "AdyenPayment": ".wire", "parse_payment": ".wire",
}


__getattr__ = lazy_exports(__name__, _EXPORTS)
