"""One reconciliation of a report file, in a process of its own (bench/settlement.py).

``python -m bench.settlement_child DSN REPORT PROVIDER_ACCOUNT BATCH_ID`` prints one JSON line:
the seconds reconcile_batch took, the lines, matched and exceptions it counted, and this
process's peak resident set size.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from datetime import timedelta
from pathlib import Path

from paycore.clock import SystemClock
from paycore.db import create_pool
from paycore.providers.settlement_sources import read_report_file
from paycore.settlements import reconcile_batch


async def run(dsn: str, report: Path, provider_account: str, batch_id: str) -> dict[str, float]:
    pool = await create_pool(dsn, max_size=2)
    try:
        started = time.perf_counter()
        batch, lines = await read_report_file("cardco", report, provider_account, batch_id=batch_id)
        outcome = await reconcile_batch(pool, batch, lines, now=SystemClock().now(),
                                        reminder_interval=timedelta(minutes=15))
        seconds = time.perf_counter() - started
    finally:
        await pool.close()
    return {"seconds": seconds, "lines": outcome.line_count, "matched": outcome.matched_count,
            "exceptions": outcome.exception_count,
            "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


if __name__ == "__main__":
    dsn, report, account, batch_id = sys.argv[1:5]
    print(json.dumps(asyncio.run(run(dsn, Path(report), account, batch_id))))
