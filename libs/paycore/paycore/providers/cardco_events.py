"""Cardco webhook events: the wire format, parsed into a provider-neutral notification.

An event is ``{"id", "type", "created", "account", "livemode", "sequence",
"data": {"object": payment}}``; ``id`` may be null in deployments without
stable event ids. Anything that does not fit is rejected before anything is
stored.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import orjson

from paycore.notifications import Notification
from paycore.pgtext import json_problem
from paycore.providers.cardco import parse_payment

EVENT_TYPES = frozenset({
    "payment.processing", "payment.requires_action", "payment.succeeded", "payment.declined",
    "payment.failed", "payment.canceled", "payment.refunded",
})


class InvalidEvent(ValueError):
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


def parse_event(body: bytes) -> Notification:
    """The notification in a verified body, or :class:`InvalidEvent`.

    It may still hold text PostgreSQL cannot store (NUL, a lone surrogate):
    check :func:`paycore.pgtext.json_problem` of ``event`` before recording it.
    """
    try:
        event = orjson.loads(body)
    except orjson.JSONDecodeError:
        event = _lone_surrogate_json(body)
    if not isinstance(event, dict):
        raise InvalidEvent("not-an-object")
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
