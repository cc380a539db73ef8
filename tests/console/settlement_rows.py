"""Settlement rows written straight into the three tables, as the reconciliation engine would.

The engine (``paycore.settlements``) is not here yet: these helpers write a batch, its lines and
its exceptions -- each exception with its escalation episode (reason
``settlement-exception:<kind>``, the detail the engine records) -- in plain SQL.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import date, datetime
from typing import Any
from uuid import UUID

import asyncpg

from tests.operators.test_inspection import episode

Line = tuple[str, int, int, UUID | None, str]  # kind, gross, fee, the payment it matched, outcome

BATCH_SQL = """
INSERT INTO settlement_batches (
    provider_account, provider_batch_id, source, batch_date, provider_status, currency,
    reported_gross_minor, reported_fees_minor, reported_net_minor, reported_lines, state, line_count,
    gross_minor, fees_minor, net_minor, matched_count, exception_count, bad_line_count, content_sha256,
    first_reconciled_at, reconciled_at)
VALUES ($1, $2, 'api', $3, $4, 'EUR', $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $18)
RETURNING batch_id"""

LINE_SQL = """
INSERT INTO settlement_lines (batch_id, line_no, kind, record_type, gross_currency, gross_minor,
                              net_currency, fee_minor, net_minor, attempt_id, outcome)
VALUES ($1, $2, $3, $3, 'EUR', $4::bigint, 'EUR', $5::bigint, $4::bigint - $5::bigint, $6, $7)"""

EXCEPTION_SQL = """
INSERT INTO settlement_exceptions (exception_key, provider_account, kind, batch_id, line_no, attempt_id,
                                   detail, escalation_id, found_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
RETURNING exception_id"""


async def batch(pool: asyncpg.Pool, account: str, provider_batch_id: str, batch_date: date, at: datetime, *,
                lines: Sequence[Line] = (), state: str = "reconciled", status: str = "closed",
                reported: tuple[int, int, int] | None = None,
                exceptions: int = 0, bad_lines: int = 0) -> int:
    """A batch and its lines ``(kind, gross, fee, attempt_id, outcome)``; totals computed from them,
    reported as computed unless ``reported`` (gross, fees, net) says otherwise."""
    gross = sum(line[1] for line in lines)
    fees = sum(line[2] for line in lines)
    rep = reported or (gross, fees, gross - fees)
    matched = sum(1 for line in lines if line[4] == "matched")
    sha = hashlib.sha256(f"{account}:{provider_batch_id}".encode()).hexdigest()
    batch_id: int = await pool.fetchval(
        BATCH_SQL, account, provider_batch_id, batch_date, status, *rep, len(lines), state, len(lines),
        gross, fees, gross - fees, matched, exceptions, bad_lines, sha, at)
    await pool.executemany(LINE_SQL, [(batch_id, n, kind, g, f, a, outcome)
                                      for n, (kind, g, f, a, outcome) in enumerate(lines, start=1)])
    return batch_id


async def exception(pool: asyncpg.Pool, account: str, kind: str, at: datetime, *, batch_id: int | None = None,
                    line_no: int | None = None, attempt_id: UUID | None = None,
                    evidence: dict[str, Any] | None = None) -> tuple[int, int]:
    """An exception and its escalation episode, as the engine records them: (exception_id, escalation_id)."""
    key = f"settlement:{account}:{batch_id}:{line_no}:{kind}:{attempt_id}"
    detail = {"provider_account": account, "batch_id": batch_id, "line_no": line_no, "kind": kind,
              **(evidence or {})}
    escalation_id = await episode(pool, at, f"settlement-exception:{kind}", attempt_id=attempt_id,
                                  detail=detail, key=key)
    exception_id: int = await pool.fetchval(EXCEPTION_SQL, key, account, kind, batch_id, line_no, attempt_id,
                                            detail, escalation_id, at)
    return exception_id, escalation_id
