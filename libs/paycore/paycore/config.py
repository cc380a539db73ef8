"""``PAYCORE_*`` settings, read from the environment and validated at start-up.

A bad value stops the process with a :class:`ConfigError` that names the
variable. Secrets (API keys, webhook and JWT secrets) are held in
:class:`Secret` so that neither ``repr`` nor a log line can print them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from paycore.domain import provider_account_id

CARDCO_API_VERSION = "2026-11-01"

# asyncio accepts any finite float, but a budget beyond int32 milliseconds is a
# misconfiguration; the same conservative bound the reference validates.
MAX_BUDGET_S = 2_147_483.647


class ConfigError(ValueError):
    """A setting is missing or invalid; ``variable`` names it."""

    def __init__(self, variable: str, message: str) -> None:
        super().__init__(f"{variable}: {message}")
        self.variable = variable


class Secret:
    """A string that never appears in ``repr``, ``str`` or logs."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True)
class Budgets:
    """Time budgets, in seconds on the application clock."""

    start_s: float = 5.0  # NotStarted -> Started transaction
    call_s: float = 15.0  # one provider call
    record_s: float = 5.0  # recording its outcome
    max_call_duration_s: float = 30.0  # the payment client's own ceiling


# Clock skew tolerated on a token's exp/nbf/iat: a few seconds of drift between
# hosts is normal; minutes would let expired tokens in.
JWT_DEFAULT_LEEWAY_S = 30.0
JWT_MAX_LEEWAY_S = 300.0


@dataclass(frozen=True)
class JwtClaimRules:
    """What a customer token must say besides carrying a valid signature."""

    audiences: tuple[str, ...] = ()  # ``aud`` must name one of them; () = none configured
    issuer: str | None = None  # ``iss`` must equal it exactly (Auth0's trailing slash included)
    # Explicit opt-out: ``aud`` is not checked at all (never the default).
    allow_any_audience: bool = False
    leeway_s: float = JWT_DEFAULT_LEEWAY_S


@dataclass(frozen=True)
class ProviderAccountConfig:
    """One configured Cardco account: where it lives and how to authenticate."""

    provider: str
    account: str
    environment: str
    base_url: str
    api_key: Secret
    webhook_secret: Secret | None
    api_version: str = CARDCO_API_VERSION
    key_retention_s: int = 86_400
    escalation_margin_s: int = 7_200
    lookup_rate_per_s: float = 20.0

    @property
    def provider_account(self) -> str:
        return provider_account_id(self.provider, self.account, self.environment)

    @property
    def payments_endpoint(self) -> str:
        return self.base_url.rstrip("/") + "/v1/payments"


@dataclass(frozen=True)
class Settings:
    database_url: str | None
    kafka_bootstrap: str | None
    jwt_secret: Secret | None
    jwks_url: str | None
    accounts: tuple[ProviderAccountConfig, ...]
    # Least time between two refetches of the JWKS for an unknown ``kid``: a
    # rotation is picked up after it, and forged kids cannot hammer the IdP.
    jwks_refetch_cooldown_s: float = 30.0
    jwt_claims: JwtClaimRules = field(default_factory=JwtClaimRules)
    budgets: Budgets = field(default_factory=Budgets)
    # Longest expected gap between inserting an attempt and moving it to Started.
    abandonment_threshold_s: float = 60.0
    # The provider's normal processing time after a call, before recovery looks.
    processing_allowance_s: float = 30.0
    inbound_idempotency_ttl_s: int = 86_400
    # After checkout or the webhook intake records an outcome that leaves an attempt
    # unresolved (Unknown, processing, a customer action), recovery looks again after
    # this long; recovery's own passes then follow its backoff.
    recheck_after_s: float = 60.0
    # Escalation reminders, for every episode whichever service raised it: the first
    # reminder is due this long after raising, and again after each reminder.
    reminder_interval_s: float = 900.0
    # After acknowledgement: the interval for an acknowledged but still open episode.
    reminder_ack_interval_s: float = 3600.0
    # Kafka and the outbox dispatcher (issue 5). None = decide from the broker:
    # on for real Kafka, off when paycore started the local broker itself.
    kafka_idempotent: bool | None = None
    kafka_effects_topic: str = "payments.effects"
    kafka_alerts_topic: str = "ops.alerts"
    kafka_effects_partitions: int = 12
    kafka_alerts_partitions: int = 3
    kafka_max_request_size: int = 1_048_576  # Kafka's default message.max.bytes
    outbox_batch_size: int = 500
    outbox_max_delivery_attempts: int = 10
    outbox_send_timeout_s: float = 10.0
    outbox_backoff_base_s: float = 1.0
    outbox_backoff_max_s: float = 300.0
    outbox_retention_s: float = 30 * 86_400.0  # the replay horizon for dispatched rows
    alert_webhook_url: str | None = None
    alert_format: str = "slack"  # or "pagerduty"
    pagerduty_routing_key: Secret | None = None

    @property
    def reminder_interval(self) -> timedelta:
        return timedelta(seconds=self.reminder_interval_s)

    @property
    def reminder_ack_interval(self) -> timedelta:
        return timedelta(seconds=self.reminder_ack_interval_s)

    @property
    def default_account(self) -> ProviderAccountConfig:
        return self.accounts[0]

    def account(self, provider_account: str) -> ProviderAccountConfig | None:
        for acct in self.accounts:
            if acct.provider_account == provider_account:
                return acct
        return None


def _get(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def _seconds(env: Mapping[str, str], name: str, default: float, *, allow_zero: bool = False) -> float:
    raw = _get(env, name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(name, f"must be a number of seconds, got {raw!r}") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(name, f"must be a positive number of seconds, got {raw!r}")
    if value > MAX_BUDGET_S:
        raise ConfigError(name, f"must be at most {MAX_BUDGET_S} seconds, got {raw!r}")
    return value


def _url(env: Mapping[str, str], name: str, raw: str) -> str:
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(name, f"must be an absolute http(s) URL, got {raw!r}")
    return raw.rstrip("/")


def validate_budgets(budgets: Budgets) -> Budgets:
    """Reject budgets that are zero, negative, non-finite or out of range."""
    for name, value in (
        ("PAYCORE_START_BUDGET_S", budgets.start_s),
        ("PAYCORE_CALL_BUDGET_S", budgets.call_s),
        ("PAYCORE_RECORD_BUDGET_S", budgets.record_s),
        ("PAYCORE_MAX_CALL_DURATION_S", budgets.max_call_duration_s),
    ):
        if not math.isfinite(value) or value <= 0 or value > MAX_BUDGET_S:
            raise ConfigError(name, f"must be positive and at most {MAX_BUDGET_S} s, got {value!r}")
    return budgets


def _jwt_text(env: Mapping[str, str], name: str) -> str | None:
    raw = _get(env, name)
    # These are compared with token claims verbatim; invisible characters would never match.
    if raw is not None and any(not c.isprintable() for c in raw):
        raise ConfigError(name, "must not contain control or other non-printable characters")
    return raw


def _jwt_claims(env: Mapping[str, str], *, jwks: bool) -> JwtClaimRules:
    """The audience, issuer and leeway customer tokens are checked against.

    With a JWKS the audience and issuer are required: the key set proves only
    that the identity provider signed a token, not that it was meant for this
    service (``aud``) or this tenant (``iss``; Entra's common key set signs for
    every tenant). ``PAYCORE_JWT_ALLOW_ANY_AUDIENCE=true`` waives the audience.
    """
    raw_audience = _jwt_text(env, "PAYCORE_JWT_AUDIENCE")
    audiences = tuple(a.strip() for a in raw_audience.split(",")) if raw_audience else ()
    if any(not a for a in audiences):
        raise ConfigError("PAYCORE_JWT_AUDIENCE", "must be one audience or a comma-separated list "
                          f"without empty entries, got {raw_audience!r}")
    issuer = _jwt_text(env, "PAYCORE_JWT_ISSUER")
    allow_any = _bool(env, "PAYCORE_JWT_ALLOW_ANY_AUDIENCE") or False
    if allow_any and audiences:
        raise ConfigError("PAYCORE_JWT_ALLOW_ANY_AUDIENCE",
                          "contradicts PAYCORE_JWT_AUDIENCE; set only one of them")
    if jwks and not audiences and not allow_any:
        raise ConfigError("PAYCORE_JWT_AUDIENCE",
                          "is required with PAYCORE_JWKS_URL: this API's identifier at the identity "
                          "provider (or PAYCORE_JWT_ALLOW_ANY_AUDIENCE=true to accept any audience)")
    if jwks and issuer is None:
        raise ConfigError("PAYCORE_JWT_ISSUER",
                          "is required with PAYCORE_JWKS_URL: the exact 'iss' of the identity provider's "
                          "tokens, e.g. https://<tenant>.auth0.com/ or https://<host>/realms/<realm>")
    leeway = _seconds(env, "PAYCORE_JWT_LEEWAY_S", JWT_DEFAULT_LEEWAY_S, allow_zero=True)
    if leeway > JWT_MAX_LEEWAY_S:
        raise ConfigError("PAYCORE_JWT_LEEWAY_S", f"must be at most {JWT_MAX_LEEWAY_S:g} seconds, "
                          f"got {leeway:g}")
    return JwtClaimRules(audiences=audiences, issuer=issuer, allow_any_audience=allow_any,
                         leeway_s=leeway)


def load_settings(env: Mapping[str, str] | None = None, *, require_cardco: bool = True) -> Settings:
    """Read and validate every ``PAYCORE_*`` variable.

    ``require_cardco=False`` lets tools that never call the provider (``paycore
    migrate``) start without Cardco credentials.
    """
    env = os.environ if env is None else env

    budgets = validate_budgets(
        Budgets(
            start_s=_seconds(env, "PAYCORE_START_BUDGET_S", 5.0),
            call_s=_seconds(env, "PAYCORE_CALL_BUDGET_S", 15.0),
            record_s=_seconds(env, "PAYCORE_RECORD_BUDGET_S", 5.0),
            max_call_duration_s=_seconds(env, "PAYCORE_MAX_CALL_DURATION_S", 30.0),
        )
    )

    jwt_secret = _get(env, "PAYCORE_JWT_SECRET")
    jwks_url = _get(env, "PAYCORE_JWKS_URL")
    if jwt_secret is not None and len(jwt_secret) < 32:
        raise ConfigError("PAYCORE_JWT_SECRET", "must be at least 32 characters for HS256")
    if jwks_url is not None:
        jwks_url = _url(env, "PAYCORE_JWKS_URL", jwks_url)

    accounts: list[ProviderAccountConfig] = []
    base_url = _get(env, "PAYCORE_CARDCO_BASE_URL")
    if base_url is not None or require_cardco:
        if base_url is None:
            raise ConfigError("PAYCORE_CARDCO_BASE_URL", "is required (the Cardco API base URL)")
        account = _get(env, "PAYCORE_CARDCO_ACCOUNT")
        if account is None:
            raise ConfigError("PAYCORE_CARDCO_ACCOUNT", "is required, e.g. acct_store")
        environment = _get(env, "PAYCORE_CARDCO_ENVIRONMENT") or "test"
        if environment not in ("test", "live"):
            raise ConfigError("PAYCORE_CARDCO_ENVIRONMENT", f"must be 'test' or 'live', got {environment!r}")
        api_key = _get(env, "PAYCORE_CARDCO_API_KEY")
        if api_key is None:
            raise ConfigError("PAYCORE_CARDCO_API_KEY", "is required")
        if not api_key.startswith(f"sk_{environment}_"):
            raise ConfigError("PAYCORE_CARDCO_API_KEY",
                              f"must be a {environment}-mode key (sk_{environment}_...)")
        webhook_secret = _get(env, "PAYCORE_CARDCO_WEBHOOK_SECRET")
        retention = _seconds(env, "PAYCORE_CARDCO_KEY_RETENTION_S", 86_400)
        margin = _seconds(env, "PAYCORE_CARDCO_ESCALATION_MARGIN_S", min(7_200.0, retention / 4),
                          allow_zero=True)
        if margin >= retention:
            raise ConfigError("PAYCORE_CARDCO_ESCALATION_MARGIN_S",
                              "must be smaller than PAYCORE_CARDCO_KEY_RETENTION_S")
        accounts.append(
            ProviderAccountConfig(
                provider="cardco",
                account=account,
                environment=environment,
                base_url=_url(env, "PAYCORE_CARDCO_BASE_URL", base_url),
                api_key=Secret(api_key),
                webhook_secret=Secret(webhook_secret) if webhook_secret else None,
                api_version=_get(env, "PAYCORE_CARDCO_API_VERSION") or CARDCO_API_VERSION,
                key_retention_s=int(retention),
                escalation_margin_s=int(margin),
                lookup_rate_per_s=_seconds(env, "PAYCORE_CARDCO_LOOKUP_RATE_PER_S", 20.0),
            )
        )

    accounts.extend(_accounts_file(env))
    ids = [a.provider_account for a in accounts]
    if len(set(ids)) != len(ids):
        raise ConfigError("PAYCORE_ACCOUNTS_FILE", "configures a provider account twice")

    return Settings(
        database_url=_get(env, "PAYCORE_DATABASE_URL"),
        kafka_bootstrap=_get(env, "PAYCORE_KAFKA_BOOTSTRAP"),
        jwt_secret=Secret(jwt_secret) if jwt_secret else None,
        jwks_url=jwks_url,
        jwks_refetch_cooldown_s=_seconds(env, "PAYCORE_JWKS_REFETCH_COOLDOWN_S", 30.0, allow_zero=True),
        jwt_claims=_jwt_claims(env, jwks=jwks_url is not None),
        accounts=tuple(accounts),
        budgets=budgets,
        abandonment_threshold_s=_seconds(env, "PAYCORE_ABANDONMENT_THRESHOLD_S", 60.0),
        processing_allowance_s=_seconds(env, "PAYCORE_PROCESSING_ALLOWANCE_S", 30.0),
        inbound_idempotency_ttl_s=int(_seconds(env, "PAYCORE_IDEMPOTENCY_TTL_S", 86_400)),
        recheck_after_s=_seconds(env, "PAYCORE_RECHECK_AFTER_S", 60.0),
        reminder_interval_s=_seconds(env, "PAYCORE_REMINDER_INTERVAL_S", 900.0),
        reminder_ack_interval_s=_seconds(env, "PAYCORE_REMINDER_ACK_INTERVAL_S", 3600.0),
        **_dispatcher_settings(env),
    )


def _bool(env: Mapping[str, str], name: str) -> bool | None:
    raw = _get(env, name)
    if raw is None:
        return None
    value = raw.lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(name, f"must be true or false, got {raw!r}")


def _count(env: Mapping[str, str], name: str, default: int, *, maximum: int = 1_000_000_000) -> int:
    raw = _get(env, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(name, f"must be a whole number, got {raw!r}") from None
    if not 1 <= value <= maximum:
        raise ConfigError(name, f"must be between 1 and {maximum}, got {raw!r}")
    return value


def _topic(env: Mapping[str, str], name: str, default: str) -> str:
    raw = _get(env, name) or default
    if len(raw) > 249 or not all(c.isascii() and (c.isalnum() or c in "._-") for c in raw):
        raise ConfigError(name, f"must be a Kafka topic name (letters, digits, '.', '_', '-'), got {raw!r}")
    return raw


def _dispatcher_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """The optional Kafka, outbox relay and alert-delivery settings."""
    alert_url = _get(env, "PAYCORE_ALERT_WEBHOOK_URL")
    alert_format = (_get(env, "PAYCORE_ALERT_FORMAT") or "slack").lower()
    if alert_format not in ("slack", "pagerduty"):
        raise ConfigError("PAYCORE_ALERT_FORMAT", f"must be 'slack' or 'pagerduty', got {alert_format!r}")
    routing_key = _get(env, "PAYCORE_PAGERDUTY_ROUTING_KEY")
    if alert_format == "pagerduty" and alert_url is not None and routing_key is None:
        raise ConfigError("PAYCORE_PAGERDUTY_ROUTING_KEY", "is required when PAYCORE_ALERT_FORMAT=pagerduty")
    base = _seconds(env, "PAYCORE_OUTBOX_BACKOFF_BASE_S", 1.0)
    ceiling = _seconds(env, "PAYCORE_OUTBOX_BACKOFF_MAX_S", 300.0)
    if ceiling < base:
        raise ConfigError("PAYCORE_OUTBOX_BACKOFF_MAX_S", "must not be below PAYCORE_OUTBOX_BACKOFF_BASE_S")
    return {
        "kafka_idempotent": _bool(env, "PAYCORE_KAFKA_IDEMPOTENT"),
        "kafka_effects_topic": _topic(env, "PAYCORE_KAFKA_EFFECTS_TOPIC", "payments.effects"),
        "kafka_alerts_topic": _topic(env, "PAYCORE_KAFKA_ALERTS_TOPIC", "ops.alerts"),
        "kafka_effects_partitions": _count(env, "PAYCORE_KAFKA_EFFECTS_PARTITIONS", 12, maximum=10_000),
        "kafka_alerts_partitions": _count(env, "PAYCORE_KAFKA_ALERTS_PARTITIONS", 3, maximum=10_000),
        "kafka_max_request_size": _count(env, "PAYCORE_KAFKA_MAX_REQUEST_SIZE", 1_048_576),
        "outbox_batch_size": _count(env, "PAYCORE_OUTBOX_BATCH_SIZE", 500, maximum=100_000),
        "outbox_max_delivery_attempts": _count(env, "PAYCORE_OUTBOX_MAX_DELIVERY_ATTEMPTS", 10,
                                               maximum=1_000),
        "outbox_send_timeout_s": _seconds(env, "PAYCORE_OUTBOX_SEND_TIMEOUT_S", 10.0),
        "outbox_backoff_base_s": base,
        "outbox_backoff_max_s": ceiling,
        "outbox_retention_s": _seconds(env, "PAYCORE_OUTBOX_RETENTION_S", 30 * 86_400.0),
        "alert_webhook_url": _url(env, "PAYCORE_ALERT_WEBHOOK_URL", alert_url) if alert_url else None,
        "alert_format": alert_format,
        "pagerduty_routing_key": Secret(routing_key) if routing_key else None,
    }


def _accounts_file(env: Mapping[str, str]) -> list[ProviderAccountConfig]:
    """More Cardco accounts from ``PAYCORE_ACCOUNTS_FILE`` (JSON list).

    Each entry names its secrets by environment variable (``api_key_env``,
    ``webhook_secret_env``); the file itself never holds a secret.
    """
    name = "PAYCORE_ACCOUNTS_FILE"
    path = _get(env, name)
    if path is None:
        return []
    try:
        entries = orjson.loads(Path(path).read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ConfigError(name, f"cannot read a JSON list from {path!r}: {type(exc).__name__}") from None
    if not isinstance(entries, list):
        raise ConfigError(name, "must hold a JSON list of accounts")
    return [_account_entry(env, name, i, e) for i, e in enumerate(entries)]


def _account_entry(env: Mapping[str, str], name: str, i: int, e: Any) -> ProviderAccountConfig:
    where = f"{name}[{i}]"
    if not isinstance(e, dict):
        raise ConfigError(where, "must be an object")
    account, environment = e.get("account"), e.get("environment")
    if not isinstance(account, str) or not account:
        raise ConfigError(f"{where}.account", "is required")
    if environment not in ("test", "live"):
        raise ConfigError(f"{where}.environment", "must be 'test' or 'live'")
    api_key = _get(env, str(e.get("api_key_env", "")))
    if api_key is None or not api_key.startswith(f"sk_{environment}_"):
        raise ConfigError(f"{where}.api_key_env", f"must name a variable holding a sk_{environment}_ key")
    secret_env = e.get("webhook_secret_env")
    webhook_secret = _get(env, str(secret_env)) if secret_env else None
    retention = e.get("key_retention_s", 86_400)
    margin = e.get("escalation_margin_s", min(7_200, retention // 4 if isinstance(retention, int) else 0))
    rate = e.get("lookup_rate_per_s", 20.0)
    if type(retention) is not int or retention <= 0:
        raise ConfigError(f"{where}.key_retention_s", "must be a positive integer")
    if type(margin) is not int or not 0 <= margin < retention:
        raise ConfigError(f"{where}.escalation_margin_s", "must be an integer below key_retention_s")
    if not isinstance(rate, int | float) or rate <= 0:
        raise ConfigError(f"{where}.lookup_rate_per_s", "must be positive")
    return ProviderAccountConfig(
        provider="cardco", account=account, environment=environment,
        base_url=_url(env, f"{where}.base_url", str(e.get("base_url", ""))),
        api_key=Secret(api_key), webhook_secret=Secret(webhook_secret) if webhook_secret else None,
        api_version=str(e.get("api_version", CARDCO_API_VERSION)), key_retention_s=retention,
        escalation_margin_s=margin, lookup_rate_per_s=float(rate),
    )
