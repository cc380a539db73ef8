"""Where a stage's CPU went: the machine's busy share and each component's CPU per unit of work.

A ratio alone cannot say whether paycore is slow or the machine is full. On a shared
two-core machine every component of a stage (PostgreSQL, the paycore processes, the
sandbox, the bench's own clients, pgbench) competes for the same cores, so each measured
window also records

- ``busy``: the share of all cores that was busy (from ``/proc/stat``; ``stolen`` is the
  part a hypervisor gave to other machines). Near 1.0 the
  stage is CPU-bound, and another process cannot add throughput: two instances can at most
  give ``1 / busy_of_one`` times one instance;
- CPU milliseconds per unit of work (payment, delivery, attempt) for each component,
  grouped by process: what would have to shrink for the rate to grow.

Processes that start and end inside the window (short-lived PostgreSQL backends) are
missed by the per-component sums; ``busy`` still counts them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from types import TracebackType

import psutil


def component(proc: psutil.Process) -> str | None:
    """The component a process belongs to, or None for what a stage does not run."""
    try:
        name = proc.name()
        if name.startswith("postgres") or name == "postmaster":
            return "postgres"
        if name.startswith("pgbench"):
            return "pgbench"
        if proc.pid == os.getpid():
            return "bench"
        cmdline = proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    if "paycore_cli" in cmdline or any(arg.endswith("/paycore") for arg in cmdline[:2]):
        args = cmdline[cmdline.index("paycore_cli") + 1:] if "paycore_cli" in cmdline else cmdline[2:]
        verb_and_name = [a for a in args[:2] if not a.startswith("-")]
        return " ".join(verb_and_name[1:2]) or "paycore"
    if any("tansu" in arg for arg in cmdline[:2]):
        return "broker"
    try:  # a --workers N server's forked workers count as the server
        parent = proc.parent()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    return component(parent) if parent is not None and parent.pid not in (0, 1, os.getpid()) else None


def _cpu_seconds() -> dict[int, tuple[str, float]]:
    seen: dict[int, tuple[str, float]] = {}
    for proc in psutil.process_iter():
        comp = component(proc)
        if comp is None:
            continue
        try:
            times = proc.cpu_times()
            seen[proc.pid] = (comp, times.user + times.system)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return seen


def _machine() -> tuple[float, float, float]:
    """(busy seconds, stolen seconds, total seconds) over all cores since boot."""
    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0)
    total = sum(t)
    return total - idle, getattr(t, "steal", 0.0), total


@dataclass
class CpuWindow:
    """``with CpuWindow() as cpu: …; cpu.report(units)``: see the module docstring."""

    busy: float = 0.0
    stolen: float = 0.0  # of ``busy``: cores the hypervisor gave to other machines
    seconds_by_component: dict[str, float] = field(default_factory=dict)
    _start: dict[int, tuple[str, float]] = field(default_factory=dict)
    _machine_start: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def __enter__(self) -> CpuWindow:
        self._start = _cpu_seconds()
        self._machine_start = _machine()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        busy_end, steal_end, total_end = _machine()
        busy_start, steal_start, total_start = self._machine_start
        elapsed = max(total_end - total_start, 1e-9)
        self.busy = (busy_end - busy_start) / elapsed
        self.stolen = (steal_end - steal_start) / elapsed
        for pid, (comp, seconds) in _cpu_seconds().items():
            before = self._start.get(pid)
            used = seconds - before[1] if before is not None else seconds
            self.seconds_by_component[comp] = self.seconds_by_component.get(comp, 0.0) + max(used, 0.0)

    def per_unit_ms(self, units: int) -> dict[str, float]:
        """CPU milliseconds per unit of work, by component, largest first."""
        return {comp: 1000 * seconds / max(units, 1)
                for comp, seconds in sorted(self.seconds_by_component.items(), key=lambda kv: -kv[1])}

    def report(self, units: int, unit: str) -> dict[str, object]:
        """The window as JSON-ready numbers; also printed as one line."""
        per_unit = self.per_unit_ms(units)
        parts = ", ".join(f"{comp} {ms:.2f}" for comp, ms in per_unit.items() if ms >= 0.01)
        per = f"; ms per {unit}: {parts}" if parts else ""
        stolen = f" ({100 * self.stolen:.0f}% stolen by other machines)" if self.stolen >= 0.005 else ""
        print(f"    cpu: machine {100 * self.busy:.0f}% busy{stolen}{per}")
        return {"busy": self.busy, "stolen": self.stolen, f"cpu_ms_per_{unit}": per_unit}
