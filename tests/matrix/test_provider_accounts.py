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
from pathlib import Path

import asyncpg
import orjson
import pytest

from paycore.accounts import AccountConfigurationDiffers, apply_provider_account, register_provider_accounts
from paycore.clock import FakeClock
from paycore.config import load_settings
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


async def test_an_account_of_another_provider_is_refused_naming_its_own_providers_variables(
    pool: asyncpg.Pool, clock: FakeClock
) -> None:
    stripe = {"PAYCORE_DEFAULT_PROVIDER": "stripe", "PAYCORE_STRIPE_API_KEY": "sk_test_store"}
    await register_provider_accounts(pool, load_settings(stripe).accounts, clock.now())
    drifted = load_settings({**stripe, "PAYCORE_STRIPE_KEY_RETENTION_S": "3600",
                             "PAYCORE_STRIPE_LOOKUP_RATE_PER_S": "5"})
    with pytest.raises(AccountConfigurationDiffers) as refused:
        await register_provider_accounts(pool, drifted.accounts, clock.now())
    message = str(refused.value)
    assert refused.value.variable == "PAYCORE_STRIPE_KEY_RETENTION_S"
    assert "PAYCORE_STRIPE_LOOKUP_RATE_PER_S" in message and "PAYCORE_CARDCO" not in message


async def test_a_setting_no_variable_sets_is_named_by_its_accounts_file_field(
    pool: asyncpg.Pool, clock: FakeClock, tmp_path: Path
) -> None:
    adyen = {"PAYCORE_DEFAULT_PROVIDER": "adyen", "PAYCORE_ADYEN_API_KEY": "adyen-key",
             "PAYCORE_ADYEN_MERCHANT_ACCOUNT": "StoreECOM", "PAYCORE_ADYEN_RETURN_URL": "https://shop.example/back"}
    accounts_file = tmp_path / "accounts.json"
    entry = {"provider": "adyen", "account": "StoreECOM", "environment": "test", "api_key_env": "ADYEN_KEY",
             "lookup_rate_per_s": 5, "return_url": "https://shop.example/back"}
    accounts_file.write_bytes(orjson.dumps([entry]))
    from_file = load_settings({"PAYCORE_DEFAULT_PROVIDER": "adyen", "ADYEN_KEY": "adyen-key",
                               "PAYCORE_ACCOUNTS_FILE": str(accounts_file)})
    await register_provider_accounts(pool, from_file.accounts, clock.now())
    with pytest.raises(AccountConfigurationDiffers) as refused:  # the default account paces at 20/s
        await register_provider_accounts(pool, load_settings(adyen).accounts, clock.now())
    assert refused.value.variable == "PAYCORE_ACCOUNTS_FILE"
    assert [d.variable for d in refused.value.differences] == [None]
    assert "(lookup_rate_per_s in its PAYCORE_ACCOUNTS_FILE entry)" in str(refused.value)
    assert "PAYCORE_CARDCO" not in str(refused.value)


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
