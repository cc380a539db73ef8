"""Adyen standard notifications: envelope, per-item HMAC, basic auth, ``[accepted]``.

One notification per payment event an Adyen merchant would get:

- ``payment.succeeded`` / ``payment.requires_capture`` (authorised, held for a
  manual capture) → ``AUTHORISATION`` ``success: "true"``;
- ``payment.declined`` / ``payment.failed`` → ``AUTHORISATION`` ``success: "false"``
  with ``reason`` (the refusal reason);
- ``payment.canceled`` (an abandoned customer action expired, a hold lapsed) →
  ``CANCELLATION``;
- ``payment.refunded`` (the control's refund) → ``REFUND`` for the refunded amount.

And one per ending of a modification paycore requested
(:mod:`paycore_sandbox.dialects.adyen_modifications`), its ``merchantReference``
the request's ``reference``, its ``pspReference`` the one the request was answered:

- ``refund.succeeded`` / ``refund.failed`` / ``refund.canceled`` → ``REFUND``
  ``success: "true"`` / ``"false"`` (``reason``: the failure reason); a succeeded
  refund the control fails later (``/_sandbox/refunds/{id}/fail``) is notified
  ``REFUND`` ``"false"`` too (Adyen would say ``REFUND_FAILED``; the sandbox's event
  does not tell the two apart, and paycore reads both as the refund failed);
- ``capture.succeeded`` / ``capture.failed`` → ``CAPTURE`` ``"true"`` / ``"false"``;
- a ``/cancels`` request: ``payment.canceled`` → ``CANCELLATION`` ``"true"``,
  :data:`CANCEL_REFUSED` (the payment had no hold to cancel) → ``"false"``.

The payment events a capture's or refund's settlement makes (``caused_by``) are not
notified: Adyen tells of the modification only. Pending states (``processing``,
``requires_action``, a pending refund or capture) are not notified, as Adyen
does not. A modification (``CANCELLATION``, ``REFUND``, ``CAPTURE``) has its own
``pspReference`` (derived from the event or movement id, so every redelivery is
identical) and names the payment in ``originalReference``.

Each item is signed: HMAC-SHA256, keyed with the account's hex HMAC key, over
``pspReference:originalReference:merchantAccountCode:merchantReference:value:currency:eventCode:success``
(missing fields empty), base64, in ``additionalData.hmacSignature`` — the
routine of Adyen's SDK (``Adyen.util.is_valid_hmac_notification``). Every
request carries ``Authorization: Basic`` (user ``paycore``, a password fixed
per account). A delivery counts only when answered 2xx with the body exactly
``[accepted]``; anything else is retried on the sandbox's schedule.

Dev credentials are deterministic per account and environment (like the
Cardco ``whsec_`` secrets): :func:`hmac_key`, :func:`webhook_password`,
:data:`WEBHOOK_USERNAME`; ``GET /_sandbox/accounts`` shows them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from paycore_sandbox.settings import SandboxAccount
from paycore_sandbox.webhooks import Event

WEBHOOK_USERNAME = "paycore"
ACKNOWLEDGEMENT = b"[accepted]"
SIGNED_FIELDS = ("pspReference", "originalReference", "merchantAccountCode",
                 "merchantReference", "value", "currency", "eventCode", "success")

# Cardco decline codes → Adyen refusalReason and refusalReasonCode.
REFUSALS: dict[str, tuple[str, str]] = {
    "card_declined": ("Refused", "2"),
    "insufficient_funds": ("Not enough balance", "12"),
}
AUTHENTICATION_FAILED = ("3D Not Authenticated", "11")
# The core event of a /cancels request refused by the rules (no hold to cancel): Adyen
# answers "received" and notifies CANCELLATION success "false"; no other dialect emits it.
CANCEL_REFUSED = "payment.cancel_refused"
# Where an Adyen payment's event snapshot carries the /cancels request it answers
# (``{"pspReference", "reference"}``), set only while that request executes.
MODIFICATION = "modification"
# Movement event types → eventCode and success.
_MOVEMENT_ITEMS: dict[str, tuple[str, str]] = {
    "refund.succeeded": ("REFUND", "true"), "refund.failed": ("REFUND", "false"),
    "refund.canceled": ("REFUND", "false"),
    "capture.succeeded": ("CAPTURE", "true"), "capture.failed": ("CAPTURE", "false"),
}


def _derived(purpose: str, account: SandboxAccount) -> bytes:
    # Deterministic per account and environment, so local runs and tests can
    # configure paycore without sharing configuration; never a real secret.
    seed = f"paycore-sandbox-adyen:{purpose}:{account.account}:{account.environment}"
    return hashlib.sha256(seed.encode()).digest()


def hmac_key(account: SandboxAccount) -> str:
    """The account's HMAC key: 64 upper-case hex characters, as Adyen shows them."""
    return _derived("hmac", account).hex().upper()


def webhook_password(account: SandboxAccount) -> str:
    """The basic-auth password of the account's notifications (user ``paycore``)."""
    return "adyen_" + _derived("basic", account).hex()[:24]


def credentials(account: SandboxAccount) -> dict[str, str]:
    """What paycore needs to speak Adyen to this sandbox account."""
    return {"merchant_account": account.account, "api_key": account.api_key,
            "hmac_key": hmac_key(account), "webhook_username": WEBHOOK_USERNAME,
            "webhook_password": webhook_password(account)}


def refusal(decline_code: str | None) -> tuple[str, str]:
    """``(refusalReason, refusalReasonCode)`` for a declined payment."""
    return REFUSALS.get(decline_code or "", ("Refused", "2"))


def modification_reference(event_id: str) -> str:
    """A modification's own pspReference: 16 characters, fixed per event."""
    digest = hashlib.sha256(f"adyen-modification:{event_id}".encode()).digest()
    return base64.b32encode(digest).decode("ascii")[:16]


def movement_psp_reference(movement_id: str) -> str:
    """A capture's or refund's pspReference: 16 characters, fixed per movement (its answer and
    every notification of it name the same one)."""
    return modification_reference(f"movement:{movement_id}")


def signing_string(item: dict[str, Any]) -> str:
    values = dict(item, value=item["amount"]["value"], currency=item["amount"]["currency"])
    return ":".join(str(values.get(name, "")) for name in SIGNED_FIELDS)


def sign_item(item: dict[str, Any], key_hex: str) -> str:
    digest = hmac.new(binascii.a2b_hex(key_hex), signing_string(item).encode("utf-8"),
                      hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


def unsigned_item(event: Event) -> dict[str, Any] | None:
    """The ``NotificationRequestItem`` of ``event`` before signing, or None (not notified).

    Adyen's events keep the core's type and payment snapshot
    (:meth:`paycore_sandbox.dialects.adyen.AdyenDialect.render_event`); the item is
    derived from them.
    """
    if event.object_id is not None:
        return _movement_item(event)
    if event.caused_by is not None:
        return None  # the capture's or refund's own item tells of it
    payment = event.payment
    psp = event.payment_id
    amount = event.amount if event.amount is not None else int(payment["amount"])
    item: dict[str, Any] = {
        "amount": {"currency": payment["currency"], "value": amount},
        "eventDate": datetime.fromtimestamp(event.created, UTC).isoformat(),
        "merchantAccountCode": payment["account"],
        "merchantReference": payment["reference"],
        "paymentMethod": "visa",
        "pspReference": psp,
    }
    modification = payment.get(MODIFICATION)
    if event.type in ("payment.canceled", CANCEL_REFUSED) and isinstance(modification, dict):
        item.update(eventCode="CANCELLATION", originalReference=psp,
                    pspReference=modification["pspReference"],
                    merchantReference=modification["reference"],
                    success="true" if event.type == "payment.canceled" else "false")
    elif event.type in ("payment.succeeded", "payment.requires_capture"):
        item.update(eventCode="AUTHORISATION", success="true")
    elif event.type in ("payment.declined", "payment.failed"):
        reason = refusal(payment.get("decline_code"))[0] if event.type == "payment.declined" \
            else AUTHENTICATION_FAILED[0]
        item.update(eventCode="AUTHORISATION", success="false", reason=reason)
    elif event.type in ("payment.canceled", "payment.refunded"):
        item.update(eventCode="CANCELLATION" if event.type == "payment.canceled" else "REFUND",
                    success="true", originalReference=psp,
                    pspReference=modification_reference(event.id))
    else:
        return None
    return item


def _movement_item(event: Event) -> dict[str, Any] | None:
    """The item of a capture's or refund's event (its data object is the movement), or None."""
    known = _MOVEMENT_ITEMS.get(event.type)
    if known is None:  # pending: not notified
        return None
    movement = event.payment
    event_code, success = known
    item: dict[str, Any] = {
        "amount": {"currency": movement["currency"], "value": int(movement["amount"])},
        "eventCode": event_code,
        "eventDate": datetime.fromtimestamp(event.created, UTC).isoformat(),
        "merchantAccountCode": movement["account"],
        "merchantReference": movement["reference"],
        "originalReference": event.payment_id,
        "paymentMethod": "visa",
        "pspReference": movement_psp_reference(str(event.object_id)),
        "success": success,
    }
    if success == "false" and movement.get("failure_reason"):
        item["reason"] = movement["failure_reason"]
    return item


def notification_item(event: Event, account: SandboxAccount) -> dict[str, Any] | None:
    """The signed ``NotificationRequestItem`` of ``event``, or None (not notified)."""
    item = unsigned_item(event)
    if item is not None:
        item["additionalData"] = {"hmacSignature": sign_item(item, hmac_key(account))}
    return item


def render(events: Sequence[Event], account: SandboxAccount) -> bytes:
    """One notification of the (notified) ``events``, in order."""
    items = [item for item in (notification_item(e, account) for e in events) if item]
    return orjson.dumps({"live": "true" if account.livemode else "false",
                         "notificationItems": [{"NotificationRequestItem": i} for i in items]})


def headers(account: SandboxAccount) -> dict[str, str]:
    """Every request's headers: basic auth (Adyen signs items, not requests, so
    no webhook id or timestamp is sent)."""
    userpass = f"{WEBHOOK_USERNAME}:{webhook_password(account)}".encode()
    return {"Authorization": "Basic " + base64.b64encode(userpass).decode("ascii"),
            "Content-Type": "application/json", "User-Agent": "Adyen HttpClient 1.0"}


def accepted(status: int, body: bytes) -> bool:
    """Adyen counts a notification delivered only when answered exactly ``[accepted]``."""
    return 200 <= status < 300 and body == ACKNOWLEDGEMENT
