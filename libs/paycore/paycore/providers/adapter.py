"""What every provider's client shares: its accounts, budgets, pool, logs and webhook side.

A provider package (``cardco``, ``stripe``, ``adyen``) keeps its own request, wire, client and
events modules; its client derives from :class:`ProviderClient`, which holds what is the same
for all three, written once:

- the constructor (its accounts among the configured ones, the clock, the call ceiling, the
  transport), the pool (:func:`paycore.providers.http.no_retry_client`, opened by the first
  call, so building a client to check settings opens nothing), ``aclose`` and ``async with``;
- what the provider is (``name``, its :class:`~paycore.providers.base.Capabilities`) and how
  its notifications read (an :class:`EventFormat`, which needs no account);
- ``create_payment``: the stored request built (``_build_create``), sent once
  (``_send_create``) and classified (``_classify_create``) by the provider's own code, and
  every ending without an answer Unknown; ``unbuildable_reason`` from the same build;
- the log lines of a create and of a lookup (attempt ids and reason codes only);
- the webhook side: the verifier built on first use (checkout and recovery never receive
  webhooks and need no secret), ``verify_deliveries``, ``verify_notification`` for a delivery
  of one notification, and the acknowledgement the provider expects.
"""

from __future__ import annotations

import abc
import logging
import ssl
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import ClassVar, Generic, Protocol, Self, TypeVar

import httpx

from paycore.clock import Clock
from paycore.domain import OperationKind, OutcomeKind, ProviderOutcome
from paycore.providers.base import (
    Capabilities,
    LookupResult,
    Notification,
    NotificationUnverified,
    OperationEnding,
    OperationOutcome,
    StoredRequest,
    VerifiedDelivery,
)
from paycore.providers.http import NotBuildable, no_retry_client
from paycore.providers.limits import accounts_of, call_limit, checked_ceiling
from paycore.providers.package import ProviderAccountConfig


class EventFormat:
    """How one provider's notifications read (:class:`~paycore.providers.base.NotificationFormat`):
    its name, the parser of a verified body, and the deduplication key. A stored event is
    re-parsed with it, so it needs no account or secret."""

    def __init__(self, name: str, parse: Callable[[bytes], Notification],
                 key: Callable[[Notification], str | None]) -> None:
        self._name = name
        self._parse = parse
        self._key = key

    @property
    def name(self) -> str:
        return self._name

    def parse_notification(self, body: bytes) -> Notification:
        return self._parse(body)

    def notification_key(self, n: Notification) -> str | None:
        return self._key(n)


class DeliveryVerifier(Protocol):
    """A provider's webhook verifier, built from its accounts' secrets."""

    def verify_deliveries(self, headers: Mapping[str, str], body: bytes, *,
                          now: datetime) -> tuple[VerifiedDelivery, ...]: ...


class OneEventPerDelivery(abc.ABC):
    """A verifier whose every delivery carries exactly one notification (Cardco's, Stripe's)."""

    @abc.abstractmethod
    def verify(self, headers: Mapping[str, str], body: bytes, *, now: datetime) -> VerifiedDelivery: ...

    def verify_deliveries(self, headers: Mapping[str, str], body: bytes, *,
                          now: datetime) -> tuple[VerifiedDelivery, ...]:
        return (self.verify(headers, body, now=now),)


RequestT = TypeVar("RequestT")  # what a provider's create call sends (an httpx.Request, the SDK's arguments)
AnswerT = TypeVar("AnswerT")  # what comes back when an answer arrives


class ProviderClient(abc.ABC, Generic[RequestT, AnswerT]):
    """The shared part of a provider's :class:`~paycore.providers.base.Provider`.

    A subclass names its :data:`FORMAT` and :data:`CAPABILITIES`; builds, sends and classifies
    its create request (``_build_create``, ``_send_create``, ``_classify_create``); builds its
    webhook verifier (``_new_verifier``).

    :param accounts: Configured provider accounts; those of another provider are ignored.
        Each stored request and each call names its account.
    :param clock: The clock budgets run on.
    :param max_call_duration_s: The client's own ceiling for one call, applied even when the
        caller passes no budget.
    :param transport: Replaces the HTTP transport (tests use real servers, never mocks); its
        own pool settings then apply.
    :raises ValueError: ``max_call_duration_s`` is not positive, not finite or above
        :data:`paycore.config.MAX_BUDGET_S`; two accounts share an id.
    """

    FORMAT: ClassVar[EventFormat]
    CAPABILITIES: ClassVar[Capabilities]
    # The body and media type the provider expects once every notification is recorded;
    # ``None``: any 2xx.
    ACKNOWLEDGEMENT: ClassVar[tuple[bytes, str] | None] = None

    def __init__(self, accounts: Sequence[ProviderAccountConfig], clock: Clock, *, max_call_duration_s: float,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._max_call_duration_s = checked_ceiling(max_call_duration_s)
        self._accounts: dict[str, ProviderAccountConfig] = accounts_of(self.FORMAT.name, accounts)
        self._clock = clock
        self._transport = transport
        self._pool: httpx.AsyncClient | None = None
        self._webhooks: DeliveryVerifier | None = None
        # One logger per provider: log routing and alerts filter on its name.
        self._log = logging.getLogger(f"paycore.providers.{self.FORMAT.name}")

    # -- the pool -------------------------------------------------------------

    def _tls(self) -> ssl.SSLContext | bool:
        """The TLS trust of the pool (httpx's default bundle unless a provider brings its own)."""
        return True

    @property
    def _http(self) -> httpx.AsyncClient:
        if self._pool is None:
            self._pool = no_retry_client(self._transport, verify=self._tls())
        return self._pool

    async def aclose(self) -> None:
        """Close the connection pool."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    # -- what the provider is -------------------------------------------------

    @property
    def name(self) -> str:
        return self.FORMAT.name

    @property
    def capabilities(self) -> Capabilities:
        return self.CAPABILITIES

    def capabilities_of(self, provider_account: str) -> Capabilities:
        return self.CAPABILITIES

    def parse_notification(self, body: bytes) -> Notification:
        return self.FORMAT.parse_notification(body)

    def notification_key(self, n: Notification) -> str | None:
        return self.FORMAT.notification_key(n)

    # -- budgets and accounts -------------------------------------------------

    def _call_limit(self, budget_s: float | None) -> tuple[float, str]:
        """Seconds this call may take, and which limit that is (for the reason)."""
        return call_limit(budget_s, self._max_call_duration_s)

    def _configured(self, provider_account: str) -> ProviderAccountConfig:
        """The account a stored request or a call names; never a fallback to another.

        :raises NotBuildable: ``account-not-configured``.
        """
        acct = self._accounts.get(provider_account)
        if acct is None:
            raise NotBuildable("account-not-configured")
        return acct

    # -- create ---------------------------------------------------------------

    @abc.abstractmethod
    def _build_create(self, stored: StoredRequest) -> RequestT:
        """What the create call sends for ``stored``, as configured now (builds no pool, sends nothing).

        Only ``stored`` (endpoint, body bytes, key, version) plus the current credentials of
        ``stored.provider_account``: never another or a default account.

        :raises NotBuildable: The stored request cannot be sent as stored.
        """

    @abc.abstractmethod
    async def _send_create(self, request: RequestT, limit_s: float, limit_name: str) -> AnswerT | str:
        """Send ``request`` once, within ``limit_s``: the answer, or why there is none (a reason)."""

    @abc.abstractmethod
    def _classify_create(self, stored: StoredRequest, answer: AnswerT, *,
                         first_send: bool) -> ProviderOutcome:
        """What an answer says about the attempt (the provider's documented statuses and bodies)."""

    async def create_payment(self, stored: StoredRequest, *, budget_s: float | None,
                             first_send: bool) -> ProviderOutcome:
        """Send the stored create-payment request once and classify the answer.

        The call runs under ``clock.budget(min(budget_s, max_call_duration_s))``; a caller that
        passes no budget is still cut off by the client's maximum call duration.

        :param stored: The attempt's stored request.
        :param budget_s: The caller's budget for this call, in seconds on the clock, or
            ``None``. Zero or negative: nothing is sent.
        :param first_send: ``True`` only if no earlier send of this attempt can have happened.
            Only then may a documented rejection mean ``not_applied``; on a resend it is
            ``unknown``.
        :return: The classified outcome, with ``http_status`` (and ``replayed`` where the
            provider says) filled when an answer arrived.
        :raises ValueError: ``budget_s`` is NaN.
        :raises asyncio.CancelledError: The calling task was cancelled.
        """
        limit_s, limit_name = self._call_limit(budget_s)
        try:
            request = self._build_create(stored)
        except NotBuildable as exc:
            # Still Unknown, not NotApplied: this call cannot prove that the attempt had no
            # earlier send. Recovery escalates it.
            return self._logged(stored, ProviderOutcome.unknown(f"request.not-buildable.{exc.reason}"))
        if limit_s <= 0:
            # The budget is already spent; do not start a send that would be cut off part-way.
            return self._logged(stored, ProviderOutcome.unknown(f"provider.no-response.{limit_name}"))
        answer = await self._send_create(request, limit_s, limit_name)
        if isinstance(answer, str):  # no answer: timeout, transport error, unreadable answer
            return self._logged(stored, ProviderOutcome.unknown(answer))
        return self._logged(stored, self._classify_create(stored, answer, first_send=first_send))

    def unbuildable_reason(self, stored: StoredRequest) -> str | None:
        """Why the stored request cannot be sent as it is now configured, or ``None``.

        Recovery asks this before committing a resend intent: an account no longer
        configured, an endpoint whose origin changed, or an invalid stored header or body
        each refuse the resend before anything is sent.
        """
        try:
            self._build_create(stored)
        except NotBuildable as exc:
            return exc.reason
        return None

    def _logged(self, stored: StoredRequest, outcome: ProviderOutcome) -> ProviderOutcome:
        level = logging.WARNING if outcome.kind is OutcomeKind.UNKNOWN else logging.INFO
        self._log.log(level, "%s create attempt_id=%s outcome=%s reason=%s http_status=%s replayed=%s",
                      self.name, stored.attempt_id, outcome.kind.value, outcome.reason, outcome.http_status,
                      outcome.replayed)
        return outcome

    # -- after the payment: one send of a stored capture, cancel or refund ------------------------

    def _build_operation(self, stored: StoredRequest, kind: OperationKind,
                         provider_payment_id: str) -> RequestT:
        """What one send of the stored operation transmits, as configured now (a provider with
        operations overrides it).

        :raises NotBuildable: The stored request cannot be sent as stored.
        """
        raise NotImplementedError(f"{self.name} sends no operations")

    async def _post_operation(self, request: RequestT, kind: OperationKind, provider_payment_id: str,
                              limit_s: float, limit_name: str) -> AnswerT | str:
        """Send ``request`` once: by default as a create is sent (one stored POST)."""
        return await self._send_create(request, limit_s, limit_name)

    def _classify_operation(self, stored: StoredRequest, kind: OperationKind, provider_payment_id: str,
                            answer: AnswerT, *, first_send: bool) -> OperationOutcome:
        """What an answer says about the operation (a provider with operations overrides it)."""
        raise NotImplementedError(f"{self.name} sends no operations")

    async def _send_operation_once(self, stored: StoredRequest, kind: OperationKind, *,
                                   provider_payment_id: str, budget_s: float | None,
                                   first_send: bool) -> OperationOutcome:
        """As :meth:`create_payment`, for an operation: built from the stored request (Unknown when
        it cannot be), sent once within the budget (nothing when it is spent), classified by the
        provider's rules, and logged."""
        limit_s, limit_name = self._call_limit(budget_s)
        try:
            request = self._build_operation(stored, kind, provider_payment_id)
        except NotBuildable as exc:
            outcome = OperationOutcome.unknown(kind, f"request.not-buildable.{exc.reason}")
        else:
            if limit_s <= 0:
                outcome = OperationOutcome.unknown(kind, f"provider.no-response.{limit_name}")
            else:
                answer = await self._post_operation(request, kind, provider_payment_id, limit_s, limit_name)
                outcome = (OperationOutcome.unknown(kind, answer) if isinstance(answer, str)
                           else self._classify_operation(stored, kind, provider_payment_id, answer,
                                                         first_send=first_send))
        return self._operation_logged(stored, outcome)

    def _operation_logged(self, stored: StoredRequest, outcome: OperationOutcome) -> OperationOutcome:
        # Operation ids and reason codes only: never the key, a header or a body.
        self._log.log(logging.WARNING if outcome.ending is OperationEnding.UNKNOWN else logging.INFO,
                      "%s %s operation_id=%s ending=%s reason=%s http_status=%s replayed=%s", self.name,
                      outcome.operation.value, stored.attempt_id, outcome.ending.value, outcome.reason,
                      outcome.http_status, outcome.replayed)
        return outcome

    def _lookup_logged(self, operation: str, provider_account: str, result: LookupResult) -> LookupResult:
        level = logging.INFO if result.kind in ("found", "not_found") else logging.WARNING
        self._log.log(level, "%s %s account=%s result=%s reason=%s",
                      self.name, operation, provider_account, result.kind, result.reason)
        return result

    # -- notifications --------------------------------------------------------

    @abc.abstractmethod
    def _new_verifier(self, accounts: Iterable[ProviderAccountConfig]) -> DeliveryVerifier:
        """The verifier of ``accounts``' webhook secrets.

        :raises paycore.config.ConfigError: No account can verify a notification.
        :raises ValueError: A malformed secret.
        """

    def _verifier(self) -> DeliveryVerifier:
        # Built on first use: checkout and recovery never receive webhooks and need no secret.
        if self._webhooks is None:
            self._webhooks = self._new_verifier(self._accounts.values())
        return self._webhooks

    def check_notification_secrets(self) -> None:
        self._verifier()

    def verify_deliveries(self, headers: Mapping[str, str], body: bytes, *,
                          now: datetime) -> tuple[VerifiedDelivery, ...]:
        return self._verifier().verify_deliveries(headers, body, now=now)

    def verify_notification(self, headers: Mapping[str, str], body: bytes, *,
                            now: datetime) -> VerifiedDelivery:
        """The delivery of one notification.

        :raises NotificationUnverified: As :meth:`verify_deliveries`; or (malformed) a delivery
            of several notifications (an Adyen batch of several items).
        """
        deliveries = self.verify_deliveries(headers, body, now=now)
        if len(deliveries) != 1:
            raise NotificationUnverified("batch-of-several-items", malformed=True)
        return deliveries[0]

    @property
    def acknowledgement(self) -> tuple[bytes, str] | None:
        return self.ACKNOWLEDGEMENT
