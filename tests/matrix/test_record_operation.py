"""Recording a capture, cancel or refund before it is sent, decided under the payment's lock (issue 29).

Real PostgreSQL, nothing mocked: each recording is re-read from the database; every refusal
records nothing; an operation that may still move money (live or Unknown) holds its amount; two
concurrent refunds are ordered by the payment's row lock (PostgreSQL's own view of who waits,
no sleeps); and a capture the lock did not see loses to the unique index as a refusal.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import asyncpg
import orjson
import pytest

from paycore import operations
from paycore.clock import FakeClock
from paycore.config import ProviderAccountConfig
from paycore.domain import OperationKind, OperationRefusal
from paycore.operations import Recorded, Refused, get_operation, operations_of, record_operation
from paycore.providers.cardco.operations import build_operation_body, operation_path

from .helpers import (
    ABANDONMENT_S,
    attempt_values,
    finish,
    insert_row,
    new_order,
    operation_values,
    seed_account,
    wait_until_blocked_by,
)

AMOUNT = 5000
PAYMENT_ID = "pay_rec_1"


class CardcoRequests:
    """Cardco's request building (the client's own functions), without its HTTP pool."""

    def operation_endpoint(self, account: ProviderAccountConfig, kind: OperationKind,
                           provider_payment_id: str) -> str:
        return account.base_url.rstrip("/") + operation_path(kind, provider_payment_id)

    def build_operation_body(self, kind: OperationKind, *, provider_payment_id: str, amount_minor: int,
                             reference: str, reason: str | None = None, currency: str | None = None,
                             account: ProviderAccountConfig | None = None) -> str:
        return build_operation_body(kind, provider_payment_id=provider_payment_id, amount_minor=amount_minor,
                                    reference=reference, reason=reason)


@pytest.fixture
async def account(pool: asyncpg.Pool, clock: FakeClock) -> ProviderAccountConfig:
    return await seed_account(pool, clock)


async def payment(pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig, *,
                  state: str = "Succeeded", hold: bool = False) -> asyncpg.Record:
    """A payment attempt of AMOUNT; ``hold``: authorized for manual capture (nothing charged)."""
    order = await new_order(pool, clock, amount=AMOUNT)
    return await insert_row(pool, "payment_attempts", attempt_values(
        order, account, clock.now(), state=state, provider_payment_id=PAYMENT_ID + uuid.uuid4().hex[:8],
        provider_status="requires_capture" if hold else "succeeded"))


async def record(db: asyncpg.Pool | asyncpg.Connection, clock: FakeClock, account: ProviderAccountConfig,
                 paid: asyncpg.Record, kind: OperationKind, amount: int, **kw: Any) -> Recorded | Refused:
    async def on(conn: asyncpg.Connection) -> Recorded | Refused:
        return await record_operation(
            conn, attempt_id=paid["attempt_id"], kind=kind, amount_minor=amount,
            requested_by="backoffice:store", account=account, requests=CardcoRequests(), now=clock.now(),
            abandonment_threshold_s=ABANDONMENT_S, **kw)
    if isinstance(db, asyncpg.Pool):
        async with db.acquire() as conn:
            return await on(conn)
    return await on(db)


async def by_hand(pool: asyncpg.Pool | asyncpg.Connection, clock: FakeClock, paid: asyncpg.Record, kind: str,
                  state: str, amount: int) -> asyncpg.Record:
    return await insert_row(pool, "payment_operations",
                            operation_values(paid, clock.now(), kind=kind, state=state, amount_minor=amount))


async def count(pool: asyncpg.Pool, paid: asyncpg.Record) -> int:
    n: int = await pool.fetchval("SELECT count(*) FROM payment_operations WHERE attempt_id = $1",
                                 paid["attempt_id"])
    return n


def recorded(result: Recorded | Refused) -> operations.Operation:
    assert isinstance(result, Recorded), result
    return result.operation


# -- recorded ------------------------------------------------------------------------------------------


async def test_a_refund_is_recorded_not_started_with_its_exact_request_and_history(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    paid = await payment(pool, clock, account)
    op = recorded(await record(pool, clock, account, paid, OperationKind.REFUND, 1200, reason="damaged"))

    row = await pool.fetchrow("SELECT * FROM payment_operations WHERE operation_id = $1", op.operation_id)
    assert row is not None
    reference = f"{paid['client_reference']}-refund1"
    assert {k: row[k] for k in (
        "attempt_id", "kind", "state", "requested_by", "provider_account", "endpoint", "api_version",
        "client_reference", "amount_minor", "currency", "created_at", "next_check_at", "first_sent_at",
        "escalation_deadline", "version")} == {
        "attempt_id": paid["attempt_id"], "kind": "refund", "state": "NotStarted",
        "requested_by": "backoffice:store", "provider_account": account.provider_account,
        "endpoint": "http://127.0.0.1:9/v1/refunds", "api_version": account.api_version,
        "client_reference": reference, "amount_minor": 1200, "currency": "EUR",
        "created_at": clock.now(), "next_check_at": clock.now() + timedelta(seconds=ABANDONMENT_S),
        "first_sent_at": None, "escalation_deadline": None, "version": 0}
    assert row["request_body"] == build_operation_body(
        OperationKind.REFUND, provider_payment_id=paid["provider_payment_id"], amount_minor=1200,
        reference=reference, reason="damaged")
    assert orjson.loads(row["request_body"])["payment"] == paid["provider_payment_id"]
    assert str(uuid.UUID(row["idempotency_key"])) == row["idempotency_key"]
    assert await get_operation(pool, op.operation_id) == op
    assert await operations_of(pool, paid["attempt_id"]) == [op]

    events = await pool.fetch("SELECT * FROM payment_attempt_events WHERE operation_id = $1", op.operation_id)
    assert [(e["attempt_id"], e["kind"], e["actor"], e["detail"]) for e in events] == [
        (paid["attempt_id"], "transition", "backoffice:store",
         {"operation": "refund", "from": None, "to": "NotStarted", "amount_minor": 1200})]


async def test_each_operation_has_its_own_key_and_numbered_reference(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    paid = await payment(pool, clock, account)
    first = recorded(await record(pool, clock, account, paid, OperationKind.REFUND, 1000))
    second = recorded(await record(pool, clock, account, paid, OperationKind.REFUND, 1000))
    assert first.idempotency_key != second.idempotency_key
    assert (first.client_reference, second.client_reference) == (
        f"{paid['client_reference']}-refund1", f"{paid['client_reference']}-refund2")


async def test_a_hold_is_captured_in_part_and_the_capture_is_then_refundable(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    hold = await payment(pool, clock, account, hold=True)
    capture = recorded(await record(pool, clock, account, hold, OperationKind.CAPTURE, 3000))
    assert capture.endpoint == f"http://127.0.0.1:9/v1/payments/{hold['provider_payment_id']}/captures"
    assert orjson.loads(capture.request_body) == {"amount": 3000, "reference": capture.client_reference}
    recorded(await record(pool, clock, account, hold, OperationKind.REFUND, 3000))
    assert await record(pool, clock, account, hold, OperationKind.REFUND, 1) == Refused(
        OperationRefusal.EXCEEDS_REFUNDABLE)


async def test_a_hold_is_cancelled_whole(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    hold = await payment(pool, clock, account, hold=True)
    cancel = recorded(await record(pool, clock, account, hold, OperationKind.CANCEL, AMOUNT))
    assert cancel.endpoint == f"http://127.0.0.1:9/v1/payments/{hold['provider_payment_id']}/cancel"


# -- refused: nothing recorded -------------------------------------------------------------------------


@pytest.mark.parametrize(("state", "kind", "refusal"), [
    ("Unknown", OperationKind.REFUND, OperationRefusal.NOT_CAPTURED),
    ("Failed", OperationKind.REFUND, OperationRefusal.NOT_CAPTURED),
    ("Started", OperationKind.CAPTURE, OperationRefusal.NOT_CAPTURABLE),
    ("Unknown", OperationKind.CANCEL, OperationRefusal.NOT_CANCELABLE),
])
async def test_a_payment_that_did_not_succeed_gives_nothing(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig, state: str, kind: OperationKind,
    refusal: OperationRefusal,
) -> None:
    unpaid = await payment(pool, clock, account, state=state, hold=kind is not OperationKind.REFUND)
    assert await record(pool, clock, account, unpaid, kind, AMOUNT) == Refused(refusal)
    assert await count(pool, unpaid) == 0


async def test_a_refund_over_the_captured_amount_by_one_minor_unit_is_refused(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    paid = await payment(pool, clock, account)
    assert await record(pool, clock, account, paid, OperationKind.REFUND, AMOUNT + 1) == Refused(
        OperationRefusal.EXCEEDS_REFUNDABLE)
    recorded(await record(pool, clock, account, paid, OperationKind.REFUND, 2000))
    assert await record(pool, clock, account, paid, OperationKind.REFUND, AMOUNT - 2000 + 1) == Refused(
        OperationRefusal.EXCEEDS_REFUNDABLE)
    recorded(await record(pool, clock, account, paid, OperationKind.REFUND, AMOUNT - 2000))
    assert await count(pool, paid) == 2


async def test_a_refund_of_a_hold_is_refused(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    hold = await payment(pool, clock, account, hold=True)
    assert await record(pool, clock, account, hold, OperationKind.REFUND, 100) == Refused(
        OperationRefusal.NOT_CAPTURED)
    assert await count(pool, hold) == 0


async def test_a_capture_over_the_hold_is_refused(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    hold = await payment(pool, clock, account, hold=True)
    assert await record(pool, clock, account, hold, OperationKind.CAPTURE, AMOUNT + 1) == Refused(
        OperationRefusal.EXCEEDS_CAPTURABLE)
    assert await count(pool, hold) == 0


async def test_a_payment_captured_up_front_cannot_be_captured_or_cancelled(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    paid = await payment(pool, clock, account)
    assert await record(pool, clock, account, paid, OperationKind.CAPTURE, 100) == Refused(
        OperationRefusal.NOT_CAPTURABLE)
    assert await record(pool, clock, account, paid, OperationKind.CANCEL, AMOUNT) == Refused(
        OperationRefusal.NOT_CANCELABLE)
    assert await count(pool, paid) == 0


async def test_a_second_capture_and_a_cancel_after_a_capture_are_refused(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    hold = await payment(pool, clock, account, hold=True)
    recorded(await record(pool, clock, account, hold, OperationKind.CAPTURE, 1000))
    assert await record(pool, clock, account, hold, OperationKind.CAPTURE, 1000) == Refused(
        OperationRefusal.NOT_CAPTURABLE)
    assert await record(pool, clock, account, hold, OperationKind.CANCEL, AMOUNT) == Refused(
        OperationRefusal.NOT_CANCELABLE)
    assert await count(pool, hold) == 1


async def test_a_capture_after_a_cancel_is_refused(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    hold = await payment(pool, clock, account, hold=True)
    recorded(await record(pool, clock, account, hold, OperationKind.CANCEL, AMOUNT))
    assert await record(pool, clock, account, hold, OperationKind.CAPTURE, AMOUNT) == Refused(
        OperationRefusal.NOT_CAPTURABLE)
    assert await count(pool, hold) == 1


# -- what holds ----------------------------------------------------------------------------------------


async def test_an_unknown_refund_holds_its_amount(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    paid = await payment(pool, clock, account)
    await by_hand(pool, clock, paid, "refund", "Unknown", 4000)
    assert await record(pool, clock, account, paid, OperationKind.REFUND, 1001) == Refused(
        OperationRefusal.EXCEEDS_REFUNDABLE)
    recorded(await record(pool, clock, account, paid, OperationKind.REFUND, 1000))


@pytest.mark.parametrize("state", ["Failed", "NotApplied", "Returned"])
async def test_a_refund_that_moved_nothing_frees_its_amount(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig, state: str
) -> None:
    paid = await payment(pool, clock, account)
    await by_hand(pool, clock, paid, "refund", state, AMOUNT)
    op = recorded(await record(pool, clock, account, paid, OperationKind.REFUND, AMOUNT))
    assert op.client_reference == f"{paid['client_reference']}-refund2"


# -- concurrency ---------------------------------------------------------------------------------------


async def test_two_concurrent_partial_refunds_over_the_refundable_amount_record_exactly_one(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    """The first recorder's transaction stays open (its recording a savepoint inside it), so the
    second must wait on the payment's lock, then decide against the first's committed refund."""
    paid = await payment(pool, clock, account)
    async with pool.acquire() as first, pool.acquire() as second:
        first_pid = first.get_server_pid()
        tx = first.transaction()
        await tx.start()
        try:
            one = await record(first, clock, account, paid, OperationKind.REFUND, 3000)
            other = asyncio.create_task(record(second, clock, account, paid, OperationKind.REFUND, 3000))
            await wait_until_blocked_by(pool, first_pid, other)
        except BaseException:
            await tx.rollback()
            raise
        await tx.commit()
        results = [one, await finish(other)]
    assert [type(r) for r in results] == [Recorded, Refused]
    assert results[1] == Refused(OperationRefusal.EXCEEDS_REFUNDABLE)
    assert await count(pool, paid) == 1


async def test_two_concurrent_partial_refunds_within_the_refundable_amount_both_record(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    paid = await payment(pool, clock, account)
    results = await asyncio.gather(
        *(finish(record(pool, clock, account, paid, OperationKind.REFUND, 2500)) for _ in range(2)))
    assert all(isinstance(r, Recorded) for r in results)
    references = sorted(recorded(r).client_reference for r in results)
    assert references == [f"{paid['client_reference']}-refund1", f"{paid['client_reference']}-refund2"]


@pytest.mark.parametrize(("kind", "refusal"), [
    (OperationKind.CANCEL, OperationRefusal.NOT_CANCELABLE),
    (OperationKind.CAPTURE, OperationRefusal.NOT_CAPTURABLE),
])
async def test_a_capture_the_lock_did_not_see_wins_the_unique_index_and_the_recording_is_refused(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig, kind: OperationKind,
    refusal: OperationRefusal,
) -> None:
    """A writer that skipped the payment's lock inserts a capture and commits while the recording,
    which could not see it, waits on its index entry: the database's backstop refuses the second."""
    hold = await payment(pool, clock, account, hold=True)
    async with pool.acquire() as skipper:
        tx = skipper.transaction()
        await tx.start()
        try:
            await by_hand(skipper, clock, hold, "capture", "NotStarted", 1000)
            recording = asyncio.create_task(record(pool, clock, account, hold, kind, AMOUNT))
            await wait_until_blocked_by(pool, skipper.get_server_pid(), recording)
        except BaseException:
            await tx.rollback()
            raise
        await tx.commit()
    assert await finish(recording) == Refused(refusal)
    assert [op.kind for op in await operations_of(pool, hold["attempt_id"])] == [OperationKind.CAPTURE]
    assert await pool.fetchval("SELECT count(*) FROM payment_attempt_events WHERE attempt_id = $1",
                               hold["attempt_id"]) == 0
