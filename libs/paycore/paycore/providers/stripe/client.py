"""The Stripe client: create a PaymentIntent and classify the answer, look intents up, budgets.

:class:`StripeProvider` is Stripe's :class:`paycore.providers.base.Provider`, on the
official SDK (``stripe`` 16.1.0): one ``stripe.StripeClient`` per configured account,
``max_network_retries=0``, every call through ``raw_request_async`` so that the stored
body, key and version are what is sent and the answer is classified here. The
contract is ``docs/providers/stripe.md``; what is sent is :mod:`.request`, the objects
are :mod:`.wire`, webhooks are :mod:`.events`.

Rules this module keeps (the same as Cardco's client):

- **It never decides to send.** No retries: the SDK's are off
  (``max_network_retries=0``: it would otherwise resend on 409, 5xx and connection
  errors), httpx's transport has ``retries=0`` and follows no redirect.
- **It never invents the request.** Body bytes, ``Idempotency-Key`` and
  ``Stripe-Version`` come from the stored attempt; only the stored account's API key
  is applied at send time.
- **No answer is Unknown**; only a documented rejection of the *first* send is
  ``not_applied``; an answer about another payment is never this attempt's.
- **Secrets stay out.** Our log lines carry attempt ids and reason codes; the SDK's
  debug lines (request bodies, response bodies) are dropped at the ``stripe`` logger.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import ssl
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote

import anyio
import httpx
import stripe

from paycore.clock import Clock
from paycore.domain import OutcomeKind, ProviderOutcome
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
from paycore.providers.http import NotBuildable, lookup_result
from paycore.providers.package import ProviderAccountConfig
from paycore.providers.stripe import events
from paycore.providers.stripe.operations import StripeOperations
from paycore.providers.stripe.provider import API_BASE, PAYMENTS_PATH
from paycore.providers.stripe.request import build_request_body, check_idempotency_key, stored_params
from paycore.providers.stripe.wire import (
    REFERENCE_KEY,
    UNREADABLE,
    SdkAnswer,
    is_replayed,
    is_token,
    key_environment,
    parse_error,
    parse_intent,
    read_json,
    retry_after_seconds,
)
from paycore.settings_spec import MAX_BUDGET_S

CREATE_PATH: Final = PAYMENTS_PATH
DEFAULT_API_BASE: Final = API_BASE
# The SDK's pinned API version: what an attempt is stamped with unless configured otherwise.
DEFAULT_API_VERSION: Final[str] = stripe.api_version
# A PaymentIntent id is one path segment of letters, digits and underscores.
_INTENT_ID_RE: Final = re.compile(r"pi_[A-Za-z0-9_]{1,250}")

CAPABILITIES: Final = Capabilities(
    # Search "is not for read-after-write flows … under normal operating conditions, data is
    # searchable in under 1 minute … could be delayed during an outage"
    # (https://docs.stripe.com/search#data-freshness): a miss may be lag.
    lookup_by_reference=ReferenceLookup.EVENTUALLY_CONSISTENT,
    # "You can remove keys from the system automatically after they're at least 24 hours old"
    # (https://docs.stripe.com/idempotency).
    key_retention_s=86_400.0,
    # "Retries with the same key return the saved response, including 500 errors"
    # (https://docs.stripe.com/api/idempotent_requests).
    server_errors_replayed=True,
)


class _DropBodies(logging.Filter):
    """Drops the SDK's DEBUG records: they carry request bodies ("Post details") and response
    bodies ("API response body"), which hold payment-method ids, references and customer data."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.DEBUG


_SDK_LOG_FILTER: Final = _DropBodies()
if not any(isinstance(f, _DropBodies) for f in logging.getLogger("stripe").filters):
    logging.getLogger("stripe").addFilter(_SDK_LOG_FILTER)


class PaycoreHTTPXClient(stripe.HTTPXClient):
    """The SDK's httpx client on paycore's pool (:func:`paycore.providers.http.no_retry_client`: no
    timeout, the per-call budget is the deadline; no retries, no redirects, no proxy from the
    environment), with the body sent as raw ``content`` (the SDK passes ``data=``, which httpx
    would re-process). The pool is the provider's: it closes it.
    """

    def __init__(self, pool: httpx.AsyncClient) -> None:
        # HTTPXClient.__init__ would build its own AsyncClient (trusting the environment);
        # the base class sets what the retry loop and telemetry need.
        stripe.HTTPClient.__init__(self)
        self.httpx = httpx
        self.anyio = anyio
        self._client = None
        self._timeout = None
        self._client_async = pool

    def _get_request_args_kwargs(self, method: str, url: str, headers: Mapping[str, str],
                                 post_data: Any) -> list[Any]:
        return [(method, url), {"headers": headers, "content": post_data or None}]


class StripeProvider(StripeOperations):
    """Stripe's :class:`~paycore.providers.base.Provider`, for every configured Stripe account.

    Its pool (with the SDK's CA bundle), budgets, logs and webhook side are
    :class:`~paycore.providers.adapter.ProviderClient`'s, as are its parameters; on top, one
    ``stripe.StripeClient`` per account, built on first use. Captures, cancels and refunds are
    :class:`~paycore.providers.stripe.operations.StripeOperations`'s, on the same clients.
    """

    FORMAT = events.STRIPE_EVENTS
    CAPABILITIES = CAPABILITIES

    def __init__(self, accounts: Sequence[ProviderAccountConfig], clock: Clock, *, max_call_duration_s: float,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        super().__init__(accounts, clock, max_call_duration_s=max_call_duration_s, transport=transport)
        self._sdk_http: PaycoreHTTPXClient | None = None
        self._clients: dict[str, stripe.StripeClient] = {}

    def _tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=stripe.ca_bundle_path)

    async def aclose(self) -> None:
        """Close the connection pool (and forget the SDK clients on it)."""
        self._sdk_http = None
        self._clients.clear()
        await super().aclose()

    def build_request_body(self, account: ProviderAccountConfig, *, amount_minor: int, currency: str,
                           payment_method: PaymentMethod, reference: str,
                           description: str | None = None, manual_capture: bool = False) -> str:
        """:func:`paycore.providers.stripe.request.build_request_body`, with ``account``'s ``return_url``.

        :raises InvalidPaymentMethod: As the body builder.
        :raises NotBuildable: ``account-not-configured``: an account this provider does not serve.
        """
        acct = self._configured(account.provider_account)
        return build_request_body(amount_minor=amount_minor, currency=currency, payment_method=payment_method,
                                  reference=reference, description=description, return_url=acct.return_url,
                                  manual_capture=manual_capture)

    # -- the account and the SDK -----------------------------------------------

    def _account(self, provider_account: str) -> ProviderAccountConfig:
        """The account, if a call may be made on it now.

        :raises NotBuildable: Not configured, a key that is no Stripe key or of the other mode,
            or a base URL the SDK cannot reach (``endpoint-changed``).
        """
        acct = self._configured(provider_account)
        api_key = acct.api_key.reveal()
        if not is_token(api_key) or key_environment(api_key) is None:
            raise NotBuildable("invalid-api-key")
        # A live key on a test account (or the reverse) would move real money, or none.
        if key_environment(api_key) != acct.environment:
            raise NotBuildable("key-environment-mismatch")
        if not acct.base_url.startswith(("https://", "http://")):
            raise NotBuildable("endpoint-changed")
        return acct

    def _client(self, acct: ProviderAccountConfig) -> stripe.StripeClient:
        if self._sdk_http is None:
            self._sdk_http = PaycoreHTTPXClient(self._http)
        client = self._clients.get(acct.provider_account)
        if client is None:
            client = stripe.StripeClient(
                acct.api_key.reveal(), http_client=self._sdk_http,
                # The SDK joins base and path; a base ending in "/" would double it.
                base_addresses={"api": acct.base_url.rstrip("/")},
                max_network_retries=0, stripe_version=acct.api_version,
            )
            self._clients[acct.provider_account] = client
        return client

    async def _send(self, client: stripe.StripeClient, method: str, path: str, params: Mapping[str, str],
                    limit_s: float, limit_name: str) -> SdkAnswer | str:
        """One request through the SDK: the answer, or the reason there is none."""
        try:
            async with self._clock.budget(limit_s):
                response = await client.raw_request_async(method, path, **params)
        except TimeoutError:
            return f"provider.no-response.{limit_name}"
        except stripe.APIConnectionError as exc:
            # Connect, reset, incomplete body, protocol error: the SDK wraps httpx's error.
            cause = exc.__cause__
            return f"provider.transport.{type(cause).__name__ if cause is not None else 'APIConnectionError'}"
        except UnicodeDecodeError:
            # The SDK formats every response body for its debug log before anything else,
            # and that raises on a body that is not UTF-8 (stripe 16.1.0 ``_util.logfmt``).
            return "provider.body-unreadable"
        except stripe.StripeError as exc:
            if exc.http_status is None:
                # Every error the SDK raises once a request reached the wire carries its status;
                # only its own refusals before sending carry none (e.g. "No API key provided"),
                # and _account rules those out. So this is a bug: it surfaces, never an outcome.
                raise
            return SdkAnswer(exc.http_status, exc.http_body, exc.headers or {})
        return SdkAnswer(response.code, response.body, response.headers)

    # -- create -------------------------------------------------------------

    def _build_create(self, stored: StoredRequest) -> tuple[ProviderAccountConfig, dict[str, str]]:
        """The account and the SDK's arguments for the stored request (builds no client, sends nothing).

        :raises NotBuildable: The stored request cannot be sent as stored, as configured now.
        """
        acct = self._account(stored.provider_account)
        if stored.endpoint != acct.base_url.rstrip("/") + CREATE_PATH:
            raise NotBuildable("endpoint-changed")
        params = stored_params(stored.request_body)
        if not is_token(stored.api_version):
            raise NotBuildable("invalid-header")
        options = {"idempotency_key": check_idempotency_key(stored.idempotency_key),
                   "stripe_version": stored.api_version}
        return acct, {**params, **options}

    async def _send_create(self, request: tuple[ProviderAccountConfig, dict[str, str]], limit_s: float,
                           limit_name: str) -> SdkAnswer | str:
        acct, params = request
        return await self._send(self._client(acct), "post", CREATE_PATH, params, limit_s, limit_name)

    def _classify_create(self, stored: StoredRequest, answer: SdkAnswer, *,
                         first_send: bool) -> ProviderOutcome:
        """Map a create answer to an outcome (https://docs.stripe.com/api/errors,
        https://docs.stripe.com/error-low-level).

        =====================================  ==========================================================
        answer                                 outcome
        =====================================  ==========================================================
        200 PaymentIntent                      by status (:meth:`PaymentIntent.to_outcome`)
        402 with ``error.payment_intent``      ``failed`` ``declined:<code>`` with that intent as
                                               evidence (judged: another payment's is ``unknown``)
        402 without one                        ``failed`` ``declined:<code>`` (the request failed;
                                               no intent named)
        400 with ``error.payment_intent``      by that intent: one exists, so never ``not_applied``
        400 ``idempotency_error``              ``unknown`` ``provider.idempotency-error``
        400 ``invalid_request_error``          first send, not replayed: ``not_applied``
                                               ``rejected:<code>[:<param>]``; else ``unknown``
                                               ``provider.rejected-this-send.<code>``
        401, 403                               first send, not replayed: ``not_applied``
                                               ``rejected:auth``; else ``unknown`` ``provider.rejected.auth``
        409                                    ``unknown`` ``provider.in-progress``
        429                                    first send, not replayed: ``not_applied``
                                               ``rejected:rate_limited``; else ``unknown``
        5xx                                    ``unknown`` ``provider.http-<status>``
        other                                  ``unknown`` ``provider.unexpected-status-<status>``
        =====================================  ==========================================================
        """
        status = answer.status
        replayed = is_replayed(answer.headers)
        meta: dict[str, Any] = {"http_status": status, "replayed": replayed}
        body = read_json(answer.body) if status in (200, 400, 402) else None

        if status == 200:
            if body is UNREADABLE:
                return ProviderOutcome.unknown("provider.body-unreadable", **meta)
            return self._intent_outcome(stored, body, meta, expect_failed=False, reason=None)

        if status in (400, 402):
            if body is UNREADABLE:
                return ProviderOutcome.unknown("provider.body-unreadable", **meta)
            error = parse_error(body)
            if error is None:
                return ProviderOutcome.unknown("provider.body-unrecognized", **meta)
            code = error.decline_code or error.code or "unspecified"
            if error.payment_intent is not None:
                # An intent exists: this is evidence about a payment, never "not applied".
                return self._intent_outcome(stored, error.payment_intent, meta, expect_failed=status == 402,
                                            reason=f"declined:{code}")
            if status == 402:
                return ProviderOutcome.failed(f"declined:{code}", **meta)
            if error.type == "idempotency_error":
                # The stored body never changes: a key reused with other parameters is our bug
                # (or a key collision), never the customer's. Escalation-worthy.
                self._log.error("stripe create attempt_id=%s: idempotency key reused with different "
                                "parameters", stored.attempt_id)
                return ProviderOutcome.unknown("provider.idempotency-error", **meta)
            if error.type != "invalid_request_error":
                return ProviderOutcome.unknown("provider.body-unrecognized", **meta)
            reason = error.code or "invalid_request"
            # Validation failures are not stored under the key (https://docs.stripe.com/idempotency:
            # "We save results only after the execution of an endpoint begins"). A replayed one was.
            return ProviderOutcome.refused_before_execution(
                reason + (f":{error.param}" if error.param else ""), first_send=first_send,
                resend_reason=f"provider.rejected-this-send.{reason}",
                request_rejected=True, **meta)

        retry_after = retry_after_seconds(answer.headers)
        if retry_after is not None:
            meta["detail"] = {"retry_after_s": min(retry_after, MAX_BUDGET_S)}
        if status in (401, 403):
            # Authentication runs before the idempotency layer (https://docs.stripe.com/error-low-level).
            return ProviderOutcome.refused_before_execution(
                "auth", first_send=first_send, resend_reason="provider.rejected.auth",
                **meta)
        if status == 429:
            # "the rate limiter runs before the API's idempotency layer" (https://docs.stripe.com/error-low-level).
            return ProviderOutcome.refused_before_execution(
                "rate_limited", first_send=first_send,
                resend_reason="provider.rate-limited", **meta)
        if status == 409:
            # idempotency_key_in_use: another request with this key is executing.
            return ProviderOutcome.unknown("provider.in-progress", **meta)
        if 500 <= status <= 599:
            # Stored under the key once execution began, and replayed to every resend.
            return ProviderOutcome.unknown(f"provider.http-{status}", **meta)
        return ProviderOutcome.unknown(f"provider.unexpected-status-{status}", **meta)

    @staticmethod
    def _intent_outcome(stored: StoredRequest, obj: Any, meta: dict[str, Any], *, expect_failed: bool,
                        reason: str | None) -> ProviderOutcome:
        intent = parse_intent(obj)
        if intent is None:
            return ProviderOutcome.unknown("provider.body-unrecognized", **meta)
        verdict = judge(stored, intent.claim())
        if not verdict.accepted:
            # Evidence about another payment: its id and status are never this attempt's.
            return ProviderOutcome.unknown(f"provider.response-mismatch.{verdict.attribute}",
                                           claim=intent.claim(),
                                           detail={"reported_payment": intent.evidence()}, **meta)
        outcome = intent.to_outcome()
        if expect_failed:
            # A 402 is a failed request: an intent in it that says otherwise is not understood.
            if outcome.kind is not OutcomeKind.FAILED:
                return ProviderOutcome.unknown("provider.body-unrecognized", **meta)
            if outcome.reason != "canceled" and reason is not None:
                outcome = dataclasses.replace(outcome, reason=reason)
        return dataclasses.replace(outcome, **meta)

    # -- lookups ------------------------------------------------------------

    async def get_payment(self, provider_account: str, payment_id: str, *,
                          budget_s: float | None) -> LookupResult:
        """``GET /v1/payment_intents/{id}`` (strongly consistent).

        :return: ``found`` with the intent as answered (the caller judges it), ``not_found``
            on 404, ``rate_limited`` on 429, else ``failed`` with a reason.
        """
        if not _INTENT_ID_RE.fullmatch(payment_id):
            result = LookupResult("failed", reason="request.not-buildable.invalid-payment-id")
        else:
            path = f"{CREATE_PATH}/{quote(payment_id, safe='')}"
            result = await self._lookup(provider_account, path, {}, budget_s=budget_s, found=_intent_found,
                                        not_found_on_404=True)
        return self._lookup_logged("get_payment", provider_account, result)

    async def find_by_reference(self, provider_account: str, reference: str, *,
                                budget_s: float | None) -> LookupResult:
        """``GET /v1/payment_intents/search?query=metadata['paycore_reference']:'<ref>'``.

        Eventually consistent (https://docs.stripe.com/search#data-freshness): ``not_found``
        may be indexing lag, which :data:`CAPABILITIES` tells recovery.
        """
        if not reference or "'" in reference or "\\" in reference or not reference.isprintable():
            result = LookupResult("failed", reason="request.not-buildable.invalid-reference")
        else:
            query = f"metadata['{REFERENCE_KEY}']:'{reference}'"
            result = await self._lookup(provider_account, f"{CREATE_PATH}/search",
                                        {"query": query, "limit": "100"}, budget_s=budget_s,
                                        found=_intents_found, not_found_on_404=False)
        return self._lookup_logged("find_by_reference", provider_account, result)

    async def _lookup(self, provider_account: str, path: str, params: dict[str, str], *,
                      budget_s: float | None, found: Callable[[Any], LookupResult],
                      not_found_on_404: bool) -> LookupResult:
        limit_s, limit_name = self._call_limit(budget_s)
        try:
            acct = self._account(provider_account)
        except NotBuildable as exc:
            return LookupResult("failed", reason=f"request.not-buildable.{exc.reason}")
        if not is_token(acct.api_version):
            return LookupResult("failed", reason="request.not-buildable.invalid-header")
        if limit_s <= 0:
            return LookupResult("failed", reason=f"provider.no-response.{limit_name}")
        query = {**params, "stripe_version": acct.api_version}
        answer = await self._send(self._client(acct), "get", path, query, limit_s, limit_name)
        if isinstance(answer, str):
            return LookupResult("failed", reason=answer)
        retry_after = retry_after_seconds(answer.headers)
        return lookup_result(answer.status, answer.body,
                             None if retry_after is None else min(retry_after, MAX_BUDGET_S), found=found,
                             not_found_on_404=not_found_on_404)

    # -- notifications (verification: events.WebhookVerifier) -------------------

    def _new_verifier(self, accounts: Iterable[ProviderAccountConfig]) -> DeliveryVerifier:
        return events.WebhookVerifier(accounts)


def _intent_found(body: Any) -> LookupResult:
    intent = parse_intent(body)
    if intent is None:
        return LookupResult("failed", reason="provider.body-unrecognized")
    return LookupResult("found", payments=(intent,))


def _intents_found(body: Any) -> LookupResult:
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        return LookupResult("failed", reason="provider.body-unrecognized")
    intents = []
    for item in body["data"]:
        intent = parse_intent(item)
        if intent is None:
            return LookupResult("failed", reason="provider.body-unrecognized")
        intents.append((item.get("created") if isinstance(item.get("created"), int) else 0, intent))
    if not intents:
        return LookupResult("not_found")
    # Search answers newest first; the interface wants oldest first.
    intents.sort(key=lambda pair: pair[0])
    payments: tuple[PaymentRecord, ...] = tuple(intent for _, intent in intents)
    return LookupResult("found", payments=payments)
