"""Bring docker-compose.yml up with podman-compose on podman 4.3, in dependency order.

    python -m tools.compose_stack up   [-p NAME] [--profile P ...] [--env-file .env] [-f FILE ...]
    python -m tools.compose_stack down [-p NAME] [--profile P ...] [--env-file .env] [-f FILE ...]

Default files: docker-compose.yml and the stand-ins override deploy/compose/standins.yml
(deploy/README.md, "Compose without a registry"). Why not a plain ``podman-compose up -d``:
podman 4.3 (Debian bookworm's) has no ``podman wait --condition healthy``, so podman-compose
skips every ``service_healthy`` condition; it schedules no HEALTHCHECK without systemd; and
its ``--requires`` chains (podman-compose's way of starting dependencies) fail to start
("generating dependency graph ... not found in input list"). So this starts each service
with ``--no-deps`` once what it ``depends_on`` holds, checking the conditions itself:
``service_healthy`` by ``podman healthcheck run`` (exit 0), ``service_completed_successfully``
by exit code 0, ``service_started`` by running. Docker Compose, and podman-compose on a newer
podman, need none of this.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
FILES = (ROOT / "docker-compose.yml", ROOT / "deploy" / "compose" / "standins.yml")
PROJECT_LABEL = "io.podman.compose.project"
SERVICE_LABEL = "com.docker.compose.service"


class StackError(RuntimeError):
    """A service did not come up: which, and its log's tail."""


def podman_compose_binary() -> str:
    """PODMAN_COMPOSE, else the one beside this interpreter (dev.lock), else on PATH."""
    beside = Path(sys.executable).parent / "podman-compose"
    return os.environ.get("PODMAN_COMPOSE") or (str(beside) if beside.exists() else "podman-compose")


@dataclass
class Stack:
    """One compose project: its files, profiles and the environment compose interpolates."""

    project: str
    files: Sequence[Path] = FILES
    profiles: Sequence[str] = ()
    env_file: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    log: Callable[[str], None] = print

    def _env(self) -> dict[str, str]:
        conf = str(ROOT / "deploy" / "containers.conf")  # runc, the host's ulimits
        return {**os.environ, "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", conf), **self.env}

    def compose(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        cmd = [podman_compose_binary(), "-p", self.project]
        cmd += ["--env-file", str(self.env_file)] if self.env_file else []
        for f in self.files:
            cmd += ["-f", str(f)]
        for p in self.profiles:
            cmd += ["--profile", p]
        done = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout,
                              env=self._env(), cwd=ROOT)
        if done.returncode != 0:
            raise StackError(f"podman-compose {' '.join(args)}: exit {done.returncode}\n"
                             f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done

    def podman(self, *args: str, check: bool = True,
               timeout: float = 120) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout,
                              env=self._env())
        if check and done.returncode != 0:
            raise StackError(f"podman {' '.join(args)}: exit {done.returncode}\n{done.stderr}")
        return done

    def config(self) -> dict[str, Any]:
        """The merged file, as podman-compose resolves it (profiles applied)."""
        loaded = yaml.safe_load(self.compose("config").stdout)
        assert isinstance(loaded, dict)
        return loaded

    def containers(self, service: str | None = None) -> list[str]:
        """The project's containers (of one service), by name."""
        flags = ["--filter", f"label={PROJECT_LABEL}={self.project}"]
        flags += ["--filter", f"label={SERVICE_LABEL}={service}"] if service else []
        out = self.podman("ps", "--all", *flags, "--format", "{{.Names}}").stdout
        return sorted(out.split())

    def healthy(self, container: str) -> bool:
        return self.podman("healthcheck", "run", container, check=False).returncode == 0

    def state(self, container: str) -> tuple[str, int]:
        out = self.podman("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", container).stdout
        status, code = out.split()
        return status, int(code)

    def _holds(self, service: str, condition: str) -> bool:
        names = self.containers(service)
        if not names:
            return False
        for name in names:
            status, code = self.state(name)
            if condition == "service_completed_successfully":
                if status in ("exited", "stopped") and code != 0:
                    logs = self.podman("logs", "--tail", "30", name, check=False)
                    raise StackError(f"{name} exited {code}:\n{logs.stdout}{logs.stderr}")
                if status not in ("exited", "stopped"):
                    return False
            elif status != "running" or (condition == "service_healthy" and not self.healthy(name)):
                return False
        return True

    def up(self, timeout: float = 240) -> list[list[str]]:
        """Start every service of the profiles in dependency order; returns the waves started."""
        services: dict[str, Any] = self.config()["services"]
        deps = {name: _depends_on(svc) for name, svc in services.items()}
        started: set[str] = set()
        waves: list[list[str]] = []
        deadline = time.monotonic() + timeout
        while len(started) < len(services):
            ready = sorted(name for name in services if name not in started
                           and all(dep in started and self._holds(dep, cond)
                                   for dep, cond in deps[name].items()))
            if ready:
                self.log(f"starting {', '.join(ready)}")
                self.compose("up", "-d", "--no-build", "--no-deps", *ready)
                started.update(ready)
                waves.append(ready)
                continue
            if time.monotonic() > deadline:
                waiting = {n: deps[n] for n in services if n not in started}
                raise StackError(f"not up within {timeout} s; waiting: {waiting}")
            time.sleep(0.5)
        return waves

    def wait_healthy(self, timeout: float = 120) -> None:
        """Every running container with a healthcheck passes it."""
        deadline = time.monotonic() + timeout
        pending = [c for c in self.containers() if self.state(c)[0] == "running"]
        while pending:
            pending = [c for c in pending if not self.healthy(c)]
            if pending and time.monotonic() > deadline:
                raise StackError(f"not healthy within {timeout} s: {pending}")
            if pending:
                time.sleep(0.5)

    def down(self) -> None:
        """Containers, networks and volumes of the project removed (``down -v``)."""
        self.compose("down", "--volumes", "--timeout", "5")


def _depends_on(service: Mapping[str, Any]) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return {str(d): "service_started" for d in deps}
    return {str(k): str((v or {}).get("condition", "service_started")) for k, v in deps.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.compose_stack", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("-p", "--project-name", default="paycore")
    parser.add_argument("-f", "--file", type=Path, action="append", default=None)
    parser.add_argument("--profile", action="append", default=[])
    parser.add_argument("--env-file", type=Path, default=ROOT / ".env")
    args = parser.parse_args(argv)
    stack = Stack(args.project_name, files=args.file or FILES, profiles=args.profile, env_file=args.env_file)
    try:
        if args.action == "down":
            stack.down()
            return 0
        started = time.monotonic()
        stack.up()
        stack.wait_healthy()
        print(f"{args.project_name} up and healthy in {time.monotonic() - started:.0f} s")
    except StackError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
