"""The console service's own settings; sessions and tokens are declared by
:mod:`paycore_console.credentials`, sign-in throttling by the library (:mod:`paycore.operators`).
Host and port are flags of ``paycore serve console``, not settings. Each setting is declared once,
as the field of :class:`ConsoleSettings` that holds it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from paycore.config import Settings, load_settings
from paycore.operators import LoginThrottle
from paycore.settings_spec import (
    ConfigError,
    Flag,
    Group,
    Invalid,
    IpNetwork,
    Items,
    Number,
    Setting,
    load,
    setting_of,
)
from paycore_console.credentials import ConsoleAuthSettings

CONSOLE_SERVICE = Group("console: the web console service (docs/operators.md)")
CONSOLE_REFUNDS = Group("console: refunds by operators (docs/operators.md)")


@dataclass(frozen=True)
class MinorUnits:
    """A whole amount in minor units, 0 included."""

    maximum: int = 10**15

    def parse(self, raw: str) -> int:
        if not raw.isascii() or not raw.isdigit():
            raise Invalid(f"must be a whole number of minor units, got {raw!r}")
        if len(raw) > len(str(self.maximum)) or int(raw) > self.maximum:
            raise Invalid(f"must be at most {self.maximum}, got {raw!r}")
        return int(raw)

    def accepts(self) -> str:
        return f"minor units ≥ 0, ≤ {self.maximum}"


@dataclass(frozen=True, kw_only=True)
class ConsoleSettings:
    """Everything the console reads from the environment, validated at start-up."""

    auth: ConsoleAuthSettings
    throttle: LoginThrottle
    trusted_proxies: tuple[str, ...] = CONSOLE_SERVICE.field(
        "PAYCORE_CONSOLE_TRUSTED_PROXIES", Items(IpNetwork()), (),
        "the proxies in front of the console (addresses or networks): only from these are "
        "`X-Forwarded-For` (the client's address, for the sign-in throttle) and `X-Forwarded-Proto` "
        "believed; none by default",
        shown_default="— (none: the peer's address is the client's)")
    hsts_max_age_s: int = CONSOLE_SERVICE.field(
        "PAYCORE_CONSOLE_HSTS_MAX_AGE_S", Number("seconds", allow_zero=True, maximum=63_072_000.0),
        31_536_000.0,
        "`Strict-Transport-Security: max-age` sent on every answer to an https request (directly, or by "
        "a trusted proxy's `X-Forwarded-Proto`); never over plain http; 0 sends none", convert=int)
    insecure_cookies: bool = CONSOLE_SERVICE.field(
        "PAYCORE_CONSOLE_INSECURE_COOKIES", Flag(), False,
        "send the session cookie without `Secure`, for a console on plain http on loopback "
        "(`paycore up` sets it); never in production")
    database_url: str | None
    reminder_interval: timedelta  # an attach or a conflict's owner schedules reminders like any writer
    reminder_ack_interval: timedelta  # an acknowledgement pushes the next reminder this far
    recheck_after_s: float
    # Refunds: the provider accounts, budgets and timings an OperationSender needs (the console
    # sends refunds only for the accounts configured here), and the approval threshold.
    core: Settings
    refund_approval_above_minor: int = CONSOLE_REFUNDS.field(
        "PAYCORE_CONSOLE_REFUND_APPROVAL_ABOVE_MINOR", MinorUnits(), 50_000,
        "a refund for more than this many minor units of the payment's currency waits for a second "
        "refunder's approval; up to it, it is sent at once; 0: every refund waits. One number for every "
        "currency: 50000 is 500.00 EUR but 50000 JPY and 50.000 KWD")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ConsoleSettings:
        core: Settings = load_settings(env, require_account=False)
        if core.database_url is None:
            raise ConfigError("PAYCORE_DATABASE_URL",
                              "is required: the console reads and acts on the database")
        return load(cls, env, auth=ConsoleAuthSettings.from_env(env), throttle=LoginThrottle.from_env(env),
                    database_url=core.database_url, reminder_interval=core.reminder_interval,
                    reminder_ack_interval=core.reminder_ack_interval, recheck_after_s=core.recheck_after_s,
                    core=core)


# Named by the local stack (`paycore up` sets it).
INSECURE_COOKIES: Setting[bool] = setting_of(ConsoleSettings, "insecure_cookies")
