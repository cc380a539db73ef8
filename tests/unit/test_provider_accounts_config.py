"""Provider accounts from the environment and the accounts file: Cardco, Stripe and Adyen."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from paycore.config import ConfigError, load_settings

CARDCO = {"PAYCORE_CARDCO_BASE_URL": "http://cardco.test", "PAYCORE_CARDCO_ACCOUNT": "acct_store",
          "PAYCORE_CARDCO_API_KEY": "sk_test_cardco"}
STRIPE = {"PAYCORE_STRIPE_API_KEY": "sk_test_51abc", "PAYCORE_STRIPE_WEBHOOK_SECRET": "whsec_abc"}
ADYEN = {"PAYCORE_ADYEN_API_KEY": "AQE_key", "PAYCORE_ADYEN_MERCHANT_ACCOUNT": "PaycoreECOM",
         "PAYCORE_ADYEN_HMAC_KEY": "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056",
         "PAYCORE_ADYEN_WEBHOOK_USERNAME": "paycore", "PAYCORE_ADYEN_WEBHOOK_PASSWORD": "pw",
         "PAYCORE_ADYEN_RETURN_URL": "https://shop.example/return"}


def refused(env: dict[str, str], variable: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_settings(env)
    assert caught.value.variable == variable
    return str(caught.value)


def test_cardco_stays_the_default_provider() -> None:
    settings = load_settings({**CARDCO, **STRIPE})
    ids = [a.provider_account for a in settings.accounts]
    assert ids == ["cardco:acct_store:test", "stripe:default:test"]
    assert settings.default_account.payments_endpoint == "http://cardco.test/v1/payments"


def test_stripe_as_the_default_provider_comes_first_with_its_contract_defaults() -> None:
    settings = load_settings({**CARDCO, **STRIPE, "PAYCORE_DEFAULT_PROVIDER": "stripe"})
    stripe = settings.default_account
    assert stripe.provider_account == "stripe:default:test"
    assert stripe.payments_endpoint == "https://api.stripe.com/v1/payment_intents"
    assert (stripe.key_retention_s, stripe.escalation_margin_s) == (86_400, 7_200)
    assert stripe.api_version == "2026-10-28.endive"
    assert stripe.webhook_secret is not None and "whsec" not in repr(stripe)


@pytest.mark.parametrize(("key", "mode"),
                         [("sk_live_x", "live"), ("rk_test_x", "test"), ("rk_live_x", "live")])
def test_a_stripe_accounts_mode_is_its_keys(key: str, mode: str) -> None:
    settings = load_settings({"PAYCORE_STRIPE_API_KEY": key, "PAYCORE_DEFAULT_PROVIDER": "stripe"})
    assert settings.default_account.environment == mode


def test_a_stripe_key_of_no_known_kind_is_refused() -> None:
    assert "sk_test_" in refused({"PAYCORE_STRIPE_API_KEY": "pk_test_publishable",
                                  "PAYCORE_DEFAULT_PROVIDER": "stripe"}, "PAYCORE_STRIPE_API_KEY")


def test_the_default_provider_must_be_configured() -> None:
    refused({"PAYCORE_DEFAULT_PROVIDER": "stripe", **CARDCO}, "PAYCORE_STRIPE_API_KEY")
    refused({"PAYCORE_DEFAULT_PROVIDER": "adyen"}, "PAYCORE_ADYEN_API_KEY")
    refused({"PAYCORE_DEFAULT_PROVIDER": "paypal"}, "PAYCORE_DEFAULT_PROVIDER")


def test_adyen_test_and_live_endpoints_and_its_31_day_window() -> None:
    test = load_settings({**ADYEN, "PAYCORE_DEFAULT_PROVIDER": "adyen"}).default_account
    assert test.provider_account == "adyen:PaycoreECOM:test"
    assert test.payments_endpoint == "https://checkout-test.adyen.com/v71/payments"
    assert (test.key_retention_s, test.escalation_margin_s) == (31 * 86_400, 7_200)
    assert test.webhook_username == "paycore" and test.return_url == "https://shop.example/return"
    live = load_settings({**ADYEN, "PAYCORE_DEFAULT_PROVIDER": "adyen", "PAYCORE_ADYEN_ENVIRONMENT": "live",
                          "PAYCORE_ADYEN_LIVE_URL_PREFIX": "1797a841fbb37ca7-AdyenDemo"}).default_account
    assert live.payments_endpoint == (
        "https://1797a841fbb37ca7-AdyenDemo-checkout-live.adyenpayments.com/checkout/v71/payments")


@pytest.mark.parametrize(("change", "variable"), [
    ({"PAYCORE_ADYEN_ENVIRONMENT": "live"}, "PAYCORE_ADYEN_LIVE_URL_PREFIX"),
    ({"PAYCORE_ADYEN_HMAC_KEY": "not-hex"}, "PAYCORE_ADYEN_HMAC_KEY"),
    ({"PAYCORE_ADYEN_WEBHOOK_PASSWORD": ""}, "PAYCORE_ADYEN_WEBHOOK_PASSWORD"),
    ({"PAYCORE_ADYEN_RETURN_URL": ""}, "PAYCORE_ADYEN_RETURN_URL"),
    ({"PAYCORE_ADYEN_MERCHANT_ACCOUNT": ""}, "PAYCORE_ADYEN_MERCHANT_ACCOUNT"),
    ({"PAYCORE_ADYEN_MERCHANT_ACCOUNT": "Shop:EU"}, "PAYCORE_ADYEN_MERCHANT_ACCOUNT"),
    ({"PAYCORE_ADYEN_ESCALATION_MARGIN_S": str(31 * 86_400)}, "PAYCORE_ADYEN_ESCALATION_MARGIN_S"),
])
def test_an_adyen_account_missing_what_it_needs_is_refused(change: dict[str, str], variable: str) -> None:
    refused({**ADYEN, "PAYCORE_DEFAULT_PROVIDER": "adyen", **change}, variable)


def accounts_file(tmp_path: Path, entries: list[dict[str, Any]]) -> dict[str, str]:
    path = tmp_path / "accounts.json"
    path.write_bytes(orjson.dumps(entries))
    return {"PAYCORE_ACCOUNTS_FILE": str(path)}


def test_accounts_of_every_provider_from_the_file(tmp_path: Path) -> None:
    env = {**CARDCO, "EU_KEY": "AQE_eu", "EU_HMAC": "00ff", "EU_PW": "pw", "US_KEY": "sk_live_us",
           **accounts_file(tmp_path, [
               {"provider": "adyen", "account": "ShopEU", "environment": "test", "api_key_env": "EU_KEY",
                "webhook_secret_env": "EU_HMAC", "webhook_username": "eu", "webhook_password_env": "EU_PW",
                "return_url": "https://shop.example/r", "base_url": "http://127.0.0.1:9/adyen"},
               {"provider": "stripe", "account": "acct_us", "api_key_env": "US_KEY"},
           ])}
    settings = load_settings(env)
    ids = [a.provider_account for a in settings.accounts]
    assert ids == ["cardco:acct_store:test", "adyen:ShopEU:test", "stripe:acct_us:live"]
    eu = settings.account("adyen:ShopEU:test")
    assert eu is not None and eu.payments_endpoint == "http://127.0.0.1:9/adyen/v71/payments"
    assert eu.key_retention_s == 31 * 86_400


@pytest.mark.parametrize(("entry", "field"), [
    ({"provider": "stripe", "account": "a", "api_key_env": "US_KEY", "api_key": "sk_live_us"}, "api_key"),
    ({"provider": "paypal", "account": "a", "api_key_env": "US_KEY"}, "provider"),
    ({"provider": "stripe", "account": "a", "api_key_env": "US_KEY", "environment": "test"}, "environment"),
    ({"provider": "stripe", "account": "a", "api_key_env": "UNSET_VARIABLE"}, "api_key_env"),
    ({"provider": "adyen", "account": "a", "environment": "test", "api_key_env": "US_KEY"}, "return_url"),
    ({"provider": "stripe", "account": "a", "api_key_env": "US_KEY", "webhook_username": "u"},
     "webhook_username"),
    ({"provider": "cardco", "account": "a", "environment": "test", "api_key_env": "US_KEY",
      "base_url": "http://x"}, "api_key_env"),
    ({"provider": "stripe", "account": "acct:us", "api_key_env": "US_KEY"}, "account"),
])
def test_a_bad_file_entry_is_refused_naming_its_field(tmp_path: Path, entry: dict[str, Any],
                                                      field: str) -> None:
    env = {**CARDCO, "US_KEY": "sk_live_us", **accounts_file(tmp_path, [entry])}
    assert refused(env, f"PAYCORE_ACCOUNTS_FILE[0].{field}")


def test_tools_that_call_no_provider_start_without_accounts() -> None:
    assert load_settings({}, require_account=False).accounts == ()


def test_the_default_stripe_version_is_the_one_the_pinned_sdk_is_generated_for() -> None:
    import stripe

    from paycore.providers.stripe import DEFAULT_API_VERSION
    from paycore.providers.stripe.provider import API_VERSION as STRIPE_API_VERSION

    assert STRIPE_API_VERSION == DEFAULT_API_VERSION == stripe.api_version


# -- key retention and escalation margin, per provider ----------------------------------------------


@pytest.mark.parametrize(("provider", "env", "defaults"), [
    ("stripe", STRIPE, (86_400, 7_200)),
    ("adyen", ADYEN, (31 * 86_400, 7_200)),
])
def test_each_providers_retention_and_margin_default_to_its_contract_and_are_overridden_by_its_own_variables(
    provider: str, env: dict[str, str], defaults: tuple[int, int],
) -> None:
    prefix = f"PAYCORE_{provider.upper()}_"
    base = {**env, "PAYCORE_DEFAULT_PROVIDER": provider}
    acct = load_settings(base).default_account
    assert (acct.key_retention_s, acct.escalation_margin_s) == defaults

    both = load_settings({**base, prefix + "KEY_RETENTION_S": "172800",
                          prefix + "ESCALATION_MARGIN_S": "600"}).default_account
    assert (both.key_retention_s, both.escalation_margin_s) == (172_800, 600)
    # Another provider's variables never reach this account.
    other = "ADYEN" if provider == "stripe" else "STRIPE"
    untouched = load_settings({**base, f"PAYCORE_{other}_KEY_RETENTION_S": "3600",
                               f"PAYCORE_{other}_ESCALATION_MARGIN_S": "60"}).default_account
    assert (untouched.key_retention_s, untouched.escalation_margin_s) == defaults


@pytest.mark.parametrize("provider", ["stripe", "adyen"])
def test_an_overridden_retention_without_a_margin_gets_a_quarter_of_it_at_most_two_hours(
    provider: str,
) -> None:
    env = {**(STRIPE if provider == "stripe" else ADYEN), "PAYCORE_DEFAULT_PROVIDER": provider}
    retention = f"PAYCORE_{provider.upper()}_KEY_RETENTION_S"
    short = load_settings({**env, retention: "3600"}).default_account
    assert (short.key_retention_s, short.escalation_margin_s) == (3_600, 900)
    long = load_settings({**env, retention: str(60 * 86_400)}).default_account
    assert (long.key_retention_s, long.escalation_margin_s) == (60 * 86_400, 7_200)


@pytest.mark.parametrize("provider", ["stripe", "adyen"])
@pytest.mark.parametrize(("retention", "margin", "variable"), [
    ("3600", "3600", "ESCALATION_MARGIN_S"),  # the margin must stay below the retention
    ("3600", "4000", "ESCALATION_MARGIN_S"),
    ("3600", "90.5", "ESCALATION_MARGIN_S"),  # whole seconds
    ("0", None, "KEY_RETENTION_S"),
    ("-1", None, "KEY_RETENTION_S"),
    ("a day", None, "KEY_RETENTION_S"),
])
def test_a_retention_or_margin_that_cannot_be_a_key_window_is_refused_naming_its_variable(
    provider: str, retention: str, margin: str | None, variable: str,
) -> None:
    prefix = f"PAYCORE_{provider.upper()}_"
    env = {**(STRIPE if provider == "stripe" else ADYEN), "PAYCORE_DEFAULT_PROVIDER": provider,
           prefix + "KEY_RETENTION_S": retention}
    if margin is not None:
        env[prefix + "ESCALATION_MARGIN_S"] = margin
    refused(env, prefix + variable)


def test_an_adyen_account_without_a_return_url_is_refused_saying_what_it_is_for() -> None:
    env = {k: v for k, v in ADYEN.items() if k != "PAYCORE_ADYEN_RETURN_URL"}
    message = refused({**env, "PAYCORE_DEFAULT_PROVIDER": "adyen"}, "PAYCORE_ADYEN_RETURN_URL")
    assert message.startswith("PAYCORE_ADYEN_RETURN_URL: is required")
    assert "returnUrl" in message and "3-D Secure" in message


@pytest.mark.parametrize("variable", ["PAYCORE_CARDCO_ACCOUNT", "PAYCORE_STRIPE_ACCOUNT"])
def test_an_account_label_cannot_hold_the_ids_separator(variable: str) -> None:
    """``provider:account:environment`` is read back by splitting at its last two colons
    (paycore.evidence.account_and_mode): a label with a colon would be read as another account."""
    env = {**CARDCO, **STRIPE, variable: "acct:store"}
    assert "must not contain ':'" in refused(env, variable)


def test_only_an_adyen_account_has_adyens_own_fields(tmp_path: Path) -> None:
    import dataclasses

    from paycore.config import ProviderAccountConfig
    from paycore.providers.adyen.provider import AdyenAccountConfig

    env = {**CARDCO, **STRIPE, **ADYEN, "EU_KEY": "AQE_eu", "EU_PW": "pw", "US_KEY": "sk_live_us",
           **accounts_file(tmp_path, [
               {"provider": "adyen", "account": "ShopEU", "environment": "live", "api_key_env": "EU_KEY",
                "live_url_prefix": "eu-prefix", "webhook_username": "eu", "webhook_password_env": "EU_PW",
                "return_url": "https://shop.example/r"},
               # Accepted on every provider's entry, as before; only an Adyen account keeps it.
               {"provider": "stripe", "account": "acct_us", "api_key_env": "US_KEY",
                "live_url_prefix": "ignored"},
           ])}
    by_id = {a.provider_account: a for a in load_settings(env).accounts}
    shared = {f.name for f in dataclasses.fields(ProviderAccountConfig)}
    assert not {"webhook_username", "live_url_prefix", "report_username"} & shared
    assert {type(a) for i, a in by_id.items() if not i.startswith("adyen:")} == {ProviderAccountConfig}
    default, eu = by_id["adyen:PaycoreECOM:test"], by_id["adyen:ShopEU:live"]
    assert isinstance(default, AdyenAccountConfig) and isinstance(eu, AdyenAccountConfig)
    assert (default.webhook_username, default.reports_base_url) == ("paycore", "https://ca-test.adyen.com")
    assert (eu.webhook_username, eu.live_url_prefix, eu.reports_base_url) == (
        "eu", "eu-prefix", "https://ca-live.adyen.com")
    assert eu.base_url == "https://eu-prefix-checkout-live.adyenpayments.com/checkout"


def test_an_adyen_account_built_as_the_shared_class_has_none_of_adyens_own() -> None:
    from paycore.config import ProviderAccountConfig, Secret
    from paycore.providers.adyen.provider import API_VERSION as ADYEN_API_VERSION
    from paycore.providers.adyen.provider import AdyenAccountConfig

    plain = ProviderAccountConfig(provider="adyen", account="ShopEU", environment="test",
                                  base_url="http://127.0.0.1:9", api_key=Secret("k"), webhook_secret=None,
                                  api_version=ADYEN_API_VERSION, return_url="https://shop.example/r")
    adyen = AdyenAccountConfig.of(plain)
    assert (adyen.provider_account, adyen.return_url) == (plain.provider_account, plain.return_url)
    assert (adyen.webhook_username, adyen.report_username, adyen.live_url_prefix) == (None, None, None)
    assert AdyenAccountConfig.of(adyen) is adyen
