"""Embedded infrastructure (Tansu, PostgreSQL) and the process supervisor."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import pwd
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import psutil
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from paycore_devstack._process import accepts_connections, free_port
from paycore_devstack.embedded import (
    EmbeddedError,
    add_system_user,
    ensure_system_user,
    start_embedded_postgres,
    start_tansu,
)
from paycore_devstack.supervisor import (
    Probe,
    ServiceExited,
    ServiceSpec,
    StopRequested,
    Supervisor,
    SupervisorError,
)
from tests.support.up import BANNER_END, gone, postmaster_pid, running_up, up_env, wait_gone

# --------------------------------------------------------------------------- tansu


async def test_tansu_round_trips_a_message() -> None:
    broker = start_tansu()
    try:
        assert broker.bootstrap == f"127.0.0.1:{broker.port}"
        assert accepts_connections("127.0.0.1", broker.port)
        topic = f"t-{uuid.uuid4().hex[:8]}"
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False, acks="all")
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"hello", key=b"k")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap,
                                    auto_offset_reset="earliest", group_id=None)
        await consumer.start()
        try:
            async with asyncio.timeout(15):
                message = await consumer.getone()
        finally:
            await consumer.stop()
        assert (message.key, message.value) == (b"k", b"hello")
    finally:
        broker.stop()
    assert not broker.running()
    assert not accepts_connections("127.0.0.1", broker.port)


def test_tansu_on_a_given_port_as_context_manager(tmp_path: Path) -> None:
    port = free_port()
    log_path = tmp_path / "tansu.log"
    with start_tansu(port, log_path=log_path) as broker:
        assert broker.bootstrap == f"127.0.0.1:{port}"
        assert accepts_connections("127.0.0.1", port)
    assert not broker.running()
    assert f"127.0.0.1:{port}" in log_path.read_text()


# --------------------------------------------------------------------------- postgres


async def test_embedded_postgres_starts_and_answers(embedded_dir: Path) -> None:
    data_dir = embedded_dir / "state" / "pg"
    with start_embedded_postgres(data_dir) as pg:
        assert pg.dsn.startswith("postgresql://postgres@/paycore?host=")
        conn = await asyncpg.connect(pg.dsn)
        try:
            assert await conn.fetchval("SELECT 1") == 1
            assert await conn.fetchval("SELECT current_database()") == "paycore"
            await conn.execute("CREATE TABLE kept (x int)")
        finally:
            await conn.close()
    # Data is kept between runs; the database is not created twice.
    with start_embedded_postgres(data_dir) as pg:
        conn = await asyncpg.connect(pg.dsn)
        try:
            assert await conn.fetchval("SELECT count(*) FROM kept") == 0
        finally:
            await conn.close()


ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="creating a system user takes root")


@ROOT_ONLY
def test_losing_the_race_to_create_the_system_user_is_no_failure() -> None:
    # CI on a fresh machine: two chaos runs started their first embedded PostgreSQL together,
    # both found no system user, and the second useradd failed (exit 9, the name was taken).
    user = f"pc_{uuid.uuid4().hex[:10]}"
    try:
        ensure_system_user(user)  # the first process: creates it
        assert pwd.getpwnam(user).pw_name == user
        add_system_user(user)  # the second, which looked before the first had created it
        ensure_system_user(user)
    finally:
        subprocess.run(["userdel", user], capture_output=True, check=False)


@ROOT_ONLY
def test_a_system_user_that_cannot_be_created_says_why() -> None:
    with pytest.raises(EmbeddedError, match="useradd exited"):
        add_system_user("no such:name")


# --------------------------------------------------------------------------- supervisor


def _child(code: str) -> list[str]:
    return [sys.executable, "-c", code]


WAITS_FOR_SIGTERM = "import signal\nprint('hello', flush=True)\nsignal.pause()"
IGNORES_SIGTERM = (
    "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('stubborn', flush=True)\nsignal.pause()"
)


def _printed(out: io.StringIO, text: str) -> Probe:
    async def probe() -> bool:
        return text in out.getvalue()

    return probe


async def test_supervisor_prefixes_output_and_stops_children_on_request() -> None:
    out = io.StringIO()
    sup = Supervisor(out=out, stop_timeout=5)
    a = await sup.start(ServiceSpec("alpha", _child(WAITS_FOR_SIGTERM)))
    b = await sup.start(ServiceSpec("beta", _child("import sys, signal\nprint('to stderr', file=sys.stderr, "
                                                    "flush=True)\nsignal.pause()")))
    await sup.wait_ready("alpha", _printed(out, "alpha    | hello"), within=30)
    await sup.wait_ready("beta", _printed(out, "beta     | to stderr"), within=30)
    sup.request_stop("test")
    assert await sup.wait() == 0
    assert a.returncode == -signal.SIGTERM
    assert b.returncode == -signal.SIGTERM


async def test_supervisor_stops_everything_when_a_child_dies() -> None:
    out = io.StringIO()
    sup = Supervisor(out=out, stop_timeout=5)
    survivor = await sup.start(ServiceSpec("survivor", _child(WAITS_FOR_SIGTERM)))
    await sup.wait_ready("survivor", _printed(out, "| hello"), within=30)
    await sup.start(ServiceSpec("crasher", _child("print('bye', flush=True)\nraise SystemExit(3)")))
    assert await sup.wait() == 1
    assert survivor.returncode == -signal.SIGTERM
    assert sup.stop_reason == "service 'crasher' exited unexpectedly (exit code 3)"
    assert "crasher  | bye" in out.getvalue()
    assert "service 'crasher' exited unexpectedly" in out.getvalue()


async def test_wait_ready_reports_a_child_that_dies_while_starting() -> None:
    sup = Supervisor(out=io.StringIO(), stop_timeout=5)
    await sup.start(ServiceSpec("broken", _child("raise SystemExit(4)")))

    async def never() -> bool:
        return False

    with pytest.raises(ServiceExited, match=r"'broken' exited unexpectedly \(exit code 4\)"):
        await sup.wait_ready("broken", never, within=30)
    await sup.stop()


async def test_wait_ready_deadline() -> None:
    sup = Supervisor(out=io.StringIO(), stop_timeout=5)
    await sup.start(ServiceSpec("slow", _child(WAITS_FOR_SIGTERM)))

    async def never() -> bool:
        return False

    with pytest.raises(SupervisorError, match=r"did not become ready within 0\.3 s"):
        await sup.wait_ready("slow", never, within=0.3)
    await sup.stop()


async def test_supervisor_kills_a_child_that_ignores_sigterm() -> None:
    out = io.StringIO()
    sup = Supervisor(out=out, stop_timeout=0.5)
    child = await sup.start(ServiceSpec("stubborn", _child(IGNORES_SIGTERM)))
    await sup.wait_ready("stubborn", _printed(out, "| stubborn"), within=30)
    await sup.stop()
    assert child.returncode == -signal.SIGKILL
    assert "did not stop within 0.5 s; killing it" in out.getvalue()


async def test_sigterm_stops_the_supervisor_cleanly() -> None:
    out = io.StringIO()
    async with Supervisor(out=out, stop_timeout=5) as sup:
        child = await sup.start(ServiceSpec("svc", _child(WAITS_FOR_SIGTERM)))
        await sup.wait_ready("svc", _printed(out, "| hello"), within=30)
        os.kill(os.getpid(), signal.SIGTERM)  # handled by the supervisor, not fatal to pytest
        assert await sup.wait() == 0
    assert sup.stop_reason == "SIGTERM"
    assert child.returncode == -signal.SIGTERM
    with pytest.raises(StopRequested):
        await sup.start(ServiceSpec("late", _child("pass")))


# --------------------------------------------------------------------------- no orphaned server


async def test_a_killed_up_leaves_no_embedded_postgres_running(embedded_dir: Path) -> None:
    """SIGKILL of ``paycore up`` (no clean-up runs) must not leave its PostgreSQL behind.

    Then a second ``up`` on the same data starts, serves and stops cleanly.
    """
    home = embedded_dir / "home"
    data_dir = home / "pg"
    async with running_up(embedded_dir, up_env(home=home), pg_data_dir=data_dir) as first:
        await first.wait_for(BANNER_END)
        pid = postmaster_pid(data_dir)
        assert pid is not None, first.output()
        postmaster = psutil.Process(pid)
        services = first.descendants()
        first.process.kill()
        assert await first.wait_exit(within_s=10) == -signal.SIGKILL
        assert await wait_gone([postmaster], within_s=20) == [], "the first run's PostgreSQL is still running"
        assert await wait_gone(services, within_s=10) == []

    async with running_up(embedded_dir, up_env(home=home), pg_data_dir=data_dir) as second:
        await second.wait_for(BANNER_END)
        pid = postmaster_pid(data_dir)
        assert pid is not None
        postmaster = psutil.Process(pid)
        # A newcomer's next command, in another terminal: it finds the stack's database by itself.
        listed = await _paycore(embedded_dir, home, "operators", "list")
        assert (listed.returncode, listed.stdout.strip()) == (0, "no operator accounts"), listed.stderr
        second.process.send_signal(signal.SIGINT)
        assert await second.wait_exit(within_s=30) == 0, second.output()
        assert await wait_gone([postmaster], within_s=10) == []
    stopped = await _paycore(embedded_dir, home, "operators", "list")
    assert stopped.returncode == 2 and "Traceback" not in stopped.stderr
    assert "export it" in stopped.stderr and "make run" in stopped.stderr


async def _paycore(cwd: Path, home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``paycore ARGV`` as a person types it: no PAYCORE_DATABASE_URL, the project's home."""
    return await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "paycore_cli", *argv], cwd=cwd,
                                   env=up_env(home=home), capture_output=True, text=True, timeout=60)


_HOLD_A_SERVER = """
import sys
from pathlib import Path
from paycore_devstack.embedded import start_embedded_postgres
pg = start_embedded_postgres(Path(sys.argv[1]))
print(pg.dsn, flush=True)
sys.stdin.read()
"""


@contextlib.asynccontextmanager
async def _holder(data_dir: Path) -> AsyncIterator[tuple[asyncio.subprocess.Process, psutil.Process]]:
    """Another process holding the embedded server in ``data_dir``; yields it and its guard."""
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _HOLD_A_SERVER, str(data_dir),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    try:
        assert holder.stdout is not None
        async with asyncio.timeout(30):
            dsn = (await holder.stdout.readline()).decode().strip()
        assert dsn, "the holder did not start PostgreSQL"
        (guard,) = psutil.Process(holder.pid).children()
        yield holder, guard
    finally:
        if holder.returncode is None:
            holder.kill()
            await holder.wait()


async def test_a_server_left_running_is_adopted_and_stopped_by_the_next_start(embedded_dir: Path) -> None:
    """The fallback when nothing stopped a dead owner's server: the next start reuses it, then stops it."""
    data_dir = embedded_dir / "state" / "pg"
    async with _holder(data_dir) as (holder, guard):
        pid = postmaster_pid(data_dir)
        assert pid is not None
        postmaster = psutil.Process(pid)
        guard.kill()  # no guard either: only the next start is left to clean up
        holder.kill()
        await holder.wait()
        assert not gone(postmaster)

        with start_embedded_postgres(data_dir) as pg:
            assert postmaster_pid(data_dir) == pid  # adopted, not a second server
            conn = await asyncpg.connect(pg.dsn)
            try:
                assert await conn.fetchval("SELECT 1") == 1
            finally:
                await conn.close()
        assert await wait_gone([postmaster], within_s=10) == []


async def test_the_guard_of_a_killed_process_leaves_a_server_another_process_uses(embedded_dir: Path) -> None:
    """A killed ``paycore migrate`` must not take down the server a running ``up`` shares with it."""
    data_dir = embedded_dir / "state" / "pg"
    with start_embedded_postgres(data_dir) as pg:
        pid = postmaster_pid(data_dir)
        assert pid is not None
        postmaster = psutil.Process(pid)
        async with _holder(data_dir) as (holder, guard):
            assert postmaster_pid(data_dir) == pid
            holder.kill()
            await holder.wait()
            assert await wait_gone([guard], within_s=10) == []  # it has looked, and is done
        assert not gone(postmaster)
        conn = await asyncpg.connect(pg.dsn)
        try:
            assert await conn.fetchval("SELECT 1") == 1
        finally:
            await conn.close()
    assert await wait_gone([postmaster], within_s=10) == []
