"""The bench's two pictures, drawn with matplotlib into files (never a display).

- ``ratios.png``: one bar per ratio (paycore over its same-run baseline), the target as a
  tick on the bar's row, green where the target is met.
- ``growth.png``: each growth measure against the number of attempts in the tables (log
  scale): rates on the left, each over its own value at the smallest size, latencies on the
  right. Flat lines are the goal.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from bench.results import Stage

MET, MISSED, PLAIN = "#2e7d32", "#c62828", "#546e7a"


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def ratios(stages: list[Stage], path: Path, when: datetime) -> None:
    plt = _pyplot()
    rows = [(f"{s.name}: {r.label}", r.value, r.target) for s in stages for r in s.ratios]
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(rows) + 1.6))
    labels = [label for label, _, _ in rows]
    values = [value for _, value, _ in rows]
    colours = [PLAIN if t is None else (MET if v >= t else MISSED) for _, v, t in rows]
    positions = list(range(len(rows)))[::-1]
    ax.barh(positions, values, color=colours)
    for y, (_, value, target) in zip(positions, rows, strict=True):
        ax.text(value, y, f" {value:.2f}", va="center", fontsize=9)
        if target is not None:
            ax.plot([target, target], [y - 0.4, y + 0.4], color="black", linewidth=2)
    ax.set_yticks(positions, labels, fontsize=9)
    ax.set_xlabel("paycore ÷ same-run baseline (black tick: target)")
    ax.set_xlim(0, max([*values, *(t for _, _, t in rows if t is not None), 1.0]) * 1.15)
    ax.set_title(f"make bench, {when:%Y-%m-%d %H:%M} UTC")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def growth(stage: Stage, path: Path, when: datetime) -> None:
    """Per-size measures: names ending in "/s" are rates, names ending in "ms" latencies."""
    plt = _pyplot()
    per_size: dict[str, dict[str, float]] = stage.details["per_size"]
    sizes = sorted(per_size, key=int)
    names = sorted({name for measures in per_size.values() for name in measures})
    fig, (rates, latencies) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name in names:
        points = [(int(s), per_size[s][name]) for s in sizes if name in per_size[s]]
        xs, ys = [x for x, _ in points], [y for _, y in points]
        if name.endswith("/s") and ys and ys[0]:
            # Each rate over its own value at the smallest size: one scale for rates that differ
            # a hundredfold, and a flat line at 1 is the goal.
            rates.plot(xs, [y / ys[0] for y in ys], marker="o", label=f"{name} (at smallest: {ys[0]:,.0f})")
        elif name.endswith("ms"):
            latencies.plot(xs, ys, marker="o", label=name)
    rates.axhline(1.0, color="black", linewidth=0.8, alpha=0.5)
    rates.set_ylabel("rate ÷ rate at the smallest size")
    latencies.set_ylabel("ms")
    for ax, title in ((rates, "throughput, relative"), (latencies, "latency")):
        ax.set_xscale("log")
        ax.set_xlabel("attempts in the tables (each with ~10 history rows)")
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    fig.suptitle(f"cost as the tables grow, {when:%Y-%m-%d %H:%M} UTC")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
