"""Small process helpers shared by the embedded infrastructure and the supervisor."""

from __future__ import annotations

import ctypes
import os
import random
import signal
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_random = random.SystemRandom()  # each process its own sequence, whatever a test seeds


# Ports below the kernel's ephemeral range: between choosing a port and binding it (seconds, for
# a service `paycore up` starts last) an outgoing connection can take an ephemeral port as its
# source port, and the bind fails (seen in CI, twice in a row, on a busy suite).
LOWEST_PORT = 15_000
_handed_out: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32_768, 60_999  # Linux's default


def _share(low: int, high: int) -> range:
    """This test worker's own slice of ``[low, high)``, or all of it outside a parallel test run.

    Each pytest-xdist worker (and every process it starts, which inherits its environment)
    picks only from its own slice: otherwise two workers can pick the same port, and the one
    that binds it second fails (seen in CI: a chaos run's dispatcher restarted onto an admin
    port another worker's test server had just taken).
    """
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 1):
        return range(low, high)
    index, slices = int(worker[2:]) % int(count), int(count)
    width = (high - low) // slices
    return range(low + index * width, low + (index + 1) * width)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the caller binds it next).

    Chosen at random below the ephemeral range, so no outgoing connection takes it before the
    caller binds it, from this test worker's own slice of that range (:func:`_share`), and
    never the same one twice in a process; the kernel's pick (an ephemeral port) only when
    that range has no free port.
    """
    low, _ = _ephemeral_range()
    candidates = _share(LOWEST_PORT, low)
    for _ in range(200 if len(candidates) > 1000 else 0):
        port = _random.choice(candidates)
        if port not in _handed_out and _bindable(host, port):
            _handed_out.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _bindable(host: str, port: int) -> bool:
    """Bindable without SO_REUSEADDR: not listened on, and no connection lingering on it either."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def port_is_free(host: str, port: int) -> bool:
    """Whether ``host:port`` can be bound right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def accepts_connections(host: str, port: int, *, timeout: float = 0.25) -> bool:
    """Whether something accepts a TCP connection on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def die_with_parent_preexec() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGTERM when this process dies (Linux).

    Children of ``paycore up`` must not outlive it, even when it is killed with
    SIGKILL and cannot stop them itself. Elsewhere there is no equivalent; the
    supervisor's orderly shutdown is all there is.

    The kernel sends the signal when the *thread* that forked the child exits, so
    this is only used from the main thread (a worker thread may end any time).
    """
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec
