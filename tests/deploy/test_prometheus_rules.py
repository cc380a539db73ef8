"""deploy/prometheus: promtool accepts the config and the rules, the rules' unit tests pass
(each alert seen firing and not firing), and every alert carries what an on-call person needs."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from .monitoring import (
    OPERATIONS,
    PROMETHEUS_DIR,
    PROMTOOL,
    RULE_TESTS,
    RULES,
    alert_rules,
    recording_rules,
    unknown_names,
)


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60, cwd=cwd, check=False)


def test_promtool_accepts_the_config_and_the_rules() -> None:
    checked = promtool("check", "config", str(PROMETHEUS_DIR / "prometheus.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "1 rule files found" in checked.stdout  # the config loads the rules file
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_rules_unit_tests_pass() -> None:
    files = sorted(p.name for p in RULE_TESTS.glob("*.yml"))
    ran = promtool("test", "rules", *files, cwd=RULE_TESTS)
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_the_unit_tests_catch_a_threshold_moved(tmp_path: Path) -> None:
    """The same tests on rules whose dead-letter alert waits for a second row must fail."""
    shutil.copytree(RULE_TESTS.parent, tmp_path / "prometheus")
    rules = tmp_path / "prometheus/rules/paycore.rules.yml"
    text = rules.read_text(encoding="utf-8")
    threshold = "paycore:outbox_dead_lettered:sum > 0"
    assert threshold in text
    rules.write_text(text.replace(threshold, threshold.replace("> 0", "> 1")), encoding="utf-8")
    tests = tmp_path / "prometheus/tests"
    ran = promtool("test", "rules", *sorted(p.name for p in tests.glob("*.yml")), cwd=tests)
    assert ran.returncode != 0 and "PaycoreOutboxDeadLetters" in ran.stdout + ran.stderr


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in RULE_TESTS.glob("*.yml"):
        for case in yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]:
            for check in case.get("alert_rule_test") or []:
                (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    alerts = set(alert_rules())
    assert alerts - firing == set(), "never seen firing"
    assert alerts - quiet == set(), "never seen quiet"


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    return {re.sub(r"[^a-z0-9 _-]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.+)$", markdown, flags=re.MULTILINE)}


def test_every_alert_has_a_severity_a_summary_and_a_runbook_in_operations_md() -> None:
    anchors = _anchors(OPERATIONS.read_text(encoding="utf-8"))
    for name, rule in alert_rules().items():
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert rule["annotations"]["summary"], name
        runbook = rule["annotations"]["runbook_url"]
        path, _, anchor = runbook.partition("#")
        assert path == "docs/operations.md" and anchor in anchors, f"{name}: {runbook} names no heading"


def test_the_rules_use_only_metrics_the_code_defines_or_rules_record() -> None:
    for name, expr in recording_rules().items():
        assert unknown_names(expr) == [], name
    for name, rule in alert_rules().items():
        assert unknown_names(rule["expr"]) == [], name
