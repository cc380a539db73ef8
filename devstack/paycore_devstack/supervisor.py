"""Run services as child processes and stop them together (``paycore up``).

Each child's stdout and stderr are read line by line and printed prefixed by the
service name (``checkout | ...``). Ctrl-C or SIGTERM sends SIGTERM to every
child, waits a bounded time and then SIGKILLs what is left. A child that exits
on its own is a failure: everything else is stopped and :meth:`Supervisor.wait`
returns non-zero with a message naming it.

Children run in their own process group, so a Ctrl-C in the terminal reaches
only the supervisor, which then stops them in order; on Linux they also get
SIGTERM if the supervisor itself is killed.

The output may go away at any time (``paycore up | tee run.log`` and the tee is
interrupted first): a failed write never stops the supervisor from stopping. From
then on output is discarded, while children's pipes are still drained so no child
blocks writing its last lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self, TextIO

from paycore_devstack._process import die_with_parent_preexec

log = logging.getLogger("paycore.runtime")

Probe = Callable[[], Awaitable[bool]]

_READ_LIMIT = 1 << 20  # longest line read whole; longer ones are split


@dataclass(frozen=True)
class ServiceSpec:
    """One child process: its name (the output prefix), command line and environment."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str] | None = None  # None: inherit this process's environment
    cwd: str | None = None


class SupervisorError(RuntimeError):
    """A service failed to start or stopped on its own."""


class ServiceExited(SupervisorError):
    def __init__(self, name: str, returncode: int) -> None:
        super().__init__(f"service {name!r} exited unexpectedly ({describe_returncode(returncode)})")
        self.name = name
        self.returncode = returncode


class StopRequested(Exception):
    """Ctrl-C / SIGTERM arrived while waiting for a service."""


def describe_returncode(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


@dataclass(eq=False)
class _Child:
    spec: ServiceSpec
    process: asyncio.subprocess.Process
    pump: asyncio.Task[None]
    exited: asyncio.Task[int]
    expected_exit: bool = False


@dataclass(eq=False)
class Supervisor:
    """Starts children, relays their output, and stops them all together.

    Use as ``async with Supervisor() as sup:`` -- inside it SIGINT and SIGTERM
    request a stop, and leaving it stops every child.
    """

    out: TextIO = field(default_factory=lambda: sys.stdout)
    stop_timeout: float = 10.0  # SIGTERM -> SIGKILL
    prefix_width: int = 8
    _children: dict[str, _Child] = field(default_factory=dict)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _signals: list[signal.Signals] = field(default_factory=list)
    _out_lost: bool = False
    stop_reason: str | None = None

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        self.install_signal_handlers()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self.stop()
        finally:
            self.remove_signal_handlers()

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.request_stop, sig.name)
            self._signals.append(sig)

    def remove_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        while self._signals:
            loop.remove_signal_handler(self._signals.pop())

    def request_stop(self, reason: str = "stop requested") -> None:
        """Ask :meth:`wait` (and any :meth:`wait_ready`) to return and stop everything."""
        if not self._stop.is_set():
            self.stop_reason = reason
            self._stop.set()  # before any output: nothing may keep the stop from happening
            self.emit("paycore", f"{reason}: stopping")

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # ------------------------------------------------------------------ children

    def emit(self, name: str, line: str) -> None:
        self.write(f"{name:<{self.prefix_width}} | {line}\n")

    def write(self, text: str) -> None:
        """Write to :attr:`out`; never raises. Once a write fails, output is discarded."""
        if self._out_lost:
            return
        try:
            self.out.write(text)
            self.out.flush()
        except (OSError, ValueError):  # EPIPE when the reader is gone; ValueError: closed file
            self._discard_output()

    def _discard_output(self) -> None:
        self._out_lost = True
        log.warning("output closed; the services' output is discarded from now on")
        # Point the descriptor at /dev/null so the interpreter's last flush of what is
        # still buffered succeeds instead of failing at exit.
        with contextlib.suppress(OSError, ValueError):
            fd = self.out.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, fd)
            finally:
                os.close(devnull)

    async def start(self, spec: ServiceSpec) -> asyncio.subprocess.Process:
        """Start ``spec`` as a child and begin relaying its output."""
        if spec.name in self._children:
            raise ValueError(f"service {spec.name!r} already started")
        if self.stopping:
            raise StopRequested
        self.prefix_width = max(self.prefix_width, len(spec.name))
        process = await asyncio.create_subprocess_exec(
            *spec.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=dict(spec.env) if spec.env is not None else None,
            cwd=spec.cwd,
            limit=_READ_LIMIT,
            process_group=0,
            preexec_fn=die_with_parent_preexec(),
        )
        assert process.stdout is not None
        pump = asyncio.create_task(self._pump(spec.name, process.stdout), name=f"pump-{spec.name}")
        exited = asyncio.create_task(process.wait(), name=f"wait-{spec.name}")
        self._children[spec.name] = _Child(spec, process, pump, exited)
        log.debug("started %s (pid %d): %s", spec.name, process.pid, " ".join(spec.argv))
        return process

    async def _pump(self, name: str, stream: asyncio.StreamReader) -> None:
        while True:
            try:
                raw = await stream.readline()
            except ValueError:  # a line longer than the limit: relay what is buffered
                raw = await stream.read(_READ_LIMIT)
            if not raw:
                return
            self.emit(name, raw.decode("utf-8", "replace").rstrip("\r\n"))

    def process(self, name: str) -> asyncio.subprocess.Process:
        return self._children[name].process

    def _exited(self) -> _Child | None:
        for child in self._children.values():
            if child.exited.done() and not child.expected_exit:
                return child
        return None

    async def wait_ready(self, name: str, probe: Probe, *, within: float, interval: float = 0.1) -> None:
        """Poll ``probe`` until it returns true, for at most ``within`` seconds.

        Raises :class:`ServiceExited` if any child exits meanwhile,
        :class:`StopRequested` on Ctrl-C/SIGTERM, and :class:`SupervisorError`
        when the deadline passes.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            while True:
                if self.stopping:
                    raise StopRequested
                dead = self._exited()
                if dead is not None:
                    await self._drain(dead)  # relay its last words before reporting it
                    raise ServiceExited(dead.spec.name, dead.exited.result())
                if await probe():
                    return
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise SupervisorError(f"service {name!r} did not become ready within {within:g} s")
                # Poll interval; wakes at once if a child exits or a stop is requested.
                watched: list[asyncio.Future[Any]] = [stop, *(c.exited for c in self._children.values())]
                await asyncio.wait(watched, timeout=min(interval, remaining),
                                   return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()

    async def wait(self) -> int:
        """Run until a stop is requested (returns 0) or a child exits (returns 1).

        Either way every child is stopped before returning.
        """
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            watched: list[asyncio.Future[Any]] = [stop, *(c.exited for c in self._children.values())]
            if not self._children and not self.stopping:
                await stop
            else:
                await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        dead = None if self.stopping else self._exited()
        if dead is not None:
            await self._drain(dead)
            message = str(ServiceExited(dead.spec.name, dead.exited.result()))
            self.emit("paycore", f"{message}; stopping everything")
            self.stop_reason = message
            self._stop.set()
        await self.stop()
        return 1 if dead is not None else 0

    @staticmethod
    async def _drain(child: _Child, within: float = 2.0) -> None:
        # Bounded: a grandchild may still hold the pipe open.
        await asyncio.wait([child.pump], timeout=within)

    async def stop(self) -> None:
        """SIGTERM every running child, wait up to :attr:`stop_timeout`, then SIGKILL."""
        running = [c for c in self._children.values() if not c.exited.done()]
        for child in running:
            child.expected_exit = True
            with contextlib.suppress(ProcessLookupError):
                child.process.send_signal(signal.SIGTERM)
        if running:
            _, late = await asyncio.wait([c.exited for c in running], timeout=self.stop_timeout)
            for child in running:
                if child.exited in late:
                    self.emit("paycore", f"{child.spec.name} did not stop within "
                                         f"{self.stop_timeout:g} s; killing it")
                    with contextlib.suppress(ProcessLookupError):
                        # The whole group: a child's own children go too.
                        os.killpg(child.process.pid, signal.SIGKILL)
            if late:
                await asyncio.wait(late)
        # Relay whatever the children printed on their way out.
        pumps = [c.pump for c in self._children.values()]
        if pumps:
            _, stuck = await asyncio.wait(pumps, timeout=2.0)
            for task in stuck:  # a grandchild still holds the pipe open
                task.cancel()
        for child in running:
            log.debug("%s stopped (%s)", child.spec.name, describe_returncode(child.exited.result()))
