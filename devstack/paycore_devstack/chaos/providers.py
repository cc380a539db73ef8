"""What differs per provider in a chaos run: one small table, read by every part of the run.

The run is one code path for Cardco, Stripe and Adyen; each part asks this table
what it needs about the provider's wire:

- the load: the payment method for each sandbox outcome (the sandbox's core speaks
  in Cardco's tokens, ``tok_visa`` ...; each dialect maps its own methods onto them:
  services/sandbox/README.md), and the provider's largest amount;
- the faults: whether the provider can be looked up at all (Adyen cannot), and
  whether its lookup by reference is a search index that lags (Stripe's Search);
- the stack: the intake's route for its webhooks (its environment comes from
  :func:`paycore_devstack.up.sandbox_provider_env`, as ``make run`` configures it);
- the invariants: which sandbox requests are its creates, and where a create
  carries its reference, API version, account and key mode.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import parse_qsl

import orjson

from paycore.providers.base import PaymentMethod


def _adyen_card(token: str) -> dict[str, Any]:
    # What Adyen's Drop-in posts: encrypted fields, never a card number. The sandbox
    # reads the outcome from the token in encryptedCardNumber.
    return {"type": "scheme", "encryptedCardNumber": token, "encryptedExpiryMonth": "adyenjs_0_1_25$m",
            "encryptedExpiryYear": "adyenjs_0_1_25$y", "encryptedSecurityCode": "adyenjs_0_1_25$c"}


@dataclass(frozen=True)
class ChaosProvider:
    """One provider's row of the table."""

    name: str
    # The sandbox outcome (the core's token) -> the provider's payment methods for it;
    # several when the provider has more than one way to end so (a script picks one).
    methods: Mapping[str, tuple[PaymentMethod, ...]]
    # ``POST`` paths of its creates in the sandbox's request log (any API version).
    create_path: re.Pattern[str]
    body_format: Literal["json", "form"]  # the create body: JSON, or Stripe's form encoding
    reference_field: str  # where the body carries the attempt's reference
    version_header: str | None  # the header naming the API version; None: it is in the path
    account_header: str | None  # the header naming the account, if the wire has one
    account_field: str | None  # the body field naming the account, if any
    api_key_header: str  # the captured key's mode (sk_test / sk_live) is in this header
    lookups: bool  # by id and by reference (Adyen has neither)
    search_lags: bool  # its lookup by reference is a search index that lags (Stripe's Search)
    max_amount_minor: int | None = None  # the provider's own ceiling, below the currency's
    manual_capture: bool = True  # paycore holds its payments for a capture (Adyen's: not yet)
    # The variables holding what signs its webhooks (Cardco's and Stripe's whsec_, Adyen's
    # HMAC key), and Adyen's basic-auth user and password.
    webhook_secret_env: str = ""
    webhook_auth_env: tuple[str, str] | None = None
    # The stray webhooks' statuses, drawn per event (Adyen notifies no pending state).
    stray_statuses: tuple[Literal["succeeded", "declined", "processing"], ...] = (
        "succeeded", "succeeded", "declined", "processing")

    @property
    def webhook_route(self) -> str:
        return f"/webhooks/{self.name}"

    @property
    def names_account(self) -> bool:
        """Whether a create names the account on the wire (Stripe's does not: the key is the account)."""
        return self.account_header is not None or self.account_field is not None

    def webhook_credentials(self, env: Mapping[str, str]) -> tuple[str, tuple[str, str] | None]:
        """(signing secret, basic auth or None) out of the provider's ``PAYCORE_<PROVIDER>_*``."""
        if self.webhook_auth_env is None:
            return env[self.webhook_secret_env], None
        user, password = self.webhook_auth_env
        return env[self.webhook_secret_env], (env[user], env[password])

    def method(self, token: str, variant: int = 0) -> PaymentMethod:
        """The payment method a storefront sends for the sandbox outcome ``token``."""
        choices = self.methods[token]
        return choices[variant % len(choices)]

    def is_create(self, request: Mapping[str, Any]) -> bool:
        return request.get("method") == "POST" and bool(self.create_path.fullmatch(str(request.get("path"))))

    def _body(self, body: str) -> Mapping[str, Any]:
        if self.body_format == "form":
            return dict(parse_qsl(body, keep_blank_values=True))
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError:
            return {}
        return parsed if isinstance(parsed, dict) else {}

    def reference_of(self, body: str) -> str | None:
        """The attempt reference a create's body carries."""
        reference = self._body(body).get(self.reference_field)
        return reference if isinstance(reference, str) else None

    def version_of(self, request: Mapping[str, Any]) -> str | None:
        """The API version a create was sent under: its header, or (Adyen) its path's ``/v71/``."""
        if self.version_header is not None:
            return (request.get("headers") or {}).get(self.version_header)
        parts = str(request.get("path") or "").split("/")
        return parts[1] if len(parts) > 2 else None

    def account_of(self, request: Mapping[str, Any]) -> str | None:
        """The account a create names on the wire; None when the wire names none (Stripe)."""
        if self.account_header is not None:
            return (request.get("headers") or {}).get(self.account_header)
        if self.account_field is not None:
            account = self._body(str(request.get("body") or "")).get(self.account_field)
            return account if isinstance(account, str) else None
        return None

    def key_mode_of(self, request: Mapping[str, Any]) -> str | None:
        """``sk_test`` / ``sk_live``: the sandbox captures only the key's mode."""
        return (request.get("headers") or {}).get(self.api_key_header)


PROVIDERS: Final[Mapping[str, ChaosProvider]] = {
    "cardco": ChaosProvider(
        "cardco",
        {"tok_visa": ("tok_visa",), "tok_decline": ("tok_decline",),
         "tok_insufficient_funds": ("tok_insufficient_funds",), "tok_3ds": ("tok_3ds",),
         "tok_async": ("tok_async",), "tok_expired": ("tok_expired",)},
        re.compile(r"/v1/payments"), "json", "reference", version_header="cardco-version",
        account_header="cardco-account", account_field=None, api_key_header="authorization",
        lookups=True, search_lags=False, webhook_secret_env="PAYCORE_CARDCO_WEBHOOK_SECRET"),
    "stripe": ChaosProvider(
        "stripe",
        {"tok_visa": ("pm_card_visa",), "tok_decline": ("pm_card_chargeDeclined",),
         "tok_insufficient_funds": ("pm_card_chargeDeclinedInsufficientFunds",),
         "tok_3ds": ("pm_card_threeDSecure2Required",), "tok_async": ("pm_card_async",),
         # An expired card is a decline at Stripe (402, executed, replayed under its key); a
         # method Stripe does not know is refused before anything executes, as tok_expired is.
         "tok_expired": ("pm_card_chargeDeclinedExpiredCard", "pm_card_unknown")},
        re.compile(r"/v1/payment_intents"), "form", "metadata[paycore_reference]",
        version_header="stripe-version", account_header=None, account_field=None,
        api_key_header="authorization", lookups=True, search_lags=True,
        max_amount_minor=99_999_999,  # eight digits (paycore.providers.stripe.request)
        webhook_secret_env="PAYCORE_STRIPE_WEBHOOK_SECRET"),
    "adyen": ChaosProvider(
        "adyen",
        {token: (_adyen_card(token),) for token in (
            "tok_visa", "tok_decline", "tok_insufficient_funds", "tok_3ds", "tok_async", "tok_expired")},
        re.compile(r"/v[0-9]+/payments"), "json", "reference", version_header=None,
        account_header=None, account_field="merchantAccount", api_key_header="x-api-key",
        lookups=False, search_lags=False, webhook_secret_env="PAYCORE_ADYEN_HMAC_KEY",
        webhook_auth_env=("PAYCORE_ADYEN_WEBHOOK_USERNAME", "PAYCORE_ADYEN_WEBHOOK_PASSWORD"),
        stray_statuses=("succeeded", "succeeded", "declined", "declined")),
}


def provider(name: str) -> ChaosProvider:
    try:
        return PROVIDERS[name]
    except KeyError:
        raise ValueError(f"no chaos run for provider {name!r}; one of {', '.join(PROVIDERS)}") from None
