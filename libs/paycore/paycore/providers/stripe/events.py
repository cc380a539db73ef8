"""Stripe webhooks: ``Stripe-Signature`` verification, and events parsed into a neutral notification.

Signature (https://docs.stripe.com/webhooks#verify-manually; the SDK's
``stripe.WebhookSignature.verify_header`` does the same): the header is
``t=<unix seconds>,v1=<hex>[,v1=<hex>…]`` (other schemes ignored); each ``v1`` is
HMAC-SHA256 keyed with the whole ``whsec_…`` string over ``f"{t}." + body``.
We verify against every configured Stripe account's secret, in constant time,
and refuse a timestamp more than :data:`paycore.webhook_signatures.TOLERANCE_S`
(300 s, Stripe's default tolerance) from the clock passed in, either side.
The account is the one whose secret verified the delivery.

An event is ``{"id": "evt_…", "object": "event", "type", "created", "livemode",
"data": {"object": …}}``; the event id is the deduplication key (Stripe may
deliver one event more than once: https://docs.stripe.com/webhooks#handle-duplicate-events).

Two readings of one verified body: :func:`parse_event`, the payment's (a
``payment_intent.*`` or ``charge.refunded`` event as a :class:`Notification`), and
:func:`parse_operation_notification`, a capture's, cancel's or refund's (``refund.*``,
``charge.refund.updated``, ``charge.refunded`` of the old shape, a voided hold's
``payment_intent.canceled``, a captured hold's ``payment_intent.succeeded``) as an
:class:`OperationNotification`, or ``None`` when the event is about no operation. Some events
are both (``charge.refunded``: the payment was refunded, and which refund did it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Final

import orjson

from paycore.domain import Claim
from paycore.providers.adapter import EventFormat, OneEventPerDelivery
from paycore.providers.base import (
    InvalidNotification,
    Notification,
    NotificationUnverified,
    OperationNotification,
    OperationOutcome,
    VerifiedDelivery,
)
from paycore.providers.package import ProviderAccountConfig
from paycore.providers.stripe.operations import (
    cancel_outcome,
    capture_outcome,
    is_requested_cancel,
    refund_outcome,
)
from paycore.providers.stripe.wire import (
    NAME,
    Charge,
    PaymentIntent,
    Refund,
    parse_charge,
    parse_held_intent,
    parse_intent,
    parse_refund,
)
from paycore.providers.webhook_secrets import AccountSecret, PreviousSecretLog, account_secrets
from paycore.settings_spec import ConfigError
from paycore.webhook_replays import SignedDelivery
from paycore.webhook_signatures import TOLERANCE_S

SIGNATURE_HEADER: Final = "stripe-signature"

INTENT_EVENT_TYPES: Final = frozenset({
    "payment_intent.succeeded", "payment_intent.payment_failed", "payment_intent.processing",
    "payment_intent.requires_action", "payment_intent.canceled", "payment_intent.created",
    "payment_intent.amount_capturable_updated",  # a hold placed: requires_capture (domain.HOLD_STATUS)
})
CHARGE_EVENT_TYPES: Final = frozenset({"charge.refunded"})
EVENT_TYPES: Final = INTENT_EVENT_TYPES | CHARGE_EVENT_TYPES
# The object is a Refund (https://docs.stripe.com/api/events/types#event_types-refund.created;
# ``charge.refund.updated`` too, despite its name).
REFUND_EVENT_TYPES: Final = frozenset({"refund.created", "refund.updated", "refund.failed",
                                       "charge.refund.updated"})
# Every type parse_operation_notification reads; the rest are about no operation.
OPERATION_EVENT_TYPES: Final = REFUND_EVENT_TYPES | CHARGE_EVENT_TYPES | frozenset({
    "payment_intent.canceled", "payment_intent.succeeded", "payment_intent.processing",
})


class InvalidEvent(InvalidNotification):
    """The body is not JSON, or not a Stripe event this adapter understands."""


@dataclasses.dataclass(frozen=True)
class _Envelope:
    event: dict[str, Any]
    type: str
    id: str
    livemode: bool | None
    account: str | None
    object: Any


def _envelope(body: bytes, types: frozenset[str]) -> _Envelope | None:
    """The event's envelope, checked; ``None`` for a type outside ``types``.

    :raises InvalidEvent: Not JSON, not an object, or an envelope field that does not fit.
    """
    try:
        event = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise InvalidEvent("not-json") from None
    if not isinstance(event, dict):
        raise InvalidEvent("not-an-object")
    event_type = event.get("type")
    if not isinstance(event_type, str) or event_type not in types:
        return None
    event_id = event.get("id")
    if not isinstance(event_id, str) or not event_id.startswith("evt_") or not event_id.strip():
        raise InvalidEvent("invalid-id")
    livemode = event.get("livemode")
    if livemode is not None and not isinstance(livemode, bool):
        raise InvalidEvent("invalid-livemode")
    account = event.get("account")  # only Connect events name one
    if account is not None and not isinstance(account, str):
        raise InvalidEvent("invalid-account")
    data = event.get("data")
    obj = data.get("object") if isinstance(data, dict) else None
    return _Envelope(event, event_type, event_id.strip(), livemode, account, obj)


def parse_event(body: bytes) -> Notification:
    """The notification in a verified body, or :class:`InvalidEvent`."""
    envelope = _envelope(body, EVENT_TYPES)
    if envelope is None:
        raise InvalidEvent("unknown-type")
    event, event_type, event_id = envelope.event, envelope.type, envelope.id
    livemode, account, obj = envelope.livemode, envelope.account, envelope.object
    intent = parse_intent(obj) if event_type in INTENT_EVENT_TYPES else None
    charge = parse_charge(obj) if event_type in CHARGE_EVENT_TYPES else None
    payment: PaymentIntent | Charge | None = intent or charge
    if payment is None:
        raise InvalidEvent("invalid-object")
    # The envelope's mode is a statement too: evidence only if it agrees with the object's.
    said = payment.claim()
    envelope_mode = (livemode,) if livemode is not None else ()
    claim = dataclasses.replace(said, livemodes=said.livemodes + envelope_mode)
    # A charge event is about the PaymentIntent the charge belongs to: the id attempts record.
    intent_id = charge.payment_intent if charge is not None else payment.id
    refunded = charge.amount_refunded if charge is not None else 0
    return Notification(
        event_id=event_id,
        event_type=event_type,
        sequence=None,
        payment_id=intent_id,
        reference=payment.reference,
        status=payment.status,
        amount_minor=payment.amount_minor,
        currency=payment.currency,
        amount_refunded=refunded,
        payload_account=account,
        payload_livemode=livemode,
        outcome=dataclasses.replace(payment.to_outcome(), claim=claim),
        event=event,
        object_account=None,
        object_livemode=payment.livemode,
    )


def parse_operation_notification(body: bytes) -> OperationNotification | None:
    """The capture, cancel or refund a verified body tells of, or ``None`` when it tells of none.

    ===============================================  ==============================================
    event                                            notification
    ===============================================  ==============================================
    ``refund.created|updated|failed``,               the Refund: its status as a refund's ending
    ``charge.refund.updated``                        (:func:`.operations.refund_outcome`), its
                                                     ``metadata[paycore_reference]`` the claim's
    ``charge.refunded``, old shape (the Charge       the latest of them (by ``created``, then
    embeds ``refunds.data[]``)                       the first listed): a charge refunded several
                                                     times says all of them, each of which also
                                                     comes in its own ``refund.*`` event
    ``charge.refunded``, new shape (API versions     ``None``: no refund in it (the refund itself
    from 2022-11-15 leave ``refunds`` out)           comes in ``refund.*`` events)
    ``payment_intent.canceled``                      a hold (``capture_method`` manual) voided by
                                                     a cancel request: the cancel ``SUCCEEDED``
                                                     (the claim: the mode only, a cancel carries
                                                     no reference); otherwise (Stripe canceled it
                                                     itself, or it never held) ``None``
    ``payment_intent.succeeded|processing``          an intent carrying
                                                     ``metadata[paycore_capture_reference]``: that
                                                     capture, ``SUCCEEDED`` or ``PENDING``; else
                                                     ``None``
    ``payment_intent.amount_capturable_updated``     ``None``: a hold placed is the payment's
                                                     authorization, no operation's ending
    any other type                                   ``None``
    ===============================================  ==============================================

    The envelope's ``livemode`` joins the object's in ``claim.livemodes``, as for a payment's.

    :raises InvalidEvent: Not JSON, an envelope that does not fit, or an event of a type above
        whose object does not parse (kept raw, never applied, as :func:`parse_event`'s).
    """
    envelope = _envelope(body, OPERATION_EVENT_TYPES)
    if envelope is None:
        return None
    outcome = _operation_outcome(envelope.type, envelope.object)
    if outcome is None:
        return None
    claim = outcome.claim or Claim()
    envelope_mode = (envelope.livemode,) if envelope.livemode is not None else ()
    claim = dataclasses.replace(claim, livemodes=claim.livemodes + envelope_mode)
    return OperationNotification(
        event_id=envelope.id, event_type=envelope.type, payload_account=envelope.account,
        payload_livemode=envelope.livemode, outcome=dataclasses.replace(outcome, claim=claim),
        event=envelope.event)


def _operation_outcome(event_type: str, obj: Any) -> OperationOutcome | None:
    """What the event's object says about an operation (``None``: about none).

    :raises InvalidEvent: ``invalid-object``.
    """
    is_charge = isinstance(obj, dict) and obj.get("object") == "charge"
    if event_type in REFUND_EVENT_TYPES and not is_charge:
        refund = parse_refund(obj)
        if refund is None:
            raise InvalidEvent("invalid-object")
        return refund_outcome(refund)
    if event_type.startswith("charge."):
        if parse_charge(obj) is None:
            raise InvalidEvent("invalid-object")
        refund = _latest_embedded_refund(obj)
        return None if refund is None else refund_outcome(refund)
    held = parse_held_intent(obj)
    if held is None:
        raise InvalidEvent("invalid-object")
    if event_type == "payment_intent.canceled":
        return cancel_outcome(held) if is_requested_cancel(held) else None
    if held.capture_reference is not None and (held.capture_method or "").startswith("manual"):
        return capture_outcome(held)
    return None


def _latest_embedded_refund(charge: dict[str, Any]) -> Refund | None:
    """The latest refund a Charge of the old shape embeds (``refunds.data[]``), or ``None`` when
    it embeds none.

    :raises InvalidEvent: ``invalid-object``: ``refunds`` is not a list object of Refunds.
    """
    embedded = charge.get("refunds")
    if embedded is None:
        return None
    data = embedded.get("data") if isinstance(embedded, dict) else None
    if not isinstance(data, list):
        raise InvalidEvent("invalid-object")
    refunds = [parse_refund(item) for item in data]
    parsed = [r for r in refunds if r is not None]
    if len(parsed) != len(refunds):
        raise InvalidEvent("invalid-object")
    # The latest by created; among equal times the first listed (Stripe lists newest first),
    # which max() keeps.
    return max(parsed, key=lambda r: r.created, default=None)


def notification_key(n: Notification) -> str | None:
    """The ``evt_…`` id: Stripe keeps it across redeliveries of one event."""
    return n.event_id


# How Stripe's notifications read (a stored event is re-parsed with it: no account needed).
STRIPE_EVENTS: Final = EventFormat(NAME, parse_event, notification_key)


def _parse_signature_header(value: str) -> tuple[int, list[str]] | None:
    """``(t, [v1…])`` of a ``Stripe-Signature`` value, or ``None`` when it has no usable ``t``/``v1``."""
    timestamps: list[str] = []
    signatures: list[str] = []
    for item in value.split(","):
        key, sep, val = item.strip().partition("=")
        if not sep:
            continue
        if key == "t":
            timestamps.append(val.strip())
        elif key == "v1" and val.strip():
            signatures.append(val.strip().lower())
    if len(timestamps) != 1 or not signatures:
        return None
    raw_ts = timestamps[0]
    if not raw_ts.isascii() or not raw_ts.isdigit() or len(raw_ts) > 12:
        return None
    return int(raw_ts), signatures


def expected_signature(secret: str, timestamp: int, body: bytes) -> str:
    """The ``v1`` signature of ``body`` at ``timestamp`` under ``secret`` (the whole ``whsec_…`` string)."""
    return hmac.new(secret.encode("utf-8"), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def signature_header(secret: str, timestamp: int, body: bytes) -> str:
    """A ``Stripe-Signature`` value for ``body`` (tests, and the sandbox's dialect)."""
    return f"t={timestamp},v1={expected_signature(secret, timestamp, body)}"


def delivery_id(body: bytes) -> str:
    """The event id of a body, or a digest of the body when it has none we can read."""
    try:
        event = orjson.loads(body)
    except orjson.JSONDecodeError:
        event = None
    event_id = event.get("id") if isinstance(event, dict) else None
    if isinstance(event_id, str) and event_id.strip():
        return event_id.strip()
    return "sha256:" + hashlib.sha256(body).hexdigest()


class WebhookVerifier(OneEventPerDelivery):
    """Verifies a delivery against every configured Stripe account's secrets (the current one, and
    during a rotation the previous one: :mod:`paycore.providers.webhook_secrets`), then parses it.

    :raises ConfigError: No Stripe account has a webhook secret.
    :raises ValueError: A secret is not ``whsec_…``.
    """

    def __init__(self, accounts: Iterable[ProviderAccountConfig]) -> None:
        self._secrets = account_secrets(accounts, "PAYCORE_STRIPE_WEBHOOK_SECRET_PREVIOUS")
        for s in self._secrets:
            if not s.secret.startswith("whsec_") or len(s.secret) <= len("whsec_"):
                which = "previous webhook secret" if s.previous else "webhook secret"
                raise ValueError(f"the {which} of {s.account.provider_account} must start with 'whsec_'")
        if not self._secrets:
            raise ConfigError("PAYCORE_STRIPE_WEBHOOK_SECRET", "is required to receive Stripe webhooks")
        self._previous_used = PreviousSecretLog()

    def verify(self, headers: Mapping[str, str], body: bytes, *, now: datetime) -> VerifiedDelivery:
        """The account whose secret verified the delivery, and the event in it (or why it is none).

        Any ``v1`` in the header may match: while Stripe rolls an endpoint's secret it signs
        with the old and the new one (https://docs.stripe.com/webhooks#roll-endpoint-secrets).

        :raises NotificationUnverified: ``malformed`` when the header is missing or has no
            ``t`` and ``v1``; else the signature matched no secret, or the timestamp is
            outside the tolerance. Never says which secret or signature.
        """
        raw = next((v for k, v in headers.items() if k.lower() == SIGNATURE_HEADER), None)
        if raw is None or not raw.strip():
            raise NotificationUnverified("missing-headers", malformed=True)
        parsed = _parse_signature_header(raw)
        if parsed is None:
            raise NotificationUnverified("malformed-signature-header", malformed=True)
        timestamp, offered = parsed
        if abs(now.timestamp() - timestamp) > TOLERANCE_S:
            raise NotificationUnverified("timestamp-outside-tolerance")
        verified_by = self._matching_secret(timestamp, offered, body)
        if verified_by is None:
            raise NotificationUnverified("no-matching-signature")
        account, previous = verified_by.account, verified_by.previous
        if previous:
            self._previous_used.used(account)
        did = delivery_id(body)
        replay = SignedDelivery(did, timestamp)
        try:
            operation = parse_operation_notification(body)
        except InvalidEvent:
            operation = None  # read as a payment's below, or kept raw with that reason
        try:
            n = parse_event(body)
        except InvalidEvent as exc:
            if operation is not None:  # refund.*, charge.refund.updated: an operation's only
                return VerifiedDelivery(account, did, replay, operation, key=operation.event_id or did,
                                        previous_secret=previous)
            return VerifiedDelivery(account, did, replay, exc, previous_secret=previous)
        # charge.refunded, a hold's payment_intent.canceled or .succeeded: a payment's too; the
        # intake reads it as the operation's when one of paycore's matches.
        return VerifiedDelivery(account, did, replay, n, key=notification_key(n), previous_secret=previous,
                                operation=operation)

    def _matching_secret(self, timestamp: int, offered: list[str], body: bytes) -> AccountSecret | None:
        for candidate in self._secrets:
            expected = expected_signature(candidate.secret, timestamp, body)
            # Every offered signature, each in constant time.
            if any(hmac.compare_digest(expected.encode(), sig.encode()) for sig in offered):
                return candidate
        return None
