"""Cardco webhooks: Standard Webhooks verification, and events parsed into a neutral notification.

An event is ``{"id", "type", "created", "account", "livemode", "sequence",
"data": {"object": payment}}``; ``id`` may be null in deployments without
stable event ids. A delivery no configured secret verifies is refused; a verified
one that does not fit is kept raw by the intake, never applied.

Refund and capture events (``refund.*``, ``capture.*``: :data:`OPERATION_EVENT_TYPES`) have the
same envelope around a refund or capture; :func:`parse_operation_event` reads them into an
:class:`OperationEvent`, apart from :func:`parse_event`, which refuses them as before.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Final

import orjson

from paycore.domain import Claim, OperationKind
from paycore.pgtext import json_problem
from paycore.providers.adapter import EventFormat, OneEventPerDelivery
from paycore.providers.base import (
    InvalidNotification,
    Notification,
    NotificationUnverified,
    OperationNotification,
    VerifiedDelivery,
    standard_notification_key,
)
from paycore.providers.cardco.operations import movement_outcome
from paycore.providers.cardco.wire import (
    NAME,
    ProviderCapture,
    ProviderRefund,
    parse_capture,
    parse_payment,
    parse_refund,
)
from paycore.providers.package import ProviderAccountConfig
from paycore.providers.webhook_secrets import PreviousSecretLog, account_secrets
from paycore.settings_spec import ConfigError
from paycore.webhook_replays import SignedDelivery
from paycore.webhook_signatures import InvalidSecret, VerificationFailed, Verifier, decode_secret

EVENT_TYPES = frozenset({
    "payment.processing", "payment.requires_action", "payment.succeeded", "payment.declined",
    "payment.failed", "payment.canceled", "payment.refunded",
    "payment.requires_capture",  # a hold placed: Succeeded, nothing charged yet (domain.HOLD_STATUS)
})

# The events about a refund or a capture: ``<object>.<its status>``.
OPERATION_EVENT_TYPES: Final = frozenset({
    "refund.pending", "refund.succeeded", "refund.failed", "refund.canceled",
    "capture.pending", "capture.succeeded", "capture.failed",
})


class InvalidEvent(InvalidNotification):
    """The body is not JSON, or not a Cardco event."""


def _blank_to_none(value: Any) -> str | None:
    """Empty or whitespace ids count as missing."""
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def _lone_surrogate_json(body: bytes) -> Any:
    """JSON orjson refuses only for its lone surrogate escapes (``"\\ud800"``), else ``not-json``.

    RFC 8259's grammar allows such escapes and the standard parser reads them;
    the event can then be recognised, though never stored as parsed (see
    :func:`paycore.pgtext.json_problem`). Anything else orjson refuses stays not JSON.
    """
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        raise InvalidEvent("not-json") from None
    if json_problem(value) != "lone-surrogate":
        raise InvalidEvent("not-json")
    return value


def _event_json(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, or :class:`InvalidEvent` (``not-json``, ``not-an-object``)."""
    try:
        event = orjson.loads(body)
    except orjson.JSONDecodeError:
        event = _lone_surrogate_json(body)
    if not isinstance(event, dict):
        raise InvalidEvent("not-an-object")
    return event


def parse_event(body: bytes) -> Notification:
    """The notification in a verified body, or :class:`InvalidEvent`.

    It may still hold text PostgreSQL cannot store (NUL, a lone surrogate):
    check :func:`paycore.pgtext.json_problem` of ``event`` before recording it.
    """
    event = _event_json(body)
    event_type = event.get("type")
    if not isinstance(event_type, str) or event_type not in EVENT_TYPES:
        raise InvalidEvent("unknown-type")
    event_id = event.get("id")
    if event_id is not None and not isinstance(event_id, str):
        raise InvalidEvent("invalid-id")
    sequence = event.get("sequence")
    if sequence is not None and (type(sequence) is not int or sequence < 1):
        raise InvalidEvent("invalid-sequence")
    account = event.get("account")
    livemode = event.get("livemode")
    if account is not None and not isinstance(account, str):
        raise InvalidEvent("invalid-account")
    if livemode is not None and not isinstance(livemode, bool):
        raise InvalidEvent("invalid-livemode")
    data = event.get("data")
    obj = data.get("object") if isinstance(data, dict) else None
    payment = parse_payment(obj)
    if payment is None:
        raise InvalidEvent("invalid-payment")
    # The envelope's account and mode are statements too: evidence only if both agree.
    said = payment.claim()
    claim = dataclasses.replace(
        said, accounts=said.accounts + ((account,) if account is not None else ()),
        livemodes=said.livemodes + ((livemode,) if livemode is not None else ()))
    return Notification(
        event_id=_blank_to_none(event_id),
        event_type=event_type,
        sequence=sequence,
        payment_id=_blank_to_none(payment.id),
        reference=_blank_to_none(payment.reference),
        status=payment.status,
        amount_minor=payment.amount_minor,
        currency=payment.currency,
        amount_refunded=payment.amount_refunded,
        payload_account=account,
        payload_livemode=livemode,
        outcome=dataclasses.replace(payment.to_outcome(), claim=claim),
        event=event,
        object_account=payment.account,
        object_livemode=payment.livemode,
    )


@dataclasses.dataclass(frozen=True)
class OperationEvent:
    """A verified Cardco event about a refund or a capture.

    The envelope is read as :func:`parse_event` reads a payment event's (``id``, ``sequence``,
    ``account``, ``livemode`` and ``created`` may be null); the envelope's account and mode are
    kept apart from the object's, for the caller to judge, as a notification's are.

    :param event_id: The stable event id, or ``None`` (a deployment without one, or blank).
    :param event_type: One of :data:`OPERATION_EVENT_TYPES`.
    :param created: Unix time the event was made, when it says.
    :param sequence: Counts the events of this refund or capture from 1, when it says.
    :param account: What the envelope says.
    :param livemode: What the envelope says.
    :param operation: The refund or capture, as it was when the event was made; its status is
        the event type's.
    :param event: The event as received (no card data or secrets in it).
    """

    event_id: str | None
    event_type: str
    created: int | None
    sequence: int | None
    account: str | None
    livemode: bool | None
    operation: ProviderRefund | ProviderCapture
    event: dict[str, Any] = dataclasses.field(repr=False, compare=False)


def is_operation_event(body_or_type: bytes | str) -> bool:
    """Whether an event type, or a verified body's, is a refund's or capture's: read it with
    :func:`parse_operation_event`, else with :func:`parse_event`. A body that is not even an
    event says ``False`` (then :func:`parse_event` says why)."""
    if isinstance(body_or_type, str):
        return body_or_type in OPERATION_EVENT_TYPES
    try:
        event_type = _event_json(body_or_type).get("type")
    except InvalidEvent:
        return False
    return isinstance(event_type, str) and event_type in OPERATION_EVENT_TYPES


def parse_operation_event(body: bytes) -> OperationEvent:
    """The refund or capture event in a verified body, or :class:`InvalidEvent`.

    Refused (reasons are fixed strings; nothing of the body is echoed): ``not-json``,
    ``not-an-object``, ``unknown-type`` (not a refund or capture event), ``invalid-id``,
    ``invalid-sequence``, ``invalid-created``, ``invalid-account``, ``invalid-livemode``,
    ``missing-object``, ``wrong-object`` (a refund event about a capture, or a payment),
    ``invalid-refund`` / ``invalid-capture`` (the object does not fit the contract), and
    ``status-differs-from-type`` (``refund.succeeded`` about a failed refund: which is true?).
    Like :func:`parse_event`'s, it may hold text PostgreSQL cannot store.
    """
    event = _event_json(body)
    event_type = event.get("type")
    if not isinstance(event_type, str) or event_type not in OPERATION_EVENT_TYPES:
        raise InvalidEvent("unknown-type")
    envelope = _operation_envelope(event)
    kind, _, status = event_type.partition(".")
    operation = _operation_object(event, kind)
    if operation.status != status:
        raise InvalidEvent("status-differs-from-type")
    return OperationEvent(event_type=event_type, operation=operation, event=event, **envelope)


def _operation_envelope(event: dict[str, Any]) -> dict[str, Any]:
    """The envelope's fields, each null or of its type, as :func:`parse_event` reads them."""
    event_id, sequence, created = event.get("id"), event.get("sequence"), event.get("created")
    account, livemode = event.get("account"), event.get("livemode")
    if event_id is not None and not isinstance(event_id, str):
        raise InvalidEvent("invalid-id")
    if sequence is not None and (type(sequence) is not int or sequence < 1):
        raise InvalidEvent("invalid-sequence")
    if created is not None and (type(created) is not int or created < 0):
        raise InvalidEvent("invalid-created")
    if account is not None and not isinstance(account, str):
        raise InvalidEvent("invalid-account")
    if livemode is not None and not isinstance(livemode, bool):
        raise InvalidEvent("invalid-livemode")
    return {"event_id": _blank_to_none(event_id), "sequence": sequence, "created": created,
            "account": account, "livemode": livemode}


def _operation_object(event: dict[str, Any], kind: str) -> ProviderRefund | ProviderCapture:
    """``data.object``, the refund or capture the type names (``kind``)."""
    data = event.get("data")
    obj = data.get("object") if isinstance(data, dict) else None
    if obj is None:
        raise InvalidEvent("missing-object")
    if not isinstance(obj, dict) or obj.get("object") != kind:
        raise InvalidEvent("wrong-object")
    operation = parse_refund(obj) if kind == "refund" else parse_capture(obj)
    if operation is None:
        raise InvalidEvent(f"invalid-{kind}")
    return operation


def operation_notification(event: OperationEvent) -> OperationNotification:
    """A refund or capture event in neutral terms: the object's outcome, and the envelope's
    account and mode added to the claim as statements that must agree with it."""
    kind = OperationKind.REFUND if isinstance(event.operation, ProviderRefund) else OperationKind.CAPTURE
    outcome = movement_outcome(kind, event.operation)
    claim = outcome.claim or Claim()
    claim = dataclasses.replace(
        claim, accounts=(*claim.accounts, *(() if event.account is None else (event.account,))),
        livemodes=(*claim.livemodes, *(() if event.livemode is None else (event.livemode,))))
    return OperationNotification(event.event_id, event.event_type, event.account, event.livemode,
                                 dataclasses.replace(outcome, claim=claim), event.event)


def notification_key(n: Notification) -> str | None:
    """Cardco's event id is stable across redeliveries when the deployment sends one; without
    it, the fields that identify one logical event (payment id, type, status, amount, currency,
    sequence) are: the neutral rule, :func:`paycore.providers.base.standard_notification_key`."""
    return standard_notification_key(n)


# How Cardco's notifications read (a stored event is re-parsed with it: no account needed).
CARDCO_EVENTS: Final = EventFormat(NAME, parse_event, notification_key)


class WebhookVerifier(OneEventPerDelivery):
    """Verifies a delivery against every configured Cardco account's webhook secrets (the current
    one, and during a rotation the previous one: :mod:`paycore.providers.webhook_secrets`), then
    parses it.

    :raises ConfigError: No account has a webhook secret.
    :raises paycore.webhook_signatures.InvalidSecret: A secret is not ``whsec_`` + base64.
    """

    def __init__(self, accounts: Iterable[ProviderAccountConfig]) -> None:
        secrets = account_secrets(accounts, "PAYCORE_CARDCO_WEBHOOK_SECRET_PREVIOUS")
        if not secrets:
            raise ConfigError("PAYCORE_CARDCO_WEBHOOK_SECRET", "is required to receive webhooks")
        for s in secrets:
            try:
                decode_secret(s.secret)
            except InvalidSecret as exc:
                which = "previous webhook secret" if s.previous else "webhook secret"
                raise InvalidSecret(f"the {which} of {s.account.provider_account}: {exc}") from None
        self._verifier = Verifier((s, s.secret) for s in secrets)
        self._previous_used = PreviousSecretLog()

    def verify(self, headers: Mapping[str, str], body: bytes, *, now: datetime) -> VerifiedDelivery:
        """The account whose secret verified the delivery, and the event in it (or why it is none).

        :raises NotificationUnverified: ``malformed`` when a Standard Webhooks header is missing.
        """
        try:
            verified_by = self._verifier.verify(headers, body, now=now)
        except VerificationFailed as exc:
            raise NotificationUnverified(exc.reason, malformed=exc.reason == "missing-headers") from None
        account, previous = verified_by.account, verified_by.previous
        if previous:
            self._previous_used.used(account)
        # verify() required both headers, the timestamp as digits.
        webhook_id = headers["webhook-id"].strip()
        replay = SignedDelivery(webhook_id, int(headers["webhook-timestamp"].strip()))
        try:
            if is_operation_event(body):
                op = operation_notification(parse_operation_event(body))
                if op.event_id is not None and op.event_id != webhook_id:
                    raise InvalidEvent("id-differs-from-webhook-id")
                # The webhook-id is stable across redeliveries (Standard Webhooks): the key when
                # the event carries no id of its own.
                return VerifiedDelivery(account, webhook_id, replay, op, key=op.event_id or webhook_id,
                                        previous_secret=previous)
            n = parse_event(body)
            if n.event_id is not None and n.event_id != webhook_id:
                raise InvalidEvent("id-differs-from-webhook-id")
        except InvalidEvent as exc:
            return VerifiedDelivery(account, webhook_id, replay, exc, previous_secret=previous)
        return VerifiedDelivery(account, webhook_id, replay, n, key=notification_key(n),
                                previous_secret=previous)
