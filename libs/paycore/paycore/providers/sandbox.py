"""What the local sandbox plays of a provider, as the provider's package describes it.

The sandbox (``services/sandbox``) speaks each provider's wire over one core that reads
outcomes from Cardco-style test tokens (``tok_visa`` ...); what a client must send to
reach each outcome on a provider's wire, and where that provider's creates carry what a
check of the sandbox's request log reads, are facts of the provider: its package says them
in a module ``sandbox.py`` beside its ``provider.py``, exporting ``SANDBOX``, a
:class:`SandboxContract`. The chaos run reads them (with the package's own facts: its
payments path, its capabilities); this module names no provider and imports no service.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from paycore.providers.base import PaymentMethod, ReferenceLookup
from paycore.providers.package import ProviderPackage
from paycore.settings_spec import Setting

# The sandbox core's outcomes, each named by its test token (services/sandbox/README.md).
OUTCOME_TOKENS: Final = ("tok_visa", "tok_decline", "tok_insufficient_funds", "tok_3ds", "tok_async",
                         "tok_expired")
StrayStatus = Literal["succeeded", "declined", "processing"]


@dataclass(frozen=True)
class SandboxContract:
    """How the sandbox plays one provider's wire, for a client driving it and a check reading its log."""

    # The sandbox outcome (the core's token) -> the provider's payment methods for it; several
    # when the provider has more than one way to end so.
    methods: Mapping[str, tuple[PaymentMethod, ...]]
    body_format: Literal["json", "form"]  # a create's body: JSON, or form encoding
    reference_field: str  # where a create's body carries the attempt's reference
    version_header: str | None  # the header naming the API version; None: it is in the payments path
    account_header: str | None  # the header naming the account, if the wire has one
    account_field: str | None  # the body field naming the account, if any
    api_key_header: str  # the header carrying the API key (the sandbox captures only its mode)
    lookup_by_reference: ReferenceLookup  # as the provider's capabilities say
    webhook_secret: Setting[Any]  # the variable holding what signs its webhooks
    # The variables of the basic auth its webhooks carry (user, password), if they carry any.
    webhook_basic_auth: tuple[Setting[Any], Setting[Any]] | None = None
    max_amount_minor: int | None = None  # the provider's own ceiling, below the currency's
    # What its receiver answers a webhook with, when the provider wants exactly that (else: any 2xx).
    webhook_acknowledgement: bytes | None = None
    # The statuses an unsolicited payment's webhook may report (a provider may notify no pending state).
    stray_statuses: tuple[StrayStatus, ...] = ("succeeded", "succeeded", "declined", "processing")
    # The sandbox service's own variables a chaos run sets for this dialect (its timings
    # shortened so that what they gate happens inside one run).
    chaos_env: Mapping[str, str] = field(default_factory=dict)


def sandbox_contract(package: ProviderPackage) -> SandboxContract:
    """The ``SANDBOX`` of the module ``sandbox`` beside the module defining ``package``'s class.

    :raises LookupError: The package describes no sandbox contract.
    """
    home = type(package).__module__.rpartition(".")[0]
    try:
        module = importlib.import_module(f"{home}.sandbox")
        contract = module.SANDBOX
    except (ImportError, AttributeError):
        raise LookupError(f"provider {package.name} describes no sandbox contract ({home}.sandbox)") from None
    if not isinstance(contract, SandboxContract):
        raise LookupError(f"{home}.sandbox.SANDBOX is not a SandboxContract")
    return contract
