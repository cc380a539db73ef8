"""The short seeded chaos run CI keeps, once per provider: ``paycore chaos`` itself, as a process.

Every service as a real process on embedded PostgreSQL and the local broker, the
sandbox's faults on in the provider's dialect, every service kind SIGKILLed and
restarted, the PostgreSQL postmaster killed once; then every check of the run must
hold, and the run must have done what it says: settled within its bound, carried
out every kill it planned, met faults, and (where it examined resends) kept them
under the original key and bytes. Each provider's run is its own test file, so
``--dist loadfile`` spreads them over the workers; ``make chaos`` is the long run.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from paycore_devstack.chaos import invariants
from paycore_devstack.chaos.model import ChaosOptions, RunRecord

# The run's checks: the eleven money invariants, then settling and the kill plan.
CHECKS = len(invariants.evaluate(invariants.Facts(now=datetime.now(UTC)), RunRecord(ChaosOptions())))
SERVICE_KINDS = ("checkout", "webhooks", "recovery", "dispatcher", "consumer")
RUN_WITHIN_S = 600


async def short_run(embedded_dir: Path, *, provider: str, seed: int, orders: int, clients: int,
                    kills: int) -> dict[str, Any]:
    """Run ``paycore chaos`` and return its JSON report, after the checks every short run must pass."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAYCORE_")}
    env["PAYCORE_HOME"] = str(embedded_dir / "home")
    runs = embedded_dir / "runs"
    log_path = embedded_dir / "chaos.log"
    with log_path.open("wb") as log_file:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "paycore_cli", "chaos", "--provider", provider, "--orders", str(orders),
            "--clients", str(clients), "--kills", str(kills), "--fault-rate", "0.3", "--seed", str(seed),
            "--settle-within", "150", "--out", str(runs),
            env=env, stdout=log_file, stderr=asyncio.subprocess.STDOUT)
        try:
            async with asyncio.timeout(RUN_WITHIN_S):
                await proc.wait()
        except TimeoutError:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), timeout=60)
            except TimeoutError:
                proc.kill()
            raise AssertionError(f"the chaos run did not end in {RUN_WITHIN_S} s:\n"
                                 + log_path.read_text(errors="replace")[-6000:]) from None
    text = log_path.read_text(errors="replace")
    # A process that exited on its own is the usual cause: its last lines first, then the table.
    exits = [line[:4000] for line in text.splitlines() if "exited on its own" in line]
    assert proc.returncode == 0, "\n".join([*exits, text[-6000:]])

    [report_file] = runs.glob("*/chaos-report.json")
    print(report_file.with_name("chaos-table.txt").read_text())  # shown when the test fails
    report: dict[str, Any] = json.loads(report_file.read_text())
    checks = {c["name"]: c for c in report["invariants"]}
    assert len(report["invariants"]) == CHECKS and report["error"] is None
    assert all(c["count"] == 0 for c in report["invariants"]), report["invariants"]
    assert report["options"]["provider"] == provider and report["clean"] is True

    # It settled within its bound, and said so.
    assert report["extra"]["settled"] is True, report["figures"]["settled"]
    assert checks["things not settled within the bound"]["note"].startswith("settled after")
    # Every kill it planned was carried out: each kind, and the database.
    figures = report["figures"]
    assert figures["kills_planned"] == figures["kills_carried_out"] == len(SERVICE_KINDS) * kills + 1
    kinds = {(i["kind"], i["target"].split("-")[0]) for i in report["incidents"]}
    for service in SERVICE_KINDS:
        assert ("kill", service) in kinds and ("restart", service) in kinds, (service, kinds)
    assert any(i["kind"] == "db-kill" for i in report["incidents"])
    assert any(i["kind"] == "db-restart" for i in report["incidents"])
    # It met faults, of the provider's dialect, on its creates and its webhooks.
    fired = figures["faults_fired"]
    assert sum(fired["create"].values()) > 0 and sum(fired["webhook"].values()) > 0, fired
    assert {r["match"]["dialect"] for r in report["extra"]["fault_rules"]} == {provider}
    # The stray webhooks went to the provider's route and were answered as unmatched.
    assert all(s["result"] in ("unmatched", "[accepted]") for s in report["extra"]["unknown_webhooks"])

    png = report_file.with_name("chaos-timeline.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    return report


def killed_instances(report: dict[str, Any]) -> set[str]:
    return {i["target"] for i in report["incidents"] if i["kind"] == "kill"}


def resends_examined(report: dict[str, Any]) -> int:
    [check] = [c for c in report["invariants"] if c["name"] == "resends not under the original key and bytes"]
    return int(check["examined"])
