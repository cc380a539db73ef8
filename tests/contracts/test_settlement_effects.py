"""``settlement-reconciled``: what paycore.settlement_effects queues for a batch validates against the
released schema, is queued once per reading of the batch, and is relayed to payments.effects keyed
``settlement:<provider_account>:<provider_batch_id>``."""

from __future__ import annotations

from datetime import timedelta

import asyncpg

from paycore import contracts
from paycore.clock import FakeClock
from paycore.settlement_effects import enqueue_reconciled
from paycore_dispatcher.relay import RelayConfig, Row, record_for
from tests.console.settlement_rows import batch
from tests.contracts.test_producers import released_validator
from tests.matrix.helpers import seed_account


async def test_a_reconciled_batch_is_queued_once_per_reading_and_conforms(
    pool: asyncpg.Pool, clock: FakeClock,
) -> None:
    account = (await seed_account(pool, clock)).provider_account
    now = clock.now()
    batch_id = await batch(pool, account, "stl_20261128", now.date() - timedelta(days=1), now,
                           lines=[("charge", 4999, 150, None, "exception"), ("fee", 0, 25, None, "booked")],
                           status="open", exceptions=1)
    row = await pool.fetchrow("SELECT * FROM settlement_batches WHERE batch_id = $1", batch_id)
    async with pool.acquire() as conn, conn.transaction():
        message_id = await enqueue_reconciled(conn, batch=row, now=now)
        assert await enqueue_reconciled(conn, batch=row, now=now) is None  # the same reading: once
    assert message_id is not None
    queued = await pool.fetchrow("SELECT * FROM outbox_messages WHERE message_id = $1", message_id)
    payload = queued["payload"]
    assert queued["kind"] == "settlement-reconciled" and queued["attempt_id"] is None
    assert queued["ordering_key"] == f"settlement:{account}:stl_20261128"
    assert queued["dedup_key"] == f"settlement-batch:{batch_id}:reconciled:{row['content_sha256'][:16]}"
    assert payload == {
        "schema_version": 1, "kind": "settlement-reconciled", "dedup_key": queued["dedup_key"],
        "batch_id": batch_id, "provider_account": account, "provider_batch_id": "stl_20261128",
        "batch_date": (now.date() - timedelta(days=1)).isoformat(), "provider_status": "open",
        "state": "reconciled", "currency": "EUR", "line_count": 2, "matched_count": 0, "exception_count": 1,
        "bad_line_count": 0, "gross_minor": 4999, "fees_minor": 175, "net_minor": 4824,
        "reconciled_at": now.isoformat()}
    assert contracts.validate(payload) == []
    assert list(released_validator("settlement-reconciled", 1).iter_errors(payload)) == []
    # The relay: a business row of the effects topic, keyed by its ordering key, no attempt header.
    config = RelayConfig(effects_topic="payments.effects", alerts_topic="ops.alerts",
                         reminder_interval=timedelta(minutes=15))
    topic, key, _, headers = record_for(Row(message_id, queued["dedup_key"], None, queued["ordering_key"],
                                            queued["kind"], payload, 0), config)
    assert (topic, key) == ("payments.effects", f"settlement:{account}:stl_20261128".encode())
    assert "attempt_id" not in dict(headers)
    # The open batch read again with other lines is a new reading: queued again.
    await pool.execute("UPDATE settlement_batches SET content_sha256 = $2 WHERE batch_id = $1", batch_id,
                       "ab" * 32)
    again = await pool.fetchrow("SELECT * FROM settlement_batches WHERE batch_id = $1", batch_id)
    async with pool.acquire() as conn, conn.transaction():
        assert await enqueue_reconciled(conn, batch=again, now=now) is not None
    # Its closing with exactly those lines is a reading too: the last record says closed.
    await pool.execute("UPDATE settlement_batches SET provider_status = 'closed' WHERE batch_id = $1",
                       batch_id)
    closed = await pool.fetchrow("SELECT * FROM settlement_batches WHERE batch_id = $1", batch_id)
    async with pool.acquire() as conn, conn.transaction():
        closing = await enqueue_reconciled(conn, batch=closed, now=now)
        assert closing is not None and await enqueue_reconciled(conn, batch=closed, now=now) is None
    last = await pool.fetchrow("SELECT payload FROM outbox_messages WHERE message_id = $1", closing)
    assert last["payload"]["provider_status"] == "closed"
    assert list(released_validator("settlement-reconciled", 1).iter_errors(last["payload"])) == []


def test_a_payload_missing_a_total_or_with_a_bad_state_is_refused() -> None:
    sample = contracts.example("settlement-reconciled")
    assert contracts.validate(sample) == []
    assert contracts.validate({k: v for k, v in sample.items() if k != "net_minor"}) == [
        "settlement-reconciled v1: $: required property 'net_minor' missing"]
    assert contracts.validate({**sample, "state": "settled"}) != []
    assert contracts.validate({**sample, "dedup_key": "attempt:x:settlement"}) != []
