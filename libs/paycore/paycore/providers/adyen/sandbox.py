"""How the local sandbox plays Adyen's wire (see :mod:`paycore.providers.sandbox`).

The sandbox reads the outcome from the core's token in ``encryptedCardNumber``; the API
version is in the payments path, the account in the body's ``merchantAccount``.
"""

from __future__ import annotations

from typing import Any, Final

from paycore.providers.adyen.client import CAPABILITIES
from paycore.providers.adyen.notifications import ACKNOWLEDGEMENT
from paycore.providers.adyen.provider import AdyenAccountSettings
from paycore.providers.sandbox import OUTCOME_TOKENS, SandboxContract
from paycore.settings_spec import setting_of


def _card(token: str) -> dict[str, Any]:
    # What Adyen's Drop-in posts: encrypted fields, never a card number.
    return {"type": "scheme", "encryptedCardNumber": token, "encryptedExpiryMonth": "adyenjs_0_1_25$m",
            "encryptedExpiryYear": "adyenjs_0_1_25$y", "encryptedSecurityCode": "adyenjs_0_1_25$c"}


SANDBOX: Final = SandboxContract(
    methods={token: (_card(token),) for token in OUTCOME_TOKENS},
    body_format="json", reference_field="reference",
    version_header=None, account_header=None, account_field="merchantAccount",
    api_key_header="x-api-key", lookup_by_reference=CAPABILITIES.lookup_by_reference,
    webhook_secret=setting_of(AdyenAccountSettings, "webhook_secret"),
    webhook_basic_auth=(setting_of(AdyenAccountSettings, "webhook_username"),
                        setting_of(AdyenAccountSettings, "webhook_password")),
    webhook_acknowledgement=ACKNOWLEDGEMENT,
    stray_statuses=("succeeded", "succeeded", "declined", "declined"),  # it notifies no pending state
)
