"""The Adyen client: send the stored ``/payments`` request and classify the answer; no lookups.

:class:`AdyenProvider` is Adyen's :class:`paycore.providers.base.Provider`, a small
httpx client for Checkout API v71 (the official SDK is synchronous; see
``docs/decisions/0002-adyen-client.md``). The contract is ``docs/providers/adyen.md``.

The rules are Cardco's (:mod:`paycore.providers.cardco.client`): it sends the stored
request once per call and never retries; endpoint, body bytes, idempotency key come
from the stored attempt and only the stored account's key is applied at send time;
every ending without a usable answer is ``unknown``; only a documented rejection of
the *first* send is ``not_applied``; programming errors surface; logs carry attempt
ids and reason codes, never the API key, a body or a payment method.

Adyen has no lookup by merchant reference, and paycore does not look payments up by
pspReference either (the Checkout API has no payment read): :meth:`get_payment` and
:meth:`find_by_reference` answer ``unsupported`` and send nothing. Recovery relies on
notifications and on resending the same request under the same key inside Adyen's
key retention (at least 31 days,
https://docs.adyen.com/development-resources/api-idempotency).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Final

import httpx

from paycore.clock import Clock
from paycore.config import ProviderAccountConfig
from paycore.domain import OutcomeKind, ProviderOutcome
from paycore.evidence import judge
from paycore.providers.adyen import notifications
from paycore.providers.adyen.notifications import ACKNOWLEDGEMENT
from paycore.providers.adyen.request import build_request_body, create_request
from paycore.providers.adyen.wire import (
    NAME,
    UNREADABLE,
    NotBuildable,
    is_transient,
    parse_error,
    parse_payment,
    read_json,
)
from paycore.providers.base import (
    Capabilities,
    LookupResult,
    PaymentMethod,
    ReferenceLookup,
    StoredRequest,
    VerifiedDelivery,
)
from paycore.providers.limits import accounts_of, call_limit, checked_ceiling

log = logging.getLogger("paycore.providers.adyen")

CAPABILITIES: Final = Capabilities(
    lookup_by_reference=ReferenceLookup.UNSUPPORTED,  # no payment read of any kind
    key_retention_s=31 * 86_400.0,  # "valid for a minimum period of 31 days after first submission"
    # Adyen documents no replay of server errors: a 5xx under a key may be answered
    # differently by a resend, which is why a resend can still learn something.
    server_errors_replayed=False,
)

# Statuses whose documented meaning is "rejected before execution" (response-handling):
# 400 "Do not repeat the request without first modifying it", 422 a validation error.
_VALIDATION_STATUSES: Final = frozenset({400, 422})


class AdyenProvider(notifications.AdyenEvents):
    """The one HTTP client for Adyen, and Adyen's :class:`~paycore.providers.base.Provider`.

    One ``httpx.AsyncClient`` (HTTP/1.1 keep-alive pool, no httpx timeout: the call's
    budget is the deadline; no redirects, no retries, no environment proxies), opened
    by the first call.

    :param accounts: Configured provider accounts; those not ``adyen`` are ignored.
    :param clock: The clock budgets run on.
    :param max_call_duration_s: The client's own ceiling for one call.
    :param transport: Replaces the HTTP transport (tests use real servers, not mocks).
    :raises ValueError: A bad ceiling; two accounts with one id.
    """

    def __init__(
        self,
        accounts: Sequence[ProviderAccountConfig],
        clock: Clock,
        *,
        max_call_duration_s: float,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        ceiling_s = checked_ceiling(max_call_duration_s)
        self._accounts: dict[str, ProviderAccountConfig] = accounts_of(NAME, accounts)
        self._clock = clock
        self._max_call_duration_s = ceiling_s
        self._transport = transport
        self._pool: httpx.AsyncClient | None = None
        self._verifier: notifications.NotificationVerifier | None = None

    @property
    def _http(self) -> httpx.AsyncClient:
        if self._pool is None:
            transport = self._transport or httpx.AsyncHTTPTransport(
                http1=True, http2=False,
                retries=0,  # httpx would otherwise reconnect on its own
                # Below the common 5 s server idle timeout: reusing a connection the server
                # is closing would turn a healthy call into an Unknown.
                limits=httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=4.0),
            )
            self._pool = httpx.AsyncClient(transport=transport, timeout=None, follow_redirects=False,
                                           trust_env=False)
        return self._pool

    async def aclose(self) -> None:
        """Close the connection pool."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.aclose()

    async def __aenter__(self) -> AdyenProvider:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    # -- what Adyen is --------------------------------------------------------

    @property
    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    def capabilities_of(self, provider_account: str) -> Capabilities:
        return CAPABILITIES

    def build_request_body(self, account: ProviderAccountConfig, *, amount_minor: int, currency: str,
                           payment_method: PaymentMethod, reference: str,
                           description: str | None = None) -> str:
        """The ``/payments`` body for ``account`` (:func:`.request.build_request_body`): it names the
        merchant account and its ``returnUrl``. ``description`` is not sent (``/payments`` has no
        such field).

        :raises ValueError: An account this provider does not serve, no ``returnUrl``, raw card
            data, or a value Adyen would reject.
        """
        del description
        acct = self._accounts.get(account.provider_account)
        if acct is None:
            raise ValueError(f"no Adyen account {account.provider_account} is configured")
        return build_request_body(amount_minor=amount_minor, currency=currency, payment_method=payment_method,
                                  reference=reference, merchant_account=acct.account,
                                  return_url=acct.return_url, environment=acct.environment)

    # -- budgets ------------------------------------------------------------

    def _call_limit(self, budget_s: float | None) -> tuple[float, str]:
        """Seconds this call may take, and which limit that is (for the reason)."""
        return call_limit(budget_s, self._max_call_duration_s)

    # -- create -------------------------------------------------------------

    def _build_create(self, stored: StoredRequest) -> httpx.Request:
        acct = self._accounts.get(stored.provider_account)
        if acct is None:
            raise NotBuildable("account-not-configured")
        return create_request(stored, acct)

    def unbuildable_reason(self, stored: StoredRequest) -> str | None:
        """Why the stored request cannot be sent as configured now (before a resend intent), or ``None``."""
        try:
            self._build_create(stored)
        except NotBuildable as exc:
            return exc.reason
        return None

    async def create_payment(self, stored: StoredRequest, *, budget_s: float | None,
                             first_send: bool) -> ProviderOutcome:
        """Send the stored ``/payments`` request once and classify the answer.

        :param budget_s: The caller's budget in seconds on the clock, or ``None`` (the
            client's ceiling still applies). Zero or negative: nothing is sent.
        :param first_send: Only then may a documented rejection be ``not_applied``.
        :raises ValueError: ``budget_s`` is NaN.
        :raises asyncio.CancelledError: The calling task was cancelled.
        """
        limit_s, limit_name = self._call_limit(budget_s)
        try:
            request = self._build_create(stored)
        except NotBuildable as exc:
            return self._logged(stored, ProviderOutcome.unknown(f"request.not-buildable.{exc.reason}"))
        if limit_s <= 0:
            return self._logged(stored, ProviderOutcome.unknown(f"provider.no-response.{limit_name}"))
        try:
            async with self._clock.budget(limit_s):
                response = await self._http.send(request)
        except TimeoutError:
            return self._logged(stored, ProviderOutcome.unknown(f"provider.no-response.{limit_name}"))
        except httpx.TransportError as exc:
            return self._logged(stored, ProviderOutcome.unknown(f"provider.transport.{type(exc).__name__}"))
        except httpx.DecodingError:
            return self._logged(stored, ProviderOutcome.unknown("provider.body-unreadable"))
        return self._logged(stored, self._classify_create(stored, response, first_send=first_send))

    def _classify_create(self, stored: StoredRequest, response: httpx.Response, *,
                         first_send: bool) -> ProviderOutcome:
        """Map a ``/payments`` answer to an outcome.

        ===============================  ================================================
        answer                           outcome
        ===============================  ================================================
        ``Transient-Error: true``        ``unknown`` ``provider.transient-error`` (any
                                         status: Adyen asks for the same-key resend)
        200, a payment of this attempt   by ``resultCode`` (:meth:`AdyenPayment.to_outcome`)
        200, another payment's answer    ``unknown`` ``provider.response-mismatch.<field>``
        400/409/422 errorCode 704        ``unknown`` ``provider.in-progress``
        400/422 about the idempotency    ``unknown`` ``provider.key-reused``
        key
        400/422 ``validation``           first send: ``not_applied`` ``rejected:<code>``;
                                         resend: ``unknown`` ``provider.rejected-this-send.<code>``
        401, 403                         first send: ``not_applied`` ``rejected:auth``;
                                         resend: ``unknown`` ``provider.rejected.auth``
        409 (other)                      ``unknown`` ``provider.conflict``
        429                              ``unknown`` ``provider.rate-limited``
        5xx                              ``unknown`` ``provider.http-<status>``
        other                            ``unknown`` ``provider.unexpected-status-<status>``
        ===============================  ================================================

        A body that is empty or not JSON where one is needed is ``provider.body-unreadable``;
        JSON that does not fit is ``provider.body-unrecognized``.
        """
        status = response.status_code
        meta: dict[str, Any] = {"http_status": status}
        if is_transient(response):
            return ProviderOutcome.unknown("provider.transient-error", **meta)

        if status == 200:
            body = read_json(response.content)
            if body is UNREADABLE:
                return ProviderOutcome.unknown("provider.body-unreadable", **meta)
            payment = parse_payment(body)
            if payment is None:
                return ProviderOutcome.unknown("provider.body-unrecognized", **meta)
            verdict = judge(stored, payment.claim())
            if not verdict.accepted:
                # Evidence about another payment: never this attempt's id or status.
                return ProviderOutcome.unknown(
                    f"provider.response-mismatch.{verdict.attribute}", claim=payment.claim(),
                    detail={"reported_payment": payment.evidence()}, **meta)
            return dataclasses.replace(payment.to_outcome(), **meta)

        if status in (400, 409, 422):
            body = read_json(response.content)
            error = None if body is UNREADABLE else parse_error(body)
            if error is not None and error.in_progress:
                # Another send under this key is executing or has executed.
                return ProviderOutcome.unknown("provider.in-progress", **meta)
            if error is not None and error.about_idempotency:
                log.error("adyen create attempt_id=%s: idempotency key refused (%s)",
                          stored.attempt_id, error.error_code)
                return ProviderOutcome.unknown("provider.key-reused", **meta)
            if status == 409:
                return ProviderOutcome.unknown("provider.conflict", **meta)
            if body is UNREADABLE:
                return ProviderOutcome.unknown("provider.body-unreadable", **meta)
            if error is None or error.error_type != "validation":
                return ProviderOutcome.unknown("provider.body-unrecognized", **meta)
            if first_send:
                return ProviderOutcome.not_applied(f"rejected:{error.error_code}", request_rejected=True,
                                                   **meta)
            # A resend refused before execution says nothing of the earlier send.
            return ProviderOutcome.unknown(f"provider.rejected-this-send.{error.error_code}",
                                           request_rejected=True, **meta)

        if status in (401, 403):
            # Refused before anything was looked at; on a resend it proves nothing.
            if first_send:
                return ProviderOutcome.not_applied("rejected:auth", **meta)
            return ProviderOutcome.unknown("provider.rejected.auth", **meta)
        if status == 429:
            return ProviderOutcome.unknown("provider.rate-limited", **meta)
        if 500 <= status <= 599:
            return ProviderOutcome.unknown(f"provider.http-{status}", **meta)
        return ProviderOutcome.unknown(f"provider.unexpected-status-{status}", **meta)

    @staticmethod
    def _logged(stored: StoredRequest, outcome: ProviderOutcome) -> ProviderOutcome:
        level = logging.WARNING if outcome.kind is OutcomeKind.UNKNOWN else logging.INFO
        log.log(level, "adyen create attempt_id=%s outcome=%s reason=%s http_status=%s",
                stored.attempt_id, outcome.kind.value, outcome.reason, outcome.http_status)
        return outcome

    # -- lookups: none --------------------------------------------------------

    async def get_payment(self, provider_account: str, payment_id: str, *,
                          budget_s: float | None) -> LookupResult:
        """``unsupported``: the Checkout API has no payment read. Sends nothing."""
        return LookupResult("unsupported")

    async def find_by_reference(self, provider_account: str, reference: str, *,
                                budget_s: float | None) -> LookupResult:
        """``unsupported``: Adyen has no lookup by merchant reference. Sends nothing."""
        return LookupResult("unsupported")

    # -- notifications --------------------------------------------------------

    def check_notification_secrets(self) -> None:
        self._notification_verifier()

    def verify_notification(self, headers: Mapping[str, str], body: bytes, *,
                            now: datetime) -> VerifiedDelivery:
        """A single-item batch (see :meth:`verify_notification_batch` for batches)."""
        return self._notification_verifier().verify(headers, body)

    def verify_deliveries(self, headers: Mapping[str, str], body: bytes, *,
                          now: datetime) -> tuple[VerifiedDelivery, ...]:
        return self.verify_notification_batch(headers, body, now=now)

    @property
    def acknowledgement(self) -> tuple[bytes, str] | None:
        return ACKNOWLEDGEMENT, "text/plain"

    def verify_notification_batch(self, headers: Mapping[str, str], body: bytes, *,
                                  now: datetime) -> tuple[VerifiedDelivery, ...]:
        """One :class:`VerifiedDelivery` per item; any item unverified → nothing.

        :raises NotificationUnverified: Basic auth or any item's HMAC failed.
        """
        return notifications.verify_notification_batch(self._notification_verifier(), headers, body, now=now)

    def _notification_verifier(self) -> notifications.NotificationVerifier:
        if self._verifier is None:
            self._verifier = notifications.NotificationVerifier(self._accounts.values())
        return self._verifier
