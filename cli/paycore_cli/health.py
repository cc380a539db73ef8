"""``paycore health``: the container's health check, probing this container's own service.

The image's ``HEALTHCHECK`` runs it, so it needs neither curl nor a shell: it asks
``http://127.0.0.1:<port>/healthz`` and exits 0 on 200, 1 otherwise, saying why in one line.
The port: ``PAYCORE_HEALTH_PORT`` when set; else the one the container's own ``paycore serve``
or ``paycore run`` binds, learnt from its command line in ``/proc`` (PID 1, or a child of PID 1
under an init such as ``--init``'s) and its environment, parsed as ``paycore`` parses it: a
service's public port, a worker's admin port, the sandbox's ``/_sandbox/clock``; else 8000.
The serving process writes nothing (the root filesystem is read-only): ``/proc`` is the record.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import io
import os
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from paycore_cli.common import DEFAULT_PORTS, HEALTH_PORT, LOOPBACK, CommandError, admin_port


def health_url(port: int) -> str:
    return f"http://{LOOPBACK}:{port}/healthz"


def paycore_arguments(argv: Sequence[str]) -> list[str] | None:
    """The arguments after ``paycore`` in a process's argv (``/opt/venv/bin/python
    /opt/venv/bin/paycore serve checkout`` or ``python -m paycore_cli ...``); None if not paycore."""
    if argv and Path(argv[0]).name == "paycore":
        return list(argv[1:])
    if len(argv) < 2 or not Path(argv[0]).name.startswith("python"):
        return None
    if Path(argv[1]).name == "paycore":
        return list(argv[2:])
    if argv[1:3] == ["-m", "paycore_cli"]:
        return list(argv[3:])
    return None


def probe_url(arguments: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The URL telling whether ``paycore ARGUMENTS``, run with ``env``, is healthy; None when it
    serves none (not a serve/run, or a worker with ``--metrics-port 0``)."""
    from paycore_cli.parser import build_parser

    if not arguments or arguments[0] not in ("serve", "run"):
        return None
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            args, _ = build_parser().parse_known_args(list(arguments))
    except SystemExit:
        return None
    if args.command == "serve":
        port = args.port if args.port is not None else DEFAULT_PORTS[args.service]
        return f"http://{LOOPBACK}:{port}/_sandbox/clock" if args.service == "sandbox" else health_url(port)
    process = f"consumer-{args.consumer}" if args.worker == "consumer" else str(args.worker)
    port = admin_port(process, args.metrics_port, env)
    return None if port is None else health_url(port)


def _read_proc(path: Path) -> list[str]:
    return [w.decode("utf-8", "replace") for w in path.read_bytes().split(b"\0") if w]


def _candidates(proc: Path) -> Iterator[Path]:
    """PID 1, then the children of PID 1 (under an init process), lowest pid first."""
    yield proc / "1"
    for pid in sorted(int(p.name) for p in proc.iterdir() if p.name.isdigit()):
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (proc / str(pid) / "stat").read_text()
            if pid != 1 and int(stat.rpartition(")")[2].split()[1]) == 1:
                yield proc / str(pid)


def container_probe(proc: Path = Path("/proc")) -> str | None:
    """The probe URL of the ``paycore serve``/``run`` this container runs, or None."""
    for process in _candidates(proc):
        try:
            arguments = paycore_arguments(_read_proc(process / "cmdline"))
        except OSError:
            continue
        if arguments is None:
            continue
        try:  # its environment (PAYCORE_METRICS_PORT); a probe exec'd into the container shares it
            environ = dict(w.partition("=")[::2] for w in _read_proc(process / "environ"))
        except OSError:
            environ = dict(os.environ)
        url = probe_url(arguments, environ)
        if url is not None:
            return url
    return None


def cmd_health(args: argparse.Namespace) -> int:
    port = HEALTH_PORT.get(os.environ)
    url: str = args.url or (health_url(port) if port is not None else None) or container_probe() \
        or health_url(HEALTH_PORT.default)
    try:
        with urllib.request.urlopen(url, timeout=args.timeout) as response:
            status: int = response.status
            body = response.read(200)
    except urllib.error.HTTPError as exc:  # a status other than 2xx/3xx: the service says why
        status, body = exc.code, exc.read(200)
    except (urllib.error.URLError, http.client.HTTPException, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CommandError(f"health: {url}: no answer ({reason})") from None
    text = body.decode("utf-8", "replace").strip().splitlines()[0] if body.strip() else ""
    if status != 200:
        raise CommandError(f"health: {url} answered {status}: {text}")
    print(f"healthy: {url} answered 200 {text}".rstrip())
    return 0
