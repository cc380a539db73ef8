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
from collections.abc import Iterable
from typing import Any, Final

import httpx

from paycore.config import ProviderAccountConfig
from paycore.domain import ProviderOutcome
from paycore.evidence import judge
from paycore.providers.adapter import DeliveryVerifier, ProviderClient
from paycore.providers.adyen import notifications
from paycore.providers.adyen.notifications import ACKNOWLEDGEMENT, ADYEN_EVENTS
from paycore.providers.adyen.request import build_request_body, create_request
from paycore.providers.adyen.wire import UNREADABLE, is_transient, parse_error, parse_payment, read_json
from paycore.providers.base import Capabilities, LookupResult, PaymentMethod, ReferenceLookup, StoredRequest
from paycore.providers.http import send_once

CAPABILITIES: Final = Capabilities(
    lookup_by_reference=ReferenceLookup.UNSUPPORTED,  # no payment read of any kind
    key_retention_s=31 * 86_400.0,  # "valid for a minimum period of 31 days after first submission"
    # Adyen documents no replay of server errors: a 5xx under a key may be answered
    # differently by a resend, which is why a resend can still learn something.
    server_errors_replayed=False,
)


class AdyenProvider(ProviderClient[httpx.Request, httpx.Response]):
    """The one HTTP client for Adyen, and Adyen's :class:`~paycore.providers.base.Provider`.

    Its pool, budgets, logs and webhook side are :class:`~paycore.providers.adapter.ProviderClient`'s
    (one keep-alive pool, no httpx timeout: the call's budget is the deadline; no redirects, no
    retries, no environment proxies), as are its parameters.
    """

    FORMAT = ADYEN_EVENTS
    CAPABILITIES = CAPABILITIES
    ACKNOWLEDGEMENT = (ACKNOWLEDGEMENT, "text/plain")

    def build_request_body(self, account: ProviderAccountConfig, *, amount_minor: int, currency: str,
                           payment_method: PaymentMethod, reference: str,
                           description: str | None = None) -> str:
        """The ``/payments`` body for ``account`` (:func:`.request.build_request_body`): it names the
        merchant account and its ``returnUrl``. ``description`` is not sent (``/payments`` has no
        such field).

        :raises InvalidPaymentMethod: No ``returnUrl``, raw card data, or a value Adyen would reject.
        :raises NotBuildable: ``account-not-configured``: an account this provider does not serve.
        """
        del description
        acct = self._configured(account.provider_account)
        return build_request_body(amount_minor=amount_minor, currency=currency, payment_method=payment_method,
                                  reference=reference, merchant_account=acct.account,
                                  return_url=acct.return_url, environment=acct.environment)

    # -- create -------------------------------------------------------------

    def _build_create(self, stored: StoredRequest) -> httpx.Request:
        return create_request(stored, self._configured(stored.provider_account))

    async def _send_create(self, request: httpx.Request, limit_s: float,
                           limit_name: str) -> httpx.Response | str:
        return await send_once(self._http, request, self._clock, limit_s, limit_name)

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
                self._log.error("adyen create attempt_id=%s: idempotency key refused (%s)",
                                stored.attempt_id, error.error_code)
                return ProviderOutcome.unknown("provider.key-reused", **meta)
            if status == 409:
                return ProviderOutcome.unknown("provider.conflict", **meta)
            if body is UNREADABLE:
                return ProviderOutcome.unknown("provider.body-unreadable", **meta)
            if error is None or error.error_type != "validation":
                return ProviderOutcome.unknown("provider.body-unrecognized", **meta)
            # Adyen does not say whether an answer was replayed from the key: a validation
            # error is never stored under it.
            return ProviderOutcome.refused_before_execution(
                error.error_code, first_send=first_send,
                resend_reason=f"provider.rejected-this-send.{error.error_code}", request_rejected=True,
                **meta)

        if status in (401, 403):
            # Refused before anything was looked at; on a resend it proves nothing.
            return ProviderOutcome.refused_before_execution(
                "auth", first_send=first_send, resend_reason="provider.rejected.auth", **meta)
        if status == 429:
            return ProviderOutcome.unknown("provider.rate-limited", **meta)
        if 500 <= status <= 599:
            return ProviderOutcome.unknown(f"provider.http-{status}", **meta)
        return ProviderOutcome.unknown(f"provider.unexpected-status-{status}", **meta)

    # -- lookups: none --------------------------------------------------------

    async def get_payment(self, provider_account: str, payment_id: str, *,
                          budget_s: float | None) -> LookupResult:
        """``unsupported``: the Checkout API has no payment read. Sends nothing."""
        return LookupResult("unsupported")

    async def find_by_reference(self, provider_account: str, reference: str, *,
                                budget_s: float | None) -> LookupResult:
        """``unsupported``: Adyen has no lookup by merchant reference. Sends nothing."""
        return LookupResult("unsupported")

    # -- notifications (verification: notifications.NotificationVerifier) --------

    def _new_verifier(self, accounts: Iterable[ProviderAccountConfig]) -> DeliveryVerifier:
        return notifications.NotificationVerifier(accounts)
