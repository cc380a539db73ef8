"""The run's table, JSON report and PNG timeline (CONTRACT; to implement)."""

from __future__ import annotations

from pathlib import Path

from paycore.runtime.chaos.model import RunRecord


def table(record: RunRecord) -> str:
    raise NotImplementedError


def write(record: RunRecord, out_dir: Path) -> dict[str, Path]:
    raise NotImplementedError
