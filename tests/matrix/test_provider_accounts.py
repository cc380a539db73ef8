"""One source of truth for a provider account's settings: the registered row.

A service whose configuration disagrees with it refuses to start, naming the
difference, instead of silently moving the deadlines every later attempt is
stamped with; a change is an explicit operator action. Real PostgreSQL; the
refusal is also shown on a real ``paycore run recovery`` process.
"""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta

import asyncpg
import pytest

from paycore.accounts import AccountConfigurationDiffers, apply_provider_account, register_provider_accounts
from paycore.clock import FakeClock
from tests.support.stack import checkout_settings

BASE_URL = "http://127.0.0.1:9"


async def registered_retention(pool: asyncpg.Pool) -> timedelta:
    value: timedelta = await pool.fetchval("SELECT key_retention FROM provider_accounts")
    return value


async def test_a_start_with_settings_that_differ_from_the_registered_account_is_refused_naming_each(
    pool: asyncpg.Pool, clock: FakeClock, db_dsn: str
) -> None:
    first = checkout_settings(BASE_URL, db_dsn)
    await register_provider_accounts(pool, first.accounts, clock.now())
    # The same configuration starts again (every instance of every service does this).
    await register_provider_accounts(pool, first.accounts, clock.now())

    drifted = checkout_settings(BASE_URL, db_dsn, PAYCORE_CARDCO_KEY_RETENTION_S="3600",
                                PAYCORE_CARDCO_ESCALATION_MARGIN_S="600")
    with pytest.raises(AccountConfigurationDiffers) as refused:
        await register_provider_accounts(pool, drifted.accounts, clock.now())
    message = str(refused.value)
    assert refused.value.variable == "PAYCORE_CARDCO_KEY_RETENTION_S"
    assert {d.setting for d in refused.value.differences} == {"key_retention_s", "escalation_margin_s"}
    assert "86400.0" in message and "3600.0" in message and "PAYCORE_CARDCO_ESCALATION_MARGIN_S" in message
    assert "paycore accounts apply" in message
    # Nothing moved: attempts started from now on are stamped from the registered settings.
    assert await registered_retention(pool) == timedelta(days=1)


async def test_changing_a_registered_account_is_an_explicit_action_that_every_later_start_must_match(
    pool: asyncpg.Pool, clock: FakeClock, db_dsn: str
) -> None:
    first = checkout_settings(BASE_URL, db_dsn)
    await register_provider_accounts(pool, first.accounts, clock.now())
    changed = checkout_settings(BASE_URL, db_dsn, PAYCORE_CARDCO_KEY_RETENTION_S="3600",
                                PAYCORE_CARDCO_ESCALATION_MARGIN_S="600")
    async with pool.acquire() as conn, conn.transaction():
        before, after = await apply_provider_account(conn, changed.default_account, clock.now())
    assert before is not None and before["key_retention_s"] == 86_400.0
    assert after["key_retention_s"] == 3_600.0
    assert await registered_retention(pool) == timedelta(hours=1)
    await register_provider_accounts(pool, changed.accounts, clock.now())  # the new settings start
    with pytest.raises(AccountConfigurationDiffers):
        await register_provider_accounts(pool, first.accounts, clock.now())  # the old ones no longer do


async def test_a_recovery_worker_configured_differently_refuses_to_start_with_a_message(
    pool: asyncpg.Pool, clock: FakeClock, db_dsn: str
) -> None:
    await register_provider_accounts(pool, checkout_settings(BASE_URL, db_dsn).accounts, clock.now())
    env = {**os.environ, "PAYCORE_DATABASE_URL": db_dsn, "PAYCORE_CARDCO_BASE_URL": BASE_URL,
           "PAYCORE_CARDCO_ACCOUNT": "acct_store", "PAYCORE_CARDCO_ENVIRONMENT": "test",
           "PAYCORE_CARDCO_API_KEY": "sk_test_acct_store_local", "PAYCORE_CARDCO_KEY_RETENTION_S": "7200"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "paycore_cli", "run", "recovery", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    async with asyncio.timeout(60):
        _, stderr = await proc.communicate()
    assert proc.returncode == 2, stderr.decode()
    text = stderr.decode()
    assert "configuration error" in text and "PAYCORE_CARDCO_KEY_RETENTION_S" in text
    assert "Traceback" not in text
    assert await registered_retention(pool) == timedelta(days=1)
