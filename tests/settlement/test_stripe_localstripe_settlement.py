"""Stripe's settlement reader against localstripe, an independent Stripe fake, end to end.

A payment is made through checkout and refunded through paycore's own sender, both against
localstripe (1.15.10, ``tests/support/localstripe_stack.py``: a real child process on a free port,
behind the stack's forwarding proxy), so the attempt and the refund carry the ids localstripe
issued. :class:`~paycore.providers.stripe.settlements.StripeSettlements` then reads that UTC day's
balance transactions from localstripe through the official SDK (``expand[]=data.source``; the
launcher's route for Stripe's path) and the engine, on a real PostgreSQL, matches the charge to
the attempt and the refund to the operation, by the ids alone.

What localstripe does not do, and so is not checked here (the sandbox's Stripe dialect is, in
``test_stripe_adyen_flows_end_to_end.py``): its Charge does not copy the intent's ``metadata``,
so a charge line carries no ``paycore_reference`` and cannot be matched by reference; its
balance transactions carry no fee (``fee`` 0, ``net`` = ``amount``) and an ``exchange_rate`` of
1.0 whatever the currency; it has no refund failures,
disputes, payouts or payout reconciliation report; and its clock is the wall clock, so the day
read is today's (UTC), still open.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import asyncpg
import pytest

from paycore.clock import FakeClock
from paycore.domain import OperationKind, OperationState
from paycore.operation_sends import OperationSender
from paycore.operations import Operation
from paycore.providers.registry import for_accounts
from paycore.providers.settlement_sources import settlement_source
from paycore.providers.stripe.settlements import StripeSettlements
from paycore.settlements import reconcile_account
from tests.support.localstripe_stack import (
    PROVIDER_ACCOUNT,
    LocalstripeStack,
    running_localstripe,
    running_localstripe_stack,
)

REMIND = timedelta(minutes=15)
GRACE = timedelta(days=3)


@pytest.fixture(scope="module")
def localstripe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_localstripe(tmp_path_factory.mktemp("localstripe")) as base_url:
        yield base_url


@pytest.fixture
async def stack(localstripe: str, pool: asyncpg.Pool, db_dsn: str) -> AsyncIterator[LocalstripeStack]:
    async for s in running_localstripe_stack(localstripe, pool, db_dsn):
        yield s


async def test_a_payment_and_its_refund_made_in_localstripe_are_matched_from_its_balance_transactions(
        stack: LocalstripeStack) -> None:
    first_day = datetime.now(UTC).date()
    attempt, r = await stack.pay("visa")
    assert (r.status_code, r.json()["state"]) == (200, "Succeeded"), r.text
    payment = await stack.pool.fetchrow("SELECT * FROM payment_attempts WHERE attempt_id = $1",
                                        attempt.attempt_id)
    assert payment["provider_payment_id"].startswith("pi_")
    client = for_accounts(stack.settings.accounts, stack.clock,
                          max_call_duration_s=stack.settings.budgets.max_call_duration_s)
    try:
        refund = await OperationSender(pool=stack.pool, client=client, clock=stack.clock,
                                       settings=stack.settings).request(
            attempt.attempt_id, OperationKind.REFUND, 1000, requested_by="test")
    finally:
        await client.aclose()
    assert isinstance(refund, Operation) and refund.state is OperationState.SUCCEEDED, refund
    assert refund.provider_operation_id is not None and refund.provider_operation_id.startswith("re_")
    last_day = datetime.now(UTC).date()  # a run that crossed midnight reads both days

    account = stack.settings.account(PROVIDER_ACCOUNT)
    assert account is not None
    now = datetime.now(UTC)
    source = settlement_source(account, clock=FakeClock(current=now))
    assert isinstance(source, StripeSettlements)
    run = await reconcile_account(stack.pool, source, PROVIDER_ACCOUNT, first_day, last_day, now=now,
                                  grace=GRACE, reminder_interval=REMIND)
    assert run.unreadable == () and run.new_missing == 0
    assert {o.result for o in run.outcomes} == {"recorded"}
    assert all(o.batch_id is not None for o in run.outcomes)
    # The batch is open (today has not ended): read whole again on the next run.
    batches = await stack.pool.fetch("SELECT provider_status FROM settlement_batches")
    assert {b["provider_status"] for b in batches} == {"open"}

    charge = await stack.pool.fetchrow(
        "SELECT * FROM settlement_lines WHERE kind = 'charge' AND attempt_id = $1", attempt.attempt_id)
    assert charge is not None, await stack.pool.fetch("SELECT * FROM settlement_lines")
    assert (charge["outcome"], charge["provider_payment_id"], charge["gross_minor"], charge["gross_currency"],
            charge["record_type"]) == ("matched", payment["provider_payment_id"], 4999, "EUR", "charge")
    assert charge["provider_line_id"].startswith("txn_") and charge["reference"] is None  # no metadata copied
    line = await stack.pool.fetchrow(
        "SELECT * FROM settlement_lines WHERE kind = 'refund' AND operation_id = $1", refund.operation_id)
    assert line is not None
    assert (line["outcome"], line["provider_operation_id"], line["gross_minor"], line["attempt_id"],
            line["reference"]) == ("matched", refund.provider_operation_id, -1000, attempt.attempt_id,
                                   refund.client_reference)  # a refund keeps the metadata paycore sent
    # localstripe states an exchange_rate of 1.0 on both transactions: stored as it said, beside the line
    assert (charge["exchange_rate"], line["exchange_rate"]) == (Decimal("1.0"), Decimal("1.0"))
    # localstripe's other tests' payments (one localstripe per module) would be unknown-payment;
    # this one's are not exceptions.
    ours = await stack.pool.fetchval(
        "SELECT count(*) FROM settlement_exceptions WHERE attempt_id = $1", attempt.attempt_id)
    assert ours == 0
