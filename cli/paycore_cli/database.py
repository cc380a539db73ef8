"""What the commands do to the database before any service starts: migrations and provider accounts."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from paycore_cli.common import CommandError, redact_dsn

log = logging.getLogger("paycore.cli")


def migrate_database(dsn: str) -> list[str]:
    import asyncpg

    from paycore.clock import SystemClock
    from paycore.db import migrate

    try:
        return asyncio.run(migrate(dsn, now=SystemClock().now()))
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise CommandError(f"migrations failed on {redact_dsn(dsn)}: {exc}") from exc


def preflight_accounts(dsn: str, settings: Any, *, local_sandbox_url: str | None = None,
                        local_providers: Sequence[str] = ()) -> None:
    """Register the configured provider accounts, or refuse a configuration that differs.

    The local sandbox's development accounts are the one exception: when ``paycore
    up`` runs it on another port than last time, the registered base URL follows,
    recorded as an operator action of ``paycore-up``.
    """
    from paycore import accounts
    from paycore.clock import SystemClock
    from paycore.db import create_pool

    async def check() -> None:
        pool = await create_pool(dsn, max_size=2)
        try:
            now = SystemClock().now()
            for account in settings.accounts:
                if local_sandbox_url is None or account.provider not in local_providers:
                    continue
                recorded = await accounts.apply_configuration(
                    pool, account, operator="paycore-up", now=now,
                    reason=f"the local sandbox listens at {local_sandbox_url}")
                if recorded is not None:
                    log.info("local sandbox account %s registered as configured (operator action %d)",
                             account.provider_account, recorded.action_id)
            await accounts.register_provider_accounts(pool, settings.accounts, now)
        finally:
            await pool.close()

    import asyncpg

    try:
        asyncio.run(check())
    except (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError) as exc:
        raise CommandError(f"cannot reach the database {redact_dsn(dsn)}: {type(exc).__name__}") from None
