"""deploy/postgres/roles.sql and after-migrate.sql, as docs/operations.md tells a deployment to run
them, on the real PostgreSQL: the owner role migrates; the services' role records a payment
through the library (orders, attempts, their history, the outbox) yet can neither create a
table nor rewrite the attempt history, and migrating as it fails."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from harness.postgres import create_database, drop_database, with_database
from paycore import accounts
from paycore.clock import FakeClock
from paycore.db import create_pool, migrate
from tests.matrix.helpers import account_config, new_order
from tests.support.attempts import started_attempt

POSTGRES = Path(__file__).resolve().parents[2] / "deploy" / "postgres"


@dataclass(frozen=True)
class Roles:
    owner_dsn: str
    app_dsn: str
    admin_dsn: str  # the database's, as the administrator


def _script(name: str, database: str, suffix: str) -> str:
    """A script of deploy/postgres with this test's own role and database names (roles are
    cluster-wide, and other test sessions share the server)."""
    text = (POSTGRES / name).read_text(encoding="utf-8")
    text = text.replace("paycore_owner", f"paycore_owner_{suffix}")
    text = text.replace("paycore_app", f"paycore_app_{suffix}")
    return text.replace("DATABASE paycore ", f"DATABASE {database} ")


def _as(dsn: str, role: str) -> str:
    """``dsn`` as another role (the test server trusts local connections: no password)."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port or 5432}"))


@pytest.fixture
async def roles(pg_admin_dsn: str) -> AsyncIterator[Roles]:
    suffix = uuid.uuid4().hex[:8]
    database = await create_database(pg_admin_dsn, "paycore_roles")
    admin_dsn = with_database(pg_admin_dsn, database)
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(_script("roles.sql", database, suffix))
    finally:
        await conn.close()
    try:
        yield Roles(_as(admin_dsn, f"paycore_owner_{suffix}"), _as(admin_dsn, f"paycore_app_{suffix}"),
                    admin_dsn)
    finally:
        await drop_database(pg_admin_dsn, database)
        conn = await asyncpg.connect(pg_admin_dsn)
        try:
            await conn.execute(f"DROP ROLE IF EXISTS paycore_owner_{suffix}, paycore_app_{suffix}")
        finally:
            await conn.close()


async def test_the_owner_migrates_and_the_services_role_writes_rows_but_no_schema_and_no_history(
        roles: Roles) -> None:
    assert "paycore_owner_" in roles.owner_dsn and "paycore_app_" in roles.app_dsn
    clock = FakeClock()
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await migrate(roles.app_dsn, now=clock.now())  # the services' role creates nothing
    assert await migrate(roles.owner_dsn, now=clock.now())  # the Job's role does
    owner = await asyncpg.connect(roles.owner_dsn)
    try:
        suffix = roles.app_dsn.split("paycore_app_")[1].split("@")[0]
        await owner.execute(_script("after-migrate.sql", "", suffix))
    finally:
        await owner.close()

    pool = await create_pool(roles.app_dsn, max_size=2)
    try:
        account = account_config()
        await accounts.register_provider_accounts(pool, (account,), clock.now())  # every service's start
        order = await new_order(pool, clock)
        attempt = await started_attempt(pool, clock, account, order.order_id, "cus_1")
        history = await pool.fetchval("SELECT count(*) FROM payment_attempt_events WHERE attempt_id = $1",
                                      attempt.attempt_id)
        assert history >= 2  # recorded, then started: INSERTs into the append-only history
        # Refused for want of the right, before the append-only trigger (same SQLSTATE) is reached.
        for statement in ("UPDATE payment_attempt_events SET detail = detail",
                          "DELETE FROM payment_attempt_events", "TRUNCATE payment_attempt_events",
                          "CREATE TABLE scratch (x int)"):
            with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied"):
                await pool.execute(statement)
    finally:
        await pool.close()
