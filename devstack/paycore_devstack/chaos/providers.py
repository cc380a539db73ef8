"""What differs per provider in a chaos run: one row per shipped provider, read by every part of the run.

The run is one code path for every provider paycore ships (``PROVIDER_PACKAGES``); each
part asks its row what it needs about the provider's wire, and the row restates nothing:
it is the provider package's own facts (its payments path, its capabilities) and the
sandbox contract the package describes (:mod:`paycore.providers.sandbox`):

- the load: the payment method for each sandbox outcome (the sandbox's core speaks
  in the first provider's tokens, ``tok_visa`` ...; each dialect maps its own methods onto them:
  services/sandbox/README.md), and the provider's largest amount;
- the faults: whether the provider can be looked up at all, and whether its lookup
  by reference is a search index that lags;
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

from paycore.providers.base import PaymentMethod, ReferenceLookup
from paycore.providers.package import ProviderPackage
from paycore.providers.registry import PROVIDER_PACKAGES
from paycore.providers.sandbox import sandbox_contract


@dataclass(frozen=True)
class ChaosProvider:
    """One provider's row of the table."""

    name: str
    # The sandbox outcome (the core's token) -> the provider's payment methods for it;
    # several when the provider has more than one way to end so (a script picks one).
    methods: Mapping[str, tuple[PaymentMethod, ...]]
    # ``POST`` paths of its creates in the sandbox's request log (any API version).
    create_path: re.Pattern[str]
    body_format: Literal["json", "form"]  # the create body: JSON, or form encoding
    reference_field: str  # where the body carries the attempt's reference
    version_header: str | None  # the header naming the API version; None: it is in the path
    account_header: str | None  # the header naming the account, if the wire has one
    account_field: str | None  # the body field naming the account, if any
    api_key_header: str  # the captured key's mode (sk_test / sk_live) is in this header
    lookups: bool  # by id and by reference (some providers have neither)
    search_lags: bool  # its lookup by reference is a search index that lags
    max_amount_minor: int | None = None  # the provider's own ceiling, below the currency's
    manual_capture: bool = True  # paycore holds its payments for a capture
    # The variables holding what signs its webhooks, and the basic-auth user and password its
    # webhooks carry, if any.
    webhook_secret_env: str = ""
    webhook_auth_env: tuple[str, str] | None = None
    # What the intake answers a webhook with, where the provider takes exactly that (else any 2xx).
    acknowledgement: bytes | None = None
    # The stray webhooks' statuses, drawn per event (a provider may notify no pending state).
    stray_statuses: tuple[Literal["succeeded", "declined", "processing"], ...] = (
        "succeeded", "succeeded", "declined", "processing")

    @property
    def webhook_route(self) -> str:
        return f"/webhooks/{self.name}"

    @property
    def names_account(self) -> bool:
        """Whether a create names the account on the wire (some do not: the key is the account)."""
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
        """The API version a create was sent under: its header, or its path's ``/v71/``."""
        if self.version_header is not None:
            return (request.get("headers") or {}).get(self.version_header)
        parts = str(request.get("path") or "").split("/")
        return parts[1] if len(parts) > 2 else None

    def account_of(self, request: Mapping[str, Any]) -> str | None:
        """The account a create names on the wire; None when the wire names none."""
        if self.account_header is not None:
            return (request.get("headers") or {}).get(self.account_header)
        if self.account_field is not None:
            account = self._body(str(request.get("body") or "")).get(self.account_field)
            return account if isinstance(account, str) else None
        return None

    def key_mode_of(self, request: Mapping[str, Any]) -> str | None:
        """``sk_test`` / ``sk_live``: the sandbox captures only the key's mode."""
        return (request.get("headers") or {}).get(self.api_key_header)


def _create_path(package: ProviderPackage) -> re.Pattern[str]:
    """Its payments path under any API version of its default's form (``v71``: ``v[0-9]+``)."""
    version = re.sub(r"[0-9]+", "[0-9]+", re.escape(package.api_version))
    return re.compile(re.escape(package.payments_path).replace(re.escape("{api_version}"), version))


def chaos_provider_of(package: ProviderPackage) -> ChaosProvider:
    """A provider's row: its package's facts and the sandbox contract it describes."""
    contract = sandbox_contract(package)
    return ChaosProvider(
        package.name, contract.methods, _create_path(package),
        contract.body_format, contract.reference_field, version_header=contract.version_header,
        account_header=contract.account_header, account_field=contract.account_field,
        api_key_header=contract.api_key_header,
        lookups=contract.lookup_by_reference is not ReferenceLookup.UNSUPPORTED,
        search_lags=contract.lookup_by_reference is ReferenceLookup.EVENTUALLY_CONSISTENT,
        max_amount_minor=contract.max_amount_minor, webhook_secret_env=contract.webhook_secret.name,
        webhook_auth_env=None if contract.webhook_basic_auth is None
        else (contract.webhook_basic_auth[0].name, contract.webhook_basic_auth[1].name),
        acknowledgement=contract.webhook_acknowledgement, stray_statuses=contract.stray_statuses)


PROVIDERS: Final[Mapping[str, ChaosProvider]] = {p.name: chaos_provider_of(p) for p in PROVIDER_PACKAGES}


def provider(name: str) -> ChaosProvider:
    try:
        return PROVIDERS[name]
    except KeyError:
        raise ValueError(f"no chaos run for provider {name!r}; one of {', '.join(PROVIDERS)}") from None
