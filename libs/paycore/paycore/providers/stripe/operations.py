"""Stripe after the payment: send captures, cancels and refunds, classify the answers, look them up.

:class:`StripeOperations` is the :class:`~paycore.providers.base.OperationCalls` half of
:class:`~paycore.providers.stripe.client.StripeProvider`, on the same SDK clients, pool, accounts
and budgets. The rules are the create's (``client.py``): the stored body is sent once per call
through ``raw_request_async`` under the stored ``Idempotency-Key`` and ``Stripe-Version``, the
SDK's retries off; no answer, an unreadable one, or one about another payment or reference is
Unknown; nothing Stripe does raises. What is sent is :mod:`.request`
(:func:`~paycore.providers.stripe.request.build_operation_body`); the objects are :mod:`.wire`.

Stripe has a Refund object, but no capture object and no cancel object: a capture and a cancel
answer the PaymentIntent. A capture writes its reference into the intent's metadata
(``paycore_capture_reference``), which is how its answer and a lookup are tied to it; a cancel
takes no metadata, so the intent's state and ``cancellation_reason`` are all there is.
"""

from __future__ import annotations

import abc
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

import stripe

from paycore.domain import Claim, OperationKind
from paycore.errors import InvalidPaymentMethod
from paycore.evidence import judge
from paycore.providers.adapter import ProviderClient
from paycore.providers.base import OperationEnding, OperationLookup, OperationOutcome, StoredRequest
from paycore.providers.http import DEFAULT_RETRY_AFTER_S, NotBuildable
from paycore.providers.package import ProviderAccountConfig
from paycore.providers.stripe.request import (
    INTENT_ID_RE,
    OPERATION_PARAMS,
    build_operation_body,
    check_idempotency_key,
    operation_path,
    stored_params,
)
from paycore.providers.stripe.wire import (
    UNREADABLE,
    HeldIntent,
    Refund,
    SdkAnswer,
    is_replayed,
    is_token,
    parse_error,
    parse_held_intent,
    parse_refund,
    read_json,
    retry_after_seconds,
)
from paycore.settings_spec import MAX_BUDGET_S

_REFUND_ENDINGS: Final = {
    "pending": OperationEnding.PENDING, "requires_action": OperationEnding.PENDING,
    "succeeded": OperationEnding.SUCCEEDED,
    "failed": OperationEnding.FAILED, "canceled": OperationEnding.FAILED,
}
# The reasons a cancel request can leave on an intent (none: ours sends none). Any other
# (``automatic``: a hold that lapsed, ``expired``, ``failed_invoice``, …) is Stripe's own doing,
# never a cancel anyone sent.
REQUESTED_CANCELLATION_REASONS: Final = frozenset({None, "abandoned", "duplicate", "fraudulent",
                                                   "requested_by_customer"})
_REFUND_ID_RE: Final = re.compile(r"(?:re|pyr)_[A-Za-z0-9_]{1,250}")
REFUNDS_PATH: Final = "/v1/refunds"
# A list page: more refunds than this on one payment would be a page we do not read.
_LIST_LIMIT: Final = "100"

StripeRequest = tuple[ProviderAccountConfig, dict[str, str]]


# ---------------------------------------------------------------------------
# What an object says, as an outcome (shared with the webhook parser, events.py)


def refund_outcome(refund: Refund, **meta: Any) -> OperationOutcome:
    """What a Refund says: pending and requires_action ``PENDING``; failed and canceled ``FAILED``
    (final, nothing moved; ``reason`` ``<status>[:<failure_reason>]``)."""
    ending = _REFUND_ENDINGS[refund.status]
    reason = None
    if ending is OperationEnding.FAILED:
        reason = f"{refund.status}:{refund.failure_reason}" if refund.failure_reason else refund.status
    return OperationOutcome(
        OperationKind.REFUND, ending, reason=reason, provider_status=refund.status,
        provider_operation_id=refund.id, provider_payment_id=refund.payment_intent,
        amount_minor=refund.amount_minor, currency=refund.currency, claim=refund.claim(), **meta)


def capture_claim(held: HeldIntent) -> Claim:
    """What a captured intent says about the capture: its capture reference, and what it received
    once it succeeded (before that ``amount_received`` is not the capture's)."""
    succeeded = held.intent.status == "succeeded"
    return Claim(reference=held.capture_reference,
                 amount_minor=held.amount_received if succeeded else None,
                 currency=held.intent.currency, livemodes=held.intent.claim().livemodes)


def capture_outcome(held: HeldIntent, **meta: Any) -> OperationOutcome:
    """What an intent that carries a capture reference says about that capture.

    ``succeeded`` ``SUCCEEDED`` (the operation's id: the charge, else the intent); ``processing``
    ``PENDING``; ``requires_capture`` or ``canceled`` ``FAILED`` (the capture ran and took
    nothing: the hold is back, or gone); anything else ``UNKNOWN``.
    """
    intent = held.intent
    ending = {"succeeded": OperationEnding.SUCCEEDED, "processing": OperationEnding.PENDING,
              "requires_capture": OperationEnding.FAILED, "canceled": OperationEnding.FAILED,
              }.get(intent.status, OperationEnding.UNKNOWN)
    reason = {OperationEnding.FAILED: f"capture-failed:{intent.status}",
              OperationEnding.UNKNOWN: f"provider.capture-answered-{intent.status}"}.get(ending)
    return OperationOutcome(
        OperationKind.CAPTURE, ending, reason=reason, provider_status=intent.status,
        provider_operation_id=held.latest_charge or intent.id, provider_payment_id=intent.id,
        amount_minor=held.amount_received if intent.status == "succeeded" else None,
        currency=intent.currency, claim=capture_claim(held), **meta)


def cancel_outcome(held: HeldIntent, **meta: Any) -> OperationOutcome:
    """A canceled intent as the cancel's success. Its claim is the account and mode only: a
    cancel carries no reference of its own, and the intent's amount is the payment's."""
    intent = held.intent
    return OperationOutcome(
        OperationKind.CANCEL, OperationEnding.SUCCEEDED, provider_status=intent.status,
        provider_payment_id=intent.id, amount_minor=intent.amount_minor, currency=intent.currency,
        claim=held.claim(), detail={"cancellation_reason": held.cancellation_reason}, **meta)


def is_requested_cancel(held: HeldIntent) -> bool:
    """A hold voided by a cancel request (not one Stripe canceled itself, nor an intent that never held)."""
    return (held.intent.status == "canceled" and (held.capture_method or "").startswith("manual")
            and held.cancellation_reason in REQUESTED_CANCELLATION_REASONS)


def _mismatch(kind: OperationKind, attribute: str, claim: Claim, reported: dict[str, Any],
              meta: dict[str, Any]) -> OperationOutcome:
    # About another operation or payment: its id and status are never this one's.
    return OperationOutcome.unknown(kind, f"provider.response-mismatch.{attribute}", claim=claim,
                                    detail={"reported": reported}, **meta)


class StripeOperations(ProviderClient[StripeRequest, SdkAnswer], abc.ABC):
    """Captures, cancels and refunds on Stripe (:class:`~paycore.providers.base.OperationCalls`).

    The account checks, the SDK clients and the one send are the provider's
    (:class:`~paycore.providers.stripe.client.StripeProvider`), so an operation goes out exactly
    as a create does.
    """

    @abc.abstractmethod
    def _account(self, provider_account: str) -> ProviderAccountConfig:
        """The account, if a call may be made on it now (:raises NotBuildable: otherwise)."""

    @abc.abstractmethod
    def _client(self, acct: ProviderAccountConfig) -> stripe.StripeClient:
        """The account's SDK client."""

    @abc.abstractmethod
    async def _send(self, client: stripe.StripeClient, method: str, path: str, params: Mapping[str, str],
                    limit_s: float, limit_name: str) -> SdkAnswer | str:
        """One request through the SDK: the answer, or the reason there is none."""

    def operation_endpoint(self, account: ProviderAccountConfig, kind: OperationKind,
                           provider_payment_id: str) -> str:
        """``<base>/v1/refunds``, ``<base>/v1/payment_intents/{id}/capture`` or ``…/cancel``.

        :raises InvalidPaymentMethod: ``provider_payment_id`` is not a PaymentIntent id.
        """
        if not INTENT_ID_RE.fullmatch(provider_payment_id):
            # The id becomes a path segment: never one that could change the path.
            raise InvalidPaymentMethod("provider_payment_id must be a PaymentIntent id (pi_…)")
        return account.base_url.rstrip("/") + operation_path(kind, provider_payment_id)

    def build_operation_body(self, kind: OperationKind, *, provider_payment_id: str, amount_minor: int,
                             reference: str, reason: str | None = None, currency: str | None = None,
                             account: ProviderAccountConfig | None = None) -> str:
        """:func:`paycore.providers.stripe.request.build_operation_body` (the intent has both the
        currency and the account)."""
        return build_operation_body(kind, provider_payment_id=provider_payment_id, amount_minor=amount_minor,
                                    reference=reference, reason=reason)

    # -- send -----------------------------------------------------------------

    async def send_operation(self, stored: StoredRequest, kind: OperationKind, *, provider_payment_id: str,
                             budget_s: float | None, first_send: bool) -> OperationOutcome:
        """Send the stored capture, cancel or refund once and classify the answer.

        ======================================  ==================================================
        answer                                  outcome
        ======================================  ==================================================
        200 Refund                              by status: pending, requires_action ``PENDING``;
                                                succeeded ``SUCCEEDED``; failed, canceled ``FAILED``
        200 intent, capture                     succeeded ``SUCCEEDED`` (the charge's id);
                                                processing ``PENDING``; else ``UNKNOWN``
                                                ``provider.capture-answered-<status>``
        200 intent, cancel                      canceled ``SUCCEEDED``; else ``UNKNOWN``
                                                ``provider.cancel-answered-<status>``
        400 ``invalid_request_error``           first send, not replayed: ``REJECTED``
                                                ``rejected:<code>[:<param>]``; else ``UNKNOWN``
                                                ``provider.rejected-this-send.<code>``; both
                                                ``request_rejected``
        400 ``idempotency_error``               ``UNKNOWN`` ``provider.idempotency-error``
        402                                     ``FAILED`` ``declined:<code>``: valid, executed and
                                                failed; nothing moved (stored under the key)
        401, 403                                first send, not replayed: ``REJECTED``
                                                ``rejected:auth``; else ``UNKNOWN``
        429                                     ``UNKNOWN`` ``provider.rate-limited``, with
                                                ``detail.retry_after_s``
        409                                     ``UNKNOWN`` ``provider.in-progress``
        5xx                                     ``UNKNOWN`` ``provider.http-<status>``
        other                                   ``UNKNOWN`` ``provider.unexpected-status-<n>``
        ======================================  ==================================================

        An answer about another intent (``provider.response-mismatch.payment``), another
        reference, amount, currency or mode (``…mismatch.<field>``) is ``UNKNOWN``, what it
        said kept in ``claim``/``detail``. An empty or non-JSON body is
        ``provider.body-unreadable``, JSON that does not fit ``provider.body-unrecognized``.

        :param stored: The operation's record: ``client_reference`` its own reference,
            ``amount_minor``/``currency`` what it moves; sent byte for byte under its key.
        :param provider_payment_id: The intent the stored request names.
        :param budget_s: The caller's budget, or ``None`` for the client ceiling; zero or
            negative sends nothing.
        :raises ValueError: ``budget_s`` is NaN.
        """
        return await self._send_operation_once(stored, kind, provider_payment_id=provider_payment_id,
                                               budget_s=budget_s, first_send=first_send)

    async def _post_operation(self, request: StripeRequest, kind: OperationKind, provider_payment_id: str,
                              limit_s: float, limit_name: str) -> SdkAnswer | str:
        acct, params = request
        return await self._send(self._client(acct), "post", operation_path(kind, provider_payment_id), params,
                                limit_s, limit_name)

    def _build_operation(self, stored: StoredRequest, kind: OperationKind,
                         provider_payment_id: str) -> StripeRequest:
        """The account and the SDK's arguments for the stored operation (sends nothing).

        :raises NotBuildable: As the create's; ``endpoint-changed`` when the stored endpoint is not
            this kind's on this intent; ``invalid-body`` when a refund's body names another intent.
        """
        acct = self._account(stored.provider_account)
        if not INTENT_ID_RE.fullmatch(provider_payment_id):
            raise NotBuildable("invalid-payment-id")
        if stored.endpoint != acct.base_url.rstrip("/") + operation_path(kind, provider_payment_id):
            raise NotBuildable("endpoint-changed")
        params = stored_params(stored.request_body, OPERATION_PARAMS[kind])
        if kind is OperationKind.REFUND and params.get("payment_intent") != provider_payment_id:
            raise NotBuildable("invalid-body")
        if not is_token(stored.api_version):
            raise NotBuildable("invalid-header")
        options = {"idempotency_key": check_idempotency_key(stored.idempotency_key),
                   "stripe_version": stored.api_version}
        return acct, {**params, **options}

    def _classify_operation(self, stored: StoredRequest, kind: OperationKind, provider_payment_id: str,
                            answer: SdkAnswer, *, first_send: bool) -> OperationOutcome:
        status = answer.status
        meta: dict[str, Any] = {"http_status": status, "replayed": is_replayed(answer.headers)}
        if status in (200, 400, 402):
            body = read_json(answer.body)
            if body is UNREADABLE:
                return OperationOutcome.unknown(kind, "provider.body-unreadable", **meta)
            if status == 200:
                return self._success(stored, kind, provider_payment_id, body, meta)
            return self._refusal(stored, kind, provider_payment_id, status, body, meta, first_send=first_send)

        retry_after = retry_after_seconds(answer.headers)
        if retry_after is not None:
            meta["detail"] = {"retry_after_s": min(retry_after, MAX_BUDGET_S)}
        if status in (401, 403):
            # Authentication runs before the idempotency layer (https://docs.stripe.com/error-low-level).
            return OperationOutcome.refused_before_execution(kind, "auth", first_send=first_send,
                                                             resend_reason="provider.rejected.auth", **meta)
        if status == 429:
            # Unknown on every send, never Rejected: the operation stays open and a lookup or a
            # later send settles it; detail.retry_after_s says when to ask again.
            meta.setdefault("detail", {"retry_after_s": DEFAULT_RETRY_AFTER_S})
            return OperationOutcome.unknown(kind, "provider.rate-limited", **meta)
        if status == 409:
            return OperationOutcome.unknown(kind, "provider.in-progress", **meta)
        if 500 <= status <= 599:
            return OperationOutcome.unknown(kind, f"provider.http-{status}", **meta)
        return OperationOutcome.unknown(kind, f"provider.unexpected-status-{status}", **meta)

    def _success(self, stored: StoredRequest, kind: OperationKind, provider_payment_id: str, body: Any,
                 meta: dict[str, Any]) -> OperationOutcome:
        if kind is OperationKind.REFUND:
            refund = parse_refund(body)
            if refund is None:
                return OperationOutcome.unknown(kind, "provider.body-unrecognized", **meta)
            verdict = judge(stored, refund.claim())
            attribute = verdict.attribute if not verdict.accepted else (
                "payment" if refund.payment_intent != provider_payment_id else None)
            if attribute is not None:
                return _mismatch(kind, attribute, refund.claim(), {
                    "id": refund.id, "payment_intent": refund.payment_intent, "status": refund.status}, meta)
            return refund_outcome(refund, **meta)

        held = parse_held_intent(body)
        if held is None:
            return OperationOutcome.unknown(kind, "provider.body-unrecognized", **meta)
        intent = held.intent
        claim = capture_claim(held) if kind is OperationKind.CAPTURE else held.claim()
        verdict = judge(stored, claim)
        attribute = "payment" if intent.id != provider_payment_id else verdict.attribute
        if attribute is None and kind is OperationKind.CAPTURE and held.capture_reference is None:
            attribute = "reference"  # an intent that does not say which capture took it proves none
        if attribute is not None:
            return _mismatch(kind, attribute, claim, intent.evidence(), meta)
        if kind is OperationKind.CAPTURE:
            outcome = capture_outcome(held, **meta)
            if outcome.ending is OperationEnding.FAILED:
                # A capture's answer is the captured intent: anything else is not understood.
                return OperationOutcome.unknown(kind, f"provider.capture-answered-{intent.status}",
                                                provider_payment_id=intent.id, **meta)
            return outcome
        if intent.status != "canceled":
            return OperationOutcome.unknown(kind, f"provider.cancel-answered-{intent.status}",
                                            provider_payment_id=intent.id, **meta)
        return cancel_outcome(held, **meta)

    def _refusal(self, stored: StoredRequest, kind: OperationKind, provider_payment_id: str, status: int,
                 body: Any, meta: dict[str, Any], *, first_send: bool) -> OperationOutcome:
        error = parse_error(body)
        if error is None:
            return OperationOutcome.unknown(kind, "provider.body-unrecognized", **meta)
        code = error.decline_code or error.code or "unspecified"
        named = error.payment_intent.get("id") if isinstance(error.payment_intent, dict) else None
        if named is not None and named != provider_payment_id:
            # An error about another intent says nothing about this operation.
            return OperationOutcome.unknown(kind, "provider.response-mismatch.payment",
                                            detail={"reported": {"id": named}}, **meta)
        if status == 402:
            # "The parameters were valid but the request failed" (https://docs.stripe.com/api/errors):
            # executed, stored under the key, and nothing moved.
            return OperationOutcome(kind, OperationEnding.FAILED, reason=f"declined:{code}",
                                    provider_payment_id=provider_payment_id, **meta)
        if error.type == "idempotency_error":
            # The stored body never changes: a key reused with other parameters is our bug.
            self._log.error("stripe %s operation_id=%s: idempotency key reused with different parameters",
                            kind.value, stored.attempt_id)
            return OperationOutcome.unknown(kind, "provider.idempotency-error", **meta)
        if error.type != "invalid_request_error":
            return OperationOutcome.unknown(kind, "provider.body-unrecognized", **meta)
        reason = error.code or "invalid_request"
        # As a create's: refused before execution on the only send (nothing was done; the
        # payment's state, e.g. payment_intent_unexpected_state, may have changed by a resend).
        return OperationOutcome.refused_before_execution(
            kind, reason + (f":{error.param}" if error.param else ""), first_send=first_send,
            resend_reason=f"provider.rejected-this-send.{reason}", request_rejected=True, **meta)


    # -- lookups --------------------------------------------------------------

    async def find_operation_by_reference(self, provider_account: str, kind: OperationKind, reference: str,
                                          *, budget_s: float | None,
                                          provider_payment_id: str | None = None) -> OperationLookup:
        """The operation of ``kind`` on the intent ``provider_payment_id`` carrying ``reference``.

        Stripe has no search for refunds and no capture or cancel objects, so every lookup is
        about one intent, and needs its id (``provider_payment_id``, an addition of this class
        to :class:`~paycore.providers.base.OperationCalls`; without it ``unavailable``
        ``lookup.needs-provider-payment-id``, nothing sent):

        - refund: ``GET /v1/refunds?payment_intent=…&limit=100``, the refunds whose
          ``metadata[paycore_reference]`` is ``reference``, oldest first (``unavailable``
          ``provider.list-truncated`` when none is on a page that says there are more);
        - capture: ``GET /v1/payment_intents/{id}``: ``found`` when its
          ``metadata[paycore_capture_reference]`` is ``reference`` (:func:`capture_outcome`),
          else ``not_found`` (a capture writes it in the same step, and retrieve is consistent);
        - cancel: the same intent: ``found`` ``SUCCEEDED`` when it is a hold canceled by a
          request (:func:`is_requested_cancel`), else ``not_found``. A cancel carries no
          reference, so ``reference`` is not compared: the one cancel a payment may have is it.

        :raises ValueError: ``budget_s`` is NaN.
        """
        if provider_payment_id is None:
            result = OperationLookup("unavailable", reason="lookup.needs-provider-payment-id")
        elif not INTENT_ID_RE.fullmatch(provider_payment_id):
            result = OperationLookup("unavailable", reason="request.not-buildable.invalid-payment-id")
        elif not reference:
            result = OperationLookup("unavailable", reason="request.not-buildable.invalid-reference")
        elif kind is OperationKind.REFUND:
            result = await self._operation_lookup(
                provider_account, REFUNDS_PATH, {"payment_intent": provider_payment_id, "limit": _LIST_LIMIT},
                budget_s=budget_s, found=lambda body: _refunds_found(body, reference), by_id=False)
        else:
            def found(body: Any) -> OperationLookup:
                held = parse_held_intent(body)
                if held is None:
                    return OperationLookup("unavailable", reason="provider.body-unrecognized")
                if kind is OperationKind.CAPTURE and held.capture_reference == reference:
                    return OperationLookup("found", found=(capture_outcome(held),))
                if kind is OperationKind.CANCEL and is_requested_cancel(held):
                    return OperationLookup("found", found=(cancel_outcome(held),))
                return OperationLookup("not_found")

            # A 404 of the intent itself is no proof about an operation on it: unavailable.
            path = f"/v1/payment_intents/{provider_payment_id}"
            result = await self._operation_lookup(provider_account, path, {}, budget_s=budget_s, found=found,
                                                  by_id=False)
        return self._operation_lookup_logged(f"find_{kind.value}_by_reference", provider_account, result)

    async def get_refund(self, provider_account: str, refund_id: str, *,
                         budget_s: float | None) -> OperationLookup:
        """``GET /v1/refunds/{id}``: ``found`` with the refund as answered, ``not_found`` on 404.

        :raises ValueError: ``budget_s`` is NaN.
        """
        if not _REFUND_ID_RE.fullmatch(refund_id):
            result = OperationLookup("unavailable", reason="request.not-buildable.invalid-refund-id")
        else:
            def found(body: Any) -> OperationLookup:
                refund = parse_refund(body)
                if refund is None:
                    return OperationLookup("unavailable", reason="provider.body-unrecognized")
                return OperationLookup("found", found=(refund_outcome(refund),))

            result = await self._operation_lookup(provider_account, f"{REFUNDS_PATH}/{refund_id}", {},
                                                  budget_s=budget_s, found=found, by_id=True)
        return self._operation_lookup_logged("get_refund", provider_account, result)

    async def _operation_lookup(self, provider_account: str, path: str, params: dict[str, str], *,
                                budget_s: float | None, found: Callable[[Any], OperationLookup],
                                by_id: bool) -> OperationLookup:
        """One ``GET`` under the account's version; ``found`` reads a 200's JSON. A miss only on a
        by-id 404; anything else without a usable answer is ``unavailable``."""
        limit_s, limit_name = self._call_limit(budget_s)
        try:
            acct = self._account(provider_account)
        except NotBuildable as exc:
            return OperationLookup("unavailable", reason=f"request.not-buildable.{exc.reason}")
        if not is_token(acct.api_version):
            return OperationLookup("unavailable", reason="request.not-buildable.invalid-header")
        if limit_s <= 0:
            return OperationLookup("unavailable", reason=f"provider.no-response.{limit_name}")
        query = {**params, "stripe_version": acct.api_version}
        answer = await self._send(self._client(acct), "get", path, query, limit_s, limit_name)
        if isinstance(answer, str):
            return OperationLookup("unavailable", reason=answer)
        status = answer.status
        if status == 200:
            body = read_json(answer.body)
            if body is UNREADABLE:
                return OperationLookup("unavailable", reason="provider.body-unreadable")
            return found(body)
        if status == 404 and by_id:
            return OperationLookup("not_found")
        if status == 429:
            retry_after = retry_after_seconds(answer.headers)
            wait_s = DEFAULT_RETRY_AFTER_S if retry_after is None else min(retry_after, MAX_BUDGET_S)
            return OperationLookup("unavailable", reason="provider.rate-limited", retry_after_s=wait_s)
        if status in (401, 403):
            return OperationLookup("unavailable", reason="provider.rejected.auth")
        if 500 <= status <= 599:
            return OperationLookup("unavailable", reason=f"provider.http-{status}")
        return OperationLookup("unavailable", reason=f"provider.unexpected-status-{status}")

    def _operation_lookup_logged(self, operation: str, provider_account: str,
                                 result: OperationLookup) -> OperationLookup:
        level = logging.WARNING if result.kind == "unavailable" else logging.INFO
        self._log.log(level, "%s %s account=%s result=%s reason=%s", self.name, operation,
                      provider_account, result.kind, result.reason)
        return result


def _refunds_found(body: Any, reference: str) -> OperationLookup:
    """The refunds of a list page carrying ``reference``, oldest first (Stripe lists newest first)."""
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        return OperationLookup("unavailable", reason="provider.body-unrecognized")
    refunds: list[Refund] = []
    for item in body["data"]:
        refund = parse_refund(item)
        if refund is None:
            return OperationLookup("unavailable", reason="provider.body-unrecognized")
        refunds.append(refund)
    mine = [r for r in reversed(refunds) if r.reference == reference]
    if not mine:
        # A page that says there is more cannot prove the refund is not on the next one.
        if body.get("has_more") is True:
            return OperationLookup("unavailable", reason="provider.list-truncated")
        return OperationLookup("not_found")
    mine.sort(key=lambda r: r.created)  # stable: equal times keep the reversed (oldest first) order
    return OperationLookup("found", found=tuple(refund_outcome(r) for r in mine))


__all__ = ["REQUESTED_CANCELLATION_REASONS", "StripeOperations", "cancel_outcome", "capture_claim",
           "capture_outcome", "is_requested_cancel", "refund_outcome"]
