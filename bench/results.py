"""What one ``make bench`` run measured: a JSON file per day and the charts people look at.

Each stage (checkout, webhooks, recovery, relay, growth) returns a :class:`Stage`; the
runner (``python -m bench``) adds the machine's load around it and writes
``bench/results/<date>.json`` and two PNGs beside it (``ratios.png``: each ratio against
its target; ``growth.png``: throughput and p99 against table size). The README shows the
latest PNGs, so they are overwritten each run while the JSON files keep the history.
"""

from __future__ import annotations

import os
import platform
import subprocess
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Ratio:
    """paycore's rate over its same-run baseline, and the target the project set for it."""

    label: str
    value: float
    target: float | None = None


@dataclass
class Stage:
    name: str
    workload: str
    measures: dict[str, float] = field(default_factory=dict)  # "<what> <unit>": value
    ratios: list[Ratio] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)  # plans, per-size tables, checks
    load_before: tuple[float, float, float] | None = None
    load_after: tuple[float, float, float] | None = None
    measured_at: str | None = None  # set when written: a day's file may hold stages of several runs
    commit: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Stage:
        def load(value: list[float] | None) -> tuple[float, float, float] | None:
            return None if value is None else (value[0], value[1], value[2])

        return cls(**{**data, "ratios": [Ratio(**r) for r in data.get("ratios", [])],
                      "load_before": load(data.get("load_before")),
                      "load_after": load(data.get("load_after"))})


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


def machine() -> dict[str, Any]:
    """Enough to compare two runs: cores, Python, the commit measured."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                check=True, cwd=RESULTS.parent.parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "commit": commit}


def write(stages: list[Stage], *, directory: Path = RESULTS, now: datetime | None = None) -> Path:
    """``<directory>/<date>.json`` and the charts, from every stage the day's file then holds.

    A second run on one day replaces the stages it ran and keeps the others (``make bench
    PAYCORE_BENCH_STAGES=growth`` after a full run redoes only growth); each stage records
    when, and at which commit, it was measured.
    """
    now = now or datetime.now(UTC)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{now.date().isoformat()}.json"
    about = machine()
    for stage in stages:
        stage.measured_at, stage.commit = now.isoformat(), about["commit"]
    fresh = {stage.name: stage for stage in stages}
    earlier = [Stage.from_json(s) for s in orjson.loads(path.read_bytes())["stages"]] if path.exists() else []
    stages = [fresh.pop(s.name, s) for s in earlier] + list(fresh.values())  # replaced in place, new last
    document = {"measured_at": now.isoformat(), "machine": about, "stages": [asdict(s) for s in stages]}
    path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))
    from bench import charts  # matplotlib only when writing

    charts.ratios(stages, directory / "ratios.png", now)
    growth = next((s for s in stages if s.name == "growth"), None)
    if growth is not None and growth.details.get("per_size"):
        charts.growth(growth, directory / "growth.png", now)
    return path
