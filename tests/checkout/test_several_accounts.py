"""One checkout, several accounts: each order is paid on the account it names, else the default.

Two Cardco accounts of the sandbox stand in for "EU orders on one account, US orders on
another"; the routing is by account id, so it is the same for accounts of different
providers (tests/providers/ covers Stripe and Adyen).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import orjson
import pytest

from tests.support.stack import Stack, running_stack

OTHER = "cardco:acct_other:test"


@pytest.fixture
async def two_accounts(pool: asyncpg.Pool, db_dsn: str, tmp_path: Path) -> AsyncIterator[Stack]:
    accounts = tmp_path / "accounts.json"

    def env_for(sandbox_url: str) -> dict[str, str]:
        accounts.write_bytes(orjson.dumps([{"account": "acct_other", "environment": "test",
                                            "base_url": sandbox_url, "api_key_env": "OTHER_KEY"}]))
        return {"OTHER_KEY": "sk_test_acct_other_local", "PAYCORE_ACCOUNTS_FILE": str(accounts)}

    async for stack in running_stack(pool, db_dsn, env_for=env_for):
        yield stack


async def attempt_account(pool: asyncpg.Pool, order_id: str) -> str:
    account: str = await pool.fetchval(
        "SELECT provider_account FROM payment_attempts WHERE order_id = $1", order_id)
    return account


async def test_an_order_is_paid_on_the_account_it_names_and_others_on_the_default(
        two_accounts: Stack) -> None:
    stack = two_accounts
    shop = stack.shop
    r = await shop.http.post("/orders", headers=shop.auth,
                             json={"amount_minor": 1200, "currency": "EUR", "provider_account": OTHER})
    assert r.status_code == 201, r.text
    named = r.json()
    assert named["provider_account"] == OTHER
    plain = await shop.create_order()

    assert (await shop.pay(named["order_id"])).status_code == 200
    assert (await shop.pay(plain)).status_code == 200

    assert await attempt_account(stack.pool, named["order_id"]) == OTHER
    assert await attempt_account(stack.pool, plain) == "cardco:acct_store:test"
    charged = {p["reference"].rsplit("-a", 1)[0]: p["account"] for p in await stack.sandbox.ledger()}
    assert charged == {named["order_id"]: "acct_other", plain: "acct_store"}


async def test_an_order_naming_an_account_this_checkout_does_not_have_is_refused(
        two_accounts: Stack) -> None:
    r = await two_accounts.shop.http.post(
        "/orders",
        json={"amount_minor": 1200, "currency": "EUR", "provider_account": "cardco:acct_nope:test"},
        headers=two_accounts.shop.auth)
    assert r.status_code == 400
    assert r.headers["content-type"].startswith("application/problem+json")
    assert OTHER in r.text  # the answer lists what is configured
    assert await two_accounts.pool.fetchval("SELECT count(*) FROM orders") == 0
