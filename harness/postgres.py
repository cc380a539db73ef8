"""Real PostgreSQL for tests and benchmarks: find the server, make and drop databases on it.

The server is ``PAYCORE_TEST_DATABASE_URL`` if set, else the local server at
127.0.0.1:5432 if it answers, else an embedded PostgreSQL under ``.paycore/``. Under
``PAYCORE_TEST_CONTAINERS`` the pytest session sets that variable to a container's
(``harness/containers.py``).
Tests take one migrated template per run and ``CREATE DATABASE … TEMPLATE`` of
it per test (isolated, and fast enough to do per test); a benchmark takes a
fresh migrated database of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from harness import settings
from paycore.clock import SystemClock
from paycore.db import migrate

LOCAL_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


def with_database(dsn: str, name: str) -> str:
    """``dsn`` pointing at database ``name`` on the same server."""
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
    configured = settings.DATABASE_URL.get(os.environ)
    if configured:
        return configured
    if settings.CONTAINERS.read(os.environ):
        # The session exports the container's URL before anything asks (tests/conftest.py).
        raise RuntimeError("PAYCORE_TEST_CONTAINERS is on but no container was started: only the "
                           "pytest session starts them (harness/containers.py)")
    if await _reachable(LOCAL_SERVER):
        return LOCAL_SERVER
    from paycore_devstack.embedded import start_embedded_postgres

    # No server here: an embedded one, kept under .paycore/ between runs.
    server = start_embedded_postgres(Path(".paycore/test-pg"))
    return server.admin_dsn


def server_dsn() -> str:
    return asyncio.run(find_server_dsn())


async def _admin(admin_dsn: str, statement: str) -> None:
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


async def create_database(admin_dsn: str, prefix: str, *, template: str | None = None) -> str:
    """A new, uniquely named database (a copy of ``template`` if given, else empty); its name."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    copy_of = f' TEMPLATE "{template}"' if template else ""
    await _admin(admin_dsn, f'CREATE DATABASE "{name}"{copy_of}')
    return name


async def drop_database(admin_dsn: str, name: str) -> None:
    await _admin(admin_dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def create_migrated_database(admin_dsn: str, prefix: str) -> str:
    """A new database with every migration applied; its name."""
    name = await create_database(admin_dsn, prefix)
    await migrate(with_database(admin_dsn, name), now=SystemClock().now())
    return name


async def create_template(admin_dsn: str) -> str:
    """This test run's migrated template (per process: parallel runs never share one)."""
    return await create_migrated_database(admin_dsn, f"paycore_tpl_{os.getpid()}")


async def create_test_database(admin_dsn: str, template: str) -> str:
    return await create_database(admin_dsn, "paycore_t", template=template)


@contextlib.asynccontextmanager
async def migrated_database(admin_dsn: str, prefix: str) -> AsyncIterator[str]:
    """A fresh, migrated database for the ``async with`` block; yields its DSN, dropped afterwards."""
    name = await create_migrated_database(admin_dsn, prefix)
    try:
        yield with_database(admin_dsn, name)
    finally:
        await drop_database(admin_dsn, name)
