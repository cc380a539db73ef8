"""The Cardco client: create a payment and classify the answer, look payments up, budgets.

:class:`CardcoClient` is Cardco's :class:`paycore.providers.base.Provider`. The
wire contract is ``docs/providers/cardco.md``; the payment object, parsing and
headers are :mod:`.wire`, what is sent is :mod:`.request`, webhooks are :mod:`.events`.

Rules this module keeps (see the reference's "payment client is registered
without automatic resends"):

- **It never decides to send.** :meth:`CardcoClient.create_payment` sends the
  stored attempt exactly once per call. There are no retries of any kind: not
  in httpx's transport, not on redirects, not here. Only checkout and the
  recovery loop decide when a payment request goes out.
- **It never invents the request.** Endpoint, body bytes, idempotency key and
  API version come from the stored attempt; only the credentials of the stored
  provider account are applied at send time. There is no fallback to another
  or a default account.
- **No answer is Unknown.** A stored request that cannot be built, an expired
  budget, a transport failure and an unreadable or unrecognised response all
  become ``ProviderOutcome.unknown(reason)``. Only a documented rejection of
  the *first* send is ``not_applied``: a no-effect rejection of a resend proves
  nothing about an earlier send.
- **Programming errors surface.** Only the expected failure types are caught;
  a bug is not disguised as a provider outcome. The attempt is already durably
  Started, so recovery still resolves it.
- **Secrets stay out.** Logs carry attempt ids and reason codes only: never
  the API key, the ``Authorization`` header or a request body.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, Final
from urllib.parse import quote

import httpx

from paycore.domain import ProviderOutcome
from paycore.errors import InvalidPaymentMethod
from paycore.evidence import judge
from paycore.providers.adapter import DeliveryVerifier
from paycore.providers.base import (
    Capabilities,
    LookupResult,
    PaymentMethod,
    PaymentRecord,
    ReferenceLookup,
    StoredRequest,
)
from paycore.providers.cardco import events
from paycore.providers.cardco.answers import classify_error
from paycore.providers.cardco.operations import CardcoOperations
from paycore.providers.cardco.request import build_request_body, create_request
from paycore.providers.cardco.wire import (
    REJECTION_CODES,
    UNREADABLE,
    auth_headers,
    is_replayed,
    parse_payment,
    read_json,
    retry_after_seconds,
)
from paycore.providers.http import NotBuildable, lookup_result, send_once
from paycore.providers.package import ProviderAccountConfig

CAPABILITIES: Final = Capabilities(
    lookup_by_reference=ReferenceLookup.CONSISTENT,  # GET /v1/payments?reference=: every payment, at once
    key_retention_s=86_400.0,  # 24 hours from the key's first request
    server_errors_replayed=True,  # a 500 is stored under the key; 400, 429 and 503 are not
)


class CardcoClient(CardcoOperations):
    """The one HTTP client for Cardco, and Cardco's :class:`~paycore.providers.base.Provider`.

    Captures, cancels and refunds are :class:`~paycore.providers.cardco.operations.CardcoOperations`'s.
    Its pool, budgets, logs and webhook side are :class:`~paycore.providers.adapter.ProviderClient`'s
    (one keep-alive pool, no httpx timeout: the per-call budget is the deadline; no redirects,
    no retries, no environment proxies). Its parameters are that class's: the configured
    accounts (those of another provider ignored), the clock, the ceiling of one call, and a
    transport that replaces HTTP in tests.
    """

    FORMAT = events.CARDCO_EVENTS
    CAPABILITIES = CAPABILITIES

    def build_request_body(self, account: ProviderAccountConfig, *, amount_minor: int, currency: str,
                           payment_method: PaymentMethod, reference: str,
                           description: str | None = None, manual_capture: bool = False) -> str:
        """:func:`paycore.providers.cardco.request.build_request_body` (Cardco takes a token only)."""
        if not isinstance(payment_method, str):
            raise InvalidPaymentMethod("Cardco takes a payment-method token (tok_...), not an object")
        return build_request_body(amount_minor=amount_minor, currency=currency, payment_method=payment_method,
                                  reference=reference, description=description, manual_capture=manual_capture)

    # -- create -------------------------------------------------------------

    def _build_create(self, stored: StoredRequest) -> httpx.Request:
        return create_request(stored, self._configured(stored.provider_account))

    async def _send_create(self, request: httpx.Request, limit_s: float,
                           limit_name: str) -> httpx.Response | str:
        return await send_once(self._http, request, self._clock, limit_s, limit_name)

    def _classify_create(
        self, stored: StoredRequest, response: httpx.Response, *, first_send: bool
    ) -> ProviderOutcome:
        """Map a create response to an outcome.

        ======================  ===================  ==========================================
        status                  body                 outcome
        ======================  ===================  ==========================================
        201                     payment              by payment status (see
                                                     :meth:`ProviderPayment.to_outcome`)
        402                     payment, declined    ``failed``, ``declined:<code>``
        400                     documented code      first send: ``not_applied``
                                                     ``rejected:<code>[:<param>]``;
                                                     resend: ``unknown``
                                                     ``provider.rejected-this-send.<code>``
        429                     any                  first send: ``not_applied``
                                                     ``rejected:rate_limited``; resend:
                                                     ``unknown`` ``provider.rate-limited``
        409                     any                  ``unknown`` ``provider.in-progress``
        422                     any                  ``unknown`` ``provider.key-reused``
        401, 403                any                  ``unknown`` ``provider.rejected.auth``
        5xx                     any                  ``unknown`` ``provider.http-<status>``
        other                   any                  ``unknown``
                                                     ``provider.unexpected-status-<status>``
        ======================  ===================  ==========================================

        A 201/402/400 body that is empty or not JSON is ``provider.body-unreadable``;
        JSON that does not fit is ``provider.body-unrecognized``; a payment
        whose reference, amount, currency, account or mode differs from what
        was sent is ``provider.response-mismatch.<field>``.
        """
        status = response.status_code
        replayed = is_replayed(response)
        meta: dict[str, Any] = {"http_status": status, "replayed": replayed}

        if status in (201, 402):
            body = read_json(response.content)
            if body is UNREADABLE:
                return ProviderOutcome.unknown("provider.body-unreadable", **meta)
            payment = parse_payment(body)
            # A 402 is only ever a decline; anything else in it is not understood.
            if payment is None or (status == 402 and payment.status != "declined"):
                return ProviderOutcome.unknown("provider.body-unrecognized", **meta)
            verdict = judge(stored, payment.claim())
            if not verdict.accepted:
                # Evidence about another payment: its id and status are never this
                # attempt's. What it said travels in ``claim``, for the escalation.
                return ProviderOutcome.unknown(
                    f"provider.response-mismatch.{verdict.attribute}", claim=payment.claim(),
                    detail={"reported_payment": payment.evidence()}, **meta,
                )
            return dataclasses.replace(payment.to_outcome(), **meta)

        error = classify_error(response, rejection_codes=REJECTION_CODES, now=self._clock.now())
        if error.reason == "provider.key-reused":
            # The stored body never changes, so a key reused with another body
            # is our bug (or a key collision), never the customer's.
            self._log.error("cardco create attempt_id=%s: idempotency key reused with a different body",
                            stored.attempt_id)
        if error.refused_code is not None:
            # A resend refused before execution: Unknown (the earlier send may have taken
            # effect); a 400's same bytes will be refused again (request_rejected).
            return ProviderOutcome.refused_before_execution(
                error.refused_code, first_send=first_send, resend_reason=error.reason,
                request_rejected=error.request_rejected, **error.meta)
        return ProviderOutcome.unknown(error.reason, **error.meta)

    # -- lookups ------------------------------------------------------------

    async def get_payment(
        self, provider_account: str, payment_id: str, *, budget_s: float | None
    ) -> LookupResult:
        """``GET /v1/payments/{id}`` for one account.

        :param provider_account: Internal provider-account id.
        :param payment_id: Cardco's payment id.
        :param budget_s: Caller's budget, or ``None`` for the client ceiling.
        :return: ``found`` with the payment as answered (even one whose id,
            account or mode is not what was asked: the caller judges the
            evidence), ``not_found`` on 404, ``rate_limited`` on 429, else
            ``failed`` with a reason.
        :raises ValueError: ``budget_s`` is NaN.
        """
        if not payment_id:
            result = LookupResult("failed", reason="request.not-buildable.invalid-payment-id")
        else:
            # quote(safe=""): an id is one path segment, whatever it contains.
            result = await self._lookup(provider_account, f"/v1/payments/{quote(payment_id, safe='')}", None,
                                        budget_s=budget_s, found=self._payment_found, not_found_on_404=True)
        return self._lookup_logged("get_payment", provider_account, result)

    async def find_by_reference(
        self, provider_account: str, reference: str, *, budget_s: float | None
    ) -> LookupResult:
        """``GET /v1/payments?reference=…``: every payment of the account with that reference.

        :param provider_account: Internal provider-account id.
        :param reference: The attempt's client reference.
        :param budget_s: Caller's budget, or ``None`` for the client ceiling.
        :return: ``found`` with every payment answered (oldest first, as seen:
            the caller judges whether each is about this attempt), ``not_found``
            for ``data: []``, ``rate_limited`` on 429, else ``failed``.
        :raises ValueError: ``budget_s`` is NaN.
        """
        if not reference:
            result = LookupResult("failed", reason="request.not-buildable.invalid-reference")
        else:
            # httpx encodes the query parameter.
            result = await self._lookup(provider_account, "/v1/payments", {"reference": reference},
                                        budget_s=budget_s, found=self._payments_found, not_found_on_404=False)
        return self._lookup_logged("find_by_reference", provider_account, result)

    # A lookup reports every payment the provider answered with, as it was seen. Whether
    # one is evidence about this attempt (its id, reference, amount, account and mode)
    # is the caller's judgement: a payment of another account or reference is not a
    # failed lookup, it is a mismatch a person must see, with what was seen recorded.

    @staticmethod
    def _payment_found(body: Any) -> LookupResult:
        payment = parse_payment(body)
        if payment is None:
            return LookupResult("failed", reason="provider.body-unrecognized")
        return LookupResult("found", payments=(payment,))

    @staticmethod
    def _payments_found(body: Any) -> LookupResult:
        if not isinstance(body, dict) or not isinstance(body.get("data"), list):
            return LookupResult("failed", reason="provider.body-unrecognized")
        payments: list[PaymentRecord] = []
        for item in body["data"]:
            payment = parse_payment(item)
            if payment is None:
                return LookupResult("failed", reason="provider.body-unrecognized")
            payments.append(payment)
        if not payments:
            return LookupResult("not_found")
        return LookupResult("found", payments=tuple(payments))

    async def _lookup(
        self,
        provider_account: str,
        path: str,
        params: dict[str, str] | None,
        *,
        budget_s: float | None,
        found: Callable[[Any], LookupResult],
        not_found_on_404: bool,
    ) -> LookupResult:
        """Send one ``GET`` lookup; ``found`` reads the JSON of a 200."""
        limit_s, limit_name = self._call_limit(budget_s)
        try:
            acct = self._configured(provider_account)
            headers = auth_headers(acct, acct.api_version)
        except NotBuildable as exc:
            return LookupResult("failed", reason=f"request.not-buildable.{exc.reason}")
        request = httpx.Request("GET", acct.base_url.rstrip("/") + path, params=params, headers=headers)
        if limit_s <= 0:
            return LookupResult("failed", reason=f"provider.no-response.{limit_name}")

        response = await send_once(self._http, request, self._clock, limit_s, limit_name)
        if isinstance(response, str):
            return LookupResult("failed", reason=response)
        return lookup_result(response.status_code, response.content,
                             retry_after_seconds(response, self._clock.now()), found=found,
                             not_found_on_404=not_found_on_404)

    # -- notifications (verification: events.WebhookVerifier) -------------------

    def _new_verifier(self, accounts: Iterable[ProviderAccountConfig]) -> DeliveryVerifier:
        return events.WebhookVerifier(accounts)
