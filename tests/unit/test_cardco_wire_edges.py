"""Cardco's wire at its edges: what the generated mutation run over ``providers/cardco/wire.py``
found untested (issue 26), each seen red against its mutant: an error body's shape, and the
longest idempotency key a create carries."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from paycore.providers.base import StoredRequest
from paycore.providers.cardco import wire
from paycore.providers.cardco.request import create_request
from paycore.providers.cardco.version import API_VERSION
from paycore.providers.http import NotBuildable
from paycore.providers.package import ProviderAccountConfig
from paycore.settings_spec import Secret


@pytest.mark.parametrize("body", [
    pytest.param(["error"], id="a-list"),
    pytest.param({"error": "card_declined"}, id="error-not-an-object"),
    pytest.param({"error": {"code": ""}}, id="code-empty"),
    pytest.param({"error": {"code": 402}}, id="code-a-number"),
    pytest.param({"error": {"code": "card_declined", "param": 5}}, id="param-a-number"),
])
def test_a_body_that_is_no_contract_error_has_no_error_code(body: Any) -> None:
    assert wire.error_code(body) is None


def test_an_error_codes_param_is_optional() -> None:
    assert wire.error_code({"error": {"code": "card_declined"}}) == ("card_declined", None)
    assert wire.error_code({"error": {"code": "invalid_request", "param": "amount"}}) == (
        "invalid_request", "amount")


def test_an_idempotency_key_is_at_most_255_characters() -> None:
    acct = ProviderAccountConfig("cardco", "acct_store", "test", "http://127.0.0.1:9", Secret("sk_test_x"),
                                 None, API_VERSION)

    def stored(key: str) -> StoredRequest:
        return StoredRequest(uuid.uuid4(), acct.provider_account, acct.payments_endpoint, API_VERSION, key,
                             '{"amount":4999}', "ref-1", 4999, "EUR")

    assert create_request(stored("k" * 255), acct).headers["Idempotency-Key"] == '"' + "k" * 255 + '"'
    with pytest.raises(NotBuildable, match="invalid-header"):
        create_request(stored("k" * 256), acct)
