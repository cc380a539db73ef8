"""Sandbox configuration: the merchant accounts it knows and its timing knobs.

Every value is validated up front so a bad config file fails at start-up with
a message naming the field, never later in the middle of a test.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import os
from dataclasses import dataclass, field, fields
from typing import Any, Literal, cast
from urllib.parse import urlsplit

from paycore.settings_spec import Count, FileField, FilePath, Group, Items, Number, Text, overrides
from paycore_sandbox.dialects import parse_endpoint

Environment = Literal["test", "live"]
ENVIRONMENTS: tuple[Environment, ...] = ("test", "live")

# The variables set fields of the config file, and override it; every field is
# then validated as one, naming the field, wherever its value came from. Each is
# declared once, as the SandboxSettings field it sets.
SANDBOX = Group("`paycore serve sandbox`: the provider sandbox (Cardco, Stripe, Adyen dialects)")
CONFIG_FILE = SANDBOX.declare(
    "PAYCORE_SANDBOX_CONFIG", FilePath(), None, "a JSON object of the `SandboxSettings` fields (below)")

# The keys of the PAYCORE_SANDBOX_CONFIG file: the SandboxSettings fields, and each account's.
CONFIG_FILE_FIELDS = (
    FileField("accounts", "`acct_store` (test, live), `acct_other` (test)",
              "the merchant accounts: a non-empty list of objects with the `accounts[].` keys"),
    FileField("accounts[].account", "required", "starts with `acct_`"),
    FileField("accounts[].environment", "required", "`test` or `live`"),
    FileField("accounts[].api_key", "required", "`sk_<environment>_…`, unique"),
    FileField("accounts[].webhook_secret", "fixed per account and environment",
              "`whsec_` + base64 of at least 16 bytes"),
    FileField("accounts[].lookup_rate_per_s", "50", "lookups per second before 429 (> 0)"),
    FileField("accounts[].lookup_burst", "50", "lookups allowed at once (≥ 1)"),
    FileField("key_retention_s", "86400", "idempotency-key retention, sandbox-clock seconds (integer > 0)"),
    FileField("action_expiry_s", "900", "a pending customer action expires after it (integer > 0)"),
    FileField("async_delay_s", "1", "`tok_async` succeeds this long after creation (≥ 0)"),
    FileField("hang_limit_s", "120", "real seconds a \"no response\" fault holds a request open (≥ 0)"),
    FileField("webhook_endpoints", "none",
              "absolute http(s) URLs webhook events are POSTed to: `<url>` for Cardco's, "
              "`stripe=<url>` / `adyen=<url>` for that dialect's"),
    FileField("stripe_search_lag_s", "0",
              "sandbox-clock seconds before a new PaymentIntent is searchable (≥ 0)"),
    FileField("webhook_time_scale", "1", "multiplies every retry delay and `webhook_delay` fault (> 0)"),
    FileField("webhook_timeout_s", "10", "real seconds a delivery may take; no 2xx within it fails (> 0)"),
)


def _fixed_secret(account: str, environment: str) -> str:
    # Deterministic per account and environment, so local runs and tests can
    # verify signatures without sharing configuration; never a real secret.
    raw = hashlib.sha256(f"paycore-sandbox:{account}:{environment}".encode()).digest()[:24]
    return "whsec_" + base64.b64encode(raw).decode("ascii")


@dataclass(frozen=True)
class SandboxAccount:
    """One merchant account in one environment, with its own key and secret."""

    account: str
    environment: Environment
    api_key: str
    webhook_secret: str
    lookup_rate_per_s: float = 50.0
    lookup_burst: int = 50

    @property
    def livemode(self) -> bool:
        return self.environment == "live"

    @property
    def provider_account_id(self) -> str:
        """paycore's internal id for this account, ``cardco:<account>:<env>``."""
        return f"cardco:{self.account}:{self.environment}"

    def validate(self, where: str) -> None:
        if not isinstance(self.account, str) or not self.account.startswith("acct_"):
            raise ValueError(f"{where}.account must be a string starting with 'acct_'")
        if self.environment not in ENVIRONMENTS:
            raise ValueError(f"{where}.environment must be 'test' or 'live'")
        prefix = f"sk_{self.environment}_"
        if not isinstance(self.api_key, str) or not self.api_key.startswith(prefix) \
                or len(self.api_key) <= len(prefix):
            raise ValueError(f"{where}.api_key must start with {prefix!r} for a "
                             f"{self.environment} account")
        _validate_secret(self.webhook_secret, f"{where}.webhook_secret")
        if isinstance(self.lookup_rate_per_s, bool) \
                or not isinstance(self.lookup_rate_per_s, int | float) \
                or not math.isfinite(self.lookup_rate_per_s) or self.lookup_rate_per_s <= 0:
            raise ValueError(f"{where}.lookup_rate_per_s must be a positive number")
        if isinstance(self.lookup_burst, bool) or not isinstance(self.lookup_burst, int) \
                or self.lookup_burst < 1:
            raise ValueError(f"{where}.lookup_burst must be an integer >= 1")


def _validate_secret(secret: object, where: str) -> None:
    if not isinstance(secret, str) or not secret.startswith("whsec_"):
        raise ValueError(f"{where} must be a string starting with 'whsec_'")
    try:
        decoded = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{where} must be 'whsec_' followed by base64") from None
    if len(decoded) < 16:
        raise ValueError(f"{where} must decode to at least 16 bytes")


def _default_accounts() -> list[SandboxAccount]:
    return [
        SandboxAccount("acct_store", "test", "sk_test_acct_store_local",
                       _fixed_secret("acct_store", "test")),
        SandboxAccount("acct_store", "live", "sk_live_acct_store_local",
                       _fixed_secret("acct_store", "live")),
        SandboxAccount("acct_other", "test", "sk_test_acct_other_local",
                       _fixed_secret("acct_other", "test")),
    ]


@dataclass(kw_only=True)
class SandboxSettings:
    """Accounts plus timing. All times are sandbox-clock seconds unless noted."""

    accounts: list[SandboxAccount] = field(default_factory=_default_accounts)
    key_retention_s: int = SANDBOX.field(
        "PAYCORE_SANDBOX_KEY_RETENTION_S", Count(), 86_400,
        "`key_retention_s`: how long the sandbox keeps an idempotency key")
    action_expiry_s: int = 900
    # tok_async turns succeeded this long after creation (sandbox clock).
    async_delay_s: float = 1.0
    # Upper bound (real seconds) a "no response" fault holds a request open.
    hang_limit_s: float = 120.0
    # Where every webhook event is POSTed (absolute http(s) URLs); more can be
    # added at runtime with POST /_sandbox/webhooks/endpoints.
    webhook_endpoints: list[str] = SANDBOX.field(
        "PAYCORE_SANDBOX_WEBHOOK_URLS", Items(Text(), drop_empty=True), (),
        "`webhook_endpoints`: absolute http(s) URLs webhook events are POSTed to; "
        "`stripe=<url>` / `adyen=<url>` receive that dialect's events, a bare URL Cardco's", convert=list)
    # Stripe's search is eventually consistent ("searchable in under 1 minute"):
    # a PaymentIntent appears in search this long (sandbox clock) after creation.
    stripe_search_lag_s: float = SANDBOX.field(
        "PAYCORE_SANDBOX_STRIPE_SEARCH_LAG_S", Number("", checked=False), 0.0,
        "`stripe_search_lag_s` (≥ 0): sandbox-clock seconds before a new PaymentIntent "
        "appears in `GET /v1/payment_intents/search`")
    # Multiplies every webhook retry delay and webhook_delay fault (real time),
    # so tests can run the 3-day retry schedule in well under a second.
    webhook_time_scale: float = SANDBOX.field(
        "PAYCORE_SANDBOX_WEBHOOK_TIME_SCALE", Number("", checked=False), 1.0,
        "`webhook_time_scale` (> 0): multiplies every webhook retry delay and `webhook_delay` fault")
    # Real seconds a delivery attempt may take; no 2xx within it is a failure.
    webhook_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def default(cls) -> SandboxSettings:
        return cls()

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> SandboxSettings:
        """Settings from ``PAYCORE_SANDBOX_CONFIG`` (JSON file) and the ``PAYCORE_SANDBOX_*``
        variables the fields declare; the variables override the file; defaults for whatever
        is unset."""
        env = dict(os.environ) if environ is None else environ
        data: dict[str, Any] = {}
        path = CONFIG_FILE.get(env)
        if path is not None:
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
            except OSError as exc:
                raise ValueError(f"{CONFIG_FILE.name}: cannot read {path}: {exc}") from None
            except json.JSONDecodeError as exc:
                raise ValueError(f"{CONFIG_FILE.name}: {path} is not valid JSON: {exc}") from None
            if not isinstance(loaded, dict):
                raise ValueError(f"{CONFIG_FILE.name}: {path} must contain a JSON object")
            data = loaded
        return cls.from_mapping({**data, **overrides(cls, env)})

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> SandboxSettings:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown sandbox setting(s): {', '.join(unknown)}")
        kwargs: dict[str, Any] = {k: v for k, v in data.items() if k != "accounts"}
        if "accounts" in data:
            kwargs["accounts"] = _accounts_from(data["accounts"])
        return cls(**kwargs)

    def validate(self) -> None:
        if not isinstance(self.accounts, list) or not self.accounts:
            raise ValueError("accounts must be a non-empty list")
        seen_keys: set[str] = set()
        seen_scopes: set[tuple[str, str]] = set()
        for i, acct in enumerate(self.accounts):
            where = f"accounts[{i}]"
            if not isinstance(acct, SandboxAccount):
                raise ValueError(f"{where} must be a SandboxAccount")
            acct.validate(where)
            if acct.api_key in seen_keys:
                raise ValueError(f"{where}.api_key is used by another account")
            if (acct.account, acct.environment) in seen_scopes:
                raise ValueError(f"{where}: {acct.account}/{acct.environment} is listed twice")
            seen_keys.add(acct.api_key)
            seen_scopes.add((acct.account, acct.environment))
        _positive_int(self.key_retention_s, "key_retention_s")
        _positive_int(self.action_expiry_s, "action_expiry_s")
        _non_negative_number(self.async_delay_s, "async_delay_s")
        _non_negative_number(self.hang_limit_s, "hang_limit_s")
        if not isinstance(self.webhook_endpoints, list):
            raise ValueError("webhook_endpoints must be a list of URLs")
        for i, spec in enumerate(self.webhook_endpoints):
            # `stripe=<url>`/`adyen=<url>` names the dialect; the URL after it is checked.
            url = parse_endpoint(spec).url if isinstance(spec, str) else spec
            problem = webhook_url_problem(url)
            if problem:
                raise ValueError(f"webhook_endpoints[{i}] {problem}")
        _positive_number(self.webhook_time_scale, "webhook_time_scale")
        _positive_number(self.webhook_timeout_s, "webhook_timeout_s")
        _non_negative_number(self.stripe_search_lag_s, "stripe_search_lag_s")

    def account_for_key(self, api_key: str) -> SandboxAccount | None:
        for acct in self.accounts:
            if acct.api_key == api_key:
                return acct
        return None

    def account_for(self, account: str, environment: str) -> SandboxAccount | None:
        for acct in self.accounts:
            if (acct.account, acct.environment) == (account, environment):
                return acct
        return None


def webhook_url_problem(url: object) -> str | None:
    """Why ``url`` is not a usable webhook endpoint, or None when it is."""
    if not isinstance(url, str) or not url:
        return "must be a non-empty string"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises on a malformed port
    except ValueError:
        return f"is not a valid URL: {url!r}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"must be an absolute http(s) URL, got {url!r}"
    if any(c.isspace() for c in url):
        return f"must not contain whitespace, got {url!r}"
    return None


def _accounts_from(raw: object) -> list[SandboxAccount]:
    if not isinstance(raw, list) or not raw:
        raise ValueError("accounts must be a non-empty list")
    allowed = {f.name for f in fields(SandboxAccount)}
    out: list[SandboxAccount] = []
    for i, item in enumerate(raw):
        where = f"accounts[{i}]"
        if not isinstance(item, dict):
            raise ValueError(f"{where} must be an object")
        unknown = sorted(set(item) - allowed)
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}")
        for name in ("account", "environment", "api_key"):
            if name not in item:
                raise ValueError(f"{where}.{name} is required")
        entry = dict(item)
        entry.setdefault("webhook_secret",
                         _fixed_secret(str(entry["account"]), str(entry["environment"])))
        acct = SandboxAccount(**cast(dict[str, Any], entry))
        acct.validate(where)
        out.append(acct)
    return out


def _positive_int(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer (seconds), got {value!r}")


def _non_negative_number(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a non-negative number (seconds), got {value!r}")


def _positive_number(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
