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

from paycore.domain import ProviderOutcome
from paycore.evidence import judge
from paycore.providers.adapter import DeliveryVerifier
from paycore.providers.adyen import notifications
from paycore.providers.adyen.answers import classify_error
from paycore.providers.adyen.notifications import ACKNOWLEDGEMENT, ADYEN_EVENTS
from paycore.providers.adyen.operations import AdyenOperations
from paycore.providers.adyen.request import build_request_body, create_request
from paycore.providers.adyen.wire import UNREADABLE, is_transient, parse_payment, read_json
from paycore.providers.base import Capabilities, LookupResult, PaymentMethod, ReferenceLookup, StoredRequest
from paycore.providers.http import send_once
from paycore.providers.package import ProviderAccountConfig

CAPABILITIES: Final = Capabilities(
    lookup_by_reference=ReferenceLookup.UNSUPPORTED,  # no payment read of any kind
    key_retention_s=31 * 86_400.0,  # "valid for a minimum period of 31 days after first submission"
    # Adyen documents no replay of server errors: a 5xx under a key may be answered
    # differently by a resend, which is why a resend can still learn something.
    server_errors_replayed=False,
    # A modification's key is kept 7 days (issue 29 takes Adyen's word for it): an operation's
    # key window is the shorter of this and the account's retention.
    operation_key_retention_s=7 * 86_400.0,
)


class AdyenProvider(AdyenOperations):
    """The one HTTP client for Adyen, and Adyen's :class:`~paycore.providers.base.Provider`.

    Captures, cancels and refunds are :class:`~paycore.providers.adyen.operations.AdyenOperations`'s.

    Its pool, budgets, logs and webhook side are :class:`~paycore.providers.adapter.ProviderClient`'s
    (one keep-alive pool, no httpx timeout: the call's budget is the deadline; no redirects, no
    retries, no environment proxies), as are its parameters.
    """

    FORMAT = ADYEN_EVENTS
    CAPABILITIES = CAPABILITIES
    ACKNOWLEDGEMENT = (ACKNOWLEDGEMENT, "text/plain")

    def build_request_body(self, account: ProviderAccountConfig, *, amount_minor: int, currency: str,
                           payment_method: PaymentMethod, reference: str,
                           description: str | None = None, manual_capture: bool = False) -> str:
        """The ``/payments`` body for ``account`` (:func:`.request.build_request_body`): it names the
        merchant account and its ``returnUrl``. ``description`` is not sent (``/payments`` has no
        such field).

        :raises InvalidPaymentMethod: No ``returnUrl``, raw card data, or a value Adyen would reject.
        :raises NotBuildable: ``account-not-configured``: an account this provider does not serve.
        """
        del description
        # A hold answers the same "Authorised" as a charge: the order, which asked for manual
        # capture, is what says it is a hold (paycore.domain.decide_outcome).
        acct = self._configured(account.provider_account)
        return build_request_body(amount_minor=amount_minor, currency=currency, payment_method=payment_method,
                                  reference=reference, merchant_account=acct.account,
                                  return_url=acct.return_url, environment=acct.environment,
                                  manual_capture=manual_capture)

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
        JSON that does not fit is ``provider.body-unrecognized``. Every answer but a 200 reads
        as :func:`.answers.classify_error` says (one table for every Adyen ``POST``).
        """
        status = response.status_code
        meta: dict[str, Any] = {"http_status": status}
        if status == 200 and not is_transient(response):
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

        error = classify_error(response)
        if error.reason == "provider.key-reused":
            self._log.error("adyen create attempt_id=%s: idempotency key refused (%s)",
                            stored.attempt_id, error.error_code)
        if error.refused_code is not None:
            return ProviderOutcome.refused_before_execution(
                error.refused_code, first_send=first_send, resend_reason=error.reason,
                request_rejected=error.request_rejected, **error.meta)
        return ProviderOutcome.unknown(error.reason, **error.meta)

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
