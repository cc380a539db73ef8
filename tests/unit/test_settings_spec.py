"""The one reader of PAYCORE_* settings: types, bounds, defaults, and errors that name the variable."""

from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from paycore.config import ConfigError, Settings, load_settings
from paycore.settings_spec import (
    MAX_BUDGET_S,
    Choice,
    Count,
    FilePath,
    Flag,
    Group,
    Items,
    Number,
    Secret,
    SecretText,
    Setting,
    Text,
    Url,
)
from paycore_dispatcher.relay import RelayConfig
from paycore_dispatcher.settings import DispatcherSettings, load_alert_settings, load_dispatcher_settings
from paycore_recovery.settings import load_recovery_settings


def declare(kind: Any, default: Any = None) -> Setting[Any]:
    return Group("a test").declare("PAYCORE_X", kind, default, "a test setting")


def refusal(setting: Setting[Any], raw: str) -> str:
    with pytest.raises(ConfigError) as refused:
        setting.read({setting.name: raw})
    assert refused.value.variable == setting.name
    assert str(refused.value).startswith(f"{setting.name}: ")
    return str(refused.value).removeprefix(f"{setting.name}: ")


def test_unset_or_blank_is_the_default_and_a_value_is_stripped() -> None:
    s = declare(Number(), 5.0)
    assert s.read({}) == s.read({"PAYCORE_X": ""}) == s.read({"PAYCORE_X": "  "}) == 5.0
    assert s.get({"PAYCORE_X": " "}) is None
    assert s.read({"PAYCORE_X": " 2.5 "}) == 2.5
    assert s.read({"PAYCORE_OTHER": "9"}) == 5.0


def test_seconds_are_positive_finite_and_bounded() -> None:
    s = declare(Number(), 5.0)
    assert s.read({"PAYCORE_X": "0.25"}) == 0.25
    assert refusal(s, "soon") == "must be a number of seconds, got 'soon'"
    for raw in ("0", "-1", "nan", "inf", "-inf"):
        assert refusal(s, raw) == f"must be a positive number of seconds, got {raw!r}"
    assert refusal(s, "1e12") == f"must be at most {MAX_BUDGET_S} seconds, got '1e12'"
    assert s.read({"PAYCORE_X": str(MAX_BUDGET_S)}) == MAX_BUDGET_S


def test_zero_only_where_allowed_and_a_declared_maximum() -> None:
    s = declare(Number(allow_zero=True, maximum=300.0), 30.0)
    assert s.read({"PAYCORE_X": "0"}) == 0.0
    assert refusal(s, "301") == "must be at most 300 seconds, got '301'"
    unbounded = declare(Number(maximum=None), 1.0)
    assert unbounded.read({"PAYCORE_X": "1e9"}) == 1e9
    rate = declare(Number("lookups per second"), 20.0)
    assert refusal(rate, "0") == "must be a positive number of lookups per second, got '0'"


def test_an_unchecked_number_leaves_its_rules_to_where_it_lands() -> None:
    s = declare(Number("", checked=False), 1.0)
    assert math.isnan(s.read({"PAYCORE_X": "nan"}))
    assert s.read({"PAYCORE_X": "-2"}) == -2.0
    assert refusal(s, "fast") == "must be a number, got 'fast'"


def test_counts_are_whole_numbers_within_bounds() -> None:
    s = declare(Count(maximum=100), 10)
    assert s.read({"PAYCORE_X": "100"}) == 100
    assert refusal(s, "2.5") == "must be a whole number, got '2.5'"
    assert refusal(s, "0") == "must be between 1 and 100, got '0'"
    assert refusal(s, "101") == "must be between 1 and 100, got '101'"


def test_flags_and_choices() -> None:
    flag = declare(Flag(), None)
    assert flag.get({}) is None
    assert [flag.read({"PAYCORE_X": v}) for v in ("1", "true", "YES", "on", "0", "False", "no", "off")] \
        == [True] * 4 + [False] * 4
    assert refusal(flag, "maybe") == "must be true or false, got 'maybe'"
    choice = declare(Choice(("slack", "pagerduty"), case="lower"), "slack")
    assert choice.read({"PAYCORE_X": "PagerDuty"}) == "pagerduty"
    assert refusal(choice, "email") == "must be 'slack' or 'pagerduty', got 'email'"
    exact = declare(Choice(("test", "live")), "test")
    assert refusal(exact, "LIVE") == "must be 'test' or 'live', got 'LIVE'"


def test_urls_text_secrets_and_paths() -> None:
    url = declare(Url())
    assert url.read({"PAYCORE_X": "https://idp.example/keys//"}) == "https://idp.example/keys"
    assert refusal(url, "idp.example/keys") == "must be an absolute http(s) URL, got 'idp.example/keys'"
    printable = declare(Text(printable=True))
    assert refusal(printable, "https://idp.example/\x00") \
        == "must not contain control or other non-printable characters"
    secret = declare(SecretText(min_length=32))
    assert refusal(secret, "short") == "must be at least 32 characters"
    value = secret.read({"PAYCORE_X": "s" * 32})
    assert isinstance(value, Secret) and value.reveal() == "s" * 32 and "sss" not in repr(value)
    assert declare(FilePath()).read({"PAYCORE_X": " /tmp/x.json "}) == Path("/tmp/x.json")


def test_lists_name_the_entry_that_is_wrong() -> None:
    s = declare(Items(Number(maximum=None)), (60.0,))
    assert s.read({"PAYCORE_X": "1, 2.5,3"}) == (1.0, 2.5, 3.0)
    assert refusal(s, "1,x") == "entry 2 must be a number of seconds, got 'x'"
    assert refusal(s, "1,-2") == "entry 2 must be a positive number of seconds, got '-2'"
    assert refusal(s, "1,,2") == "entry 2 is empty in '1,,2'"
    dropping = declare(Items(Text(), drop_empty=True), ())
    assert dropping.read({"PAYCORE_X": " a , b ,"}) == ("a", "b")


def test_require_says_what_is_missing() -> None:
    s = declare(Text())
    assert s.require({"PAYCORE_X": "acct_store"}) == "acct_store"
    with pytest.raises(ConfigError) as refused:
        s.require({}, ", e.g. acct_store")
    assert str(refused.value) == "PAYCORE_X: is required, e.g. acct_store"


def test_a_group_declares_each_paycore_variable_once() -> None:
    group = Group("a test")
    group.declare("PAYCORE_A", Count(), 1, "a")
    with pytest.raises(ValueError, match="declared twice"):
        group.declare("PAYCORE_A", Count(), 2, "again")
    with pytest.raises(ValueError, match="PAYCORE_"):
        group.declare("OTHER_A", Count(), 1, "not ours")


# -- the declarations in use: same variables, same bounds as before --------------------------------


@pytest.mark.parametrize(("variable", "raw"), [
    ("PAYCORE_KAFKA_EFFECTS_PARTITIONS", "10001"), ("PAYCORE_KAFKA_EFFECTS_TOPIC", "payments effects"),
    ("PAYCORE_PROCESSING_ALLOWANCE_S", "-1"),
    ("PAYCORE_RECHECK_AFTER_S", "0"), ("PAYCORE_KAFKA_IDEMPOTENT", "2"),
    ("PAYCORE_JWKS_URL", "keys.example"),
])
def test_library_settings_refuse_a_bad_value_naming_the_variable(variable: str, raw: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings({variable: raw}, require_account=False)
    assert refused.value.variable == variable


@pytest.mark.parametrize("url", ["http://idp.example/.well-known/jwks.json", "http://10.0.0.5/jwks",
                                 "http://localhost.evil.example/jwks", "http://[2001:db8::1]/jwks"])
def test_a_jwks_over_plain_http_off_loopback_is_refused_at_start_up(url: str) -> None:
    # Whoever can intercept a plain-http fetch of the key set could serve their own key and
    # mint operator and customer tokens.
    env = {"PAYCORE_JWKS_URL": url, "PAYCORE_JWT_AUDIENCE": "checkout", "PAYCORE_JWT_ISSUER": "https://idp/"}
    with pytest.raises(ConfigError) as refused:
        load_settings(env, require_account=False)
    assert refused.value.variable == "PAYCORE_JWKS_URL" and "must be https" in str(refused.value)


@pytest.mark.parametrize("url", ["https://idp.example/jwks", "http://127.0.0.1:8080/jwks",
                                 "http://localhost:9000/jwks", "http://[::1]:9000/jwks", "http://127.8.9.1/j"])
def test_a_jwks_over_https_or_on_loopback_is_accepted(url: str) -> None:
    env = {"PAYCORE_JWKS_URL": url, "PAYCORE_JWT_AUDIENCE": "checkout", "PAYCORE_JWT_ISSUER": "https://idp/"}
    assert load_settings(env, require_account=False).jwks_url == url


@pytest.mark.parametrize(("variable", "raw"), [
    ("PAYCORE_OUTBOX_BATCH_SIZE", "0"), ("PAYCORE_OUTBOX_BATCH_SIZE", "100001"),
    ("PAYCORE_OUTBOX_RETENTION_S", "forever"), ("PAYCORE_OUTBOX_BACKOFF_MAX_S", "0.5"),
    ("PAYCORE_ALERT_FORMAT", "email"),
])
def test_dispatcher_settings_refuse_a_bad_value_naming_the_variable(variable: str, raw: str) -> None:
    app = load_settings({}, require_account=False)
    with pytest.raises(ConfigError) as refused:
        load_dispatcher_settings(app, {variable: raw})
        load_alert_settings({variable: raw})
    assert refused.value.variable == variable


def test_library_settings_are_read_into_the_same_attributes() -> None:
    settings = load_settings({
        "PAYCORE_PROCESSING_ALLOWANCE_S": "12", "PAYCORE_RECHECK_AFTER_S": "7",
        "PAYCORE_JWT_AUDIENCE": "a, b", "PAYCORE_KAFKA_IDEMPOTENT": "off",
        "PAYCORE_KAFKA_PAGES_TOPIC": "ops.pages.eu",
    }, require_account=False)
    assert (settings.processing_allowance_s, settings.recheck_after_s) == (12.0, 7.0)
    assert settings.jwt_claims.audiences == ("a", "b")
    assert settings.kafka_idempotent is False
    assert settings.kafka_pages_topic == "ops.pages.eu"


def test_dispatcher_settings_are_read_into_their_own_attributes() -> None:
    app = load_settings({}, require_account=False)
    env = {"PAYCORE_OUTBOX_BATCH_SIZE": "50", "PAYCORE_ALERT_FORMAT": "PAGERDUTY",
           "PAYCORE_ALERT_WEBHOOK_URL": "https://events.example/v2/", "PAYCORE_PAGERDUTY_ROUTING_KEY": "rk"}
    assert load_dispatcher_settings(app, env).batch_size == 50
    alerts = load_alert_settings(env)
    assert (alerts.format, alerts.webhook_url) == ("pagerduty", "https://events.example/v2")
    assert alerts.pagerduty_routing_key is not None and alerts.pagerduty_routing_key.reveal() == "rk"
    with pytest.raises(ConfigError) as refused:
        load_alert_settings({**env, "PAYCORE_PAGERDUTY_ROUTING_KEY": ""})
    assert refused.value.variable == "PAYCORE_PAGERDUTY_ROUTING_KEY"
    assert load_dispatcher_settings(app, {}) == DispatcherSettings()  # the declared defaults
    # The relay's own defaults are the declarations', not a copy of them.
    relay = RelayConfig(effects_topic="e", alerts_topic="a", reminder_interval=timedelta(seconds=1))
    assert (relay.batch_size, relay.max_delivery_attempts, relay.send_timeout_s, relay.backoff_base_s,
            relay.backoff_max_s) == (500, 10, 10.0, 1.0, 300.0)
    assert load_settings({}, require_account=False) == Settings(
        database_url=None, kafka_bootstrap=None, jwt_secret=None, jwks_url=None, accounts=())


def test_the_default_account_reads_its_version_rate_and_margin() -> None:
    env = {"PAYCORE_CARDCO_BASE_URL": "http://127.0.0.1:1/", "PAYCORE_CARDCO_ACCOUNT": "acct_store",
           "PAYCORE_CARDCO_API_KEY": "sk_test_x", "PAYCORE_CARDCO_KEY_RETENTION_S": "3600"}
    [acct] = load_settings(env).accounts
    assert (acct.base_url, acct.api_version, acct.lookup_rate_per_s) \
        == ("http://127.0.0.1:1", "2026-11-01", 20.0)
    assert (acct.key_retention_s, acct.escalation_margin_s) == (3600, 900)  # min(7200, retention / 4)
    [acct] = load_settings({**env, "PAYCORE_CARDCO_API_VERSION": "2027-01-01",
                            "PAYCORE_CARDCO_LOOKUP_RATE_PER_S": "2.5"}).accounts
    assert (acct.api_version, acct.lookup_rate_per_s) == ("2027-01-01", 2.5)
    with pytest.raises(ConfigError) as refused:
        load_settings({**env, "PAYCORE_CARDCO_ACCOUNT": ""})
    assert str(refused.value) == "PAYCORE_CARDCO_ACCOUNT: is required, e.g. acct_store"
    with pytest.raises(ConfigError) as refused:
        load_settings({**env, "PAYCORE_CARDCO_LOOKUP_RATE_PER_S": "0"})
    assert refused.value.variable == "PAYCORE_CARDCO_LOOKUP_RATE_PER_S"


def test_an_accounts_file_entry_reads_every_documented_field(tmp_path: Path) -> None:
    path = tmp_path / "accounts.json"
    path.write_bytes(orjson.dumps([{
        "account": "acct_eu", "environment": "live", "base_url": "https://eu.cardco.example/",
        "api_key_env": "EU_KEY", "webhook_secret_env": "EU_WHSEC", "api_version": "2027-01-01",
        "key_retention_s": 7200, "escalation_margin_s": 600, "lookup_rate_per_s": 5,
    }]))
    env = {"PAYCORE_ACCOUNTS_FILE": str(path), "EU_KEY": "sk_live_eu", "EU_WHSEC": "whsec_eu"}
    [acct] = load_settings(env, require_account=False).accounts
    assert (acct.provider_account, acct.base_url, acct.api_key.reveal(), acct.webhook_secret) == (
        "cardco:acct_eu:live", "https://eu.cardco.example", "sk_live_eu", Secret("whsec_eu"))
    assert (acct.api_version, acct.key_retention_s, acct.escalation_margin_s, acct.lookup_rate_per_s) \
        == ("2027-01-01", 7200, 600, 5.0)
    path.write_bytes(orjson.dumps([{"account": "acct_eu", "environment": "live", "base_url": "eu",
                                    "api_key_env": "EU_KEY"}]))
    with pytest.raises(ConfigError) as refused:
        load_settings(env, require_account=False)
    assert refused.value.variable == "PAYCORE_ACCOUNTS_FILE[0].base_url"


@pytest.mark.parametrize(("variable", "raw"), [
    ("PAYCORE_RECOVERY_BACKOFF_S", "60,soon"), ("PAYCORE_RECOVERY_BACKOFF_S", "60,0"),
    ("PAYCORE_RECOVERY_BATCH", "0"), ("PAYCORE_RECOVERY_CONCURRENCY", "two"),
    ("PAYCORE_RECOVERY_INTERVAL_S", "nan"), ("PAYCORE_PAYMENT_TOKEN_TTL_S", "-1"),
    ("PAYCORE_RECOVERY_LEASE_S", "20"),  # not longer than one worst-case pass (2 × 15 + 5 s)
])
def test_recovery_settings_refuse_a_bad_value_naming_the_variable(variable: str, raw: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_recovery_settings(load_settings({}, require_account=False), {variable: raw})
    assert refused.value.variable == variable


def test_recovery_settings_keep_their_defaults_and_have_no_upper_bound() -> None:
    app = load_settings({}, require_account=False)
    defaults = load_recovery_settings(app, {})
    assert (defaults.backoff_s, defaults.batch, defaults.concurrency, defaults.lease_s) \
        == ((60.0, 120.0, 300.0, 900.0), 200, 8, 90.0)
    ninety_days = str(90 * 86_400)  # above the library's budget bound: a policy, not a budget
    read = load_recovery_settings(app, {"PAYCORE_PAYMENT_TOKEN_TTL_S": ninety_days,
                                        "PAYCORE_RECOVERY_BACKOFF_S": "1, 2,3"})
    assert (read.payment_token_ttl_s, read.backoff_s) == (90 * 86_400.0, (1.0, 2.0, 3.0))


def test_the_outbox_retention_can_be_set_to_its_own_default_and_beyond() -> None:
    # A horizon in days is a SQL interval, not an asyncio budget: the budget bound
    # (int32 milliseconds, ~24.8 days) refused the documented default of 30 days.
    thirty_days = {"PAYCORE_OUTBOX_RETENTION_S": str(30 * 86_400)}
    assert load_dispatcher_settings(load_settings(thirty_days, require_account=False),
                                    thirty_days).outbox_retention_s == 30 * 86_400.0
    # A longer horizon needs the topics (and so the inboxes) to keep their records as long.
    longer = {"PAYCORE_OUTBOX_RETENTION_S": str(90 * 86_400),
              "PAYCORE_KAFKA_RETENTION_S": str(90 * 86_400),
              "PAYCORE_CONSUMER_INBOX_RETENTION_S": str(95 * 86_400)}
    assert load_dispatcher_settings(load_settings(longer, require_account=False),
                                    longer).outbox_retention_s == 90 * 86_400.0


# -- a settings class's fields are its declarations (docs/decisions/0010-settings-declared-once.md) --


def test_a_field_is_declared_once_and_load_reads_it_through_its_kind() -> None:
    import dataclasses

    from paycore.settings_spec import load, nested, overrides, setting_of

    group = Group("a test")

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Inner:
        count: int = group.field("PAYCORE_T_COUNT", Count(maximum=9), 3, "a count")

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Outer:
        given: str
        whole_s: int = group.field("PAYCORE_T_WHOLE_S", Number(), 90.0, "seconds, held whole", convert=int)
        mode: str | None = group.field("PAYCORE_T_MODE", Choice(("a", "b")), "a", "a mode", unset=None)
        names: list[str] = group.field(  # noqa: RUF009
            "PAYCORE_T_NAMES", Items(Text()), (), "names", convert=list)
        inner: Inner = nested(Inner)  # noqa: RUF009

    assert [s.name for s in group.settings] == ["PAYCORE_T_COUNT", "PAYCORE_T_WHOLE_S", "PAYCORE_T_MODE",
                                                "PAYCORE_T_NAMES"]
    assert setting_of(Outer, "whole_s").default == 90.0  # the docs' default; the field's is int
    assert load(Outer, {}, given="x") == Outer(given="x") \
        == Outer(given="x", whole_s=90, mode=None, names=[], inner=Inner(count=3))
    env = {"PAYCORE_T_WHOLE_S": " 2.5 ", "PAYCORE_T_MODE": "b", "PAYCORE_T_NAMES": "p, q",
           "PAYCORE_T_COUNT": "9"}
    assert load(Outer, env, given="x") == Outer(given="x", whole_s=2, mode="b", names=["p", "q"],
                                                inner=Inner(count=9))
    assert load(Outer, env, given="x", whole_s=7).whole_s == 7  # given wins
    assert overrides(Outer, {"PAYCORE_T_NAMES": "r", "PAYCORE_T_MODE": " "}) == {"names": ["r"]}
    assert load(Outer, {}, given="x").names is not load(Outer, {}, given="x").names
    with pytest.raises(ConfigError) as refused:
        load(Outer, {"PAYCORE_T_COUNT": "10"}, given="x")
    assert str(refused.value) == "PAYCORE_T_COUNT: must be between 1 and 9, got '10'"
    with pytest.raises(AttributeError):
        setting_of(Outer, "given")
    with pytest.raises(ValueError, match="declared twice"):
        group.field("PAYCORE_T_COUNT", Count(), 1, "again")
