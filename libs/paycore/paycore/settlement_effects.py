"""What reconciling a settlement batch tells the rest of the business: ``settlement-reconciled``.

The reconciliation engine (:mod:`paycore.settlements`) calls :func:`enqueue_reconciled` in the
transaction that records the batch, so the record is queued exactly when the batch is. Its
contract is ``contracts/schemas/settlement-reconciled.v1.json`` (docs/asyncapi.yaml).

The row names no attempt: its ordering key ``settlement:<provider_account>:<provider_batch_id>``
sends it to ``payments.effects`` with that record key (the relay keys a business row by its
ordering key), so every reading of one batch reaches accounting in order. Its dedup key names
the reading by the lines' content hash: the same lines read again queue nothing; an open batch
read again with other lines queues a new record.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg

from paycore import outbox

KIND = "settlement-reconciled"
HASH_SHOWN = 16  # hex digits of content_sha256 in the dedup key


def ordering_key(provider_account: str, provider_batch_id: str) -> str:
    """The batch's ordering key, and so its Kafka record key."""
    return f"settlement:{provider_account}:{provider_batch_id}"


def dedup_key(batch_id: int, content_sha256: str) -> str:
    """One reading of the batch: its id and the first 16 hex digits of its lines' hash."""
    return f"settlement-batch:{batch_id}:reconciled:{content_sha256[:HASH_SHOWN]}"


def payload(batch: asyncpg.Record) -> dict[str, Any]:
    """The record's fields from a ``settlement_batches`` row (``outbox.enqueue`` adds
    ``schema_version``, ``kind`` and ``dedup_key``)."""
    return {
        "batch_id": batch["batch_id"],
        "provider_account": batch["provider_account"],
        "provider_batch_id": batch["provider_batch_id"],
        "batch_date": batch["batch_date"].isoformat(),
        "provider_status": batch["provider_status"],
        "state": batch["state"],
        "currency": batch["currency"],
        "line_count": batch["line_count"],
        "matched_count": batch["matched_count"],
        "exception_count": batch["exception_count"],
        "bad_line_count": batch["bad_line_count"],
        "gross_minor": batch["gross_minor"],
        "fees_minor": batch["fees_minor"],
        "net_minor": batch["net_minor"],
        "reconciled_at": batch["reconciled_at"].isoformat(),
    }


async def enqueue_reconciled(conn: asyncpg.Connection, *, batch: asyncpg.Record, now: datetime) -> int | None:
    """Queue the batch's ``settlement-reconciled`` record unless this reading is already queued;
    returns the new outbox row's id, or None."""
    return await outbox.enqueue(
        conn, dedup_key=dedup_key(batch["batch_id"], batch["content_sha256"]), kind=KIND,
        payload=payload(batch), now=now, attempt_id=None,
        ordering=ordering_key(batch["provider_account"], batch["provider_batch_id"]))
