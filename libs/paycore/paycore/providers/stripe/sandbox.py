"""How the local sandbox plays Stripe's wire (see :mod:`paycore.providers.sandbox`).

Its test PaymentMethods (``pm_card_visa`` ...) reach the sandbox core's outcomes, as
``services/sandbox``'s Stripe dialect maps them.
"""

from __future__ import annotations

from typing import Final

from paycore.providers.sandbox import SandboxContract
from paycore.providers.stripe.client import CAPABILITIES
from paycore.providers.stripe.provider import StripeAccountSettings
from paycore.providers.stripe.request import MAX_AMOUNT_MINOR
from paycore.providers.stripe.wire import REFERENCE_KEY
from paycore.settings_spec import setting_of

SANDBOX: Final = SandboxContract(
    methods={
        "tok_visa": ("pm_card_visa",), "tok_decline": ("pm_card_chargeDeclined",),
        "tok_insufficient_funds": ("pm_card_chargeDeclinedInsufficientFunds",),
        "tok_3ds": ("pm_card_threeDSecure2Required",), "tok_async": ("pm_card_async",),
        # An expired card is a decline at Stripe (402, executed, replayed under its key); a
        # method Stripe does not know is refused before anything executes, as tok_expired is.
        "tok_expired": ("pm_card_chargeDeclinedExpiredCard", "pm_card_unknown"),
    },
    body_format="form", reference_field=f"metadata[{REFERENCE_KEY}]",
    version_header="stripe-version", account_header=None, account_field=None,  # the key is the account
    api_key_header="authorization", lookup_by_reference=CAPABILITIES.lookup_by_reference,
    webhook_secret=setting_of(StripeAccountSettings, "webhook_secret"),
    max_amount_minor=MAX_AMOUNT_MINOR,
    # Stripe's Search indexes a new PaymentIntent 2 s after it was created in a chaos run (the
    # sandbox's lag, beyond which its search_stale faults hide payments longer).
    chaos_env={"PAYCORE_SANDBOX_STRIPE_SEARCH_LAG_S": "2"},
)
