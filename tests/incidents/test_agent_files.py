"""Where the incident agent writes: faust makes a data directory at start even for a memory
store, and the image runs with `/` as its working directory on a read-only root filesystem
(deploy/k8s: only /tmp is writable). The directory goes under the temp dir, never the cwd."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from paycore.kafka import KafkaSettings
from paycore_incidents.app import Topics, build
from paycore_incidents.settings import IncidentSettings


def test_the_data_directory_is_made_under_the_temp_dir_not_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cwd, temp = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir()
    temp.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    app = build(KafkaSettings(bootstrap="127.0.0.1:9"), Topics("ops.alerts", "ops.pages", 3),
                IncidentSettings(app_id="paycore-incidents")).app
    app._create_directories()  # what faust runs on first start
    assert (temp / "paycore-incidents-data").is_dir()
    assert list(cwd.iterdir()) == []
