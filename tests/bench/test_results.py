"""``make bench`` leaves a dated JSON and the charts the README shows (no benchmark runs here)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import orjson

from bench import results
from bench.results import Ratio, Stage

PNG = b"\x89PNG\r\n\x1a\n"


def stages() -> list[Stage]:
    growth = Stage("growth", "10k..1M attempts",
                   details={"per_size": {"10000": {"checkout payments/s": 120.0, "claim p99 ms": 1.2},
                                         "1000000": {"checkout payments/s": 118.0, "claim p99 ms": 1.4}}})
    return [Stage("checkout", "4 clients", {"x1 payments/s": 128.1},
                  [Ratio("x1 ÷ pgbench", 0.29, 0.6), Ratio("x2 ÷ pgbench", 0.65, 0.6)],
                  load_before=(0.5, 0.4, 0.3), load_after=(2.0, 1.0, 0.5)),
            Stage("relay", "100k rows", ratios=[Ratio("3 relays ÷ bare producer", 0.4)]), growth]


def test_a_run_writes_its_dated_json_and_both_charts(tmp_path: Path) -> None:
    when = datetime(2026, 12, 1, 19, 0, tzinfo=UTC)
    path = results.write(stages(), directory=tmp_path, now=when)

    assert path == tmp_path / "2026-12-01.json"
    document = orjson.loads(path.read_bytes())
    assert document["measured_at"] == when.isoformat()
    assert document["machine"]["cpus"] >= 1
    checkout = document["stages"][0]
    assert checkout["ratios"][0] == {"label": "x1 ÷ pgbench", "value": 0.29, "target": 0.6}
    assert checkout["load_before"] == [0.5, 0.4, 0.3]
    for chart in ("ratios.png", "growth.png"):
        data = (tmp_path / chart).read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000  # a drawn picture, not an empty canvas


def test_without_growth_no_growth_chart_and_a_second_run_replaces_only_the_stages_it_ran(
        tmp_path: Path) -> None:
    when = datetime(2026, 12, 1, 19, 0, tzinfo=UTC)
    results.write(stages()[:1], directory=tmp_path, now=when)
    results.write(stages()[1:2], directory=tmp_path, now=when.replace(hour=20))

    assert not (tmp_path / "growth.png").exists()
    assert [p.name for p in tmp_path.glob("*.json")] == ["2026-12-01.json"]
    document = orjson.loads((tmp_path / "2026-12-01.json").read_bytes())
    assert [(s["name"], s["measured_at"][11:13]) for s in document["stages"]] == [("checkout", "19"),
                                                                                  ("relay", "20")]

    rerun = stages()[:1]
    rerun[0].measures = {"x1 payments/s": 150.0}
    results.write(rerun, directory=tmp_path, now=when.replace(hour=21))
    document = orjson.loads((tmp_path / "2026-12-01.json").read_bytes())
    assert [(s["name"], s["measured_at"][11:13]) for s in document["stages"]] == [("checkout", "21"),
                                                                                  ("relay", "20")]
    assert document["stages"][0]["measures"] == {"x1 payments/s": 150.0}
    assert document["stages"][0]["ratios"][0]["label"] == "x1 ÷ pgbench"  # read back, written again
