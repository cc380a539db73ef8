"""Guard of an embedded PostgreSQL: stops it once its owner has gone, however it went.

``python -m paycore_devstack._pg_guard DATA_DIR``, started by
:func:`paycore_devstack.embedded.start_embedded_postgres` before the server, in a
session of its own, with stdin the read end of a pipe only the owner can write
to. The kernel closes the owner's end when the owner exits -- SIGKILL included --
so EOF on stdin means "the owner is gone or done". The guard then stops the
server unless a living process still holds a handle on it.

Why not ``PR_SET_PDEATHSIG`` on the server: ``pg_ctl`` starts the postmaster in
a new session and exits, so the postmaster is nobody's child whose parent could
die; the parent-death signal also fires per thread, not per process, and exists
only on Linux. A pipe's EOF works for every way a process ends, on every POSIX
system.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path

from paycore_devstack.embedded import stop_unheld_server

log = logging.getLogger("paycore.runtime.guard")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m paycore_devstack._pg_guard DATA_DIR", file=sys.stderr)
        return 2
    data_dir = Path(args[0])
    # The owner's terminal is the owner's business: only EOF ends the wait.
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)  # it logs every command at INFO
    while os.read(0, 4096):
        pass
    try:
        stopped = stop_unheld_server(data_dir)
    except Exception:
        log.exception("could not check or stop embedded PostgreSQL in %s", data_dir)
        return 1
    if stopped is not None:
        log.warning("embedded PostgreSQL (pid %d) in %s outlived every process using it; stopped it",
                    stopped, data_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
