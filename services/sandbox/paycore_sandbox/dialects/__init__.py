"""Wire dialects: each provider's documented wire, over the sandbox's one core.

The core (ledger, lifecycle, tokens' outcomes, idempotency store, faults,
clock, request capture, webhook delivery with its retries and faults) speaks
in Cardco's terms: statuses ``succeeded|processing|requires_action|declined|
failed|canceled`` and core event types ``payment.<status>`` /
``payment.refunded``. A *dialect* translates that core to and from one
provider's wire:

- its ``/v1...`` routes (paths, authentication, request bodies, status codes,
  headers and error shapes), which create payments with
  ``lifecycle.create_payment(..., dialect=<name>)`` so the payment records its
  dialect (shown by ``GET /_sandbox/payments``) and only that dialect's
  lookups see it;
- how a core event about one of its payments is rendered (type and data
  object, snapshotted when the event is emitted) and what its webhook body is;
- which events it notifies at all (Adyen sends nothing for pending states),
  how one webhook attempt carrying one event — or several, for a dialect that
  ``batches`` (Adyen) — is rendered and signed, and which answer counts as
  delivered (Cardco, Stripe: any 2xx; Adyen: 2xx with exactly ``[accepted]``);
  the shared :mod:`paycore_sandbox.delivery` sends it, with its retries and
  faults, only to the endpoints of the same dialect;
- its dev credentials for an account (``GET /_sandbox/accounts``).

A dialect is a module ``paycore_sandbox.dialects.<name>`` exposing ``DIALECT``,
an object satisfying :class:`Dialect`; :data:`DIALECT_NAMES` lists the ones
this sandbox serves. Modules are imported on first use, so a dialect's
handlers may import the API helpers without an import cycle.

Two wires may share a path (Cardco's and Stripe's ``/v1/refunds``): the one whose
requests carry a header the other's never do takes its requests with a
:class:`ClaimedRoute`, which :func:`paycore_sandbox.app.create_app` tries first.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from starlette.routing import Match, Route
from starlette.types import Scope

if TYPE_CHECKING:
    from starlette.routing import BaseRoute

    from paycore_sandbox.ledger import Payment
    from paycore_sandbox.settings import SandboxAccount
    from paycore_sandbox.webhooks import Event

DEFAULT_DIALECT = "cardco"
# Every dialect this sandbox serves; a webhook endpoint names one of them.
DIALECT_NAMES: tuple[str, ...] = ("cardco", "stripe", "adyen")


@dataclass(frozen=True)
class WebhookMessage:
    """One webhook attempt as sent: the body bytes and the headers that sign it."""

    body: bytes
    headers: dict[str, str]


@dataclass(frozen=True)
class UnknownPayment:
    """A payment the provider holds that no client asked it for (a chaos run's stray webhooks:
    the receiver must record it for a person, never attach it to an attempt)."""

    account: str
    environment: str
    amount_minor: int
    currency: str
    status: Literal["succeeded", "declined", "processing"]
    reference: str
    nonce: str  # makes its ids fresh (a reused receiver would see a replay otherwise)
    created: int  # unix seconds


@dataclass(frozen=True)
class UnsolicitedWebhook:
    """The provider's webhook about an :class:`UnknownPayment`: its ids, bytes and signing."""

    event_id: str  # what the receiver deduplicates it by
    payment_id: str
    body: bytes
    sign: Callable[[int], dict[str, str]]  # the headers of a send at this unix time


class ClaimedRoute(Route):
    """A route only for the requests that carry ``header`` (lower case), on a path another
    wire serves too; the others of the path go on to that wire's route."""

    def __init__(self, path: str, endpoint: Any, *, methods: list[str], header: str) -> None:
        super().__init__(path, endpoint, methods=methods)
        self.header = header.lower().encode("latin-1")

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] == "http" and not any(name == self.header for name, _ in scope["headers"]):
            return Match.NONE, {}
        return super().matches(scope)


def answered_2xx(status: int, body: bytes) -> bool:
    """The usual acceptance rule: any 2xx answer counts as delivered."""
    del body
    return 200 <= status < 300


class Dialect(Protocol):
    """What a dialect module's ``DIALECT`` provides."""

    name: str
    # Whether several events may share one delivery (``POST /_sandbox/webhooks/batch``).
    batches: bool

    def routes(self) -> Sequence[BaseRoute]:
        """The provider's API routes (mounted by :func:`paycore_sandbox.app.create_app`)."""
        ...

    def render_payment(self, payment: Payment) -> dict[str, Any]:
        """The payment as this provider's API shows it (control endpoints answer it too)."""
        ...

    def render_event(self, payment: Payment, core_type: str) -> tuple[str, dict[str, Any]]:
        """The provider's event type and data object for a core event, at emission."""
        ...

    def event_json(self, event: Event) -> dict[str, Any]:
        """The event's webhook body as recorded (``GET /_sandbox/events`` shows it)."""
        ...

    def credentials(self, account: SandboxAccount) -> dict[str, str]:
        """What paycore needs to speak this dialect to ``account`` (dev credentials)."""
        ...

    def notifies(self, event: Event) -> bool:
        """Whether the provider sends a webhook for ``event`` at all; decided before
        any webhook fault, so an event nobody is sent never uses up a rule."""
        ...

    def unstable_message_id(self) -> str:
        """A fresh per-attempt id for the ``webhook_unstable_ids`` fault."""
        ...

    def webhook_message(self, events: Sequence[Event], account: SandboxAccount, *,
                        message_id: str, unstable: bool, timestamp: int) -> WebhookMessage:
        """One attempt's body and signed headers for ``events``: one event, or
        several (in body order) only when the dialect :attr:`batches`.

        ``message_id`` is the (first) event's id, or under ``webhook_unstable_ids``
        (``unstable``) a fresh :meth:`unstable_message_id` per attempt;
        ``timestamp`` is real wall-clock seconds. A stable event's body must be
        the same bytes on every attempt.
        """
        ...

    def accepted(self, status: int, body: bytes) -> bool:
        """Whether the receiver's answer counts as delivered (else it is retried)."""
        ...

    def unknown_payment_webhook(self, payment: UnknownPayment, *, webhook_secret: str,
                                basic_auth: tuple[str, str] | None) -> UnsolicitedWebhook:
        """The webhook the provider sends about ``payment``, signed with ``webhook_secret`` (and
        carrying ``basic_auth`` where its webhooks carry one)."""
        ...


def dialect_named(name: str) -> Dialect:
    """The dialect ``name`` (one of :data:`DIALECT_NAMES`)."""
    if name not in DIALECT_NAMES:
        raise KeyError(f"unknown sandbox dialect {name!r}")
    module = importlib.import_module(f"{__name__}.{name}")
    dialect: Dialect = module.DIALECT
    return dialect


@dataclass(frozen=True)
class Endpoint:
    """A webhook endpoint: where the events of one dialect's payments go."""

    url: str
    dialect: str = DEFAULT_DIALECT

    @property
    def spec(self) -> str:
        """``url`` for Cardco (as before dialects), else ``<dialect>=<url>``."""
        return self.url if self.dialect == DEFAULT_DIALECT else f"{self.dialect}={self.url}"


def parse_endpoint(spec: str) -> Endpoint:
    """``<url>`` (Cardco) or ``<dialect>=<url>``; the URL itself is checked by the caller.

    Only a known dialect name before the first ``=`` counts as a prefix, so a
    URL with ``=`` in its query is still a Cardco URL.
    """
    name, sep, rest = spec.partition("=")
    if sep and name in DIALECT_NAMES:
        return Endpoint(rest, name)
    return Endpoint(spec)
