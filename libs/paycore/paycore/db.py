"""Connection pool and schema migrations.

Migrations are the numbered ``.sql`` files in ``paycore/migrations``. ``migrate``
applies the missing ones in order, each in its own transaction, under a
session advisory lock so that several processes starting at once apply each
file exactly once; re-running it is a no-op.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import asyncpg
import orjson

from paycore import queries
from paycore.errors import DATABASE_ERRORS

__all__ = ["DATABASE_ERRORS", "create_pool", "migrate", "migrations"]

log = logging.getLogger("paycore.db")

# An arbitrary constant: the advisory lock that serialises migrations (taken and released inline in
# migrate: a session lock, not a statement on any table).
MIGRATION_LOCK_ID = 0x7061_7963_6F72_65  # "paycore"

MIGRATIONS = queries.load("schema_migrations")  # the runner's bookkeeping


@dataclass(frozen=True)
class Migration:
    version: str  # file name without .sql, e.g. "0001_schema"
    sql: str


def migrations() -> list[Migration]:
    """Every bundled migration, in version order."""
    # A plain path, not importlib.resources: editable installs on 3.11 confuse the latter.
    folder = Path(__file__).parent / "migrations"
    found = [
        Migration(entry.stem, entry.read_text(encoding="utf-8")) for entry in folder.glob("*.sql")
    ]
    return sorted(found, key=lambda m: m.version)


async def migrate(dsn: str, *, now: datetime) -> list[str]:
    """Apply missing migrations; returns the versions applied by this call."""
    conn: asyncpg.Connection = await asyncpg.connect(dsn)
    applied_now: list[str] = []
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_ID)
        try:
            await MIGRATIONS.create_table.execute(conn)
            done = {r["version"] for r in await MIGRATIONS.applied.fetch(conn)}
            for migration in migrations():
                if migration.version in done:
                    continue
                async with conn.transaction():
                    await conn.execute(migration.sql)
                    await MIGRATIONS.insert.execute(conn, version=migration.version, now=now)
                log.info("applied migration %s", migration.version)
                applied_now.append(migration.version)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_ID)
    finally:
        await conn.close()
    return applied_now


async def _init_connection(conn: asyncpg.Connection) -> None:
    # jsonb in and out as Python objects, through orjson.
    await conn.set_type_codec(
        "jsonb",
        encoder=lambda v: orjson.dumps(v).decode(),
        decoder=orjson.loads,
        schema="pg_catalog",
        format="text",
    )


async def _keep_session(conn: asyncpg.Connection) -> None:
    """No reset query on release (asyncpg still rolls back an open transaction first)."""


async def create_pool(dsn: str, *, min_size: int = 1, max_size: int = 10,
                      session_free: bool = False) -> asyncpg.Pool:
    """An asyncpg pool whose connections encode and decode ``jsonb`` with orjson.

    ``session_free``: the caller promises its code never leaves session state on a
    connection (no ``SET`` outside a transaction, session advisory locks, ``LISTEN``,
    cursors or prepared statements by name), so releasing a connection skips asyncpg's
    reset query (``RESET ALL``, ``UNLISTEN *``, ...): one round trip fewer per acquire.
    An open transaction is still rolled back on release either way.
    """
    pool: asyncpg.Pool = await asyncpg.create_pool(
        dsn, min_size=min_size, max_size=max_size, init=_init_connection,
        reset=_keep_session if session_free else None,
    )
    return pool


@contextlib.asynccontextmanager
async def transaction_on(db: asyncpg.Pool | asyncpg.Connection) -> AsyncIterator[asyncpg.Connection]:
    """One transaction on a pool's connection, or on the caller's connection (a savepoint inside
    a transaction the caller already holds, so a refusal undoes only this action)."""
    if isinstance(db, asyncpg.Pool):
        async with db.acquire() as conn, conn.transaction():
            yield conn
    else:
        async with db.transaction():
            yield db


async def delete_in_batches(pool: asyncpg.Pool, statement: str | queries.Query, *args: object,
                            batch_size: int, **params: object) -> int:
    """Run a retention ``DELETE`` until it deletes fewer than ``batch_size`` rows; the total.

    A named query takes ``params`` by name and the batch size as ``:batch_size`` (its ``LIMIT``);
    a plain statement takes ``args`` and then the batch size as its last parameter. Each run is
    one short transaction that never holds a whole table's worth of locks.
    """
    deleted = 0
    while True:
        if isinstance(statement, queries.Query):
            status = await statement.execute(pool, **params, batch_size=batch_size)
        else:
            status = await pool.execute(statement, *args, batch_size)
        count = int(status.split()[-1])
        deleted += count
        if count < batch_size:
            return deleted


async def run_every(seconds: float, stop: asyncio.Event, job: str, step: Callable[[], Awaitable[None]],
                    logger: logging.Logger = log) -> None:
    """Run ``step`` now and then every ``seconds`` until ``stop``; a database error is logged on
    ``logger`` and waits for the next round (a periodic job never ends its process)."""
    while not stop.is_set():
        try:
            await step()
        except DATABASE_ERRORS as exc:
            logger.warning("%s failed: %s", job, exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)
