"""The run's table, JSON report and PNG timeline.

:func:`table` is what ``paycore chaos`` prints: every invariant with its count and
note, then the run's figures. :func:`write` puts the table, ``chaos-report.json``
(everything the run recorded, JSON-serialisable, ISO timestamps) and
``chaos-timeline.png`` (orders/s, live attempts and open escalations over time,
with the kills, the database outage and the phases marked) into one directory.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson

from paycore_devstack.chaos.kills import CARRIED_OUT
from paycore_devstack.chaos.model import Incident, RunRecord, Sample

TABLE_FILE = "chaos-table.txt"
JSON_FILE = "chaos-report.json"
TIMELINE_FILE = "chaos-timeline.png"
RATE_WINDOW_S = 5.0  # orders/s is averaged over this much of the timeline
NAME_WIDTH = 74
GAP_S = 2.5  # samples come every second: more than two missing is a gap in the lines

# -- figures -----------------------------------------------------------------------------------


def _status_class(status: int | None) -> str:
    return "no answer" if status is None else f"{status // 100}xx"


def _kind(instance: str) -> str:
    """checkout-2 -> checkout: the service kind an instance belongs to."""
    return instance.rstrip("0123456789").rstrip("-") or instance


def _end(record: RunRecord) -> float:
    moments = [s.at for s in record.samples] + [i.at for i in record.incidents]
    return max(moments, default=0.0)


def outages(record: RunRecord) -> list[tuple[float, float]]:
    """(db-kill, db-restart) pairs in seconds; an outage without a restart lasts to the run's end."""
    spans: list[tuple[float, float]] = []
    down: float | None = None
    for incident in sorted(record.incidents, key=lambda i: i.at):
        if incident.kind == "db-kill" and down is None:
            down = incident.at
        elif incident.kind == "db-restart" and down is not None:
            spans.append((down, incident.at))
            down = None
    if down is not None:
        spans.append((down, max(_end(record), down)))
    return spans


def figures(record: RunRecord) -> dict[str, Any]:
    """The run in numbers (the table's second half and the JSON's ``figures``)."""
    last_up = next((s for s in reversed(record.samples) if s.db_up), None)
    answers = Counter(_status_class(a.status) for a in record.answers)
    retry_503 = sum(1 for a in record.answers if a.status == 503 and a.retry_after)
    kills = Counter(_kind(i.target) for i in record.incidents if i.kind == "kill")
    restarts = sum(1 for i in record.incidents if i.kind == "restart")
    spans = outages(record)
    created = last_up.orders_created if last_up else 0
    load_s = record.phases.get("load")
    settled = [i.detail for i in record.incidents if i.kind == "settled"]
    plan = record.extra.get("kill_plan", [])
    carried = [k for k in plan if k.get("outcome") == CARRIED_OUT]
    return {
        "orders_planned": record.options.orders,
        "orders_by_clients": len(record.orders),
        "orders_created": created,
        "orders_paid": last_up.orders_paid if last_up else 0,
        "orders_done_by_clients": sum(1 for p in record.orders.values() if p.done),
        "answers": dict(sorted(answers.items())),
        "answers_503_with_retry_after": retry_503,
        "kills": sum(kills.values()),
        "kills_by_kind": dict(sorted(kills.items())),
        "kills_planned": len(plan),
        "kills_carried_out": len(carried),
        # Per instance: (planned, carried out), so an instance the plan never reached shows.
        "kills_by_instance": {target: [sum(1 for k in plan if k.get("target") == target),
                                       sum(1 for k in carried if k.get("target") == target)]
                              for target in sorted({str(k.get("target")) for k in plan})},
        "faults_fired": record.extra.get("faults_fired"),
        "faults_never_fired": never_fired(record),
        "restarts": restarts,
        "db_outages_s": [round(b - a, 2) for a, b in spans],
        "db_outage_s": round(sum(b - a for a, b in spans), 2),
        "samples_db_down": sum(1 for s in record.samples if not s.db_up),
        "phases_s": {k: round(v, 2) for k, v in record.phases.items()},
        "orders_per_s": round(created / load_s, 2) if load_s else None,
        "settled": settled[-1] if settled else None,
        "exited_on_own": [f"{name} ({code})" for name, code in record.exited_on_own],
        "error": record.extra.get("error"),
        "clean": record.clean,
    }


def never_fired(record: RunRecord) -> list[str]:
    """``operation:fault`` of every planned rule the sandbox never fired (None before the faults end)."""
    fired = record.extra.get("faults_fired")
    if fired is None:
        return []
    planned = {(r.get("match", {}).get("operation", "webhook"), r["fault"])
               for r in record.extra.get("fault_rules", [])}
    return sorted(f"{op}:{fault}" for op, fault in planned if not fired.get(op, {}).get(fault))


def _fired_row(f: dict[str, Any]) -> str:
    fired = f["faults_fired"]
    if fired is None:
        return "not recorded (the run ended before the faults were turned off)"
    parts = []
    for operation, counts in sorted(fired.items()):
        each = ", ".join(f"{name} {n}" for name, n in sorted(counts.items()) if n)
        parts.append(f"{operation}: {each or 'none'}")
    text = "; ".join(parts) or "none (no fault rules)"
    if f["faults_never_fired"]:
        text += f"; planned but never fired: {', '.join(f['faults_never_fired'])}"
    return text


def _kills_row(f: dict[str, Any]) -> str:
    each = ", ".join(f"{target} {carried}/{planned}" for target, (planned, carried)
                     in f["kills_by_instance"].items())
    return (f"{f['kills_carried_out']} of {f['kills_planned']} planned kills carried out"
            + (f" ({each})" if each else ""))


# -- the table ------------------------------------------------------------------------------------


def table(record: RunRecord) -> str:
    """Every invariant with its count (and notes), then the run's figures, as readable text."""
    o = record.options
    lines = [
        *([f"THE RUN FAILED: {record.extra['error']}", ""] if record.extra.get("error") else []),
        f"paycore chaos - seed {o.seed}, {o.orders} orders, {o.clients} clients, "
        f"fault rate {o.fault_rate:g}, {o.kills} kills per service kind, "
        f"database kill {'on' if o.db_kill else 'off'}, "
        f"provider {o.provider}",
        f"started {record.started_wall.isoformat(timespec='seconds')}",
        "",
        f"{'invariant':<{NAME_WIDTH}} {'count':>6}",
        "-" * (NAME_WIDTH + 7),
    ]
    for r in record.results:
        lines.append(f"{r.name:<{NAME_WIDTH}} {r.count:>6}{'' if r.count == 0 else '  <-- BROKEN'}")
        if r.note:
            lines.append(f"    {r.note}")
        if r.count and r.examples:
            lines.append(f"    e.g. {'; '.join(r.examples)}")
    if not record.results:
        lines.append("(no invariants were checked: the run ended before the check)")
    broken = sum(1 for r in record.results if r.count)
    lines += ["-" * (NAME_WIDTH + 7),
              f"{len(record.results) - broken} of {len(record.results)} checks hold"
              + ("" if not broken else f"; {broken} BROKEN"), ""]

    f = figures(record)
    answers = ", ".join(f"{k} {v}" for k, v in f["answers"].items()) or "none"
    kills = ", ".join(f"{k} {v}" for k, v in f["kills_by_kind"].items()) or "none"
    outage = (f"{f['db_outage_s']:.1f} s" + (f" ({len(f['db_outages_s'])} outages)"
                                              if len(f["db_outages_s"]) > 1 else "")
              if f["db_outages_s"] else "none")
    phases = ", ".join(f"{k} {v:.1f} s" for k, v in f["phases_s"].items()) or "none"
    rows = [
        ("orders", f"{f['orders_created']} created of {f['orders_planned']} planned, "
                   f"{f['orders_paid']} paid; the clients worked {f['orders_by_clients']} "
                   f"and finished {f['orders_done_by_clients']}"),
        ("client answers", f"{answers} ({f['answers_503_with_retry_after']} were 503 with Retry-After)"),
        ("kills / restarts", f"{f['kills']} / {f['restarts']} ({kills})"),
        ("planned kills", _kills_row(f)),
        ("faults fired", _fired_row(f)),
        ("database outage", f"{outage}; {f['samples_db_down']} samples could not reach it"),
        ("phases", phases),
        ("orders/s", f"{f['orders_per_s']:.1f} over the load phase" if f["orders_per_s"] else "n/a"),
        ("settled", f["settled"] or "not recorded"),
        ("exited on their own", ", ".join(f["exited_on_own"]) or "none"),
    ]
    lines.append("figures")
    lines += [f"  {name:<22} {value}" for name, value in rows]
    return "\n".join(lines) + "\n"


# -- the JSON report ------------------------------------------------------------------------------


def _iso(record: RunRecord, at: float) -> str:
    return (record.started_wall + timedelta(seconds=at)).isoformat(timespec="milliseconds")


def _timed(record: RunRecord, item: Incident | Sample) -> dict[str, Any]:
    return {"time": _iso(record, item.at), **dataclasses.asdict(item)}


def report_json(record: RunRecord) -> dict[str, Any]:
    """Everything the run recorded, as plain JSON values."""
    options = {k: str(v) if isinstance(v, Path) else v
               for k, v in dataclasses.asdict(record.options).items()}
    by_route = Counter(f"{a.route} {a.status if a.status is not None else 'no answer'}"
                       for a in record.answers)
    return {
        "options": options,
        "started": record.started_wall.isoformat(timespec="milliseconds"),
        "clean": record.clean,
        "error": record.extra.get("error"),
        "figures": figures(record),
        "phases": {k: round(v, 3) for k, v in record.phases.items()},
        "invariants": [dataclasses.asdict(r) for r in record.results],
        "incidents": [_timed(record, i) for i in record.incidents],
        "samples": [_timed(record, s) for s in record.samples],
        "answers_by_route_and_status": dict(sorted(by_route.items())),
        "server_errors": [{"time": _iso(record, a.at), **dataclasses.asdict(a)}
                          for a in record.answers if a.status is not None and a.status >= 500],
        "exited_on_own": [{"instance": name, "returncode": code} for name, code in record.exited_on_own],
        "orders": [dataclasses.asdict(p) for p in record.orders.values()],
        "extra": record.extra,
    }


# -- the timeline ---------------------------------------------------------------------------------


def rates(samples: Sequence[Sample], window_s: float = RATE_WINDOW_S) -> tuple[list[float], list[float],
                                                                              list[float]]:
    """(times, orders created/s, orders paid/s), each averaged over ``window_s`` of answered samples.

    Samples taken while the database was down repeat the last values, so they are
    left out: the first sample after an outage is compared with the last one before
    it, which spreads the catch-up over the outage instead of showing a spike.
    """
    up = [s for s in samples if s.db_up]
    times: list[float] = []
    created: list[float] = []
    paid: list[float] = []
    start = 0
    for i in range(1, len(up)):
        while start < i - 1 and up[i].at - up[start + 1].at >= window_s:
            start += 1
        base = up[start]
        dt = up[i].at - base.at
        if dt <= 0:
            continue
        times.append(up[i].at)
        created.append((up[i].orders_created - base.orders_created) / dt)
        paid.append((up[i].orders_paid - base.orders_paid) / dt)
    return times, created, paid


def _with_gaps(xs: Sequence[float], *series: Sequence[float], gap_s: float) -> list[list[float]]:
    """Break the lines (a NaN point) where samples are missing, e.g. while the database was down."""
    out: list[list[float]] = [[] for _ in range(1 + len(series))]
    for i, x in enumerate(xs):
        if i and x - xs[i - 1] > gap_s:
            for column in out:
                column.append(math.nan)
        out[0].append(x)
        for column, values in zip(out[1:], series, strict=True):
            column.append(values[i])
    return out


def _grouped(marks: Sequence[tuple[float, str]], near: float) -> list[tuple[float, str]]:
    """Marks closer than ``near`` share one label, so labels of one moment do not overprint."""
    groups: list[tuple[float, list[str]]] = []
    for at, label in sorted(marks):
        if groups and at - groups[-1][0] < near:
            groups[-1][1].append(label)
        else:
            groups.append((at, [label]))
    return [(at, ", ".join(labels)) for at, labels in groups]


_MOMENTS = {"faults-on": "faults on", "faults-off": "faults off", "load-done": "load done",
            "settled": "settled"}
_KIND_COLOURS = ("tab:brown", "tab:cyan", "tab:olive", "tab:pink", "tab:gray", "navy", "darkgoldenrod")


def _verdict(record: RunRecord) -> str:
    broken = sum(1 for r in record.results if r.count)
    if record.extra.get("error"):
        return "THE RUN FAILED"
    if not record.results:
        return "invariants not checked"
    return "all checks hold" if not broken else f"{broken} check{'s' if broken > 1 else ''} BROKEN"


def timeline(record: RunRecord, path: Path) -> Path:
    """Draw the run: orders/s above, live attempts and open escalations below, incidents on both."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a display
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
    from matplotlib.transforms import blended_transform_factory

    samples = record.samples
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(15, 8.5), dpi=100,
                                      gridspec_kw={"height_ratios": [1, 1.1]})
    try:
        t, created, paid = _with_gaps(*rates(samples), gap_s=GAP_S)
        top.plot(t, created, color="tab:blue", lw=1.4, label="orders created/s")
        top.plot(t, paid, color="tab:green", lw=1.4, label="orders paid/s")
        top.set_ylabel(f"orders/s ({RATE_WINDOW_S:g} s average)")
        up = [s for s in samples if s.db_up]
        xs, started, unknown, escalations = _with_gaps(
            [s.at for s in up], [s.attempts_started for s in up], [s.attempts_unknown for s in up],
            [s.open_escalations for s in up], gap_s=GAP_S)
        bottom.step(xs, started, where="post", color="tab:orange", lw=1.3, label="Started attempts")
        bottom.step(xs, unknown, where="post", color="tab:red", lw=1.6, label="Unknown attempts")
        bottom.step(xs, escalations, where="post", color="tab:purple", lw=1.3, label="open escalations")
        bottom.set_ylabel("count")
        bottom.yaxis.set_major_locator(MaxNLocator(integer=True))  # attempts come whole
        bottom.set_xlabel("seconds since the run started")
        if not samples:
            top.text(0.5, 0.5, "no samples were recorded", transform=top.transAxes, ha="center")

        for ax in (top, bottom):
            ax.set_ylim(bottom=0)
            ax.grid(True, color="0.9", lw=0.6)
            for n, (down, back) in enumerate(outages(record)):
                ax.axvspan(down, back, color="tab:red", alpha=0.13, lw=0,
                           label="database down" if n == 0 else None)
        near = 0.012 * max(_end(record), 1.0)
        _mark_kills(record, (top, bottom), blended_transform_factory, near)
        _mark_moments(record, (top, bottom), blended_transform_factory, near)

        for ax in (top, bottom):
            ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
        o = record.options
        fig.suptitle(f"paycore chaos - {o.provider}, seed {o.seed}, {o.orders} orders, {o.clients} clients, "
                     f"fault rate {o.fault_rate:g}, {o.kills} kills per kind - {_verdict(record)}",
                     fontsize=11)
        fig.tight_layout(rect=(0, 0, 1, 0.97))
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
    return path


def _mark_kills(record: RunRecord, axes: Sequence[Any], blended: Any, near: float) -> None:
    kills = [i for i in record.incidents if i.kind in ("kill", "db-kill")]
    kinds = sorted({_kind(i.target) for i in kills if i.kind == "kill"})
    colours = {k: _KIND_COLOURS[n % len(_KIND_COLOURS)] for n, k in enumerate(kinds)}
    for incident in kills:
        colour = "tab:red" if incident.kind == "db-kill" else colours[_kind(incident.target)]
        for ax in axes:
            ax.axvline(incident.at, color=colour, lw=1.0, alpha=0.8)
    top = axes[0]
    for at, label in _grouped([(i.at, i.target) for i in kills], near):
        top.text(at, 0.98, f"kill {label} ", transform=blended(top.transData, top.transAxes), rotation=90,
                 va="top", ha="right", fontsize=7, color="0.2")


def _mark_moments(record: RunRecord, axes: Sequence[Any], blended: Any, near: float) -> None:
    marks: list[tuple[float, str]] = []
    for incident in record.incidents:
        label = _MOMENTS.get(incident.kind)
        if label is None:
            continue
        if incident.kind == "settled" and incident.detail.startswith("not settled"):
            label = "NOT settled"
        marks.append((incident.at, label))
        for ax in axes:
            ax.axvline(incident.at, color="black", lw=1.1, ls="--", alpha=0.7)
    bottom = axes[-1]
    for at, label in _grouped(marks, near):
        bottom.text(at, 0.98, f"{label} ", transform=blended(bottom.transData, bottom.transAxes),
                    rotation=90, va="top", ha="right", fontsize=8, color="black")


# -- writing ----------------------------------------------------------------------------------------


def write(record: RunRecord, out_dir: Path) -> dict[str, Path]:
    """Write the table, the JSON report and the PNG timeline into ``out_dir``; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"table": out_dir / TABLE_FILE, "json": out_dir / JSON_FILE, "timeline": out_dir / TIMELINE_FILE}
    paths["table"].write_text(table(record), encoding="utf-8")
    # default=str: whatever another part put into record.extra still serialises, readably.
    paths["json"].write_bytes(orjson.dumps(report_json(record), default=str,
                                           option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))
    timeline(record, paths["timeline"])
    return paths
