"""In-process units: settings, key parsing, fingerprints, hang limit."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import pytest

from harness.servers import serve_asgi
from paycore_sandbox.app import create_app
from paycore_sandbox.errors import ApiError
from paycore_sandbox.idempotency import fingerprint, parse_idempotency_key
from paycore_sandbox.settings import SandboxSettings
from tests.sandbox.support import add_faults, create, ledger, payment_body


def test_default_settings() -> None:
    settings = SandboxSettings.default()
    assert [(a.account, a.environment, a.api_key) for a in settings.accounts] == [
        ("acct_store", "test", "sk_test_acct_store_local"),
        ("acct_store", "live", "sk_live_acct_store_local"),
        ("acct_other", "test", "sk_test_acct_other_local"),
    ]
    for acct in settings.accounts:
        assert acct.webhook_secret.startswith("whsec_")
        assert len(base64.b64decode(acct.webhook_secret.removeprefix("whsec_"))) == 24
        assert (acct.lookup_rate_per_s, acct.lookup_burst) == (50, 50)
    assert settings.accounts[0].webhook_secret == SandboxSettings.default().accounts[0] \
        .webhook_secret
    assert settings.accounts[1].provider_account_id == "cardco:acct_store:live"
    assert (settings.key_retention_s, settings.action_expiry_s) == (86400, 900)


def test_from_env(tmp_path: Path) -> None:
    config = tmp_path / "sandbox.json"
    config.write_text(json.dumps({
        "accounts": [{"account": "acct_x", "environment": "live", "api_key": "sk_live_x1",
                      "lookup_burst": 5}],
        "async_delay_s": 0.5,
    }))
    settings = SandboxSettings.from_env({"PAYCORE_SANDBOX_CONFIG": str(config),
                                         "PAYCORE_SANDBOX_KEY_RETENTION_S": "120"})
    assert settings.key_retention_s == 120
    assert settings.async_delay_s == 0.5
    [acct] = settings.accounts
    assert (acct.account, acct.livemode, acct.lookup_burst) == ("acct_x", True, 5)
    assert SandboxSettings.from_env({}) == SandboxSettings.default()


@pytest.mark.parametrize(("config", "env", "named"), [
    ({"key_retention_s": 0}, {}, "key_retention_s"),
    ({}, {"PAYCORE_SANDBOX_KEY_RETENTION_S": "soon"}, "PAYCORE_SANDBOX_KEY_RETENTION_S"),
    ({"hang_limit_s": -1}, {}, "hang_limit_s"),
    ({"colour": "red"}, {}, "colour"),
    ({"accounts": []}, {}, "accounts"),
    ({"accounts": [{"account": "acct_a", "environment": "test", "api_key": "sk_live_a"}]},
     {}, "accounts[0].api_key"),
    ({"accounts": [{"account": "acct_a", "environment": "prod", "api_key": "sk_test_a"}]},
     {}, "accounts[0].environment"),
    ({"accounts": [{"account": "acct_a", "environment": "test", "api_key": "sk_test_a",
                    "webhook_secret": "nope"}]}, {}, "accounts[0].webhook_secret"),
    ({"accounts": [{"account": "acct_a", "environment": "test", "api_key": "sk_test_a",
                    "lookup_rate_per_s": 0}]}, {}, "accounts[0].lookup_rate_per_s"),
    ({"accounts": [{"account": "acct_a", "environment": "test", "api_key": "sk_test_a"},
                   {"account": "acct_b", "environment": "test", "api_key": "sk_test_a"}]},
     {}, "accounts[1].api_key"),
])
def test_bad_settings_name_the_field(tmp_path: Path, config: dict[str, object],
                                     env: dict[str, str], named: str) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=named.replace("[", r"\[").replace("]", r"\]")):
        SandboxSettings.from_env({"PAYCORE_SANDBOX_CONFIG": str(path), **env})


def test_unreadable_config_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="PAYCORE_SANDBOX_CONFIG"):
        SandboxSettings.from_env({"PAYCORE_SANDBOX_CONFIG": str(tmp_path / "missing.json")})


@pytest.mark.parametrize(("header", "key"), [
    ('"abc"', "abc"), ("abc", "abc"), ('  "a b"  ', "a b"), ('"a\\"b"', 'a"b'),
    ('"a\\\\b"', "a\\b"), ("8e03978e-40d5-43e8-bc93-6894a57f9324",
                          "8e03978e-40d5-43e8-bc93-6894a57f9324"),
])
def test_parse_idempotency_key(header: str, key: str) -> None:
    assert parse_idempotency_key(header) == key


@pytest.mark.parametrize("header", [None, "", '"x', '"a\\nb"', '"a"b"', "a,b", '"é"'])
def test_parse_idempotency_key_rejects(header: str | None) -> None:
    with pytest.raises(ApiError) as info:
        parse_idempotency_key(header)
    assert info.value.status == 400


def test_fingerprint_is_canonical() -> None:
    a = {"b": 1, "a": {"d": [1, 2], "c": "x"}}
    b = {"a": {"c": "x", "d": [1, 2]}, "b": 1}
    assert fingerprint(a) == fingerprint(b)
    assert fingerprint(a) != fingerprint({**a, "b": 2})


async def test_hang_limit_bounds_held_requests() -> None:
    app = create_app(SandboxSettings(hang_limit_s=0.2))
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        await add_faults(client, {"fault": "lose_response", "match": {"any": True},
                                  "times": 1})
        with pytest.raises(httpx.TransportError):
            await create(client, payment_body())
        assert len(await ledger(client)) == 1
        assert (await create(client, payment_body())).status_code == 201


def test_pending_holds_only_payments_not_yet_final_in_creation_order() -> None:
    # Every lookup sweeps ledger.pending(); it must follow status changes made on the
    # payment objects themselves (lifecycle._transition), since a final status is never left.
    from paycore_sandbox.ledger import Ledger, Payment

    def payment(n: int, status: str) -> Payment:
        return Payment(id=f"pay_{n}", account="acct_store", environment="test", amount=100, currency="EUR",
                       reference=f"ref-{n}", payment_method="tok_async", idempotency_key=f"k{n}",
                       created=0, status=status)  # type: ignore[arg-type]

    book = Ledger()
    first, done, third = payment(1, "processing"), payment(2, "succeeded"), payment(3, "requires_action")
    for p in (first, done, third):
        book.add(p)
    assert [p.id for p in book.pending()] == ["pay_1", "pay_3"]
    first.status = "succeeded"
    assert [p.id for p in book.pending()] == ["pay_3"]
    third.status = "canceled"
    assert book.pending() == []
    assert len(book) == 3
