"""deploy/grafana/dashboards: every panel queries only metrics the code defines or recording
rules of deploy/prometheus/rules record, and the dashboard charts what operators watch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .monitoring import DASHBOARDS, NAME, unknown_names

# What the overview must chart (issue 14): a name each, found in some panel's expression.
WATCHED = (
    "paycore:recovery_open_attempts:max", "paycore:recovery_oldest_unknown_age_seconds:max",
    "paycore:escalations_open:max", "paycore:attempts_past_escalation_deadline:max",
    "paycore:escalations_unacknowledged_oldest_age_seconds:max", "paycore:recovery_resends:rate5m",
    "paycore:recovery_lookups:rate5m", "paycore:outbox_oldest_pending_age_seconds:max",
    "paycore:outbox_backlog:max", "paycore:outbox_dead_lettered:sum", "paycore:provider_scopes_paused:max",
    "paycore:http_request_duration_seconds:p99_5m", "ALERTS",
)


def _exprs(dashboard: Path) -> dict[str, list[str]]:
    """Panel title -> its targets' expressions."""
    data: dict[str, Any] = json.loads(dashboard.read_text(encoding="utf-8"))
    return {p["title"]: [t["expr"] for t in p.get("targets") or []] for p in data["panels"]}


@pytest.mark.parametrize("dashboard", sorted(DASHBOARDS.glob("*.json")), ids=lambda p: p.name)
def test_every_panel_queries_defined_metrics_or_recorded_series(dashboard: Path) -> None:
    panels = _exprs(dashboard)
    assert panels and all(panels.values()), "a panel without a query"
    for title, exprs in panels.items():
        for expr in exprs:
            assert unknown_names(expr) == [], f"{title}: {expr}"


def test_the_overview_charts_what_operators_watch() -> None:
    exprs = " ".join(e for es in _exprs(DASHBOARDS / "paycore.json").values() for e in es)
    assert [w for w in WATCHED if w not in exprs] == []


def test_an_unknown_name_is_reported() -> None:
    assert unknown_names("rate(paycore_recovery_lookups_total[5m])") == []
    assert unknown_names("max(paycore_recovery_lookup_total)") == ["paycore_recovery_lookup_total"]
    assert unknown_names("paycore:outbox_lag:max") == ["paycore:outbox_lag:max"]
    assert NAME.findall('paycore:http_request_duration_seconds:p99_5m{route="/x"}') == [
        "paycore:http_request_duration_seconds:p99_5m"]
