"""``PAYCORE_*`` settings every service shares, declared here and validated at start-up.

Each setting is declared once, as the field of :class:`Settings` (or of a part of it) that
holds it (:mod:`paycore.settings_spec`), grouped by the component it governs;
:func:`load_settings` reads them all, then checks the rules that tie two of them together. A bad
value stops the process with a :class:`ConfigError` that names the variable.
Secrets (API keys, webhook and JWT secrets) are held in :class:`Secret` so that
neither ``repr`` nor a log line can print them. Recovery's, the dispatcher's and the
sandbox's own settings are declared in those services, beside the code they govern; the
Kafka topics are here because the library's consumer helper and every Kafka worker read them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

from paycore.account_settings import ESCALATION_MARGIN_CAP_S as ESCALATION_MARGIN_CAP_S  # re-exported
from paycore.account_settings import ProviderAccountConfig as ProviderAccountConfig  # re-exported
from paycore.account_settings import load_accounts
from paycore.settings_spec import MAX_BUDGET_S as MAX_BUDGET_S  # re-exported: the library's bound
from paycore.settings_spec import (
    Choice,
    Count,
    FilePath,
    Flag,
    Group,
    Invalid,
    Items,
    Number,
    SecretText,
    Setting,
    Text,
    Url,
    load,
    nested,
    setting_of,
)
from paycore.settings_spec import ConfigError as ConfigError  # re-exported: every service raises it
from paycore.settings_spec import Secret as Secret  # re-exported

SECONDS = Number("seconds")
SECONDS_OR_ZERO = Number("seconds", allow_zero=True)

# The groups in the order the README's tables list them; each setting is declared once, as the
# field of the class that holds it (docs/decisions/0010-settings-declared-once.md).
CONNECTIONS = Group("every service: where the database and the broker are")
# Managed Kafka (Confluent Cloud, MSK, Aiven, Redpanda Cloud, Event Hubs) takes TLS and SASL: every
# client paycore makes (paycore.kafka, and the incidents agent's faust app) reads these.
KAFKA_SECURITY = Group("every Kafka client (dispatcher, consumers, alerts, incidents): TLS and SASL")
TOKENS = Group("checkout: customer tokens (JWT)")
PAYMENTS = Group("checkout, webhooks, recovery: each payment attempt's timings")
REMINDERS = Group("every service that raises an escalation: its reminders")
SETTLEMENT = Group("recovery, `paycore reconcile settlements`: reconciling settlements (docs/settlement.md)")
KAFKA = Group("every Kafka worker: the topics, and the dispatcher's producer (docs/dispatcher.md)")


class KafkaTopic:
    """A Kafka topic name: letters, digits, ``.``, ``_``, ``-``; at most 249 characters."""

    _NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")

    def parse(self, raw: str) -> str:
        if not self._NAME.fullmatch(raw):
            raise Invalid(f"must be a Kafka topic name (letters, digits, '.', '_', '-'), got {raw!r}")
        return raw

    def accepts(self) -> str:
        return "Kafka topic name"


# --------------------------------------------------------------------------- the settings


@dataclass(frozen=True, kw_only=True)
class Budgets:
    """Time budgets, in seconds on the application clock."""

    start_s: float = PAYMENTS.field(  # NotStarted -> Started transaction
        "PAYCORE_START_BUDGET_S", SECONDS, 5.0, "budget of the start transition (NotStarted → Started)")
    call_s: float = PAYMENTS.field("PAYCORE_CALL_BUDGET_S", SECONDS, 15.0, "budget of one provider call")
    record_s: float = PAYMENTS.field(
        "PAYCORE_RECORD_BUDGET_S", SECONDS, 5.0, "budget of recording its outcome")
    max_call_duration_s: float = PAYMENTS.field(
        "PAYCORE_MAX_CALL_DURATION_S", SECONDS, 30.0, "the payment client's own ceiling on one call")


@dataclass(frozen=True, kw_only=True)
class KafkaSecurity:
    """How Kafka clients connect (``PAYCORE_KAFKA_SECURITY_PROTOCOL`` and what it needs).

    Read only: the rules tying them together hold for a process that makes Kafka clients
    (:func:`paycore.kafka.kafka_settings`), so checkout need not carry the Kafka password.
    """

    protocol: str = KAFKA_SECURITY.field(
        "PAYCORE_KAFKA_SECURITY_PROTOCOL",
        Choice(("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"), case="upper"), "PLAINTEXT",
        "`SSL`: TLS, the brokers' certificates verified; `SASL_SSL`: TLS and a username and password "
        "(most managed Kafka); `PLAINTEXT`, `SASL_PLAINTEXT`: nothing encrypted, a private network only")
    # None when unset: PLAIN (see ``mechanism``), but set at all it is an error without SASL.
    sasl_mechanism: str | None = KAFKA_SECURITY.field(
        "PAYCORE_KAFKA_SASL_MECHANISM", Choice(("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), case="upper"),
        "PLAIN",
        "with `SASL_*`: how the brokers check the password; `PLAIN` sends it as is, so only with `SASL_SSL`",
        unset=None)
    sasl_username: str | None = KAFKA_SECURITY.field(
        "PAYCORE_KAFKA_SASL_USERNAME", Text(printable=True), None, "the SASL username (an API key's id)",
        shown_default="— (required with `SASL_*`)")
    sasl_password: Secret | None = KAFKA_SECURITY.field(
        "PAYCORE_KAFKA_SASL_PASSWORD", SecretText(), None, "the SASL password (an API key's secret)",
        shown_default="— (required with `SASL_*`)")
    ssl_ca_file: Path | None = KAFKA_SECURITY.field(  # None: the system's CAs
        "PAYCORE_KAFKA_SSL_CA_FILE", FilePath(), None,
        "with `SSL`, `SASL_SSL`: a PEM file of the CAs the brokers' certificates chain to (a private CA); "
        "read when a client is made",
        shown_default="— (the system's CAs)")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def mechanism(self) -> str:
        return self.sasl_mechanism or str(KAFKA_SASL_MECHANISM.default)


@dataclass(frozen=True, kw_only=True)
class Settings:
    accounts: tuple[ProviderAccountConfig, ...] = ()  # paycore.account_settings.load_accounts
    database_url: str | None = CONNECTIONS.field(
        "PAYCORE_DATABASE_URL", Text(), None, "PostgreSQL DSN",
        shown_default="embedded (`paycore up`), else required")
    # `paycore migrate` connects with this role when set (DDL), the services with database_url.
    migration_database_url: str | None = CONNECTIONS.field(
        "PAYCORE_MIGRATION_DATABASE_URL", Text(), None,
        "`paycore migrate` only: the DSN of a role that may create and alter paycore's tables, so the "
        "services' role need not",
        shown_default="`PAYCORE_DATABASE_URL`")
    kafka_bootstrap: str | None = CONNECTIONS.field(
        "PAYCORE_KAFKA_BOOTSTRAP", Text(), None, "Kafka bootstrap servers (`host:port`, comma-separated)",
        shown_default="embedded (`paycore up`), else required by the dispatcher")
    kafka_security: KafkaSecurity = nested(KafkaSecurity)
    jwt_secret: Secret | None = TOKENS.field(
        "PAYCORE_JWT_SECRET", SecretText(min_length=32), None,
        "HS256 secret customer tokens are signed with",
        shown_default="— (this or a JWKS, for checkout)")
    jwks_url: str | None = TOKENS.field(
        "PAYCORE_JWKS_URL", Url(https_off_loopback=True), None,
        "a JWKS serving RS256/ES256 keys; wins when both are set; unreachable, checkout answers 503; https "
        "unless on loopback (whoever can change a plain http answer could mint tokens)")
    # Least time between two refetches of the JWKS for an unknown ``kid``: a
    # rotation is picked up after it, and forged kids cannot hammer the IdP.
    jwks_refetch_cooldown_s: float = TOKENS.field(
        "PAYCORE_JWKS_REFETCH_COOLDOWN_S", SECONDS_OR_ZERO, 30.0,
        "least time between JWKS refetches for an unknown `kid` (a key rotation is seen after it)")
    # Declared after this class (``nested`` finds it by name): its settings follow the JWKS's in
    # the table.
    jwt_claims: JwtClaimRules = nested(lambda: JwtClaimRules())
    budgets: Budgets = nested(Budgets)
    # Longest expected gap between inserting an attempt and moving it to Started.
    abandonment_threshold_s: float = PAYMENTS.field(
        "PAYCORE_ABANDONMENT_THRESHOLD_S", SECONDS, 60.0,
        "a NotStarted attempt older than this is abandoned (closed by recovery)")
    # The provider's normal processing time after a call, before recovery looks.
    processing_allowance_s: float = PAYMENTS.field(
        "PAYCORE_PROCESSING_ALLOWANCE_S", SECONDS, 30.0,
        "the provider's normal processing time: a started attempt's first recovery check is due after "
        "call + record budgets + this")
    inbound_idempotency_ttl_s: int = PAYMENTS.field(
        "PAYCORE_IDEMPOTENCY_TTL_S", SECONDS, 86_400.0, "inbound `Idempotency-Key` retention (whole seconds)",
        convert=int)
    # After checkout or the webhook intake records an outcome that leaves an attempt
    # unresolved (Unknown, processing, a customer action), recovery looks again after
    # this long; recovery's own passes then follow its backoff.
    recheck_after_s: float = PAYMENTS.field(
        "PAYCORE_RECHECK_AFTER_S", SECONDS, 60.0,
        "checkout or the webhook intake left an attempt unresolved (Unknown, processing, a customer action): "
        "recovery looks again after this long, then follows its own backoff")
    # Escalation reminders, for every episode whichever service raised it: the first
    # reminder is due this long after raising, and again after each reminder.
    reminder_interval_s: float = REMINDERS.field(
        "PAYCORE_REMINDER_INTERVAL_S", SECONDS, 900.0,
        "first reminder of an escalation episode, and every one after it until acknowledged")
    # After acknowledgement: the interval for an acknowledged but still open episode.
    reminder_ack_interval_s: float = REMINDERS.field(
        "PAYCORE_REMINDER_ACK_INTERVAL_S", SECONDS, 3600.0,
        "reminders of an acknowledged, still open episode")
    settlement_grace_s: float = SETTLEMENT.field(
        "PAYCORE_SETTLEMENT_GRACE_S", Number("seconds", maximum=None), 3 * 86_400.0,
        "a payment or refund that succeeded this long ago and is in no closed batch of its account is "
        "missing from the provider's books (an exception); providers settle a day or more later")
    # Kafka (issue 5). None = decide from the broker:
    # on for real Kafka, off when paycore started the local broker itself.
    kafka_idempotent: bool | None = KAFKA.field(
        "PAYCORE_KAFKA_IDEMPOTENT", Flag(), None, "idempotent producer",
        shown_default="true; false when `paycore up` started the local broker")
    kafka_effects_topic: str = KAFKA.field(
        "PAYCORE_KAFKA_EFFECTS_TOPIC", KafkaTopic(), "payments.effects", "business effects, keyed by attempt")
    kafka_alerts_topic: str = KAFKA.field(
        "PAYCORE_KAFKA_ALERTS_TOPIC", KafkaTopic(), "ops.alerts", "operator alerts, keyed by escalation")
    kafka_effects_partitions: int = KAFKA.field(
        "PAYCORE_KAFKA_EFFECTS_PARTITIONS", Count(maximum=10_000), 12,
        "partitions of the effects topic when the dispatcher creates it")
    kafka_alerts_partitions: int = KAFKA.field(
        "PAYCORE_KAFKA_ALERTS_PARTITIONS", Count(maximum=10_000), 3,
        "partitions of the alerts topic when the dispatcher creates it")
    kafka_max_request_size: int = KAFKA.field(  # Kafka's default message.max.bytes
        "PAYCORE_KAFKA_MAX_REQUEST_SIZE", Count(), 1_048_576, "producer `max_request_size`, bytes")
    kafka_replication_factor: int = KAFKA.field(
        "PAYCORE_KAFKA_REPLICATION_FACTOR", Count(maximum=32), 3,
        "replicas of each topic when the dispatcher creates it (1 only for a single-broker development "
        "cluster)")
    kafka_min_insync_replicas: int = KAFKA.field(
        "PAYCORE_KAFKA_MIN_INSYNC_REPLICAS", Count(maximum=32), 2,
        "`min.insync.replicas` of each topic the dispatcher creates: with `acks=all` a record is "
        "acknowledged only once this many replicas hold it; at most the replication factor")
    # Days, not an asyncio budget: the budget bound (~24.8 days) would refuse it. One of a chain the
    # dispatcher checks at start-up (the dispatcher's settings): outbox rows (the replay horizon) <=
    # the topics' retention < consumer inbox rows.
    kafka_retention_s: float = KAFKA.field(
        "PAYCORE_KAFKA_RETENTION_S", Number("seconds", maximum=None), 35 * 86_400.0,
        "`retention.ms` of each topic the dispatcher creates (set the same on topics you create): the "
        "longest a consumer may stay behind; not below PAYCORE_OUTBOX_RETENTION_S")
    # Incident grouping (issue 14): `paycore run incidents` writes the pages, `paycore run alerts`
    # delivers them when PAYCORE_ALERT_INCIDENT_GROUPING says so (the dispatcher's settings).
    kafka_pages_topic: str = KAFKA.field(
        "PAYCORE_KAFKA_PAGES_TOPIC", KafkaTopic(), "ops.pages",
        "pages after incident grouping: per-attempt alerts passed through, and incident open/closed pages")

    @property
    def settlement_grace(self) -> timedelta:
        return timedelta(seconds=self.settlement_grace_s)

    @property
    def reminder_interval(self) -> timedelta:
        return timedelta(seconds=self.reminder_interval_s)

    @property
    def reminder_ack_interval(self) -> timedelta:
        return timedelta(seconds=self.reminder_ack_interval_s)

    @property
    def default_account(self) -> ProviderAccountConfig:
        """The account new orders use when they name none (``PAYCORE_DEFAULT_PROVIDER``'s first)."""
        return self.accounts[0]

    def account(self, provider_account: str) -> ProviderAccountConfig | None:
        for acct in self.accounts:
            if acct.provider_account == provider_account:
                return acct
        return None


@dataclass(frozen=True, kw_only=True)
class JwtClaimRules:
    """What a customer token must say besides carrying a valid signature."""

    # ``aud`` must name one of them; () = none configured
    audiences: tuple[str, ...] = TOKENS.field(
        "PAYCORE_JWT_AUDIENCE", Items(Text(printable=True)), (),
        "a token's `aud` (string or list) must name one of these, else 401",
        shown_default="— (required with a JWKS)")
    # ``iss`` must equal it exactly (Auth0's trailing slash included)
    issuer: str | None = TOKENS.field(
        "PAYCORE_JWT_ISSUER", Text(printable=True), None,
        "a token's `iss` must equal it exactly, trailing slash included",
        shown_default="— (required with a JWKS)")
    # Explicit opt-out: ``aud`` is not checked at all (never the default).
    allow_any_audience: bool = TOKENS.field(
        "PAYCORE_JWT_ALLOW_ANY_AUDIENCE", Flag(), False,
        "`true`: `aud` is not verified (a warning at start-up); waives the audience, never the issuer; "
        "contradicts `PAYCORE_JWT_AUDIENCE`")
    # Clock skew tolerated on exp/nbf/iat: a few seconds of drift between hosts is
    # normal; minutes would let expired tokens in.
    leeway_s: float = TOKENS.field(
        "PAYCORE_JWT_LEEWAY_S", Number("seconds", allow_zero=True, maximum=300.0), 30.0,
        "clock skew tolerated on `exp`, `nbf` and `iat`")


# Named by other modules (their errors and defaults, the console, the CLI): the fields above.
DATABASE_URL: Setting[str | None] = setting_of(Settings, "database_url")
KAFKA_BOOTSTRAP: Setting[str | None] = setting_of(Settings, "kafka_bootstrap")
KAFKA_SECURITY_PROTOCOL: Setting[str] = setting_of(KafkaSecurity, "protocol")
KAFKA_SASL_MECHANISM: Setting[str] = setting_of(KafkaSecurity, "sasl_mechanism")
KAFKA_SASL_USERNAME: Setting[str | None] = setting_of(KafkaSecurity, "sasl_username")
KAFKA_SASL_PASSWORD: Setting[Secret | None] = setting_of(KafkaSecurity, "sasl_password")
KAFKA_SSL_CA_FILE: Setting[Path | None] = setting_of(KafkaSecurity, "ssl_ca_file")
JWKS_URL: Setting[str | None] = setting_of(Settings, "jwks_url")
JWKS_REFETCH_COOLDOWN: Setting[float] = setting_of(Settings, "jwks_refetch_cooldown_s")
JWT_AUDIENCE: Setting[tuple[str, ...]] = setting_of(JwtClaimRules, "audiences")
JWT_ISSUER: Setting[str | None] = setting_of(JwtClaimRules, "issuer")
JWT_LEEWAY: Setting[float] = setting_of(JwtClaimRules, "leeway_s")
REMINDER_INTERVAL: Setting[float] = setting_of(Settings, "reminder_interval_s")
KAFKA_EFFECTS_TOPIC: Setting[str] = setting_of(Settings, "kafka_effects_topic")
KAFKA_ALERTS_TOPIC: Setting[str] = setting_of(Settings, "kafka_alerts_topic")
KAFKA_EFFECTS_PARTITIONS: Setting[int] = setting_of(Settings, "kafka_effects_partitions")
KAFKA_ALERTS_PARTITIONS: Setting[int] = setting_of(Settings, "kafka_alerts_partitions")
KAFKA_MAX_REQUEST_SIZE: Setting[int] = setting_of(Settings, "kafka_max_request_size")
KAFKA_REPLICATION_FACTOR: Setting[int] = setting_of(Settings, "kafka_replication_factor")
KAFKA_MIN_INSYNC_REPLICAS: Setting[int] = setting_of(Settings, "kafka_min_insync_replicas")
KAFKA_RETENTION: Setting[float] = setting_of(Settings, "kafka_retention_s")


# --------------------------------------------------------------------------- reading them


def load_settings(env: Mapping[str, str] | None = None, *, require_account: bool = True) -> Settings:
    """Read and validate every ``PAYCORE_*`` variable the library declares.

    ``require_account=False`` lets tools that never call a provider (``paycore
    migrate``) start without provider credentials.
    """
    env = os.environ if env is None else env
    settings = load(Settings, env)  # a bad value among them is reported before a missing account
    settings = replace(settings, accounts=load_accounts(env, require_account=require_account))
    _check_jwt_claims(settings)
    if settings.kafka_min_insync_replicas > settings.kafka_replication_factor:
        # every acks=all send would fail with NOT_ENOUGH_REPLICAS
        raise ConfigError(KAFKA_MIN_INSYNC_REPLICAS.name,
                          f"is {settings.kafka_min_insync_replicas}, above PAYCORE_KAFKA_REPLICATION_FACTOR "
                          f"({settings.kafka_replication_factor})")
    return settings


def _check_jwt_claims(settings: Settings) -> None:
    """The audience and issuer customer tokens are checked against.

    With a JWKS the audience and issuer are required: the key set proves only
    that the identity provider signed a token, not that it was meant for this
    service (``aud``) or this tenant (``iss``; Entra's common key set signs for
    every tenant). ``PAYCORE_JWT_ALLOW_ANY_AUDIENCE=true`` waives the audience.
    """
    claims, jwks = settings.jwt_claims, settings.jwks_url is not None
    if claims.allow_any_audience and claims.audiences:
        raise ConfigError(setting_of(JwtClaimRules, "allow_any_audience").name,
                          "contradicts PAYCORE_JWT_AUDIENCE; set only one of them")
    if jwks and not claims.audiences and not claims.allow_any_audience:
        raise ConfigError(JWT_AUDIENCE.name,
                          "is required with PAYCORE_JWKS_URL: this API's identifier at the identity "
                          "provider (or PAYCORE_JWT_ALLOW_ANY_AUDIENCE=true to accept any audience)")
    if jwks and claims.issuer is None:
        raise ConfigError(JWT_ISSUER.name,
                          "is required with PAYCORE_JWKS_URL: the exact 'iss' of the identity provider's "
                          "tokens, e.g. https://<tenant>.auth0.com/ or https://<host>/realms/<realm>")
