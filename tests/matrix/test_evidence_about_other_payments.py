"""Evidence about another payment resolves nothing and reaches a person at once.

The reference: a provider payment id is associated with an attempt only after its
other verified attributes match and no other attempt owns it; a lookup that finds
a payment with another account, environment or reference escalates a mismatch
at once and records what was seen. The provider here is a real HTTP server that
plays Cardco from a script (the sandbox never answers with another account's
payment); the database is real, and the code paths are checkout's and recovery's own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from prometheus_client import CollectorRegistry

from paycore import orders
from paycore.accounts import register_provider_accounts
from paycore.attempts import Attempt, get_attempt, record_outcome
from paycore.clock import FakeClock
from paycore.config import Settings
from paycore.domain import AttemptState, ProviderOutcome
from paycore.providers.cardco import CardcoClient
from paycore_checkout.payments import CheckoutMetrics, CheckoutPayments
from paycore_recovery.loop import Pass, RecoveryWorker
from paycore_recovery.metrics import RecoveryMetrics
from paycore_recovery.settings import RecoverySettings
from tests.support.attempts import started_attempt
from tests.support.scripted_cardco import ScriptedCardco, payment_object, running_scripted_cardco
from tests.support.stack import checkout_settings
from tests.support.timings import REMINDER_INTERVAL


@pytest.fixture
async def cardco() -> AsyncIterator[ScriptedCardco]:
    async with running_scripted_cardco() as server:
        yield server


@pytest.fixture
async def settings(cardco: ScriptedCardco, db_dsn: str, pool: asyncpg.Pool, clock: FakeClock) -> Settings:
    # A reminder interval other than the default, to see every writer take it from the setting.
    configured = checkout_settings(cardco.base_url, db_dsn, PAYCORE_REMINDER_INTERVAL_S="120")
    await register_provider_accounts(pool, configured.accounts, clock.now())
    return configured


@pytest.fixture
async def client(settings: Settings, clock: FakeClock) -> AsyncIterator[CardcoClient]:
    async with CardcoClient(settings.accounts, clock, max_call_duration_s=30) as c:
        yield c


async def new_started_attempt(pool: asyncpg.Pool, clock: FakeClock, settings: Settings,
                              customer: str = "cus_1") -> Attempt:
    order = await orders.create_order(pool, customer_id=customer, amount_minor=4999, currency="EUR",
                                      now=clock.now())
    return await started_attempt(pool, clock, settings.default_account, order.order_id, customer)


async def escalations_of(pool: asyncpg.Pool, attempt: Attempt) -> list[dict[str, Any]]:
    rows = await pool.fetch("SELECT * FROM payment_escalations WHERE attempt_id = $1 ORDER BY escalation_id",
                            attempt.attempt_id)
    return [dict(r) for r in rows]


# --- a create response that names another payment ------------------------------------------------------


async def test_a_create_answer_naming_another_payment_stays_unknown_without_its_id_and_escalates_mismatch(
    pool: asyncpg.Pool, clock: FakeClock, settings: Settings, client: CardcoClient, cardco: ScriptedCardco,
) -> None:
    # pay_foreign belongs to another attempt of this account (its own reference).
    owner = await new_started_attempt(pool, clock, settings, customer="cus_owner")
    order = await orders.create_order(pool, customer_id="cus_1", amount_minor=4999, currency="EUR",
                                      now=clock.now())
    cardco.reply(201, payment_object(id="pay_foreign", reference=owner.client_reference))

    payments = CheckoutPayments(pool=pool, client=client, clock=clock, settings=settings,
                                metrics=CheckoutMetrics(CollectorRegistry()))
    status = await payments.pay(order.order_id, "cus_1", "tok_visa")

    assert status.state is AttemptState.UNKNOWN
    attempt = await get_attempt(pool, status.attempt_id)  # type: ignore[arg-type]
    assert attempt.provider_payment_id is None and attempt.provider_status is None
    [escalation] = await escalations_of(pool, attempt)
    assert escalation["reason"] == "mismatch" and escalation["resolved_at"] is None
    assert escalation["detail"]["field"] == "reference"
    assert escalation["detail"]["provider_payment_id"] == "pay_foreign"
    # Raised by checkout's outcome write, on the configured reminder interval.
    assert escalation["next_reminder_at"] == escalation["raised_at"] + timedelta(seconds=120)
    [send_result] = await pool.fetch("SELECT detail FROM payment_attempt_events WHERE attempt_id = $1"
                                     " AND kind = 'send_result'", attempt.attempt_id)
    assert send_result["detail"]["reason"] == "provider.response-mismatch.reference"
    assert send_result["detail"]["reported_payment"]["id"] == "pay_foreign"  # what it said, kept

    # The payment's real owner settles on its own evidence, with no conflict to untangle.
    evidence = ProviderOutcome.succeeded("pay_foreign", 4999, "EUR")
    settled = (await record_outcome(pool, owner.attempt_id, evidence, now=clock.now(),
                                   actor="notification-handler", recheck_after_s=60,
                                   from_send=False, reminder_interval=REMINDER_INTERVAL)).attempt
    assert settled.state is AttemptState.SUCCEEDED and settled.provider_payment_id == "pay_foreign"
    assert await escalations_of(pool, owner) == []


# --- a lookup that finds another account's, mode's or reference's payment --------------------------------


@pytest.mark.parametrize(
    ("seen", "reason"),
    [({"livemode": True}, "mismatch"),
     ({"account": "acct_other"}, "mismatch"),
     ({"reference": "ORD-someone-else-a1"}, "mismatch")],
    ids=["live-mode", "another-account", "another-reference"],
)
async def test_a_lookup_finding_a_payment_that_is_not_this_attempts_escalates_at_once_and_records_it(
    pool: asyncpg.Pool, clock: FakeClock, settings: Settings, client: CardcoClient, cardco: ScriptedCardco,
    seen: dict[str, Any], reason: str,
) -> None:
    attempt = await new_started_attempt(pool, clock, settings)
    lost = ProviderOutcome.unknown("provider.no-response.caller")
    attempt = (await record_outcome(pool, attempt.attempt_id, lost, now=clock.now(),
                                   actor="endpoint", recheck_after_s=60,
                                   reminder_interval=REMINDER_INTERVAL)).attempt
    clock.advance(60)
    answered = payment_object(id="pay_seen", **{"reference": attempt.client_reference, **seen})
    cardco.reply(200, {"data": [answered]})
    recovery = RecoverySettings()
    worker = RecoveryWorker(pool=pool, client=client, clock=clock, settings=settings, recovery=recovery,
                            metrics=RecoveryMetrics(), owner="w1")

    assert await worker.run_pass() == [Pass.ESCALATED]

    after = await get_attempt(pool, attempt.attempt_id)
    assert after.state is AttemptState.UNKNOWN and after.provider_payment_id is None
    [escalation] = await escalations_of(pool, attempt)
    assert escalation["reason"] == reason and escalation["resolved_at"] is None
    assert escalation["next_reminder_at"] == escalation["raised_at"] + timedelta(seconds=120)
    # What was seen is in the history, not dropped: the operator sees the other payment.
    [lookup] = await pool.fetch("SELECT detail FROM payment_attempt_events WHERE attempt_id = $1"
                                " AND kind = 'lookup'", attempt.attempt_id)
    assert lookup["detail"]["result"] == "found"
    [payment] = lookup["detail"]["payments"]
    assert payment["id"] == "pay_seen" and all(payment[k] == v for k, v in seen.items())
    # Looked at again only on the slow read-only cadence; nothing was sent.
    assert after.next_check_at == clock.now() + timedelta(seconds=recovery.slow_cadence_s)
    assert after.recovery_owner is None
    assert [r.method for r in cardco.received] == ["GET"]
