"""The accounts file as a union of entry classes tagged by ``provider`` (decision 0010, followed):
each key declared once, as a field, documented and read from that one declaration."""

# An entry class's defaults are entry_key(...) calls: each makes a dataclass field, not a shared value.
# ruff: noqa: RUF009

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from paycore.config import ConfigError, load_settings
from paycore.providers.package import (
    AccountEntry,
    FileSecret,
    FileText,
    documented_keys,
    entry_key,
    entry_keys,
    load_entry,
    section_of,
)
from paycore.providers.registry import PROVIDER_PACKAGES
from paycore.settings_spec import Secret

CARDCO = {"PAYCORE_CARDCO_BASE_URL": "http://cardco.test", "PAYCORE_CARDCO_ACCOUNT": "acct_store",
          "PAYCORE_CARDCO_API_KEY": "sk_test_cardco", "US_KEY": "sk_live_us", "PW": "pw"}


@dataclass(frozen=True, kw_only=True)
class _Extended(AccountEntry):
    first: str | None = entry_key(FileText(), "—", "its own, listed after the API key",
                                  listed_after="api_key_env")
    second: Secret | None = entry_key(FileSecret(), "—", "its own, in the same section")
    last: str | None = entry_key(FileText(), "—", "its own, at the end", listed_after="lookup_rate_per_s")


def test_a_providers_own_keys_are_listed_in_their_sections_and_refused_by_the_first() -> None:
    keys = [f.key for f in documented_keys([AccountEntry, _Extended])]
    shared = list(entry_keys(AccountEntry))
    assert keys == [*shared[:3], "first", "second", *shared[3:], "last"]
    assert [section_of(_Extended, k) for k in ("first", "second", "last")] == ["first", "first", "last"]


def test_an_entry_class_reads_each_of_its_keys_from_its_one_declaration() -> None:
    entry = load_entry(_Extended, {"account": "a", "api_key_env": "KEY", "second": "PW", "first": "x"},
                       {"KEY": "k", "PW": "pw"}, "F[0]")
    assert (entry.account, entry.api_key_env) == ("a", Secret("k"))
    assert (entry.first, entry.second) == ("x", Secret("pw"))
    assert entry.lookup_rate_per_s == 20.0 and entry.key_retention_s is None
    with pytest.raises(ConfigError, match=r"^F\[0\]\.second: names UNSET, which is not set$"):
        load_entry(_Extended, {"account": "a", "api_key_env": "KEY", "second": "UNSET"}, {"KEY": "k"}, "F[0]")


def test_a_package_without_an_entry_class_of_its_own_takes_the_shared_keys() -> None:
    assert all(issubclass(p.file_entry, AccountEntry) for p in PROVIDER_PACKAGES)
    assert any(p.file_entry is AccountEntry for p in PROVIDER_PACKAGES)


def _refused(tmp_path: Path, entry: dict[str, Any]) -> str:
    path = tmp_path / "accounts.json"
    path.write_bytes(orjson.dumps([entry]))
    with pytest.raises(ConfigError) as caught:
        load_settings({**CARDCO, "PAYCORE_ACCOUNTS_FILE": str(path)})
    return str(caught.value)


@pytest.mark.parametrize(("key", "section"), [("webhook_password_previous_env", "webhook_username"),
                                              ("webhook_password_env", "webhook_username"),
                                              ("report_password_env", "report_username")])
@pytest.mark.parametrize("provider", ["cardco", "stripe"])
def test_any_key_of_anothers_section_is_refused_naming_the_section(tmp_path: Path, provider: str, key: str,
                                                                   section: str) -> None:
    entry = {"provider": provider, "account": "a", "environment": "live", "api_key_env": "US_KEY",
             "base_url": "http://x", key: "PW"}
    assert _refused(tmp_path, entry) == f"PAYCORE_ACCOUNTS_FILE[0].{section}: is for Adyen accounts only"


def test_a_null_key_of_another_provider_is_no_key(tmp_path: Path) -> None:
    path = tmp_path / "accounts.json"
    path.write_bytes(orjson.dumps([{"provider": "stripe", "account": "a", "api_key_env": "US_KEY",
                                    "webhook_username": None, "report_username": None}]))
    settings = load_settings({**CARDCO, "PAYCORE_ACCOUNTS_FILE": str(path)})
    assert [a.provider_account for a in settings.accounts] == ["cardco:acct_store:test", "stripe:a:live"]
