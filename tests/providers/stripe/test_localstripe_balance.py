"""Balance transactions through the real ``stripe`` SDK against localstripe, an independent fake.

paycore's Stripe settlement reader lists ``/v1/balance_transactions`` by ``created`` with
``expand=["data.source"]``; the sandbox serves that from its own book, so this checks the same
call against someone else's reading of Stripe's API (through the launcher's route for Stripe's
path, ``tests/support/localstripe_server.py``): a payment made in localstripe is listed, by
time window and type, its source expanded to the Charge (of that intent).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
import stripe

from tests.support.localstripe_stack import API_KEY, payment_method, running_localstripe


@pytest.fixture(scope="module")
def localstripe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_localstripe(tmp_path_factory.mktemp("localstripe")) as base_url:
        yield base_url


async def test_the_sdk_lists_a_payments_balance_transaction_with_its_source(
        localstripe: str, monkeypatch: pytest.MonkeyPatch) -> None:
    before = int(time.time())
    pm = await payment_method(localstripe, "4242424242424242")
    reference = f"ORD-{uuid.uuid4().hex[:10]}"
    async with httpx.AsyncClient(timeout=15) as http:
        created = await http.post(localstripe + "/v1/payment_intents", auth=(API_KEY, ""), data={
            "amount": "2345", "currency": "eur", "payment_method": pm, "confirm": "true",
            "payment_method_types[]": "card", "metadata[paycore_reference]": reference})
    assert created.status_code == 200, created.text
    intent = created.json()
    assert intent["status"] == "succeeded"

    monkeypatch.setattr(stripe, "api_base", localstripe)
    listed = await stripe.BalanceTransaction.list_async(
        api_key=API_KEY, created={"gte": before, "lt": int(time.time()) + 1}, type="charge",
        expand=["data.source"], limit=100)
    [txn] = [t for t in listed.data if t.source.payment_intent == intent["id"]]  # type: ignore[union-attr]
    assert (txn.object, txn.type, txn.amount, txn.currency, txn.reporting_category) == (
        "balance_transaction", "charge", 2345, "eur", "charge")
    assert txn.source.object == "charge"  # type: ignore[union-attr]
    # localstripe's Charge does not copy the intent's metadata (Stripe's does): not checked.
    assert (txn.source.amount, txn.source.id) == (2345, txn["source"]["id"])  # type: ignore[union-attr]

    later = await stripe.BalanceTransaction.list_async(
        api_key=API_KEY, created={"gte": int(time.time()) + 60})
    assert later.data == []
    refunds = await stripe.BalanceTransaction.list_async(api_key=API_KEY, type="refund")
    assert all(t.type == "refund" for t in refunds.data)
