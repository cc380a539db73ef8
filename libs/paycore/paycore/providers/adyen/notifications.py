"""Adyen standard notifications: basic auth, per-item HMAC, batches, items parsed into neutral notifications.

An item is read two ways: as a payment's :class:`~paycore.providers.base.Notification`
(:func:`parse_item`) and, for the eventCodes of captures, cancels and refunds, as an
:class:`~paycore.providers.base.OperationNotification` (:func:`parse_operation_item`).

A delivery is ``{"live": "false", "notificationItems": [{"NotificationRequestItem": {...}}, ...]}``
(https://docs.adyen.com/development-resources/webhooks/understand-notifications).
Verification, in order:

1. HTTP basic auth (``Authorization: Basic``) against each account's
   ``webhook_username``/``webhook_password``
   (https://docs.adyen.com/development-resources/webhooks/#set-up-notifications-in-your-customer-area);
2. every item's HMAC signature (``additionalData.hmacSignature``): HMAC-SHA256, keyed
   with the hex-decoded HMAC key, over
   ``pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success``
   (absent fields empty), base64
   (https://docs.adyen.com/development-resources/webhooks/secure-webhooks/verify-hmac-signatures).
   Proven equal to ``Adyen.util.generate_notification_sig`` by the tests' vectors.

The account is the one whose credentials and key verified the whole batch; one item
that fails verifies nothing (nothing is stored). During a rotation an account's previous
HMAC key and password verify too (:mod:`paycore.providers.webhook_secrets`), for that
account only. The answer Adyen expects is
``[accepted]`` (:data:`ACKNOWLEDGEMENT`). There is no event id: an item's deduplication
key is synthesized from pspReference, eventCode, success and merchantReference.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Final

import orjson

from paycore.domain import Claim, OperationKind, OutcomeKind, ProviderOutcome
from paycore.providers.adapter import EventFormat
from paycore.providers.adyen.provider import AdyenAccountConfig
from paycore.providers.adyen.wire import CURRENCY_RE, NAME
from paycore.providers.base import (
    InvalidNotification,
    Notification,
    NotificationUnverified,
    OperationEnding,
    OperationNotification,
    OperationOutcome,
    VerifiedDelivery,
    synthesized_key,
)
from paycore.providers.package import ProviderAccountConfig
from paycore.providers.webhook_secrets import PreviousSecretLog
from paycore.settings_spec import ConfigError, Secret

ACKNOWLEDGEMENT: Final = b"[accepted]"

# The signed fields, in signing order.
SIGNED_FIELDS: Final = ("pspReference", "originalReference", "merchantAccountCode", "merchantReference",
                        "value", "currency", "eventCode", "success")
_STRING_FIELDS: Final = ("pspReference", "originalReference", "merchantAccountCode", "merchantReference",
                         "eventCode", "success")


class InvalidItem(InvalidNotification):
    """A verified item that is not one paycore acts on, or not a notification at all."""


# ---------------------------------------------------------------------------
# HMAC


def _signed_values(item: Mapping[str, Any]) -> list[str] | None:
    """The signed fields of ``item`` as text, or ``None`` when one has the wrong type."""
    values: dict[str, str] = {}
    for name in _STRING_FIELDS:
        value = item.get(name, "")
        if not isinstance(value, str):
            return None
        values[name] = value
    amount = item.get("amount")
    if not isinstance(amount, dict):
        return None
    value, currency = amount.get("value"), amount.get("currency")
    if not isinstance(value, int) or isinstance(value, bool) or not isinstance(currency, str):
        return None
    values["value"], values["currency"] = str(value), currency
    return [values[name] for name in SIGNED_FIELDS]


def signing_string(item: Mapping[str, Any]) -> str | None:
    """What an item's signature covers, or ``None`` when the item cannot be signed."""
    values = _signed_values(item)
    return None if values is None else ":".join(values)


def hmac_key_bytes(hex_key: str) -> bytes:
    """The HMAC key as Adyen's Customer Area shows it (hex), decoded.

    :raises ValueError: Not hex of an even length.
    """
    try:
        return binascii.a2b_hex(hex_key.strip())
    except (binascii.Error, ValueError):
        raise ValueError("the Adyen HMAC key must be hexadecimal") from None


def item_signature(item: Mapping[str, Any], key: bytes) -> str | None:
    """The base64 HMAC-SHA256 of the item's signing string under ``key``."""
    text = signing_string(item)
    if text is None:
        return None
    return base64.b64encode(hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()).decode("ascii")


def item_verifies(item: Mapping[str, Any], key: bytes) -> bool:
    """Whether ``additionalData.hmacSignature`` is the item's signature under ``key`` (constant time)."""
    extra = item.get("additionalData")
    received = extra.get("hmacSignature") if isinstance(extra, dict) else None
    if not isinstance(received, str) or not received:
        return False
    expected = item_signature(item, key)
    if expected is None:
        return False
    return hmac.compare_digest(expected.encode("ascii"), received.encode("utf-8", "replace"))


# ---------------------------------------------------------------------------
# The batch


def batch_items(body: bytes) -> tuple[Any, list[dict[str, Any]]]:
    """``(live, items)`` of a delivery body.

    :raises NotificationUnverified: (malformed) not JSON, or not a batch of items.
    """
    try:
        batch = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise NotificationUnverified("not-json", malformed=True) from None
    items = batch.get("notificationItems") if isinstance(batch, dict) else None
    if not isinstance(items, list) or not items:
        raise NotificationUnverified("no-notification-items", malformed=True)
    out: list[dict[str, Any]] = []
    for entry in items:
        item = entry.get("NotificationRequestItem") if isinstance(entry, dict) else None
        if not isinstance(item, dict):
            raise NotificationUnverified("invalid-notification-item", malformed=True)
        out.append(item)
    return batch.get("live"), out


def single_item_event(live: Any, item: dict[str, Any]) -> dict[str, Any]:
    """One item as the batch of one it is stored as (what :func:`parse_notification` re-reads)."""
    return {"live": live, "notificationItems": [{"NotificationRequestItem": item}]}


# ---------------------------------------------------------------------------
# Items into notifications

# eventCode → (success → what it says). Each is documented at
# https://docs.adyen.com/development-resources/webhooks/webhook-types (standard webhooks).
# Modifications (CANCELLATION, REFUND, CANCEL_OR_REFUND) name the payment in
# originalReference; pspReference is the modification's own.
MODIFICATIONS: Final = frozenset({"CANCELLATION", "REFUND", "CANCEL_OR_REFUND"})
ACTED_ON: Final = frozenset({"AUTHORISATION", "OFFER_CLOSED"}) | MODIFICATIONS


def _live(value: Any) -> bool | None:
    if value in ("true", True):
        return True
    if value in ("false", False):
        return False
    return None


def parse_item(live: Any, item: dict[str, Any]) -> Notification:
    """The notification one item says, or :class:`InvalidItem`.

    ==========================  ========  ============================================
    eventCode                   success   outcome (``event_type``)
    ==========================  ========  ============================================
    AUTHORISATION               true      ``succeeded`` (``payment.succeeded``)
    AUTHORISATION               false     ``failed`` ``declined`` (``payment.failed``)
    OFFER_CLOSED                true      ``failed`` ``offer-closed`` (``payment.failed``)
    CANCELLATION                true      ``failed`` ``canceled`` (``payment.canceled``)
    CANCEL_OR_REFUND            true      cancel: as CANCELLATION; refund: as REFUND
    REFUND                      true      ``succeeded``, a refund (``payment.refunded``)
    anything else, or a failed  —         :class:`InvalidItem` ``not-applicable:<code>``:
    modification                          kept raw, never applied (as Cardco's unknown types)
    ==========================  ========  ============================================

    A refund's amount is the refund's, not the payment's: its claim states no amount.
    """
    values = _signed_values(item)
    if values is None:
        raise InvalidItem("invalid-fields")
    psp, original, merchant_account, reference, _, currency, event_code, success = values
    value = item["amount"]["value"]
    if not psp.strip() or not event_code or success not in ("true", "false"):
        raise InvalidItem("invalid-fields")
    if not CURRENCY_RE.fullmatch(currency) or value < 0:
        raise InvalidItem("invalid-amount")
    livemode = _live(live)
    if livemode is None:
        raise InvalidItem("invalid-live")
    ok = success == "true"
    action = event_code
    if event_code == "CANCEL_OR_REFUND":
        extra = item.get("additionalData")
        modification = extra.get("modification.action") if isinstance(extra, dict) else None
        action = {"cancel": "CANCELLATION", "refund": "REFUND"}.get(str(modification), "")
    if event_code not in ACTED_ON or not action or (event_code in MODIFICATIONS and not ok):
        raise InvalidItem(f"not-applicable:{event_code}:{success}")
    if event_code in MODIFICATIONS and not original.strip():
        raise InvalidItem("modification-without-original-reference")
    payment_id = original if event_code in MODIFICATIONS else psp
    is_refund = action == "REFUND"
    claim = Claim(provider_payment_id=payment_id, reference=reference or None,
                  amount_minor=None if is_refund else value, currency=currency,
                  accounts=(merchant_account,) if merchant_account else (), livemodes=(livemode,))
    common: dict[str, Any] = {"provider_payment_id": payment_id, "currency": currency, "claim": claim,
                              "amount_minor": None if is_refund else value}
    if action == "AUTHORISATION" and ok:
        event_type, status = "payment.succeeded", "succeeded"
        outcome = ProviderOutcome(OutcomeKind.SUCCEEDED, provider_status=status, **common)
    elif action == "AUTHORISATION":
        event_type, status = "payment.failed", "failed"
        outcome = ProviderOutcome.failed("declined", provider_status=status, **common)
    elif action == "OFFER_CLOSED":
        event_type, status = "payment.failed", "failed"
        outcome = ProviderOutcome.failed("offer-closed", provider_status=status, **common)
    elif action == "CANCELLATION":
        event_type, status = "payment.canceled", "canceled"
        outcome = ProviderOutcome.failed("canceled", provider_status=status, **common)
    else:  # REFUND: the payment was authorised and captured, then refunded
        event_type, status = "payment.refunded", "succeeded"
        outcome = ProviderOutcome(OutcomeKind.SUCCEEDED, provider_status=status, **common)
    return Notification(
        event_id=None, event_type=event_type, sequence=None, payment_id=payment_id,
        reference=reference or None, status=status, amount_minor=None if is_refund else value,
        currency=currency, amount_refunded=value if is_refund else 0,
        payload_account=merchant_account or None, payload_livemode=livemode, outcome=outcome,
        event=single_item_event(live, item),
    )


def item_key(item: Mapping[str, Any]) -> str:
    """The deduplication key of an item: stable across redeliveries, distinct per success value.

    Adyen items carry no event id; pspReference, eventCode, success and merchantReference
    identify one logical event (a refund has its own pspReference).
    """
    fields = {name: item.get(name) for name in ("pspReference", "eventCode", "success", "merchantReference")}
    return synthesized_key({"provider": NAME, **fields})


def parse_notification(body: bytes) -> Notification:
    """The notification in a stored single-item batch, or :class:`InvalidItem`."""
    try:
        live, items = batch_items(body)
    except NotificationUnverified as exc:
        raise InvalidItem(exc.reason) from None
    if len(items) != 1:
        raise InvalidItem("not-one-item")
    return parse_item(live, items[0])


def notification_key(n: Notification) -> str | None:
    """The key of a parsed notification (its event is a batch of one item)."""
    items = n.event.get("notificationItems")
    if not isinstance(items, list) or len(items) != 1:
        return None
    return item_key(items[0]["NotificationRequestItem"])


# How Adyen's notifications read: a stored event (a batch of one item) is re-parsed with it,
# without any account or secret.
ADYEN_EVENTS: Final = EventFormat(NAME, parse_notification, notification_key)


# ---------------------------------------------------------------------------
# Items about captures, cancels and refunds

# eventCode → (the operation, success → ending, the reason of a FAILED ending). A modification
# names the payment in originalReference; its pspReference is the modification's own, the one
# the /refunds, /captures or /cancels answer gave; merchantReference is the reference the
# request sent (https://docs.adyen.com/development-resources/webhooks/webhook-types). REFUND_FAILED,
# REFUNDED_REVERSED, CAPTURE_FAILED and TECHNICAL_CANCEL are documented with success "true" only:
# any other value is not understood (kept raw, never applied).
_S, _F = OperationEnding.SUCCEEDED, OperationEnding.FAILED
OPERATION_EVENTS: Final[dict[str, tuple[OperationKind, dict[str, OperationEnding], str]]] = {
    "REFUND": (OperationKind.REFUND, {"true": _S, "false": _F}, "refused"),
    # A refund reported succeeded that later failed, or whose money came back: FAILED, which
    # the domain makes Returned for a Succeeded refund.
    "REFUND_FAILED": (OperationKind.REFUND, {"true": _F}, "refund-failed"),
    "REFUNDED_REVERSED": (OperationKind.REFUND, {"true": _F}, "refunded-reversed"),
    "CAPTURE": (OperationKind.CAPTURE, {"true": _S, "false": _F}, "refused"),
    "CAPTURE_FAILED": (OperationKind.CAPTURE, {"true": _F}, "capture-failed"),
    "CANCELLATION": (OperationKind.CANCEL, {"true": _S, "false": _F}, "refused"),
    "TECHNICAL_CANCEL": (OperationKind.CANCEL, {"true": _S}, "refused"),
}
OPERATION_EVENT_CODES: Final = frozenset(OPERATION_EVENTS)


def parse_operation_item(live: Any, item: dict[str, Any]) -> OperationNotification | None:
    """The capture, cancel or refund one verified item tells of; ``None`` for an item about no
    operation (``AUTHORISATION``, ``OFFER_CLOSED``, ``CANCEL_OR_REFUND``, which paycore never
    requests, ``REPORT_AVAILABLE``, …), or :class:`InvalidItem`.

    ======================  ========  ================================================
    eventCode               success   operation, ending (``reason``)
    ======================  ========  ================================================
    REFUND                  true      refund ``SUCCEEDED``
    REFUND                  false     refund ``FAILED`` (``refused``)
    REFUND_FAILED           true      refund ``FAILED`` (``refund-failed``)
    REFUNDED_REVERSED       true      refund ``FAILED`` (``refunded-reversed``)
    CAPTURE                 true      capture ``SUCCEEDED``
    CAPTURE                 false     capture ``FAILED`` (``refused``)
    CAPTURE_FAILED          true      capture ``FAILED`` (``capture-failed``)
    CANCELLATION            true      cancel ``SUCCEEDED``
    CANCELLATION            false     cancel ``FAILED`` (``refused``)
    TECHNICAL_CANCEL        true      cancel ``SUCCEEDED``
    ======================  ========  ================================================

    ``provider_operation_id`` is the item's pspReference, ``provider_payment_id`` its
    originalReference, the claim's reference its merchantReference (the operation's own),
    amount, currency, ``merchantAccountCode`` and the batch's ``live``; ``provider_status`` is
    ``<eventCode>:<success>``. ``event_id`` is the item's deduplication key (:func:`item_key`:
    Adyen items carry no id).

    A ``CANCELLATION`` or ``REFUND`` also reads as a payment's notification
    (:func:`parse_item`): it is about an operation only when paycore has one with this
    pspReference or reference; otherwise (a cancel or refund made in the Customer Area, an
    expired authorisation) it is the payment's.
    """
    values = _signed_values(item)
    if values is None:
        raise InvalidItem("invalid-fields")
    psp, original, merchant_account, reference, _, currency, event_code, success = values
    known = OPERATION_EVENTS.get(event_code)
    if known is None:
        return None
    kind, endings, failure = known
    value = item["amount"]["value"]
    if not psp.strip() or success not in ("true", "false"):
        raise InvalidItem("invalid-fields")
    if not CURRENCY_RE.fullmatch(currency) or value < 0:
        raise InvalidItem("invalid-amount")
    livemode = _live(live)
    if livemode is None:
        raise InvalidItem("invalid-live")
    if not original.strip():
        raise InvalidItem("modification-without-original-reference")
    ending = endings.get(success)
    if ending is None:
        raise InvalidItem(f"not-applicable:{event_code}:{success}")
    claim = Claim(reference=reference or None, amount_minor=value, currency=currency,
                  accounts=(merchant_account,) if merchant_account else (), livemodes=(livemode,))
    outcome = OperationOutcome(
        kind, ending, reason=failure if ending is OperationEnding.FAILED else None,
        provider_status=f"{event_code}:{success}", provider_operation_id=psp, provider_payment_id=original,
        amount_minor=value, currency=currency, claim=claim)
    return OperationNotification(
        event_id=item_key(item), event_type=event_code, payload_account=merchant_account or None,
        payload_livemode=livemode, outcome=outcome, event=single_item_event(live, item))


def parse_operation_notification(body: bytes) -> OperationNotification | None:
    """:func:`parse_operation_item` of a stored single-item batch (``Notification.event``), or
    :class:`InvalidItem`."""
    try:
        live, items = batch_items(body)
    except NotificationUnverified as exc:
        raise InvalidItem(exc.reason) from None
    if len(items) != 1:
        raise InvalidItem("not-one-item")
    return parse_operation_item(live, items[0])


# ---------------------------------------------------------------------------
# Verification


@dataclasses.dataclass(frozen=True)
class _Secret:
    value: bytes
    previous: bool  # the one a rotation is replacing


@dataclasses.dataclass(frozen=True)
class _Credentials:
    account: ProviderAccountConfig
    username: bytes
    passwords: tuple[_Secret, ...]  # the current one first
    hmac_keys: tuple[_Secret, ...]  # the current one first

    def password_matches(self, user: bytes, password: bytes) -> _Secret | None:
        """The password matching ``user:password``; every candidate compared in constant time, so
        timing says nothing of which user exists or which password matched."""
        user_ok = hmac.compare_digest(self.username, user)
        matched = [p for p in self.passwords if hmac.compare_digest(p.value, password)]
        return matched[0] if user_ok and matched else None

    def item_key(self, item: Mapping[str, Any]) -> _Secret | None:
        """The HMAC key that signed ``item`` (the current one if both would)."""
        return next((k for k in self.hmac_keys if item_verifies(item, k.value)), None)


def _hmac_key(acct: ProviderAccountConfig, secret: Secret, previous: bool) -> _Secret:
    try:
        return _Secret(hmac_key_bytes(secret.reveal()), previous)
    except ValueError as exc:
        which = "previous HMAC key" if previous else "HMAC key"
        raise ValueError(f"the {which} of {acct.provider_account}: {exc}") from None


def _basic_credentials(headers: Mapping[str, str]) -> tuple[bytes, bytes]:
    """``(user, password)`` of ``Authorization: Basic``.

    :raises NotificationUnverified: (malformed) missing or not basic auth.
    """
    raw = headers.get("authorization")
    if raw is None:
        raise NotificationUnverified("missing-basic-auth", malformed=True)
    scheme, _, encoded = raw.strip().partition(" ")
    if scheme.lower() != "basic" or not encoded.strip():
        raise NotificationUnverified("not-basic-auth", malformed=True)
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise NotificationUnverified("invalid-basic-auth", malformed=True) from None
    user, sep, password = decoded.partition(b":")
    if not sep:
        raise NotificationUnverified("invalid-basic-auth", malformed=True)
    return user, password


class NotificationVerifier:
    """Verifies a batch against every configured Adyen account's basic auth and HMAC key.

    :raises ConfigError: No account has an HMAC key with a webhook user and password.
    :raises ValueError: An HMAC key is not hex.
    """

    def __init__(self, accounts: Iterable[ProviderAccountConfig]) -> None:
        self._credentials: list[_Credentials] = []
        for account in accounts:
            acct = AdyenAccountConfig.of(account)  # its basic auth is Adyen's own
            if acct.webhook_secret is None or acct.webhook_username is None or acct.webhook_password is None:
                continue
            passwords = [_Secret(acct.webhook_password.reveal().encode("utf-8"), previous=False)]
            keys = [_hmac_key(acct, acct.webhook_secret, previous=False)]
            if acct.webhook_password_previous is not None:
                old = acct.webhook_password_previous.reveal().encode("utf-8")
                passwords.append(_Secret(old, previous=True))
            if acct.webhook_secret_previous is not None:
                keys.append(_hmac_key(acct, acct.webhook_secret_previous, previous=True))
            self._credentials.append(_Credentials(
                account, acct.webhook_username.encode("utf-8"), tuple(passwords), tuple(keys)))
        if not self._credentials:
            raise ConfigError("PAYCORE_ADYEN_HMAC_KEY", "with PAYCORE_ADYEN_WEBHOOK_USERNAME and _PASSWORD "
                              "is required to receive notifications")
        self._previous_used = PreviousSecretLog()

    def verify_batch(self, headers: Mapping[str, str], body: bytes) -> tuple[VerifiedDelivery, ...]:
        """One verified delivery per item, all for the account whose credentials verified the batch.

        :raises NotificationUnverified: ``malformed`` without basic auth or a batch of items;
            else no account's password and HMAC key verified every item.
        """
        user, password = _basic_credentials(headers)
        checked = [(c, c.password_matches(user, password)) for c in self._credentials]
        matches = [(c, p) for c, p in checked if p is not None]
        if not matches:
            raise NotificationUnverified("basic-auth-failed")
        live, items = batch_items(body)
        for cred, password_used in matches:
            # Each item under either of the account's keys: a batch built while Adyen switched
            # keys may hold both.
            keys = [cred.item_key(item) for item in items]
            if all(k is not None for k in keys):
                previous_key = [k is not None and k.previous for k in keys]
                if password_used.previous:
                    self._previous_used.used(cred.account, "basic-auth password")
                if any(previous_key):
                    self._previous_used.used(cred.account, "HMAC key")
                return tuple(self._delivery(cred.account, live, item, password_used.previous or by_previous)
                             for item, by_previous in zip(items, previous_key, strict=True))
        raise NotificationUnverified("signature-mismatch")

    @staticmethod
    def _delivery(account: ProviderAccountConfig, live: Any, item: dict[str, Any],
                  previous: bool) -> VerifiedDelivery:
        key = item_key(item)
        try:
            operation = parse_operation_item(live, item)
        except InvalidItem:
            operation = None  # read as a payment's below, or kept raw with that reason
        try:
            n = parse_item(live, item)
        except InvalidItem as exc:
            if operation is not None:  # CAPTURE, REFUND_FAILED, …: an operation's only
                return VerifiedDelivery(account, key, None, operation, key=key, previous_secret=previous)
            return VerifiedDelivery(account, key, None, exc, previous_secret=previous)
        # REFUND, CANCELLATION: a payment's too; which one decides whether an operation matches.
        return VerifiedDelivery(account, key, None, n, key=key, previous_secret=previous, operation=operation)

    def verify_deliveries(self, headers: Mapping[str, str], body: bytes, *,
                          now: datetime) -> tuple[VerifiedDelivery, ...]:
        """:meth:`verify_batch` (``now`` unused: Adyen signs no timestamp)."""
        del now
        return self.verify_batch(headers, body)
