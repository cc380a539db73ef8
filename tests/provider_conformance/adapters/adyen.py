"""Adyen's conformance adapter: the sandbox's ``adyen`` dialect (encrypted card fields)."""

from __future__ import annotations

import dataclasses
from typing import Any

from paycore.settings_spec import Secret
from tests.provider_conformance.adapters import ConformanceAdapter
from tests.provider_conformance.adapters.sandbox import serving


def card(token: str) -> dict[str, Any]:
    """What Adyen's Drop-in posts; the sandbox reads the outcome from encryptedCardNumber."""
    return {"type": "scheme", "encryptedCardNumber": token, "encryptedExpiryMonth": "adyenjs_0_1_25$m",
            "encryptedExpiryYear": "adyenjs_0_1_25$y", "encryptedSecurityCode": "adyenjs_0_1_25$c"}


ADAPTER = ConformanceAdapter(
    serve=serving("adyen"),
    methods={"succeeded": card("tok_visa"), "declined": card("tok_decline")},
    wrong_secret=lambda acct: dataclasses.replace(acct, webhook_secret=Secret("00" * 32)),
    untimed_signature="Adyen's HMAC signs the item's fields, no delivery time (replays are the intake's)",
)
