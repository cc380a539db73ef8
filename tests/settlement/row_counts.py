"""The settlement tests' row counts: what a reconciliation writes, counted before and after."""

from __future__ import annotations

import asyncpg

TABLES = ("settlement_batches", "settlement_lines", "settlement_exceptions", "payment_escalations",
          "outbox_messages")


async def counts(pool: asyncpg.Pool) -> dict[str, int]:
    return {t: await pool.fetchval(f"SELECT count(*) FROM {t}") for t in TABLES}


def more_exceptions(before: dict[str, int], new: int) -> dict[str, int]:
    """The counts after ``new`` new exceptions: each its row, its escalation and the escalation's alert."""
    return {**before, "settlement_exceptions": before["settlement_exceptions"] + new,
            "payment_escalations": before["payment_escalations"] + new,
            "outbox_messages": before["outbox_messages"] + new}
