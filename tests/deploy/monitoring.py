"""What the monitoring tests share: where deploy/prometheus and deploy/grafana are, the Debian
``prometheus`` package's binaries (`make test` installs it), and the names the rules and
dashboards may use."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import yaml

from tools.deploy_check.compose_cross import defined_metrics, is_defined

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "deploy/prometheus"
RULES = PROMETHEUS_DIR / "rules/paycore.rules.yml"
RULE_TESTS = PROMETHEUS_DIR / "tests"
DASHBOARDS = ROOT / "deploy/grafana/dashboards"
OPERATIONS = ROOT / "docs/operations.md"
PROMTOOL = "/usr/bin/promtool"
PROMETHEUS = "/usr/bin/prometheus"

# A raw metric (paycore_...) or a recording rule's output (paycore:...:...) in PromQL.
NAME = re.compile(r"\bpaycore[_:][a-z0-9_:]*[a-z0-9]")


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    return groups


def recording_rules() -> dict[str, str]:
    """Recorded name -> its expression."""
    return {r["record"]: r["expr"] for g in rule_groups() for r in g["rules"] if "record" in r}


def alert_rules() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in rule_groups() for r in g["rules"] if "alert" in r}


@functools.cache
def _known() -> tuple[set[str], set[str]]:
    """(metric names the code defines, names the rules record): read once per session."""
    return defined_metrics(), set(recording_rules())


def unknown_names(expr: str) -> list[str]:
    """The paycore names in ``expr`` that neither the code defines nor a recording rule records."""
    defined, recorded = _known()
    return [n for n in NAME.findall(expr) if n not in recorded and not is_defined(n, defined)]
