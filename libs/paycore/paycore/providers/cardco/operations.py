"""Cardco after the payment: send captures, cancels and refunds, classify the answers, look them up.

:class:`CardcoOperations` is the :class:`~paycore.providers.base.OperationCalls` half of
:class:`~paycore.providers.cardco.client.CardcoClient`, on the same pool, accounts and budgets.
The rules are the create's (``client.py``): the stored request is sent once per call, byte for
byte under its key; no answer, an unreadable one, or one about another payment or reference
is Unknown; nothing the provider does raises. Every non-success answer reads as a create's
(:func:`.answers.classify_error`): the contract applies ``POST /v1/payments``'s idempotency
rules to every ``POST``.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import quote

import httpx
import orjson

from paycore.domain import Claim, OperationKind
from paycore.errors import InvalidPaymentMethod
from paycore.evidence import judge
from paycore.providers.adapter import ProviderClient
from paycore.providers.base import (
    OperationEnding,
    OperationLookup,
    OperationOutcome,
    StoredRequest,
)
from paycore.providers.cardco.answers import classify_error
from paycore.providers.cardco.request import create_request
from paycore.providers.cardco.wire import (
    MAX_REFERENCE_LEN,
    REJECTION_CODES,
    UNREADABLE,
    ProviderMovement,
    auth_headers,
    is_replayed,
    parse_capture,
    parse_list,
    parse_payment_object,
    parse_refund,
    read_json,
    retry_after_seconds,
)
from paycore.providers.http import DEFAULT_RETRY_AFTER_S, NotBuildable, send_once
from paycore.providers.package import ProviderAccountConfig

# The 400 codes each endpoint documents as "nothing done", beside those of every POST.
OPERATION_REJECTION_CODES: Final = {
    OperationKind.CAPTURE: REJECTION_CODES | {"amount_too_large", "payment_not_capturable"},
    OperationKind.CANCEL: REJECTION_CODES | {"payment_not_cancelable"},
    OperationKind.REFUND: REJECTION_CODES | {"amount_exceeds_refundable", "payment_not_refundable"},
}
# The success status of each endpoint: a new capture or refund is 201, a cancel answers the payment.
_OK_STATUS: Final = {OperationKind.CAPTURE: 201, OperationKind.CANCEL: 200, OperationKind.REFUND: 201}
# Where lookups by reference exist; a cancel has no object of its own (look the payment up).
_LIST_PATH: Final = {OperationKind.CAPTURE: "/v1/captures", OperationKind.REFUND: "/v1/refunds"}
_PARSERS: Final[dict[OperationKind, Callable[[Any], ProviderMovement | None]]] = {
    OperationKind.CAPTURE: parse_capture, OperationKind.REFUND: parse_refund,
}
_MOVEMENT_ENDINGS: Final = {
    "pending": OperationEnding.PENDING, "succeeded": OperationEnding.SUCCEEDED,
    "failed": OperationEnding.FAILED, "canceled": OperationEnding.FAILED,
}
MAX_REASON_LEN: Final = 200


def operation_path(kind: OperationKind, provider_payment_id: str) -> str:
    """The path of an operation of ``kind`` on the payment."""
    segment = quote(provider_payment_id, safe="")  # an id is one path segment, whatever it holds
    if kind is OperationKind.CAPTURE:
        return f"/v1/payments/{segment}/captures"
    if kind is OperationKind.CANCEL:
        return f"/v1/payments/{segment}/cancel"
    return "/v1/refunds"


def build_operation_body(kind: OperationKind, *, provider_payment_id: str, amount_minor: int,
                         reference: str, reason: str | None = None) -> str:
    """Serialize an operation's body once, for storing: canonical JSON as the create's.

    A capture sends ``amount`` and ``reference``; a cancel only ``reference`` (it releases the
    whole hold; ``amount_minor`` is what the operation records); a refund ``payment``,
    ``amount`` (always: paycore decides the amount, never the provider's default),
    ``reference`` and an optional ``reason``.

    :raises InvalidPaymentMethod: A value the contract would reject (a ``ValueError``).
    """
    if isinstance(amount_minor, bool) or not isinstance(amount_minor, int) or amount_minor <= 0:
        raise InvalidPaymentMethod("amount_minor must be a positive integer")
    if not provider_payment_id:
        raise InvalidPaymentMethod("provider_payment_id must not be empty")
    if not 1 <= len(reference) <= MAX_REFERENCE_LEN:
        raise InvalidPaymentMethod(f"reference must be 1 to {MAX_REFERENCE_LEN} characters")
    if reason is not None and (kind is not OperationKind.REFUND or len(reason) > MAX_REASON_LEN):
        raise InvalidPaymentMethod(f"only a refund takes a reason, of at most {MAX_REASON_LEN} characters")
    body: dict[str, Any] = {"reference": reference}
    if kind is not OperationKind.CANCEL:
        body["amount"] = amount_minor
    if kind is OperationKind.REFUND:
        body["payment"] = provider_payment_id
        if reason is not None:
            body["reason"] = reason
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS).decode("utf-8")


def movement_outcome(kind: OperationKind, movement: ProviderMovement, **meta: Any) -> OperationOutcome:
    """What a refund or capture object says, as an outcome (a canceled refund is ``FAILED``:
    final, nothing moved)."""
    ending = _MOVEMENT_ENDINGS[movement.status]
    reason = None
    if ending is OperationEnding.FAILED:
        failure = movement.failure_reason
        reason = f"{movement.status}:{failure}" if failure else movement.status
    return OperationOutcome(
        kind, ending, reason=reason, provider_status=movement.status, provider_operation_id=movement.id,
        provider_payment_id=movement.payment, amount_minor=movement.amount_minor, currency=movement.currency,
        claim=_movement_claim(movement), **meta)


def _movement_claim(movement: ProviderMovement) -> Claim:
    # provider_payment_id stays None: the claim's id is an attempt's payment, checked apart.
    return Claim(reference=movement.reference, amount_minor=movement.amount_minor, currency=movement.currency,
                 accounts=(movement.account,), livemodes=(movement.livemode,))


class CardcoOperations(ProviderClient[httpx.Request, httpx.Response], abc.ABC):
    """Captures, cancels and refunds on Cardco (:class:`~paycore.providers.base.OperationCalls`)."""

    def operation_endpoint(self, account: ProviderAccountConfig, kind: OperationKind,
                           provider_payment_id: str) -> str:
        return account.base_url.rstrip("/") + operation_path(kind, provider_payment_id)

    def build_operation_body(self, kind: OperationKind, *, provider_payment_id: str, amount_minor: int,
                             reference: str, reason: str | None = None, currency: str | None = None,
                             account: ProviderAccountConfig | None = None) -> str:
        """:func:`build_operation_body` (Cardco's body names neither: the payment has both)."""
        return build_operation_body(kind, provider_payment_id=provider_payment_id, amount_minor=amount_minor,
                                    reference=reference, reason=reason)

    # -- send -----------------------------------------------------------------

    async def send_operation(self, stored: StoredRequest, kind: OperationKind, *, provider_payment_id: str,
                             budget_s: float | None, first_send: bool) -> OperationOutcome:
        """Send the stored capture, cancel or refund once and classify the answer.

        ``stored`` is the operation's record: its ``client_reference`` is the operation's
        reference, ``amount_minor``/``currency`` what it moves; the body goes byte-identical
        on every send, under the stored key.

        A documented 400 (``amount_exceeds_refundable``, ``payment_not_refundable``,
        ``amount_too_large``, ``payment_not_capturable``, ``payment_not_cancelable``, or any
        code every ``POST`` documents) is ``REJECTED`` only when ``first_send``: nothing was
        done. On a resend after an Unknown it proves nothing about the earlier send, which
        may have been executed and be the very reason this one is refused (the refund it
        made leaves nothing refundable; the capture it made leaves no hold): ``UNKNOWN``
        ``provider.rejected-this-send.<code>`` with ``request_rejected``, as a payment's.
        A 429 likewise; every other answer reads as :func:`.answers.classify_error` says.

        A success whose object names another payment, reference, amount, currency, account
        or mode than was sent is not evidence: ``UNKNOWN``
        ``provider.response-mismatch.<field>``, what it said kept in ``claim``/``detail``.

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

        :raises NotBuildable: As the create's; ``endpoint-changed`` when the stored endpoint is
            not this kind's path, or names another payment than ``provider_payment_id``.
        """
        request = create_request(stored, self._configured(stored.provider_account))
        if not request.url.raw_path.decode("ascii").endswith(operation_path(kind, provider_payment_id)):
            raise NotBuildable("endpoint-changed")
        if kind is OperationKind.REFUND and _body_payment(stored.request_body) != provider_payment_id:
            raise NotBuildable("invalid-body")
        return request

    def _classify_operation(self, stored: StoredRequest, kind: OperationKind, provider_payment_id: str,
                            response: httpx.Response, *, first_send: bool) -> OperationOutcome:
        if response.status_code != _OK_STATUS[kind]:
            error = classify_error(response, rejection_codes=OPERATION_REJECTION_CODES[kind],
                                   now=self._clock.now())
            if error.reason == "provider.key-reused":
                self._log.error("cardco %s operation_id=%s: idempotency key reused with a different body",
                                kind.value, stored.attempt_id)
            if error.refused_code is not None:
                return OperationOutcome.refused_before_execution(
                    kind, error.refused_code, first_send=first_send, resend_reason=error.reason,
                    request_rejected=error.request_rejected, **error.meta)
            return OperationOutcome.unknown(kind, error.reason, **error.meta)

        meta: dict[str, Any] = {"http_status": response.status_code, "replayed": is_replayed(response)}
        body = read_json(response.content)
        if body is UNREADABLE:
            return OperationOutcome.unknown(kind, "provider.body-unreadable", **meta)
        if kind is OperationKind.CANCEL:
            return self._cancel_outcome(stored, provider_payment_id, body, meta)
        movement = _PARSERS[kind](body)
        if movement is None:
            return OperationOutcome.unknown(kind, "provider.body-unrecognized", **meta)
        claim = _movement_claim(movement)
        verdict = judge(stored, claim)
        attribute = verdict.attribute if not verdict.accepted else (
            "payment" if movement.payment != provider_payment_id else None)
        if attribute is not None:
            # About another operation or payment: its id and status are never this one's.
            return OperationOutcome.unknown(
                kind, f"provider.response-mismatch.{attribute}", claim=claim,
                detail={"reported": {"id": movement.id, "payment": movement.payment,
                                     "status": movement.status}}, **meta)
        return movement_outcome(kind, movement, **meta)

    @staticmethod
    def _cancel_outcome(stored: StoredRequest, provider_payment_id: str, body: Any,
                        meta: dict[str, Any]) -> OperationOutcome:
        """A cancel answers the payment: it must be this payment, of this account, canceled."""
        kind = OperationKind.CANCEL
        payment = parse_payment_object(body)
        if payment is None:
            return OperationOutcome.unknown(kind, "provider.body-unrecognized", **meta)
        # Only the account and mode are judged: the payment's reference and amount are the
        # payment's, not the cancel's.
        claim = Claim(accounts=payment.claim().accounts, livemodes=payment.claim().livemodes)
        verdict = judge(stored, claim)
        attribute = verdict.attribute if not verdict.accepted else (
            "payment" if payment.id != provider_payment_id else None)
        if attribute is not None:
            return OperationOutcome.unknown(kind, f"provider.response-mismatch.{attribute}",
                                            claim=payment.claim(), detail={"reported": payment.evidence()},
                                            **meta)
        if payment.status != "canceled":
            # The contract's 200 is the canceled payment; anything else is not understood.
            return OperationOutcome.unknown(kind, f"provider.cancel-answered-{payment.status}",
                                            provider_payment_id=payment.id, **meta)
        return OperationOutcome(kind, OperationEnding.SUCCEEDED, provider_status=payment.status,
                                provider_payment_id=payment.id, amount_minor=payment.amount_minor,
                                currency=payment.currency, claim=payment.claim(), **meta)


    # -- lookups --------------------------------------------------------------

    async def find_operation_by_reference(self, provider_account: str, kind: OperationKind, reference: str,
                                          *, budget_s: float | None,
                                          provider_payment_id: str | None = None) -> OperationLookup:
        """``GET /v1/refunds?reference=…`` or ``GET /v1/captures?reference=…``: every object of the
        account with that reference, oldest first, as seen (the caller judges each).

        A cancel has no object and no such lookup: ``unavailable``
        (``lookup.unsupported.cancel``), nothing sent; its evidence is the payment
        (``get_payment``: ``canceled``).

        :raises ValueError: ``budget_s`` is NaN.
        """
        path = _LIST_PATH.get(kind)
        if path is None:
            result = OperationLookup("unavailable", reason=f"lookup.unsupported.{kind.value}")
        elif not reference:
            result = OperationLookup("unavailable", reason="request.not-buildable.invalid-reference")
        else:
            parse = _PARSERS[kind]

            def found(body: Any) -> OperationLookup:
                objects = parse_list(body, parse)
                if objects is None:
                    return OperationLookup("unavailable", reason="provider.body-unrecognized")
                if not objects:
                    return OperationLookup("not_found")
                return OperationLookup("found", found=tuple(movement_outcome(kind, m) for m in objects))

            result = await self._operation_lookup(provider_account, path, {"reference": reference},
                                                  budget_s=budget_s, found=found, by_id=False)
        return self._operation_lookup_logged(f"find_{kind.value}_by_reference", provider_account, result)

    async def get_refund(self, provider_account: str, refund_id: str, *,
                         budget_s: float | None) -> OperationLookup:
        """``GET /v1/refunds/{id}``: ``found`` with the refund as answered, ``not_found`` on 404.

        :raises ValueError: ``budget_s`` is NaN.
        """
        if not refund_id:
            result = OperationLookup("unavailable", reason="request.not-buildable.invalid-refund-id")
        else:
            def found(body: Any) -> OperationLookup:
                refund = parse_refund(body)
                if refund is None:
                    return OperationLookup("unavailable", reason="provider.body-unrecognized")
                return OperationLookup("found", found=(movement_outcome(OperationKind.REFUND, refund),))

            path = f"/v1/refunds/{quote(refund_id, safe='')}"
            result = await self._operation_lookup(provider_account, path, None, budget_s=budget_s,
                                                  found=found, by_id=True)
        return self._operation_lookup_logged("get_refund", provider_account, result)

    async def _operation_lookup(self, provider_account: str, path: str, params: dict[str, str] | None, *,
                                budget_s: float | None, found: Callable[[Any], OperationLookup],
                                by_id: bool) -> OperationLookup:
        """One ``GET``; ``found`` reads a 200's JSON. A miss only on a by-id 404 (a search never
        answers 404 for one); anything else without a usable answer is ``unavailable``."""
        limit_s, limit_name = self._call_limit(budget_s)
        try:
            acct = self._configured(provider_account)
            headers = auth_headers(acct, acct.api_version)
        except NotBuildable as exc:
            return OperationLookup("unavailable", reason=f"request.not-buildable.{exc.reason}")
        if limit_s <= 0:
            return OperationLookup("unavailable", reason=f"provider.no-response.{limit_name}")
        request = httpx.Request("GET", acct.base_url.rstrip("/") + path, params=params, headers=headers)
        response = await send_once(self._http, request, self._clock, limit_s, limit_name)
        if isinstance(response, str):
            return OperationLookup("unavailable", reason=response)
        status = response.status_code
        if status == 200:
            body = read_json(response.content)
            if body is UNREADABLE:
                return OperationLookup("unavailable", reason="provider.body-unreadable")
            return found(body)
        if status == 404 and by_id:
            return OperationLookup("not_found")
        if status == 429:
            retry_after = retry_after_seconds(response, self._clock.now())
            return OperationLookup(
                "unavailable", reason="provider.rate-limited",
                retry_after_s=DEFAULT_RETRY_AFTER_S if retry_after is None else retry_after)
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


def _body_payment(request_body: str) -> object:
    """The ``payment`` a stored refund body names (``None`` when it names none)."""
    try:
        body = orjson.loads(request_body)
    except orjson.JSONDecodeError:
        return None
    return body.get("payment") if isinstance(body, dict) else None


__all__ = ["OPERATION_REJECTION_CODES", "CardcoOperations", "build_operation_body",
           "movement_outcome", "operation_path"]
