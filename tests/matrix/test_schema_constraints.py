"""Every named CHECK and UNIQUE rule of the schema, exercised against the real database.

Each invalid row is rejected with the constraint's own name, and a valid
neighbour of it is accepted, so a constraint that is missing, misspelled or
too strict fails here.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import pytest

from paycore import orders
from paycore.clock import FakeClock
from paycore.config import ProviderAccountConfig

from .helpers import attempt_values, insert_row, new_order, seed_account

CheckViolation = asyncpg.exceptions.CheckViolationError
UniqueViolation = asyncpg.exceptions.UniqueViolationError

HOUR = timedelta(hours=1)
FINGERPRINT = "0" * 64
AT_CREATION = object()  # idempotency_values: expires_at equal to created_at


@pytest.fixture
async def account(pool: asyncpg.Pool, clock: FakeClock) -> ProviderAccountConfig:
    return await seed_account(pool, clock)


@pytest.fixture
async def live_account(pool: asyncpg.Pool, clock: FakeClock) -> ProviderAccountConfig:
    return await seed_account(pool, clock, environment="live")


@pytest.fixture
async def order(pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig) -> orders.Order:
    return await new_order(pool, clock)


async def rejected(pool: asyncpg.Pool, table: str, values: dict[str, Any], constraint: str | set[str],
                   error: type[asyncpg.PostgresError] = CheckViolation) -> None:
    with pytest.raises(error) as exc:
        await insert_row(pool, table, values)
    allowed = {constraint} if isinstance(constraint, str) else constraint
    assert exc.value.constraint_name in allowed


def escalation_values(now: datetime, **overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "escalation_key": f"attempt:{uuid.uuid4()}:deadline",
        "reason": "deadline",
        "raised_at": now,
        "next_reminder_at": now + HOUR,
    }
    values.update(overrides)
    return values


def outbox_values(now: datetime, **overrides: Any) -> dict[str, Any]:
    key = f"attempt:{uuid.uuid4()}:order-confirmation"
    values: dict[str, Any] = {
        "dedup_key": key,
        "kind": "order-confirmation",
        "payload": {"dedup_key": key},
        "created_at": now,
        "next_attempt_at": now,
    }
    values.update(overrides)
    return values


def event_values(now: datetime, **overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "occurred_at": now,
        "kind": "lookup",
        "actor": "recovery-1",
        "detail": {"status": "processing"},
    }
    values.update(overrides)
    return values


def provider_account_values(now: datetime, **overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "provider_account": "cardco:acct_other:test",
        "provider": "cardco",
        "account": "acct_other",
        "environment": "test",
        "base_url": "http://127.0.0.1:9",
        "api_version": "2026-11-01",
        "key_retention": timedelta(hours=24),
        "escalation_margin": timedelta(hours=2),
        "lookup_rate_per_s": 20,
        "updated_at": now,
    }
    values.update(overrides)
    return values


def order_values(now: datetime, **overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "order_id": orders.new_order_id(),
        "customer_id": "cus_1",
        "amount_minor": 4999,
        "currency": "EUR",
        "created_at": now,
    }
    values.update(overrides)
    return values


def idempotency_values(now: datetime, **overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "idempotency_key": str(uuid.uuid4()),
        "endpoint": "POST /orders/{order_id}/payment",
        "customer_id": "cus_1",
        "request_fingerprint": FINGERPRINT,
        "state": "in_progress",
        "created_at": now,
        "expires_at": now + timedelta(days=1),
    }
    values.update(overrides)
    if values["expires_at"] is AT_CREATION:
        values["expires_at"] = now
    return values


# --- payment_attempts: CHECK constraints ---------------------------------------------------------------


@pytest.mark.parametrize("state", ["Unkown", "unknown", "Pending", ""])
async def test_a_state_value_outside_the_allowed_set_is_rejected_by_the_database(
    pool: asyncpg.Pool, clock: FakeClock, order: orders.Order, account: ProviderAccountConfig, state: str
) -> None:
    await rejected(pool, "payment_attempts",
                   attempt_values(order, account, clock.now(), state=state, sent=True),
                   "ck_payment_attempt_state")
    row = await insert_row(pool, "payment_attempts",
                           attempt_values(order, account, clock.now(), state="Unknown"))
    assert row["state"] == "Unknown"


async def test_an_attempt_number_below_one_is_rejected(
    pool: asyncpg.Pool, clock: FakeClock, order: orders.Order, account: ProviderAccountConfig
) -> None:
    for number in (0, -1):
        await rejected(pool, "payment_attempts",
                       attempt_values(order, account, clock.now(), attempt_number=number),
                       "ck_payment_attempt_number")
    await insert_row(pool, "payment_attempts", attempt_values(order, account, clock.now(), number=1))


async def test_a_zero_or_negative_amount_is_rejected(
    pool: asyncpg.Pool, clock: FakeClock, order: orders.Order, account: ProviderAccountConfig
) -> None:
    for amount in (0, -4999):
        await rejected(pool, "payment_attempts",
                       attempt_values(order, account, clock.now(), amount_minor=amount),
                       "ck_payment_amount")
    row = await insert_row(pool, "payment_attempts",
                           attempt_values(order, account, clock.now(), amount_minor=1))
    assert row["amount_minor"] == 1


async def test_a_currency_that_is_not_three_upper_case_letters_is_rejected(
    pool: asyncpg.Pool, clock: FakeClock, order: orders.Order, account: ProviderAccountConfig
) -> None:
    for currency in ("eur", "EURO", "EU", "E1R", ""):
        await rejected(pool, "payment_attempts",
                       attempt_values(order, account, clock.now(), currency=currency),
                       "ck_payment_currency")
    await insert_row(pool, "payment_attempts", attempt_values(order, account, clock.now(), currency="EUR"))


async def test_a_negative_version_is_rejected(
    pool: asyncpg.Pool, clock: FakeClock, order: orders.Order, account: ProviderAccountConfig
) -> None:
    await rejected(pool, "payment_attempts", attempt_values(order, account, clock.now(), version=-1),
                   "ck_payment_version")
    row = await insert_row(pool, "payment_attempts", attempt_values(order, account, clock.now(), version=0))
    assert row["version"] == 0


SEND_BOUNDARY_REJECTED = {
    "NotStarted-with-first_sent_at": dict(state="NotStarted", sent=False, first_sent_at=True),
    "NotStarted-with-escalation_deadline": dict(state="NotStarted", sent=False, escalation_deadline=True),
    "NotStarted-with-both-timestamps": dict(state="NotStarted", sent=True),
    "NotApplied-without-timestamps-other-reason": dict(state="NotApplied", sent=False,
                                                        outcome_reason="rejected:invalid_request"),
    "NotApplied-never-sent-with-timestamps": dict(state="NotApplied", sent=True, outcome_reason="never-sent"),
    "NotApplied-never-sent-with-first_sent_at-only": dict(state="NotApplied", sent=False,
                                                           outcome_reason="never-sent", first_sent_at=True),
    "Started-without-timestamps": dict(state="Started", sent=False),
    "Started-without-escalation_deadline": dict(state="Started", sent=False, first_sent_at=True),
    "Unknown-without-first_sent_at": dict(state="Unknown", sent=False, escalation_deadline=True),
    "Succeeded-without-timestamps": dict(state="Succeeded", sent=False),
    "Unknown-with-never-sent-reason": dict(state="Unknown", sent=True, outcome_reason="never-sent"),
}


def _boundary_row(order: orders.Order, account: ProviderAccountConfig, now: datetime,
                  spec: dict[str, Any]) -> dict[str, Any]:
    spec = dict(spec)
    extra: dict[str, Any] = {}
    if spec.pop("first_sent_at", False):
        extra["first_sent_at"] = now
    if spec.pop("escalation_deadline", False):
        extra["escalation_deadline"] = now + timedelta(hours=22)
    return attempt_values(order, account, now, **spec, **extra)


@pytest.mark.parametrize("spec", SEND_BOUNDARY_REJECTED.values(), ids=SEND_BOUNDARY_REJECTED.keys())
async def test_a_row_on_the_wrong_side_of_the_send_boundary_is_rejected(
    pool: asyncpg.Pool, clock: FakeClock, order: orders.Order, account: ProviderAccountConfig,
    spec: dict[str, Any],
) -> None:
    await rejected(pool, "payment_attempts", _boundary_row(order, account, clock.now(), spec),
                   "ck_payment_attempt_send_boundary")


async def test_a_not_applied_row_without_a_reason_and_without_send_timestamps_is_rejected(
    pool: asyncpg.Pool, clock: FakeClock, order: orders.Order, account: ProviderAccountConfig
) -> None:
    await rejected(pool, "payment_attempts",
                   attempt_values(order, account, clock.now(), state="NotApplied", sent=False,
                                  outcome_reason=None),
                   "ck_payment_attempt_send_boundary")


SEND_BOUNDARY_ACCEPTED = {
    "NotStarted-without-timestamps": dict(state="NotStarted", sent=False),
    "NotApplied-never-sent-without-timestamps": dict(state="NotApplied", sent=False,
                                                      outcome_reason="never-sent"),
    "NotApplied-rejected-with-timestamps": dict(state="NotApplied", sent=True,
                                                 outcome_reason="rejected:invalid_request"),
    "Started-with-timestamps": dict(state="Started", sent=True),
    "Unknown-with-timestamps": dict(state="Unknown", sent=True, outcome_reason="provider.no-response"),
    "Succeeded-with-timestamps": dict(state="Succeeded", sent=True),
    "Failed-with-timestamps": dict(state="Failed", sent=True, outcome_reason="card_declined"),
}


@pytest.mark.parametrize("spec", SEND_BOUNDARY_ACCEPTED.values(), ids=SEND_BOUNDARY_ACCEPTED.keys())
async def test_a_row_on_the_right_side_of_the_send_boundary_is_accepted(
    pool: asyncpg.Pool, clock: FakeClock, order: orders.Order, account: ProviderAccountConfig,
    spec: dict[str, Any],
) -> None:
    row = await insert_row(pool, "payment_attempts", _boundary_row(order, account, clock.now(), spec))
    assert row["state"] == spec["state"]


LEASE_FIELDS = ("recovery_owner", "lease_token", "lease_acquired_at", "lease_expires_at")
LEASE_REJECTED = {
    "owner-without-token": ("recovery_owner", "lease_acquired_at", "lease_expires_at"),
    "token-without-acquired_at": ("recovery_owner", "lease_token", "lease_expires_at"),
    "token-without-expiry": ("recovery_owner", "lease_token", "lease_acquired_at"),
    "lease-without-owner": ("lease_token", "lease_acquired_at", "lease_expires_at"),
    "owner-only": ("recovery_owner",),
    "token-only": ("lease_token",),
    "expiry-only": ("lease_expires_at",),
}


def _lease(now: datetime, fields: tuple[str, ...]) -> dict[str, Any]:
    full: dict[str, Any] = {
        "recovery_owner": "recovery-1",
        "lease_token": uuid.uuid4(),
        "lease_acquired_at": now,
        "lease_expires_at": now + timedelta(seconds=30),
    }
    return {name: full[name] for name in fields}


@pytest.mark.parametrize("fields", LEASE_REJECTED.values(), ids=LEASE_REJECTED.keys())
async def test_a_partial_lease_is_rejected(
    pool: asyncpg.Pool, clock: FakeClock, order: orders.Order, account: ProviderAccountConfig,
    fields: tuple[str, ...],
) -> None:
    await rejected(pool, "payment_attempts",
                   attempt_values(order, account, clock.now(), state="Unknown",
                                  **_lease(clock.now(), fields)),
                   "ck_payment_attempt_lease")


async def test_a_complete_lease_or_no_lease_is_accepted(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    held = await insert_row(pool, "payment_attempts", attempt_values(
        await new_order(pool, clock), account, clock.now(), state="Unknown",
        **_lease(clock.now(), LEASE_FIELDS)))
    assert held["lease_token"] is not None
    free = await insert_row(pool, "payment_attempts", attempt_values(
        await new_order(pool, clock), account, clock.now(), state="Unknown"))
    assert free["recovery_owner"] is None


async def test_an_action_expiry_without_an_action_is_rejected(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    now = clock.now()
    await rejected(pool, "payment_attempts", attempt_values(
        await new_order(pool, clock), account, now, state="Started", next_action_expires_at=now + HOUR),
        "ck_payment_attempt_action_expiry")
    without_expiry = await insert_row(pool, "payment_attempts", attempt_values(
        await new_order(pool, clock), account, now, state="Started", next_action={"type": "redirect"}))
    assert without_expiry["next_action"] == {"type": "redirect"}
    with_expiry = await insert_row(pool, "payment_attempts", attempt_values(
        await new_order(pool, clock), account, now, state="Started", next_action={"type": "redirect"},
        next_action_expires_at=now + HOUR))
    assert with_expiry["next_action_expires_at"] == now + HOUR


# --- payment_attempts: uniqueness ----------------------------------------------------------------------


async def test_a_client_reference_is_unique_within_a_provider_account(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    first = await insert_row(pool, "payment_attempts",
                             attempt_values(await new_order(pool, clock), account, clock.now()))
    await rejected(pool, "payment_attempts", attempt_values(
        await new_order(pool, clock), account, clock.now(), client_reference=first["client_reference"]),
        "uq_payment_attempt_reference", UniqueViolation)


async def test_an_idempotency_key_is_unique_within_a_provider_account(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig
) -> None:
    first = await insert_row(pool, "payment_attempts",
                             attempt_values(await new_order(pool, clock), account, clock.now()))
    await rejected(pool, "payment_attempts", attempt_values(
        await new_order(pool, clock), account, clock.now(), idempotency_key=first["idempotency_key"]),
        "uq_payment_attempt_idempotency_key", UniqueViolation)


async def test_the_same_reference_and_key_in_test_and_live_accounts_do_not_collide(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig,
    live_account: ProviderAccountConfig,
) -> None:
    assert account.provider_account == "cardco:acct_store:test"
    assert live_account.provider_account == "cardco:acct_store:live"
    test_row = await insert_row(pool, "payment_attempts", attempt_values(
        await new_order(pool, clock), account, clock.now(), client_reference="ORD-5521-a1",
        idempotency_key="key-1"))
    live_row = await insert_row(pool, "payment_attempts", attempt_values(
        await new_order(pool, clock), live_account, clock.now(), client_reference="ORD-5521-a1",
        idempotency_key="key-1"))
    assert test_row["attempt_id"] != live_row["attempt_id"]


async def test_an_attempt_number_is_unique_per_order(
    pool: asyncpg.Pool, clock: FakeClock, order: orders.Order, account: ProviderAccountConfig
) -> None:
    await insert_row(pool, "payment_attempts", attempt_values(order, account, clock.now(), state="Failed"))
    await rejected(pool, "payment_attempts", attempt_values(
        order, account, clock.now(), state="Failed", client_reference="other-ref"),
        "uq_payment_attempt_number", UniqueViolation)


async def test_a_second_live_attempt_for_one_order_is_rejected_by_the_partial_index(
    pool: asyncpg.Pool, clock: FakeClock, order: orders.Order, account: ProviderAccountConfig
) -> None:
    await insert_row(pool, "payment_attempts", attempt_values(order, account, clock.now(), state="Unknown"))
    for state in ("NotStarted", "Started", "Unknown"):
        await rejected(pool, "payment_attempts",
                       attempt_values(order, account, clock.now(), state=state, number=2),
                       "one_live_attempt_per_order", UniqueViolation)


async def test_final_attempts_leave_the_partial_index_so_a_new_live_attempt_is_accepted(
    pool: asyncpg.Pool, clock: FakeClock, order: orders.Order, account: ProviderAccountConfig
) -> None:
    await insert_row(pool, "payment_attempts", attempt_values(order, account, clock.now(), state="Failed"))
    await insert_row(pool, "payment_attempts", attempt_values(
        order, account, clock.now(), state="NotApplied", number=2, sent=False, outcome_reason="never-sent"))
    live = await insert_row(pool, "payment_attempts",
                            attempt_values(order, account, clock.now(), state="NotStarted", number=3))
    assert live["attempt_number"] == 3


async def test_a_provider_payment_id_belongs_to_one_attempt_per_account(
    pool: asyncpg.Pool, clock: FakeClock, account: ProviderAccountConfig,
    live_account: ProviderAccountConfig,
) -> None:
    await insert_row(pool, "payment_attempts", attempt_values(
        await new_order(pool, clock), account, clock.now(), state="Succeeded", provider_payment_id="pay_1"))
    await rejected(pool, "payment_attempts", attempt_values(
        await new_order(pool, clock), account, clock.now(), state="Unknown", provider_payment_id="pay_1"),
        "one_attempt_per_provider_payment", UniqueViolation)
    # Another account is another scope, and attempts without an id never collide.
    await insert_row(pool, "payment_attempts", attempt_values(
        await new_order(pool, clock), live_account, clock.now(), state="Unknown",
        provider_payment_id="pay_1"))
    for _ in range(2):
        await insert_row(pool, "payment_attempts",
                         attempt_values(await new_order(pool, clock), account, clock.now(), state="Unknown"))


# --- payment_attempt_events ----------------------------------------------------------------------------


async def test_an_event_kind_outside_the_allowed_set_is_rejected(
    pool: asyncpg.Pool, clock: FakeClock
) -> None:
    await rejected(pool, "payment_attempt_events", event_values(clock.now(), kind="webhook"), "ck_event_kind")
    for kind in ("send_intent", "send_result", "send_abandoned", "lookup", "transition"):
        await insert_row(pool, "payment_attempt_events", event_values(clock.now(), kind=kind))


async def test_a_notification_event_with_a_key_but_no_account_is_rejected_by_the_database(
    pool: asyncpg.Pool, clock: FakeClock
) -> None:
    await rejected(pool, "payment_attempt_events", event_values(
        clock.now(), kind="notification", notification_key="evt_1"), "ck_notification_event_fields")
    await rejected(pool, "payment_attempt_events", event_values(clock.now(), kind="notification"),
                   "ck_notification_event_fields")
    row = await insert_row(pool, "payment_attempt_events", event_values(
        clock.now(), kind="notification", provider_account="cardco:acct_store:test",
        notification_key="evt_1"))
    assert row["notification_key"] == "evt_1"


async def test_a_non_notification_event_cannot_carry_notification_fields(
    pool: asyncpg.Pool, clock: FakeClock
) -> None:
    await rejected(pool, "payment_attempt_events", event_values(
        clock.now(), kind="transition", provider_account="cardco:acct_store:test"),
        "ck_notification_event_fields")
    await rejected(pool, "payment_attempt_events", event_values(
        clock.now(), kind="lookup", notification_key="evt_1"), "ck_notification_event_fields")


async def test_a_notification_key_is_unique_per_account_but_unkeyed_notifications_are_each_recorded(
    pool: asyncpg.Pool, clock: FakeClock
) -> None:
    test_acct, live_acct = "cardco:acct_store:test", "cardco:acct_store:live"
    await insert_row(pool, "payment_attempt_events", event_values(
        clock.now(), kind="notification", provider_account=test_acct, notification_key="evt_1"))
    await rejected(pool, "payment_attempt_events", event_values(
        clock.now(), kind="notification", provider_account=test_acct, notification_key="evt_1"),
        "uq_notification", UniqueViolation)
    # The same event id under another account is another event.
    await insert_row(pool, "payment_attempt_events", event_values(
        clock.now(), kind="notification", provider_account=live_acct, notification_key="evt_1"))
    # NULL keys are distinct: two unkeyed deliveries for one account are two rows.
    for _ in range(2):
        await insert_row(pool, "payment_attempt_events", event_values(
            clock.now(), kind="notification", provider_account=test_acct))
    unkeyed = await pool.fetchval(
        "SELECT count(*) FROM payment_attempt_events "
        "WHERE provider_account = $1 AND notification_key IS NULL",
        test_acct)
    assert unkeyed == 2


# --- payment_escalations -------------------------------------------------------------------------------


async def test_a_negative_reminder_count_is_rejected(pool: asyncpg.Pool, clock: FakeClock) -> None:
    await rejected(pool, "payment_escalations", escalation_values(clock.now(), reminder_count=-1),
                   "ck_escalation_reminder_count")
    await insert_row(pool, "payment_escalations", escalation_values(clock.now(), reminder_count=0))


async def test_a_resolved_escalation_with_a_reminder_scheduled_is_rejected(
    pool: asyncpg.Pool, clock: FakeClock
) -> None:
    now = clock.now()
    await rejected(pool, "payment_escalations", escalation_values(now, resolved_at=now + HOUR),
                   "ck_escalation_resolved_reminder")
    await insert_row(pool, "payment_escalations",
                     escalation_values(now, resolved_at=now + HOUR, next_reminder_at=None))


async def test_an_escalation_resolved_before_it_was_raised_is_rejected(
    pool: asyncpg.Pool, clock: FakeClock
) -> None:
    now = clock.now()
    await rejected(pool, "payment_escalations",
                   escalation_values(now, resolved_at=now - HOUR, next_reminder_at=None),
                   "ck_escalation_resolved_after_raised")
    await insert_row(pool, "payment_escalations",
                     escalation_values(now, resolved_at=now, next_reminder_at=None))


async def test_an_escalation_acknowledged_before_it_was_raised_is_rejected(
    pool: asyncpg.Pool, clock: FakeClock
) -> None:
    now = clock.now()
    await rejected(pool, "payment_escalations", escalation_values(now, acknowledged_at=now - HOUR),
                   "ck_escalation_acknowledged_after_raised")
    await insert_row(pool, "payment_escalations", escalation_values(now, acknowledged_at=now))


async def test_one_open_escalation_per_key_and_a_new_episode_after_resolving(
    pool: asyncpg.Pool, clock: FakeClock
) -> None:
    now = clock.now()
    key = f"attempt:{uuid.uuid4()}:deadline"
    first = await insert_row(pool, "payment_escalations", escalation_values(now, escalation_key=key))
    await rejected(pool, "payment_escalations", escalation_values(now, escalation_key=key),
                   "one_open_escalation_per_key", UniqueViolation)
    await pool.execute(
        "UPDATE payment_escalations SET resolved_at = $2, next_reminder_at = NULL WHERE escalation_id = $1",
        first["escalation_id"], now + HOUR)
    second = await insert_row(pool, "payment_escalations",
                              escalation_values(now + HOUR, escalation_key=key))
    assert second["escalation_id"] != first["escalation_id"]


# --- outbox_messages -----------------------------------------------------------------------------------


async def test_a_negative_outbox_delivery_count_is_rejected(pool: asyncpg.Pool, clock: FakeClock) -> None:
    await rejected(pool, "outbox_messages", outbox_values(clock.now(), delivery_attempts=-1),
                   "ck_outbox_delivery_attempts")
    await insert_row(pool, "outbox_messages", outbox_values(clock.now(), delivery_attempts=0))


async def test_an_outbox_row_cannot_be_both_dispatched_and_dead_lettered(
    pool: asyncpg.Pool, clock: FakeClock
) -> None:
    now = clock.now()
    await rejected(pool, "outbox_messages", outbox_values(now, dispatched_at=now, dead_lettered_at=now),
                   "ck_outbox_single_terminal_state")
    await insert_row(pool, "outbox_messages", outbox_values(now, dispatched_at=now))
    await insert_row(pool, "outbox_messages", outbox_values(now, dead_lettered_at=now))


async def test_an_outbox_dedup_key_is_unique(pool: asyncpg.Pool, clock: FakeClock) -> None:
    first = await insert_row(pool, "outbox_messages", outbox_values(clock.now()))
    await rejected(pool, "outbox_messages", outbox_values(clock.now(), dedup_key=first["dedup_key"]),
                   "uq_outbox_dedup_key", UniqueViolation)


# --- orders, provider_accounts, idempotency_records ----------------------------------------------------


@pytest.mark.parametrize(
    ("column", "bad", "good", "constraint"),
    [
        ("status", "Shipped", "Paid", "ck_order_status"),
        ("status", "open", "Cancelled", "ck_order_status"),
        ("amount_minor", 0, 1, "ck_order_amount"),
        ("currency", "eur", "USD", "ck_order_currency"),
        ("version", -1, 0, "ck_order_version"),
    ],
)
async def test_an_invalid_order_row_is_rejected(
    pool: asyncpg.Pool, clock: FakeClock, column: str, bad: Any, good: Any, constraint: str
) -> None:
    await rejected(pool, "orders", order_values(clock.now(), **{column: bad}), constraint)
    row = await insert_row(pool, "orders", order_values(clock.now(), **{column: good}))
    assert row[column] == good


@pytest.mark.parametrize(
    ("overrides", "constraint"),
    [
        (dict(environment="prod", provider_account="cardco:acct_other:prod"),
         "ck_provider_account_environment"),
        (dict(provider_account="cardco:acct_other:live"), "ck_provider_account_id"),
        (dict(provider_account="acct_other"), "ck_provider_account_id"),
        (dict(escalation_margin=timedelta(seconds=-1)), "ck_provider_account_margin"),
        (dict(escalation_margin=timedelta(hours=24)), "ck_provider_account_margin"),
        (dict(escalation_margin=timedelta(hours=25)), "ck_provider_account_margin"),
        (dict(lookup_rate_per_s=0), "ck_provider_account_rate"),
    ],
    ids=["environment", "id-wrong-environment", "id-not-composite", "margin-negative",
         "margin-equals-retention", "margin-exceeds-retention", "rate-zero"],
)
async def test_an_invalid_provider_account_row_is_rejected(
    pool: asyncpg.Pool, clock: FakeClock, overrides: dict[str, Any], constraint: str
) -> None:
    await rejected(pool, "provider_accounts", provider_account_values(clock.now(), **overrides), constraint)


async def test_a_valid_provider_account_row_is_accepted(pool: asyncpg.Pool, clock: FakeClock) -> None:
    row = await insert_row(pool, "provider_accounts",
                           provider_account_values(clock.now(), escalation_margin=timedelta(0)))
    assert row["provider_account"] == "cardco:acct_other:test"


@pytest.mark.parametrize(
    ("overrides", "constraint"),
    [
        # An unknown state also fails ck_idempotency_completed, which PostgreSQL checks first (by name).
        (dict(state="pending"), {"ck_idempotency_state", "ck_idempotency_completed"}),
        (dict(idempotency_key=""), "ck_idempotency_key_length"),
        (dict(idempotency_key="k" * 256), "ck_idempotency_key_length"),
        (dict(request_fingerprint="A" * 64), "ck_idempotency_fingerprint"),
        (dict(request_fingerprint="0" * 63), "ck_idempotency_fingerprint"),
        (dict(state="completed"), "ck_idempotency_completed"),
        (dict(state="in_progress", response_status=200, response_body=b"{}"), "ck_idempotency_completed"),
        (dict(state="completed", response_status=200), "ck_idempotency_completed"),
        (dict(expires_at=AT_CREATION), "ck_idempotency_expiry"),
    ],
    ids=["state", "key-empty", "key-too-long", "fingerprint-upper-case", "fingerprint-short",
         "completed-without-response", "in-progress-with-response", "completed-without-body",
         "expires-at-creation"],
)
async def test_an_invalid_idempotency_record_is_rejected(
    pool: asyncpg.Pool, clock: FakeClock, overrides: dict[str, Any], constraint: str | set[str]
) -> None:
    await rejected(pool, "idempotency_records", idempotency_values(clock.now(), **overrides), constraint)


async def test_an_idempotency_record_is_unique_per_key_endpoint_and_customer(
    pool: asyncpg.Pool, clock: FakeClock
) -> None:
    now = clock.now()
    first = await insert_row(pool, "idempotency_records", idempotency_values(
        now, idempotency_key="k" * 255, state="completed", response_status=202, response_body=b"{}"))
    await rejected(pool, "idempotency_records",
                   idempotency_values(now, idempotency_key=first["idempotency_key"]),
                   "pk_idempotency_records", UniqueViolation)
    # Another customer's identical key is a different record.
    await insert_row(pool, "idempotency_records",
                     idempotency_values(now, idempotency_key=first["idempotency_key"], customer_id="cus_2"))
