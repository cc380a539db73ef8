"""Smoke: the whole checkout path over HTTP against the sandbox."""

from __future__ import annotations

from tests.support.stack import Stack


async def test_visa_payment_succeeds_and_is_charged_once(stack: Stack) -> None:
    order = await stack.shop.create_order()
    r = await stack.shop.pay(order)
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "Succeeded"
    ledger = await stack.sandbox.ledger()
    assert len(ledger) == 1
