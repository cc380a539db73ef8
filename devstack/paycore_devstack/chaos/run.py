"""One chaos run, top to bottom.

1. Start the whole system (:class:`~.stack.ChaosStack`): embedded PostgreSQL,
   the local broker, the sandbox, two checkouts, the webhook intake, two
   recovery workers, the dispatcher and the fulfillment and email consumers,
   with short recovery timings and a short key window.
2. Sample the system every second for the timeline.
3. Turn the provider's faults on (drawn from the seed).
4. Run the storefront clients; meanwhile kill and restart every service kind,
   and the database once, at points of progress drawn from the seed.
5. Turn the faults off; let recovery settle within a bound.
6. Check every money invariant against the sandbox's ledger and the database,
   and that the run did what it says: it settled within its bound and carried
   out every kill it planned.
7. Write the table, the JSON report and the PNG timeline, also when a step
   failed (with the error).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from paycore_devstack.chaos import faults, invariants, kills, load, report
from paycore_devstack.chaos.model import ChaosOptions, RunRecord
from paycore_devstack.chaos.stack import ChaosStack

log = logging.getLogger("paycore.chaos")


async def run_chaos(options: ChaosOptions) -> RunRecord:
    """Run it; the record holds every observation and, at the end, the invariants' results.

    A run that fails (a service that does not start, a sandbox that refuses the faults,
    a check that cannot read the ledger) still writes what it has, with the error in
    ``record.extra["error"]`` and in the report; the record is then returned (never
    clean). An interruption (Ctrl-C, SIGTERM) writes it too, then goes on.
    """
    record = RunRecord(options)
    options.out_dir.mkdir(parents=True, exist_ok=True)
    stack = ChaosStack(options, record)
    report_dir = stack.run_dir  # logs, the database's data and the report, per run
    record.extra["report_dir"] = str(report_dir)
    try:
        await _run(stack, options, record)
    except Exception as exc:
        log.exception("the chaos run failed")
        record.extra["error"] = f"{type(exc).__name__}: {exc}"
    except BaseException as exc:
        record.extra["error"] = f"interrupted ({type(exc).__name__})"
        report.write(record, report_dir)
        raise
    # 7
    report.write(record, report_dir)
    return record


async def _run(stack: ChaosStack, options: ChaosOptions, record: RunRecord) -> None:
    # 1
    async with stack:
        endpoints = stack.endpoints
        # 2
        stop_sampling = asyncio.Event()
        sampler = asyncio.create_task(invariants.sample_loop(endpoints, record, stop_sampling))
        try:
            # 3
            await faults.install(endpoints, options, record)
            # 4
            load_started = record.now()
            progress = load.Progress(total=options.orders)
            killing = asyncio.create_task(kills.run(stack, options, record, progress))
            try:
                await load.run(endpoints, options, record, progress)
            finally:
                progress.finished.set()
                await killing
            record.phases["load"] = record.now() - load_started
            record.incident("load-done", "clients", f"{len(record.orders)} orders")
            # 5
            await faults.clear(endpoints, record)
            settle_started = record.now()
            await invariants.settle(endpoints, options, record)
            record.phases["settle"] = record.now() - settle_started
            # 6
            record.exited_on_own.extend(stack.exited_on_own())
            record.results = await invariants.check(endpoints, record)
        finally:
            stop_sampling.set()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
