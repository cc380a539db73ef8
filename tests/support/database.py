"""Real PostgreSQL for tests: one migrated template per run, one database per test.

The server is ``PAYCORE_TEST_DATABASE_URL`` if set, else the local server at
127.0.0.1:5432 if it answers, else an embedded PostgreSQL under ``.paycore/``.
Each test gets ``CREATE DATABASE … TEMPLATE`` of the migrated template: isolated,
and fast enough to do per test.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from paycore.clock import SystemClock
from paycore.db import migrate

LOCAL_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


def with_database(dsn: str, name: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + name))


async def _reachable(dsn: str) -> bool:
    try:
        conn = await asyncpg.connect(dsn, timeout=3)
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return False
    await conn.close()
    return True


async def find_server_dsn() -> str:
    """The admin DSN of the PostgreSQL server tests and benchmarks use."""
    configured = os.environ.get("PAYCORE_TEST_DATABASE_URL")
    if configured:
        return configured
    if await _reachable(LOCAL_SERVER):
        return LOCAL_SERVER
    from paycore.runtime.embedded import start_embedded_postgres

    # No server here: an embedded one, kept under .paycore/ between runs.
    server = start_embedded_postgres(Path(".paycore/test-pg"))
    return server.admin_dsn


def server_dsn() -> str:
    return asyncio.run(find_server_dsn())


async def create_template(admin_dsn: str) -> str:
    name = f"paycore_tpl_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    await migrate(with_database(admin_dsn, name), now=SystemClock().now())
    return name


async def create_test_database(admin_dsn: str, template: str) -> str:
    name = f"paycore_t_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    finally:
        await conn.close()
    return name


async def drop_database(admin_dsn: str, name: str) -> None:
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()
