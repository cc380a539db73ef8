"""How the local sandbox plays Cardco's wire (see :mod:`paycore.providers.sandbox`).

The sandbox's core speaks Cardco's test tokens, so each outcome's method is its token.
"""

from __future__ import annotations

from typing import Final

from paycore.providers.cardco.client import CAPABILITIES
from paycore.providers.cardco.provider import CardcoAccountSettings
from paycore.providers.sandbox import OUTCOME_TOKENS, SandboxContract
from paycore.settings_spec import setting_of

SANDBOX: Final = SandboxContract(
    methods={token: (token,) for token in OUTCOME_TOKENS},
    body_format="json", reference_field="reference",
    version_header="cardco-version", account_header="cardco-account", account_field=None,
    api_key_header="authorization", lookup_by_reference=CAPABILITIES.lookup_by_reference,
    webhook_secret=setting_of(CardcoAccountSettings, "webhook_secret"),
)
