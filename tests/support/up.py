"""``paycore up`` as a real child process, on free ports, for the start/stop tests.

Every service ``up`` starts gets a free port (derived from :data:`paycore_cli.common.UP_SERVICES`,
so a new service cannot be forgotten and fall back to its fixed default). Its stdout
is a pipe read continuously by a task (a full pipe would stall the supervisor) and
can be closed on purpose; its stderr goes to a file quoted on failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from paycore_cli.common import UP_ADMIN, UP_SERVICES
from paycore_devstack._process import free_port

BANNER_END = "paycore token"  # the banner's last line: everything is up


def gone(process: psutil.Process) -> bool:
    """Whether ``process`` has ended (a zombie nobody reaps counts as ended)."""
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def wait_gone(processes: list[psutil.Process], *, within_s: float) -> list[psutil.Process]:
    """Poll until every process has ended; returns those still running at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        alive = [p for p in processes if not gone(p)]
        if not alive or loop.time() > deadline:
            return alive
        await asyncio.sleep(0.05)


def postmaster_pid(data_dir: Path) -> int | None:
    """The pid in ``data_dir/postmaster.pid`` (the embedded server's), if the file is there."""
    try:
        return int((data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


@dataclass(eq=False)
class UpProcess:
    process: asyncio.subprocess.Process
    ports: dict[str, int]
    stderr_path: Path
    _transport: asyncio.ReadTransport
    _reader: asyncio.StreamReader
    lines: list[str] = field(default_factory=list)
    _pump: asyncio.Task[None] | None = None
    _seen: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def pid(self) -> int:
        return self.process.pid

    def url(self, service: str) -> str:
        return f"http://127.0.0.1:{self.ports[service]}"

    def output(self) -> str:
        err = self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""
        return "--- stdout\n" + "".join(self.lines) + "--- stderr\n" + err

    async def _read(self) -> None:
        while True:
            raw = await self._reader.readline()
            if not raw:
                self._seen.set()
                return
            self.lines.append(raw.decode("utf-8", "replace"))
            self._seen.set()

    async def wait_for(self, marker: str, *, within_s: float = 60.0) -> None:
        """Wait until a stdout line contains ``marker``; fails if ``up`` exits first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while not any(marker in line for line in self.lines):
            if self._pump is None or self._pump.done():
                raise AssertionError(f"paycore up ended its output before {marker!r}:\n{self.output()}")
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(f"no {marker!r} within {within_s:g} s:\n{self.output()}")
            self._seen.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._seen.wait()

    def close_stdout(self) -> None:
        """Close our end of ``up``'s stdout, as a terminated ``| tee`` does."""
        if self._pump is not None:
            self._pump.cancel()
        self._transport.close()

    def descendants(self) -> list[psutil.Process]:
        return psutil.Process(self.pid).children(recursive=True)

    async def wait_exit(self, *, within_s: float) -> int:
        try:
            async with asyncio.timeout(within_s):
                return await self.process.wait()
        except TimeoutError:
            raise AssertionError(f"paycore up still running after {within_s:g} s:\n{self.output()}") from None


async def _start(cwd: Path, env: Mapping[str, str], stderr_path: Path) -> UpProcess:
    ports = {name: free_port() for name in UP_SERVICES}
    argv = [sys.executable, "-m", "paycore_cli", "up"]
    for name, port in ports.items():
        argv += [f"--{name}-port", str(port)]
    for name in UP_ADMIN:  # their admin ports: free ones too, so tests run side by side
        argv += [f"--{name}-metrics-port", str(free_port())]
    read_fd, write_fd = os.pipe()
    stderr_fd = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        process = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, env=dict(env), stdin=asyncio.subprocess.DEVNULL,
            stdout=write_fd, stderr=stderr_fd,
        )
    finally:
        os.close(write_fd)
        os.close(stderr_fd)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", buffering=0))
    up = UpProcess(process, ports, stderr_path, transport, reader)
    up._pump = asyncio.create_task(up._read())
    return up


def up_env(*, home: Path | None = None, database_url: str | None = None, **extra: str) -> dict[str, str]:
    """This process's environment without PAYCORE_*, plus the given home, database and extras."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAYCORE_")}
    env["PYTHONUNBUFFERED"] = "1"
    if home is not None:
        env["PAYCORE_HOME"] = str(home)
    if database_url is not None:
        env["PAYCORE_DATABASE_URL"] = database_url
    env.update(extra)
    return env


@contextlib.asynccontextmanager
async def running_up(cwd: Path, env: Mapping[str, str], *, stderr_path: Path | None = None,
                     pg_data_dir: Path | None = None) -> AsyncIterator[UpProcess]:
    """Start ``paycore up``; on the way out make sure it, its children and its embedded server are gone.

    The clean-up is for failing tests only: a test that stops ``up`` asserts on its own.
    """
    up = await _start(cwd, env, stderr_path or cwd / "up.stderr")
    try:
        yield up
    finally:
        leftovers: list[psutil.Process] = []
        if up.process.returncode is None:
            with contextlib.suppress(psutil.NoSuchProcess):
                leftovers = up.descendants()
            with contextlib.suppress(ProcessLookupError):
                up.process.send_signal(signal.SIGINT)
            try:
                async with asyncio.timeout(30):
                    await up.process.wait()
            except TimeoutError:
                up.process.kill()
                await up.process.wait()
        for p in leftovers:
            with contextlib.suppress(psutil.NoSuchProcess):
                if not gone(p):
                    p.kill()
        pid = postmaster_pid(pg_data_dir) if pg_data_dir is not None else None
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)  # fast shutdown of a server a failed test left
        up.close_stdout()
