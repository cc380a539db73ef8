"""``make bench``: every stage in turn, then ``bench/results/<date>.json`` and the charts.

``PAYCORE_BENCH_STAGES`` picks stages (default: all, in this order). Each stage prints its
table as it goes; the machine's load average is recorded before and after each one, because
a ratio measured while something else runs says less (the notes in docs/performance.md).
"""

from __future__ import annotations

import importlib
import os

from bench import results

STAGES = ["checkout", "webhooks", "recovery", "relay", "growth", "settlement"]


def main() -> None:
    asked = os.environ.get("PAYCORE_BENCH_STAGES", ",".join(STAGES))
    chosen = [s.strip() for s in asked.split(",") if s.strip()]
    unknown = sorted(set(chosen) - set(STAGES))
    if unknown:
        raise SystemExit(f"unknown bench stage(s) {unknown}; choose from {STAGES}")
    measured: list[results.Stage] = []
    for name in chosen:
        before = results.load_average()
        stage: results.Stage = importlib.import_module(f"bench.{name}").main()
        stage.load_before, stage.load_after = before, results.load_average()
        print(f"  load average before {before[0]:.2f}, after {stage.load_after[0]:.2f}\n")
        measured.append(stage)
    path = results.write(measured)
    print(f"wrote {path.relative_to(results.RESULTS.parent.parent)} and the charts beside it")
    print(f"{'stage':<10} {'ratio':<44} {'value':>7} {'target':>7}")
    for stage in measured:
        for ratio in stage.ratios:
            target = "" if ratio.target is None else f"{ratio.target:.2f}"
            print(f"{stage.name:<10} {ratio.label:<44} {ratio.value:7.3f} {target:>7}")


if __name__ == "__main__":
    main()
