"""The ``provider_accounts`` table: one registered configuration per account, without secrets.

The database row is the one source of truth for an account's settings. The
first service that starts with an account registers it; every later start
compares its own configuration with the registered row and refuses to start,
naming each difference, rather than silently moving the settings every other
service uses (the Started transition stamps ``escalation_deadline`` from this
row). Changing a registered account is an explicit operator action
(:func:`apply_configuration`, ``paycore accounts apply``), recorded in
``operator_actions``; an attempt already Started keeps the deadline it was
stamped with.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from paycore import queries
from paycore.account_settings import ACCOUNTS_FILE, REGISTERED_SETTINGS, registered_setting_variable
from paycore.config import ConfigError, ProviderAccountConfig
from paycore.operator_actions import ActionKind, OperatorAction, record_action

PROVIDER_ACCOUNTS = queries.load("provider_accounts")

# Each compared setting; the variable that sets it is the account's provider's
# (paycore.account_settings.REGISTERED_BY), and an accounts-file entry's field has its name.
SETTINGS = REGISTERED_SETTINGS


def configured_settings(acct: ProviderAccountConfig) -> dict[str, Any]:
    """The registered settings this configuration asks for."""
    return {"base_url": acct.base_url, "api_version": acct.api_version,
            "key_retention_s": float(acct.key_retention_s),
            "escalation_margin_s": float(acct.escalation_margin_s),
            "lookup_rate_per_s": float(acct.lookup_rate_per_s)}


@dataclass(frozen=True)
class Difference:
    provider_account: str
    setting: str
    variable: str | None  # the provider's variable for it; None: only an accounts-file entry sets it
    registered: Any
    configured: Any

    def describe(self) -> str:
        where = f"{self.setting} in its {ACCOUNTS_FILE.name} entry"
        return (f"{self.provider_account}: {self.setting} is registered as {self.registered!r} but this "
                f"service is configured with {self.configured!r} "
                f"({f'{self.variable}, or {where}' if self.variable else where})")


class AccountConfigurationDiffers(ConfigError):
    """This service's account configuration disagrees with the registered one; it must not start."""

    def __init__(self, differences: Sequence[Difference]) -> None:
        self.differences = tuple(differences)
        lines = "; ".join(d.describe() for d in differences)
        super().__init__(
            differences[0].variable or ACCOUNTS_FILE.name,
            f"provider account settings differ from the registered ones: {lines}. Configure the "
            "registered values, or change them for every service with `paycore accounts apply "
            "--operator NAME --reason TEXT` (recorded; started attempts keep their stamped deadlines).",
        )


async def _registered(conn: asyncpg.Connection | asyncpg.Pool,
                      ids: list[str]) -> dict[str, dict[str, Any]]:
    rows = await PROVIDER_ACCOUNTS.settings_of.fetch(conn, provider_accounts=ids)
    return {r["provider_account"]: {k: r[k] for k in SETTINGS} for r in rows}


def differences(registered: dict[str, Any], acct: ProviderAccountConfig) -> list[Difference]:
    configured = configured_settings(acct)
    return [Difference(acct.provider_account, name, registered_setting_variable(acct.provider, name),
                       registered[name], configured[name])
            for name in SETTINGS if registered[name] != configured[name]]


async def register_provider_accounts(
    pool: asyncpg.Pool | asyncpg.Connection, accounts: Iterable[ProviderAccountConfig], now: datetime
) -> None:
    """Register every configured account not yet known; refuse a configuration that differs.

    :raises AccountConfigurationDiffers: a registered account's settings differ
        from this service's configuration (every difference is named).
    """
    accounts = list(accounts)
    for acct in accounts:
        await PROVIDER_ACCOUNTS.register.execute(
            pool, provider_account=acct.provider_account, provider=acct.provider, account=acct.account,
            environment=acct.environment, base_url=acct.base_url, api_version=acct.api_version,
            key_retention_s=float(acct.key_retention_s), escalation_margin_s=float(acct.escalation_margin_s),
            lookup_rate_per_s=acct.lookup_rate_per_s, now=now,
        )
    registered = await _registered(pool, [a.provider_account for a in accounts])
    found = [d for acct in accounts for d in differences(registered[acct.provider_account], acct)]
    if found:
        raise AccountConfigurationDiffers(found)


async def apply_configuration(
    pool: asyncpg.Pool, acct: ProviderAccountConfig, *, operator: str, reason: str, now: datetime,
) -> OperatorAction | None:
    """Make ``acct``'s configuration the registered one, recorded as ``operator``'s action.

    Returns the recorded action, or ``None`` when the registered settings already
    match (nothing to change, nothing recorded). Attempts already Started keep the
    deadline they were stamped with; attempts started afterwards use the new settings.
    """
    async with pool.acquire() as conn, conn.transaction():
        registered = (await _registered(conn, [acct.provider_account])).get(acct.provider_account)
        if registered is not None and not differences(registered, acct):
            return None
        before, after = await apply_provider_account(conn, acct, now)
        return await record_action(
            conn, action=ActionKind.ACCOUNT_APPLY, operator=operator, reason=reason, now=now,
            before=before or {}, after=after, provider_account=acct.provider_account,
        )


async def apply_provider_account(
    conn: asyncpg.Connection, acct: ProviderAccountConfig, now: datetime
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """Make ``acct``'s configuration the registered one (an operator action; run it in the
    transaction that records the action). Returns the settings before (``None`` if the
    account was not registered) and after."""
    before = (await _registered(conn, [acct.provider_account])).get(acct.provider_account)
    if before is None:
        await register_provider_accounts(conn, [acct], now)
    else:
        after = configured_settings(acct)
        await PROVIDER_ACCOUNTS.update.execute(
            conn, provider_account=acct.provider_account, base_url=after["base_url"],
            api_version=after["api_version"], key_retention_s=after["key_retention_s"],
            escalation_margin_s=after["escalation_margin_s"], lookup_rate_per_s=after["lookup_rate_per_s"],
            now=now)
    return before, configured_settings(acct)
