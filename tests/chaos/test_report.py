"""The chaos run's report: the table, the JSON and the PNG timeline, from a record built by hand."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

from paycore_devstack.chaos import report
from paycore_devstack.chaos.model import (
    ChaosOptions,
    ClientAnswer,
    Incident,
    InvariantResult,
    OrderPlan,
    RunRecord,
    Sample,
)

NAMES = ("orders with more than one succeeded provider payment",
         "provider payments not linked to exactly one attempt",
         "orders whose final state disagrees with the ledger",
         "orders with more than one live attempt",
         "attempts Unknown/Started past their deadline without an open escalation",
         "paid orders whose fulfillment effect was applied other than exactly once",
         "attempts whose history misses a transition",
         "provider requests without a recorded send intent",
         "resends not under the original key and bytes",
         "client answers 5xx other than 503 with Retry-After",
         "processes that exited on their own",
         "things not settled within the bound",
         "planned kills not carried out")


def a_run(tmp_path: Path, *, broken: bool = False) -> RunRecord:
    """Three minutes of a run: load with kills and a database outage, then settling."""
    record = RunRecord(ChaosOptions(orders=600, clients=8, seed=7, kills=2, out_dir=tmp_path))
    created = paid = 0
    for second in range(181):
        db_up = not 70 <= second < 78  # the database is down from 70 s to 78 s
        if db_up and second < 150:
            created += 4
            paid += 3 if second > 3 else 0
        unknown = 12 if 70 <= second < 95 else (3 if second < 150 else 0)
        record.samples.append(Sample(at=second + 0.05, orders_created=created, orders_paid=paid,
                                     attempts_started=6 if second < 150 else 1, attempts_unknown=unknown,
                                     open_escalations=min(second // 30, 4), db_up=db_up))
    record.incidents += [Incident(0.5, "faults-on", "sandbox", "11 rules")]
    for at, instance in ((20.0, "checkout-1"), (35.0, "recovery-2"), (52.0, "webhooks-1"),
                         (90.0, "dispatcher-1"), (110.0, "consumer-fulfillment"), (125.0, "checkout-2")):
        record.incidents += [Incident(at, "kill", instance), Incident(at + 1.5, "restart", instance)]
    record.incidents += [Incident(70.0, "db-kill", "postgres"), Incident(78.0, "db-restart", "postgres"),
                         Incident(150.0, "load-done", "clients", "600 orders"),
                         Incident(150.5, "faults-off", "sandbox"),
                         Incident(171.0, "settled", "system", "settled after 20.5 s")]
    record.answers += [ClientAnswer(1.0 + i * 0.2, i % 8, "POST /orders", 201) for i in range(600)]
    record.answers += [ClientAnswer(71.0, 2, "POST /orders/{id}/payment", 503, "database-unavailable",
                                    retry_after=True, order_id="ord_1"),
                       ClientAnswer(72.0, 3, "GET /orders/{id}/payment/status", None, error="ConnectError")]
    if broken:
        record.answers.append(ClientAnswer(73.0, 4, "POST /orders", 500, "internal"))
    record.orders["ord_1"] = OrderPlan("ord_1", 2, "cus_2", 4999, "EUR", tokens=["tok_3ds"], action="abandon")
    record.phases.update(load=149.5, settle=20.5)
    record.extra["kill_plan"] = [
        {"at": 0.1, "target": "checkout-1", "outcome": "carried out"},
        {"at": 0.2, "target": "checkout-2", "outcome": "carried out"},
        {"at": 0.3, "target": "recovery-2", "outcome": "carried out"},
        {"at": 0.4, "target": "postgres", "down_s": 8.0, "outcome": "carried out"},
        {"at": 0.9, "target": "recovery-1", "outcome": "not carried out: the load ended at 85%"}]
    record.extra["fault_rules"] = [
        {"fault": "lose_response", "match": {"operation": "create", "dialect": "cardco"}},
        {"fault": "malformed_body", "match": {"operation": "create", "dialect": "cardco"}},
        {"fault": "webhook_duplicate", "match": {"any": True, "dialect": "cardco"}}]
    record.extra["faults_fired"] = {"create": {"lose_response": 7, "malformed_body": 0},
                                    "webhook": {"webhook_duplicate": 3}}
    record.results = [InvariantResult(name, 0, note="noted" if n == 5 else "")
                      for n, name in enumerate(NAMES)]
    if broken:
        record.results[9] = InvariantResult(NAMES[9], 1, ("POST /orders 500 internal at 73.0 s",))
    record.extra["report_dir"] = str(tmp_path)
    return record


def png_size(data: bytes) -> tuple[int, int]:
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_write_produces_the_table_the_json_and_a_png_timeline(tmp_path: Path) -> None:
    record = a_run(tmp_path)
    paths = report.write(record, tmp_path / "out")

    assert {p.name for p in paths.values()} == {"chaos-table.txt", "chaos-report.json", "chaos-timeline.png"}
    assert all(p.parent == tmp_path / "out" and p.exists() for p in paths.values())

    body = json.loads(paths["json"].read_text())
    assert [i["name"] for i in body["invariants"]] == list(NAMES)
    assert all(i["count"] == 0 and i["examples"] == [] for i in body["invariants"])
    assert body["clean"] is True and body["options"]["seed"] == 7
    assert body["options"]["out_dir"] == str(tmp_path)
    assert body["figures"]["kills"] == 6 and body["figures"]["restarts"] == 6
    assert (body["figures"]["kills_planned"], body["figures"]["kills_carried_out"]) == (5, 4)
    assert body["figures"]["kills_by_instance"]["recovery-1"] == [1, 0]
    assert body["figures"]["faults_never_fired"] == ["create:malformed_body"]
    assert body["error"] is None
    assert body["figures"]["db_outage_s"] == 8.0
    assert body["figures"]["orders_created"] == 568 and body["phases"] == {"load": 149.5, "settle": 20.5}
    kill = next(i for i in body["incidents"] if i["kind"] == "db-kill")
    assert kill["time"].startswith(record.started_wall.date().isoformat()) and kill["at"] == 70.0
    assert len(body["samples"]) == 181 and body["samples"][0]["time"].endswith("+00:00")
    assert body["orders"][0]["action"] == "abandon"

    data = paths["timeline"].read_bytes()
    width, height = png_size(data)
    assert (width, height) == (1500, 850)
    assert 30_000 < len(data) < 2_000_000  # drawn, not blank; not an accident either


def test_the_table_lists_every_invariant_with_its_count_then_the_runs_figures(tmp_path: Path) -> None:
    text = report.table(a_run(tmp_path, broken=True))

    for name in NAMES:
        assert name in text
    assert re.search(r"\nclient answers 5xx other than 503 with Retry-After +1  <-- BROKEN\n", text)
    assert "e.g. POST /orders 500 internal at 73.0 s" in text
    assert "12 of 13 checks hold; 1 BROKEN" in text
    assert "    noted" in text  # a note is shown under its invariant
    figures = text.split("figures\n", 1)[1]
    assert "568 created of 600 planned, 414 paid; the clients worked 1 and finished 0" in figures
    assert "2xx 600, 5xx 2, no answer 1 (1 were 503 with Retry-After)" in figures
    assert "6 / 6 (checkout 2, consumer-fulfillment 1, dispatcher 1, recovery 1, webhooks 1)" in figures
    assert "database outage" in figures and "8.0 s; 8 samples could not reach it" in figures
    assert "load 149.5 s, settle 20.5 s" in figures
    assert "3.8 over the load phase" in figures
    assert "settled after 20.5 s" in figures
    # What was planned against what happened: kills and faults.
    assert ("4 of 5 planned kills carried out (checkout-1 1/1, checkout-2 1/1, postgres 1/1, recovery-1 0/1, "
            "recovery-2 1/1)") in figures
    assert ("create: lose_response 7; webhook: webhook_duplicate 3; planned but never fired: "
            "create:malformed_body") in figures


def test_orders_per_second_spreads_an_outage_instead_of_spiking_after_it() -> None:
    samples = [Sample(float(t), 10 * t, 0, 0, 0, 0, True) for t in range(10)]
    samples += [Sample(float(t), 90, 0, 0, 0, 0, False) for t in range(10, 20)]  # down: stale values
    samples += [Sample(float(t), 10 * t, 0, 0, 0, 0, True) for t in range(20, 30)]

    times, created, _ = report.rates(samples, window_s=5.0)

    assert 20.0 in times and 15.0 not in times  # no points while the database was down
    assert all(abs(rate - 10.0) < 1e-9 for rate in created)


def test_an_empty_record_still_writes_a_readable_report(tmp_path: Path) -> None:
    record = RunRecord(ChaosOptions(out_dir=tmp_path))
    paths = report.write(record, tmp_path)
    assert "no invariants were checked" in paths["table"].read_text()
    assert json.loads(paths["json"].read_text())["invariants"] == []
    png_size(paths["timeline"].read_bytes())


def test_a_failed_run_says_so_first_in_the_table_and_in_the_json(tmp_path: Path) -> None:
    record = RunRecord(ChaosOptions(out_dir=tmp_path))
    record.extra["error"] = "ChaosStackError: consumer-email exited before it was ready"
    paths = report.write(record, tmp_path)
    text = paths["table"].read_text()
    assert text.startswith("THE RUN FAILED: ChaosStackError: consumer-email exited before it was ready\n")
    assert "not recorded (the run ended before the faults were turned off)" in text
    body = json.loads(paths["json"].read_text())
    assert body["error"] == record.extra["error"] and body["clean"] is False
