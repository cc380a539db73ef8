"""Cardco, behind :class:`paycore.providers.base.Provider`.

- :mod:`.request`: what is sent (the body stored on the attempt, the create request);
- :mod:`.wire`: the payment object, parsing, errors, ``Retry-After``, structured headers;
- :mod:`.client`: :class:`CardcoClient` (create and classify, lookups, budgets);
- :mod:`.operations`: its captures, cancels and refunds; :mod:`.answers`: what a ``POST``'s
  non-success answer means, for the create and the operations alike;
- :mod:`.events`: webhook verification and events, parsed into a neutral notification.

The contract is ``docs/providers/cardco.md``.
"""

from paycore.providers.base import LookupResult, StoredRequest
from paycore.providers.cardco.client import CAPABILITIES, CardcoClient
from paycore.providers.cardco.events import CARDCO_EVENTS, InvalidEvent, parse_event
from paycore.providers.cardco.request import build_request_body
from paycore.providers.cardco.wire import NAME, ProviderPayment, parse_payment

__all__ = [
    "CAPABILITIES", "CARDCO_EVENTS", "NAME", "CardcoClient", "InvalidEvent", "LookupResult",
    "ProviderPayment", "StoredRequest", "build_request_body", "parse_event", "parse_payment",
]
