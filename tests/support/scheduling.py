"""Longest files first, so the suite's wall time is its work divided by the workers.

``make test`` hands whole files to its workers (``--dist loadfile``) in collection order
(``--no-loadscope-reorder``; xdist would otherwise order files by their number of tests,
which sent the one-test, minute-long scenarios last, to run alone at the end). Each file's
seconds come from ``tests/file_durations.json``, which ``make test-durations`` rewrites
from a full run; a file not listed (new) counts as quick and keeps its place.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import orjson
import pytest

DURATIONS = Path(__file__).resolve().parents[1] / "file_durations.json"
RECORD_TO = "PAYCORE_TEST_DURATIONS_OUT"


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def longest_first(items: list[pytest.Item]) -> None:
    """Sort in place by the file's recorded seconds; stable, so a file's tests keep their order."""
    seconds: dict[str, float] = orjson.loads(DURATIONS.read_bytes()) if DURATIONS.exists() else {}
    items.sort(key=lambda item: -seconds.get(file_of(item.nodeid), 0.0))


class Recorder:
    """Sums each file's setup, call and teardown seconds as reports reach the controller."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[file_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self) -> None:
        ranked = dict(sorted(((f, round(s, 1)) for f, s in self.seconds.items()), key=lambda fs: -fs[1]))
        self.out.write_bytes(orjson.dumps(ranked, option=orjson.OPT_INDENT_2) + b"\n")


def configure(config: pytest.Config) -> None:
    out = os.environ.get(RECORD_TO)
    if out and not hasattr(config, "workerinput"):  # the controller sees every worker's reports
        config.pluginmanager.register(Recorder(Path(out)), "paycore-file-durations")
