"""Adyen after the payment: send captures, cancels and refunds (Checkout API v71 modifications).

:class:`AdyenOperations` is the :class:`~paycore.providers.base.OperationCalls` half of
:class:`~paycore.providers.adyen.client.AdyenProvider`, on the same pool, accounts and budgets.
The rules are the create's (``client.py``): the stored request is sent once per call, byte for
byte under its key, never retried; no answer, an unreadable one, or one about another payment
or reference is Unknown; nothing the provider does raises.

Adyen answers a modification with ``201`` and ``status: "received"``
(https://docs.adyen.com/online-payments/refund, .../capture, .../cancel): the request was
accepted for processing, nothing more. That is never a success: it is ``PENDING``, and the
ending comes only by the ``REFUND``/``CAPTURE``/``CANCELLATION`` notification
(:func:`paycore.providers.adyen.notifications.parse_operation_item`). Adyen has no read of a
modification either, so the lookups answer ``unavailable`` and send nothing.
"""

from __future__ import annotations

import abc
from typing import Any, Final
from urllib.parse import quote

import httpx
import orjson

from paycore.domain import OperationKind
from paycore.errors import InvalidPaymentMethod
from paycore.evidence import judge
from paycore.payment_methods import contains_card_number
from paycore.providers.adapter import ProviderClient
from paycore.providers.adyen.answers import classify_error
from paycore.providers.adyen.request import create_request
from paycore.providers.adyen.wire import (
    CURRENCY_RE,
    MAX_REFERENCE_LEN,
    RECEIVED,
    UNREADABLE,
    AdyenModification,
    is_transient,
    parse_modification,
    read_json,
)
from paycore.providers.base import (
    UNSUPPORTED_LOOKUP,
    OperationEnding,
    OperationLookup,
    OperationOutcome,
    StoredRequest,
)
from paycore.providers.http import NotBuildable
from paycore.providers.package import ProviderAccountConfig

# The path segment of each modification under /payments/{pspReference}/.
_SEGMENTS: Final = {OperationKind.CAPTURE: "captures", OperationKind.CANCEL: "cancels",
                    OperationKind.REFUND: "refunds"}
# A modification answers 201 Created (https://docs.adyen.com/api-explorer/Checkout/71/overview).
_CREATED: Final = 201
MAX_REASON_LEN: Final = 200
# Adyen has no lookup for modifications: only the notification or a same-key resend can tell.
NO_MODIFICATION_LOOKUP: Final = f"{UNSUPPORTED_LOOKUP}.modifications"


def operation_path(kind: OperationKind, provider_payment_id: str, api_version: str) -> str:
    """``/{version}/payments/{pspReference}/{captures|cancels|refunds}``."""
    segment = quote(provider_payment_id, safe="")  # an id is one path segment, whatever it holds
    return f"/{api_version}/payments/{segment}/{_SEGMENTS[kind]}"


def build_operation_body(kind: OperationKind, *, provider_payment_id: str, amount_minor: int, reference: str,
                         merchant_account: str, currency: str | None) -> str:
    """Serialize a modification's body once, for storing: canonical JSON (sorted keys).

    A capture and a refund send ``merchantAccount``, ``amount`` (``value``, ``currency``;
    always: paycore decides the amount, never Adyen's default) and ``reference``; a cancel only
    ``merchantAccount`` and ``reference`` (it releases the whole authorisation; ``amount_minor``
    is what the operation records). ``reference`` is the operation's own: Adyen echoes it in the
    answer and as the notification's ``merchantReference``.

    :raises InvalidPaymentMethod: A value Adyen would reject (a ``ValueError``).
    """
    if isinstance(amount_minor, bool) or not isinstance(amount_minor, int) or amount_minor <= 0:
        raise InvalidPaymentMethod("amount_minor must be a positive integer")
    if not provider_payment_id:
        raise InvalidPaymentMethod("provider_payment_id must not be empty")
    if not 1 <= len(reference) <= MAX_REFERENCE_LEN:
        raise InvalidPaymentMethod(f"reference must be 1 to {MAX_REFERENCE_LEN} characters")
    if contains_card_number(reference):
        raise InvalidPaymentMethod("reference looks like a card number")
    if not merchant_account:
        raise InvalidPaymentMethod("merchant account must not be empty")
    body: dict[str, Any] = {"merchantAccount": merchant_account, "reference": reference}
    if kind is not OperationKind.CANCEL:
        if currency is None or not CURRENCY_RE.fullmatch(currency):
            raise InvalidPaymentMethod("a capture or refund needs the payment's currency, "
                                       "three upper-case letters")
        body["amount"] = {"value": amount_minor, "currency": currency}
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS).decode("utf-8")


class AdyenOperations(ProviderClient[httpx.Request, httpx.Response], abc.ABC):
    """Captures, cancels and refunds on Adyen (:class:`~paycore.providers.base.OperationCalls`)."""

    def operation_endpoint(self, account: ProviderAccountConfig, kind: OperationKind,
                           provider_payment_id: str) -> str:
        return account.base_url.rstrip("/") + operation_path(kind, provider_payment_id, account.api_version)

    def build_operation_body(self, kind: OperationKind, *, provider_payment_id: str, amount_minor: int,
                             reference: str, reason: str | None = None, currency: str | None = None,
                             account: ProviderAccountConfig | None = None) -> str:
        """:func:`build_operation_body` for ``account`` (the payment's): the body names its merchant
        account, and a capture's or refund's amount its ``currency`` (the payment's). Both are
        keyword-only additions to :class:`~paycore.providers.base.OperationCalls`'s signature,
        required here (Adyen's body needs them) and optional there (Cardco's does not).

        ``reason`` is checked as Cardco's is (a refund's only, at most 200 characters) but not
        sent: Adyen's ``merchantRefundReason`` is a fixed enumeration, paycore's a free text.

        :raises InvalidPaymentMethod: No ``account``, no ``currency`` for a capture or refund, or a
            value Adyen would reject.
        :raises NotBuildable: ``account-not-configured``: an account this provider does not serve.
        """
        if account is None:
            raise InvalidPaymentMethod("an Adyen modification names the merchant account: pass account=")
        if reason is not None and (kind is not OperationKind.REFUND or len(reason) > MAX_REASON_LEN):
            raise InvalidPaymentMethod(
                f"only a refund takes a reason, of at most {MAX_REASON_LEN} characters")
        acct = self._configured(account.provider_account)
        return build_operation_body(kind, provider_payment_id=provider_payment_id, amount_minor=amount_minor,
                                    reference=reference, merchant_account=acct.account, currency=currency)

    # -- send -----------------------------------------------------------------

    async def send_operation(self, stored: StoredRequest, kind: OperationKind, *, provider_payment_id: str,
                             budget_s: float | None, first_send: bool) -> OperationOutcome:
        """Send the stored capture, cancel or refund once and classify the answer.

        ``stored`` is the operation's record: its ``client_reference`` is the operation's
        reference, ``amount_minor``/``currency`` what it moves; the body goes byte-identical on
        every send, under the stored key.

        ===============================  ================================================
        answer                           outcome
        ===============================  ================================================
        201 ``received``, this           ``PENDING`` (``provider_status`` ``received``,
        operation's                      ``provider_operation_id`` the modification's
                                         pspReference): never ``SUCCEEDED``
        201 naming another payment,      ``UNKNOWN`` ``provider.response-mismatch.<field>``
        reference, amount, currency or   (``payment``, ``reference``, ``amount``, …), what
        merchant account                 it said kept in ``claim``/``detail``
        201 another status, no           ``UNKNOWN`` ``provider.body-unrecognized``
        pspReference, malformed
        a validation error, 401/403      first send: ``REJECTED`` ``rejected:<code>``;
                                         resend: ``UNKNOWN`` (it proves nothing about an
                                         earlier send that may have executed)
        429                              ``UNKNOWN`` ``provider.rate-limited``,
                                         ``detail.retry_after_s``
        anything else                    ``UNKNOWN`` as :func:`.answers.classify_error`
                                         says (transient, 704, 5xx, …)
        ===============================  ================================================

        :param provider_payment_id: The payment the stored request names.
        :param budget_s: The caller's budget, or ``None`` for the client ceiling; zero or
            negative sends nothing.
        :raises ValueError: ``budget_s`` is NaN.
        """
        return await self._send_operation_once(stored, kind, provider_payment_id=provider_payment_id,
                                               budget_s=budget_s, first_send=first_send)

    def _build_operation(self, stored: StoredRequest, kind: OperationKind,
                         provider_payment_id: str) -> httpx.Request:
        """The stored POST, if it is still this kind's on this payment.

        :raises NotBuildable: As the create's (origin, key, body, merchant account);
            ``endpoint-changed`` when the stored endpoint is not this kind's path on
            ``provider_payment_id``.
        """
        request = create_request(stored, self._configured(stored.provider_account))
        expected = operation_path(kind, provider_payment_id, stored.api_version)
        if not request.url.raw_path.decode("ascii").endswith(expected):
            raise NotBuildable("endpoint-changed")
        return request

    def _classify_operation(self, stored: StoredRequest, kind: OperationKind, provider_payment_id: str,
                            response: httpx.Response, *, first_send: bool) -> OperationOutcome:
        if response.status_code != _CREATED or is_transient(response):
            error = classify_error(response)
            if error.reason == "provider.key-reused":
                self._log.error("adyen %s operation_id=%s: idempotency key refused (%s)",
                                kind.value, stored.attempt_id, error.error_code)
            if error.refused_code is not None:
                return OperationOutcome.refused_before_execution(
                    kind, error.refused_code, first_send=first_send, resend_reason=error.reason,
                    request_rejected=error.request_rejected, **error.meta)
            # A 429 says when to ask again: the recovery loop's next check honours it.
            detail = {"retry_after_s": error.retry_after_s} if error.retry_after_s is not None else {}
            return OperationOutcome.unknown(kind, error.reason, detail=detail, **error.meta)

        meta: dict[str, Any] = {"http_status": response.status_code}
        body = read_json(response.content)
        if body is UNREADABLE:
            return OperationOutcome.unknown(kind, "provider.body-unreadable", **meta)
        answer = parse_modification(body)
        # Only "received" is documented; a capture's or refund's answer states its amount.
        if answer is None or answer.status != RECEIVED or (
                kind is not OperationKind.CANCEL and answer.amount_minor is None):
            return OperationOutcome.unknown(kind, "provider.body-unrecognized", **meta)
        return _received(stored, kind, provider_payment_id, answer, meta)


    # -- lookups: none ----------------------------------------------------------

    async def find_operation_by_reference(self, provider_account: str, kind: OperationKind, reference: str,
                                          *, budget_s: float | None,
                                          provider_payment_id: str | None = None) -> OperationLookup:
        """``unavailable``: Adyen has no read of a modification, by reference or otherwise. Sends
        nothing; the ending comes by notification, and recovery escalates at the deadline."""
        return OperationLookup("unavailable", reason=NO_MODIFICATION_LOOKUP)

    async def get_refund(self, provider_account: str, refund_id: str, *,
                         budget_s: float | None) -> OperationLookup:
        """``unavailable``: Adyen has no read of a refund. Sends nothing."""
        return OperationLookup("unavailable", reason=NO_MODIFICATION_LOOKUP)


def _received(stored: StoredRequest, kind: OperationKind, provider_payment_id: str,
              answer: AdyenModification, meta: dict[str, Any]) -> OperationOutcome:
    """A ``received`` answer: ``PENDING`` when it is about this operation, else ``UNKNOWN``."""
    claim = answer.claim()
    verdict = judge(stored, claim)
    attribute = verdict.attribute if not verdict.accepted else (
        "payment" if answer.payment_psp_reference != provider_payment_id else None)
    if attribute is not None:
        # About another modification or payment: its pspReference is never this operation's.
        return OperationOutcome.unknown(kind, f"provider.response-mismatch.{attribute}", claim=claim,
                                        detail={"reported": answer.evidence()}, **meta)
    return OperationOutcome(kind, OperationEnding.PENDING, provider_status=answer.status,
                            provider_operation_id=answer.psp_reference,
                            provider_payment_id=answer.payment_psp_reference,
                            amount_minor=answer.amount_minor, currency=answer.currency, claim=claim, **meta)


__all__ = ["NO_MODIFICATION_LOOKUP", "AdyenOperations", "build_operation_body", "operation_path"]
