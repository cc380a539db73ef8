"""Cardco, behind :class:`paycore.providers.base.Provider`.

- :mod:`.provider`: ``PROVIDER``, what paycore knows of it (settings, accounts' rules, defaults,
  how its parts are built): light, for the settings; the names below load on first use;
- :mod:`.request`: what is sent (the body stored on the attempt, the create request);
- :mod:`.wire`: the payment object, parsing, errors, ``Retry-After``, structured headers;
- :mod:`.client`: :class:`CardcoClient` (create and classify, lookups, budgets);
- :mod:`.operations`: its captures, cancels and refunds; :mod:`.answers`: what a ``POST``'s
  non-success answer means, for the create and the operations alike;
- :mod:`.events`: webhook verification and events, parsed into a neutral notification.

The contract is ``docs/providers/cardco.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from paycore.providers.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from paycore.providers.base import LookupResult, StoredRequest
    from paycore.providers.cardco.client import CAPABILITIES, CardcoClient
    from paycore.providers.cardco.events import CARDCO_EVENTS, InvalidEvent, parse_event
    from paycore.providers.cardco.request import build_request_body
    from paycore.providers.cardco.wire import NAME, ProviderPayment, parse_payment

__all__ = [
    "CAPABILITIES", "CARDCO_EVENTS", "NAME", "CardcoClient", "InvalidEvent", "LookupResult",
    "ProviderPayment", "StoredRequest", "build_request_body", "parse_event", "parse_payment",
]

# Each name this package re-exports, by its module: imported on first use, so the package's
# settings (.provider) load without its client.
_EXPORTS: Final = {
    "LookupResult": "paycore.providers.base", "StoredRequest": "paycore.providers.base",
    "CAPABILITIES": ".client", "CardcoClient": ".client",
    "CARDCO_EVENTS": ".events", "InvalidEvent": ".events", "parse_event": ".events",
    "build_request_body": ".request",
    "NAME": ".wire", "ProviderPayment": ".wire", "parse_payment": ".wire",
}


__getattr__ = lazy_exports(__name__, _EXPORTS)
