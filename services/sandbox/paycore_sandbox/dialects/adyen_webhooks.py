"""Adyen standard notifications: envelope, per-item HMAC, basic auth, ``[accepted]``.

One notification per payment event an Adyen merchant would get:

- ``payment.succeeded`` → ``AUTHORISATION`` ``success: "true"``;
- ``payment.declined`` / ``payment.failed`` → ``AUTHORISATION`` ``success: "false"``
  with ``reason`` (the refusal reason);
- ``payment.canceled`` (an abandoned customer action expired) → ``CANCELLATION``;
- ``payment.refunded`` → ``REFUND`` for the refunded amount.

Pending states (``processing``, ``requires_action``) are not notified, as Adyen
does not. A modification (``CANCELLATION``, ``REFUND``) has its own
``pspReference`` (derived from the event id, so every redelivery is identical)
and names the payment in ``originalReference``.

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
    if event.type == "payment.succeeded":
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
