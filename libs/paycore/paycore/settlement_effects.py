"""The ``settlement-reconciled`` effect: one per batch read, for the accounting systems."""

from __future__ import annotations

import hashlib
from datetime import datetime

import asyncpg

from paycore import outbox


def _reading(batch: asyncpg.Record) -> str:
    """16 hex digits naming a reading of the batch: its lines' digest while the provider calls it
    open; once closed, a digest of that and of its being closed -- the closing reading may hold
    exactly the lines of the last open one, and must still reach the accounting systems."""
    digest: str = batch["content_sha256"]
    if batch["provider_status"] == "closed":
        digest = hashlib.sha256(f"{digest}:closed".encode()).hexdigest()
    return digest[:16]


async def enqueue_reconciled(conn: asyncpg.Connection, *, batch: asyncpg.Record, now: datetime) -> int | None:
    """Queue the batch's effect, once per reading of the batch (an open batch read again with
    new lines is a new message, and so is its closing; the same content is none)."""
    dedup_key = f"settlement-batch:{batch['batch_id']}:reconciled:{_reading(batch)}"
    return await outbox.enqueue(
        conn, dedup_key=dedup_key, kind="settlement-reconciled", now=now, attempt_id=None,
        ordering=f"settlement:{batch['provider_account']}:{batch['provider_batch_id']}",
        payload={
            "batch_id": batch["batch_id"], "provider_account": batch["provider_account"],
            "provider_batch_id": batch["provider_batch_id"], "batch_date": batch["batch_date"].isoformat(),
            "provider_status": batch["provider_status"], "state": batch["state"],
            "currency": batch["currency"],
            "line_count": batch["line_count"], "matched_count": batch["matched_count"],
            "exception_count": batch["exception_count"], "bad_line_count": batch["bad_line_count"],
            "gross_minor": batch["gross_minor"], "fees_minor": batch["fees_minor"],
            "net_minor": batch["net_minor"],
            "reconciled_at": batch["reconciled_at"].isoformat(),
        })
