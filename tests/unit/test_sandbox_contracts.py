"""Each shipped provider package says how the local sandbox plays its wire (its ``sandbox.py``)."""

from __future__ import annotations

from dataclasses import fields

import pytest

from paycore.providers.package import ProviderPackage
from paycore.providers.registry import PROVIDER_PACKAGES
from paycore.providers.sandbox import OUTCOME_TOKENS, sandbox_contract
from tests.fourth_provider.provider import PROVIDER as PAYZO


@pytest.mark.parametrize("package", PROVIDER_PACKAGES, ids=lambda p: p.name)
def test_each_shipped_package_reaches_every_sandbox_outcome(package: ProviderPackage) -> None:
    contract = sandbox_contract(package)
    assert set(contract.methods) == set(OUTCOME_TOKENS)
    assert all(contract.methods.values())
    # Basic auth on its webhooks exactly when its accounts carry a webhook user (Adyen's).
    basic_auth = "webhook_username" in {f.name for f in fields(package.account_class)}
    assert (contract.webhook_basic_auth is not None) == basic_auth


def test_a_package_describing_no_sandbox_contract_is_refused_by_name() -> None:
    with pytest.raises(LookupError, match="payzo describes no sandbox contract"):
        sandbox_contract(PAYZO)
