"""The Adyen report user's settings load: from the environment (``PAYCORE_ADYEN_REPORT_*``) and from
the accounts file (``report_username``, ``report_password_env``, ``reports_base_url``), with the
Customer Area of the account's mode as the default reports host; and the settlement source they
give (``docs/providers/adyen.md``, "Settlements")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from paycore.config import ConfigError, ProviderAccountConfig, load_settings
from paycore.providers.adyen.settlements import AdyenSettlements
from paycore.providers.settlement_sources import settlement_source
from paycore.settlement_lines import SettlementSourceError

ADYEN = {"PAYCORE_DEFAULT_PROVIDER": "adyen", "PAYCORE_ADYEN_API_KEY": "AQE_key",
         "PAYCORE_ADYEN_MERCHANT_ACCOUNT": "ShopEU", "PAYCORE_ADYEN_RETURN_URL": "https://shop.example/return"}
REPORT_USER = {"PAYCORE_ADYEN_REPORT_USERNAME": "report_123@Company.Shop",
               "PAYCORE_ADYEN_REPORT_PASSWORD": "s3cret-report"}
LIVE = {"PAYCORE_ADYEN_ENVIRONMENT": "live", "PAYCORE_ADYEN_LIVE_URL_PREFIX": "1797a841fbb37ca7-AdyenDemo"}


def refused(env: dict[str, str], variable: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_settings(env)
    assert caught.value.variable == variable
    return str(caught.value)


def adyen(env: dict[str, str]) -> ProviderAccountConfig:
    return load_settings(env).default_account


def test_the_report_user_from_the_environment_downloads_from_the_test_customer_area() -> None:
    account = adyen({**ADYEN, **REPORT_USER})
    assert (account.report_username, account.reports_base_url) == (
        "report_123@Company.Shop", "https://ca-test.adyen.com")
    assert account.report_password is not None and account.report_password.reveal() == "s3cret-report"
    assert "s3cret-report" not in repr(account)
    assert isinstance(settlement_source(account), AdyenSettlements)


def test_the_reports_host_is_the_live_customer_area_for_a_live_account_unless_set() -> None:
    assert adyen({**ADYEN, **REPORT_USER, **LIVE}).reports_base_url == "https://ca-live.adyen.com"
    moved = adyen({**ADYEN, **REPORT_USER, "PAYCORE_ADYEN_REPORTS_BASE_URL": "http://127.0.0.1:8700"})
    assert moved.reports_base_url == "http://127.0.0.1:8700"
    not_a_url = {**ADYEN, "PAYCORE_ADYEN_REPORTS_BASE_URL": "ca-test.adyen.com"}
    refused(not_a_url, "PAYCORE_ADYEN_REPORTS_BASE_URL")


@pytest.mark.parametrize("alone", sorted(REPORT_USER))
def test_the_report_username_and_password_are_set_together(alone: str) -> None:
    message = refused({**ADYEN, alone: REPORT_USER[alone]}, "PAYCORE_ADYEN_REPORT_PASSWORD")
    assert "PAYCORE_ADYEN_REPORT_USERNAME" in message and "together" in message
    assert "s3cret-report" not in message


def test_without_a_report_user_the_account_loads_and_its_settlements_come_from_files_only() -> None:
    account = adyen(ADYEN)
    assert (account.report_username, account.report_password, account.reports_base_url) == (
        None, None, "https://ca-test.adyen.com")
    with pytest.raises(SettlementSourceError) as caught:
        settlement_source(account)
    assert "PAYCORE_ADYEN_REPORT_USERNAME" in str(caught.value)
    assert "report_password_env" in str(caught.value)


# -- the accounts file -------------------------------------------------------------------------------


def accounts_file(tmp_path: Path, *entries: dict[str, Any]) -> dict[str, str]:
    path = tmp_path / "accounts.json"
    path.write_bytes(orjson.dumps(list(entries)))
    return {"PAYCORE_ACCOUNTS_FILE": str(path), "PAYCORE_DEFAULT_PROVIDER": "adyen", "EU_KEY": "AQE_eu",
            "EU_REPORT_PW": "eu-report-pw", "US_KEY": "sk_live_us"}


def entry(account: str = "ShopEU", environment: str = "test", **fields: Any) -> dict[str, Any]:
    return {"provider": "adyen", "account": account, "environment": environment, "api_key_env": "EU_KEY",
            "return_url": "https://shop.example/r", **fields}


def test_the_report_user_from_the_accounts_file_with_its_reports_host(tmp_path: Path) -> None:
    env = accounts_file(
        tmp_path,
        entry(report_username="report_eu@Company.Shop", report_password_env="EU_REPORT_PW",
              reports_base_url="http://127.0.0.1:8700/"),
        entry("ShopUS", "live", base_url="http://127.0.0.1:9/adyen", report_username="report_us@Company.Shop",
              report_password_env="EU_REPORT_PW"),
        entry("ShopUK"))
    settings = load_settings(env)
    eu, us, uk = (settings.account(f"adyen:{name}") for name in ("ShopEU:test", "ShopUS:live", "ShopUK:test"))
    assert eu is not None and us is not None and uk is not None
    assert (eu.report_username, eu.reports_base_url) == ("report_eu@Company.Shop", "http://127.0.0.1:8700")
    assert eu.report_password is not None and eu.report_password.reveal() == "eu-report-pw"
    assert (us.report_username, us.reports_base_url) == ("report_us@Company.Shop", "https://ca-live.adyen.com")
    assert (uk.report_username, uk.report_password, uk.reports_base_url) == (
        None, None, "https://ca-test.adyen.com")
    assert isinstance(settlement_source(eu), AdyenSettlements)
    with pytest.raises(SettlementSourceError, match="report_username and report_password_env"):
        settlement_source(uk)


@pytest.mark.parametrize(("fields", "field"), [
    ({"report_username": "report_eu@Company.Shop"}, "report_password_env"),
    ({"report_password_env": "EU_REPORT_PW"}, "report_password_env"),
    ({"report_username": "report_eu@Company.Shop", "report_password_env": "UNSET_VARIABLE"},
     "report_password_env"),
    ({"report_username": ""}, "report_username"),
    ({"reports_base_url": "not a url"}, "reports_base_url"),
])
def test_a_bad_report_user_in_the_accounts_file_is_refused_naming_its_field(
        tmp_path: Path, fields: dict[str, Any], field: str) -> None:
    refused(accounts_file(tmp_path, entry(**fields)), f"PAYCORE_ACCOUNTS_FILE[0].{field}")


@pytest.mark.parametrize("field", [
    {"report_username": "r@Company.Shop", "report_password_env": "EU_REPORT_PW"},
    {"report_username": "r@Company.Shop"},
    {"reports_base_url": "http://127.0.0.1:8700"},
])
def test_the_report_fields_are_for_adyen_accounts_only(tmp_path: Path, field: dict[str, Any]) -> None:
    stripe = {"provider": "stripe", "account": "acct_us", "api_key_env": "US_KEY", **field}
    env = {**accounts_file(tmp_path, entry(), stripe)}
    message = refused(env, "PAYCORE_ACCOUNTS_FILE[1].report_username")
    assert "Adyen" in message
