"""payment_operations' CHECK and UNIQUE rules against the real database (issue 29).

As for attempts (test_schema_constraints.py): each invalid row is rejected with the
constraint's own name and a valid neighbour is accepted, so a rule that is missing, misspelled
or too strict fails here. The states and kinds the database allows are the domain's.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from paycore.clock import FakeClock
from paycore.domain import OperationKind, OperationState

from .helpers import attempt_values, insert_row, new_order, operation_values, seed_account

CheckViolation = asyncpg.exceptions.CheckViolationError
UniqueViolation = asyncpg.exceptions.UniqueViolationError


@pytest.fixture
async def payment(pool: asyncpg.Pool, clock: FakeClock) -> asyncpg.Record:
    """A Succeeded payment attempt the operations belong to."""
    account = await seed_account(pool, clock)
    order = await new_order(pool, clock)
    return await insert_row(pool, "payment_attempts",
                            attempt_values(order, account, clock.now(), state="Succeeded"))


async def rejected(pool: asyncpg.Pool, values: dict[str, Any], constraint: str,
                   error: type[asyncpg.PostgresError] = CheckViolation) -> None:
    with pytest.raises(error) as exc:
        await insert_row(pool, "payment_operations", values)
    assert exc.value.constraint_name == constraint


async def allowed_values(pool: asyncpg.Pool, constraint: str) -> set[str]:
    """The quoted values of a CHECK's IN list, as PostgreSQL stored it."""
    definition = await pool.fetchval(
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = $1", constraint)
    return {part.split("'")[1] for part in definition.split("ARRAY[")[1].split(",")}


async def test_the_database_allows_exactly_the_domains_kinds_and_states(pool: asyncpg.Pool) -> None:
    assert await allowed_values(pool, "ck_operation_kind") == {k.value for k in OperationKind}
    assert await allowed_values(pool, "ck_operation_state") == {s.value for s in OperationState}


async def test_an_unknown_kind_or_state_is_rejected(
    pool: asyncpg.Pool, clock: FakeClock, payment: asyncpg.Record
) -> None:
    await rejected(pool, operation_values(payment, clock.now(), kind="chargeback"), "ck_operation_kind")
    await rejected(pool, operation_values(payment, clock.now(), state="Pending", sent=True),
                   "ck_operation_state")


@pytest.mark.parametrize("kind", ["capture", "cancel"])
async def test_only_a_refund_can_be_returned(
    pool: asyncpg.Pool, clock: FakeClock, payment: asyncpg.Record, kind: str
) -> None:
    await rejected(pool, operation_values(payment, clock.now(), kind=kind, state="Returned"),
                   "ck_operation_returned_is_a_refund")
    row = await insert_row(pool, "payment_operations",
                           operation_values(payment, clock.now(), state="Returned"))
    assert row["kind"] == "refund"


@pytest.mark.parametrize("amount", [0, -1])
async def test_a_zero_or_negative_amount_is_rejected(
    pool: asyncpg.Pool, clock: FakeClock, payment: asyncpg.Record, amount: int
) -> None:
    await rejected(pool, operation_values(payment, clock.now(), amount_minor=amount), "ck_operation_amount")


async def test_a_currency_that_is_not_three_upper_case_letters_is_rejected(
    pool: asyncpg.Pool, clock: FakeClock, payment: asyncpg.Record
) -> None:
    await rejected(pool, operation_values(payment, clock.now(), currency="eur"), "ck_operation_currency")


async def test_a_negative_version_is_rejected(
    pool: asyncpg.Pool, clock: FakeClock, payment: asyncpg.Record
) -> None:
    await rejected(pool, operation_values(payment, clock.now(), version=-1), "ck_operation_version")


@pytest.mark.parametrize(("state", "sent", "reason"), [
    ("NotStarted", True, None),
    ("Started", False, None),
    ("Unknown", True, "never-sent"),
    ("NotApplied", False, None),
])
async def test_a_row_on_the_wrong_side_of_the_send_boundary_is_rejected(
    pool: asyncpg.Pool, clock: FakeClock, payment: asyncpg.Record, state: str, sent: bool,
    reason: str | None,
) -> None:
    await rejected(pool, operation_values(payment, clock.now(), state=state, sent=sent,
                                          outcome_reason=reason),
                   "ck_operation_send_boundary")


@pytest.mark.parametrize(("state", "sent", "reason"), [
    ("NotStarted", False, None),
    ("NotApplied", False, "never-sent"),
    ("NotApplied", True, "rejected:amount_exceeds_refundable"),
    ("Unknown", True, "provider.no-response"),
    ("Succeeded", True, None),
])
async def test_a_row_on_the_right_side_of_the_send_boundary_is_accepted(
    pool: asyncpg.Pool, clock: FakeClock, payment: asyncpg.Record, state: str, sent: bool,
    reason: str | None,
) -> None:
    row = await insert_row(pool, "payment_operations",
                           operation_values(payment, clock.now(), state=state, sent=sent,
                                            outcome_reason=reason))
    assert row["state"] == state


async def test_a_partial_lease_is_rejected_and_a_whole_one_accepted(
    pool: asyncpg.Pool, clock: FakeClock, payment: asyncpg.Record
) -> None:
    now = clock.now()
    await rejected(pool, operation_values(payment, now, state="Unknown", recovery_owner="recovery-1"),
                   "ck_operation_lease")
    row = await insert_row(pool, "payment_operations", operation_values(
        payment, now, state="Unknown", recovery_owner="recovery-1", lease_token=uuid.uuid4(),
        lease_acquired_at=now, lease_expires_at=now + timedelta(seconds=30)))
    assert row["lease_token"] is not None


async def test_a_reference_and_a_key_are_unique_within_a_provider_account(
    pool: asyncpg.Pool, clock: FakeClock, payment: asyncpg.Record
) -> None:
    first = await insert_row(pool, "payment_operations", operation_values(payment, clock.now()))
    await rejected(pool, operation_values(payment, clock.now(), client_reference=first["client_reference"]),
                   "uq_operation_reference", UniqueViolation)
    await rejected(pool, operation_values(payment, clock.now(), idempotency_key=first["idempotency_key"]),
                   "uq_operation_idempotency_key", UniqueViolation)


@pytest.mark.parametrize(("first", "second"), [
    ("capture", "capture"), ("capture", "cancel"), ("cancel", "capture"), ("cancel", "cancel"),
])
@pytest.mark.parametrize("holding", ["NotStarted", "Unknown", "Succeeded"])
async def test_one_capture_or_cancel_holds_a_payment_while_live_or_succeeded(
    pool: asyncpg.Pool, clock: FakeClock, payment: asyncpg.Record, first: str, second: str,
    holding: str,
) -> None:
    await insert_row(pool, "payment_operations",
                     operation_values(payment, clock.now(), kind=first, state=holding))
    await rejected(pool, operation_values(payment, clock.now(), kind=second),
                   "one_capture_or_cancel_per_payment", UniqueViolation)


@pytest.mark.parametrize("ended", ["Failed", "NotApplied"])
async def test_a_failed_or_unapplied_capture_leaves_room_for_another_and_refunds_are_many(
    pool: asyncpg.Pool, clock: FakeClock, payment: asyncpg.Record, ended: str
) -> None:
    await insert_row(pool, "payment_operations", operation_values(
        payment, clock.now(), kind="capture", state=ended, outcome_reason="card_declined"))
    await insert_row(pool, "payment_operations", operation_values(payment, clock.now(), kind="capture"))
    for _ in range(3):
        await insert_row(pool, "payment_operations", operation_values(payment, clock.now(), kind="refund"))


async def test_a_provider_operation_id_belongs_to_one_operation_per_account(
    pool: asyncpg.Pool, clock: FakeClock, payment: asyncpg.Record
) -> None:
    await insert_row(pool, "payment_operations", operation_values(
        payment, clock.now(), state="Succeeded", provider_operation_id="re_1"))
    await rejected(pool, operation_values(payment, clock.now(), state="Succeeded",
                                          provider_operation_id="re_1"),
                   "one_operation_per_provider_operation", UniqueViolation)


async def test_an_operations_history_is_the_payments_marked_with_the_operation(
    pool: asyncpg.Pool, clock: FakeClock, payment: asyncpg.Record
) -> None:
    operation = await insert_row(pool, "payment_operations", operation_values(payment, clock.now()))
    await pool.execute(
        "INSERT INTO payment_attempt_events (attempt_id, operation_id, occurred_at, kind, actor, detail)"
        " VALUES ($1, $2, $3, 'send_intent', 'test', '{}')",
        payment["attempt_id"], operation["operation_id"], clock.now())
    with pytest.raises(asyncpg.exceptions.ForeignKeyViolationError):
        await pool.execute(
            "INSERT INTO payment_attempt_events (attempt_id, operation_id, occurred_at, kind, actor, detail)"
            " VALUES ($1, $2, $3, 'send_intent', 'test', '{}')",
            payment["attempt_id"], uuid.uuid4(), clock.now())
