"""The ``provider_accounts`` table: configured accounts, without secrets.

Each service upserts the accounts it is configured with at start-up. The
Started transition stamps ``escalation_deadline`` from the row in force at that
moment, so a later configuration change never moves a stamped deadline.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import asyncpg

from paycore.config import ProviderAccountConfig

UPSERT_ACCOUNT = """
INSERT INTO provider_accounts (provider_account, provider, account, environment, base_url, api_version,
                               key_retention, escalation_margin, lookup_rate_per_s, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, make_interval(secs => $7), make_interval(secs => $8), $9, $10)
ON CONFLICT (provider_account) DO UPDATE
SET base_url = EXCLUDED.base_url,
    api_version = EXCLUDED.api_version,
    key_retention = EXCLUDED.key_retention,
    escalation_margin = EXCLUDED.escalation_margin,
    lookup_rate_per_s = EXCLUDED.lookup_rate_per_s,
    updated_at = EXCLUDED.updated_at
"""


async def sync_provider_accounts(
    pool: asyncpg.Pool | asyncpg.Connection, accounts: Iterable[ProviderAccountConfig], now: datetime
) -> None:
    """Upsert every configured account (no credentials are stored)."""
    for acct in accounts:
        await pool.execute(
            UPSERT_ACCOUNT,
            acct.provider_account,
            acct.provider,
            acct.account,
            acct.environment,
            acct.base_url,
            acct.api_version,
            float(acct.key_retention_s),
            float(acct.escalation_margin_s),
            acct.lookup_rate_per_s,
            now,
        )
