"""bench/cpu.py: a window attributes CPU to the processes a stage runs, by component."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from bench.cpu import CpuWindow

# Burns CPU until its stdin closes; its argv names it the way `paycore run recovery` is named.
BURN = """
import sys, threading
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
while not stop.is_set():
    sum(range(1000))
"""


def _cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def test_a_window_counts_a_paycore_workers_cpu_under_its_name() -> None:
    worker = subprocess.Popen([sys.executable, "-c", BURN, "paycore_cli", "run", "recovery"],
                              stdin=subprocess.PIPE)
    try:
        proc = psutil.Process(worker.pid)
        with CpuWindow() as cpu:
            start, deadline = _cpu_seconds(proc), time.monotonic() + 30
            while _cpu_seconds(proc) - start < 0.3:  # until it burned 0.3 s inside the window
                assert time.monotonic() < deadline, "the burner never got 0.3 s of CPU"
                time.sleep(0.01)  # polling a measurement, not synchronising
    finally:
        assert worker.stdin is not None
        worker.stdin.close()
        worker.wait(timeout=10)
    assert cpu.seconds_by_component.get("recovery", 0.0) >= 0.3
    assert 0.0 < cpu.busy <= 1.0 and 0.0 <= cpu.stolen <= cpu.busy
    per_attempt = cpu.report(100, "attempt")["cpu_ms_per_attempt"]
    assert isinstance(per_attempt, dict) and per_attempt["recovery"] >= 3.0
