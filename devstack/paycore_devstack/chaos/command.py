"""``paycore chaos``: the run, its table and its exit code (1 when an invariant is broken)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys

from paycore_cli.common import paycore_home, sigterm_raises_interrupt


def cmd_chaos(args: argparse.Namespace) -> int:
    from pathlib import Path

    from paycore_devstack.chaos.model import ChaosOptions
    from paycore_devstack.chaos.report import table
    from paycore_devstack.chaos.run import run_chaos

    out_dir = Path(args.out) if args.out else paycore_home(create=True) / "chaos"
    options = ChaosOptions(
        orders=args.orders, clients=args.clients, duration_s=args.duration, fault_rate=args.fault_rate,
        kills=args.kills, seed=args.seed, provider=args.provider, db_kill=not args.no_db_kill,
        settle_within_s=args.settle_within, out_dir=out_dir.absolute(),
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # every client request is not news
    with contextlib.ExitStack() as stack:
        stack.enter_context(sigterm_raises_interrupt())
        record = asyncio.run(run_chaos(options))
    print(table(record))
    report_dir = record.extra.get("report_dir", str(out_dir))
    print(f"report: {report_dir}/chaos-table.txt, chaos-report.json, chaos-timeline.png")
    if record.extra.get("error"):
        print(f"paycore: the chaos run failed: {record.extra['error']} (logs in {report_dir}/logs)",
              file=sys.stderr)
        return 1
    if not record.clean:
        print("paycore: chaos run found broken checks (see the table); once the cause is fixed, keep "
              f"--provider {options.provider} --seed {options.seed} as a regression run "
              "(docs/chaos.md, Regressions)", file=sys.stderr)
        return 1
    return 0
