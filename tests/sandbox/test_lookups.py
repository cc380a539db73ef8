"""Lookups by id and by reference, account isolation, per-account rate limit."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from harness.servers import serve_asgi
from paycore_sandbox.app import create_app
from paycore_sandbox.settings import SandboxAccount, SandboxSettings
from tests.sandbox.support import (
    OTHER_TEST_KEY,
    STORE_LIVE_KEY,
    STORE_TEST_KEY,
    auth,
    create,
    error_of,
    new_reference,
    payment_body,
)

OTHER = auth("acct_other", OTHER_TEST_KEY)


async def test_lookup_by_id(client: httpx.AsyncClient) -> None:
    created = (await create(client, payment_body())).json()
    found = await client.get(f"/v1/payments/{created['id']}", headers=auth())
    assert found.status_code == 200
    assert found.json() == created
    missing = await client.get("/v1/payments/pay_doesnotexist", headers=auth())
    assert missing.status_code == 404
    assert error_of(missing)["code"] == "resource_missing"


async def test_lookup_by_reference_oldest_first(client: httpx.AsyncClient) -> None:
    reference = new_reference()
    first = (await create(client, payment_body(reference, "tok_decline"))).json()
    second = (await create(client, payment_body(reference))).json()
    await create(client, payment_body())  # another reference
    found = await client.get("/v1/payments", params={"reference": reference},
                             headers=auth())
    assert found.status_code == 200
    assert found.json() == {"data": [first, second]}
    none = await client.get("/v1/payments", params={"reference": "ORD-none"},
                            headers=auth())
    assert none.json() == {"data": []}
    no_param = await client.get("/v1/payments", headers=auth())
    assert no_param.status_code == 400
    assert error_of(no_param)["param"] == "reference"


async def test_lookups_only_see_own_account_and_environment(
        client: httpx.AsyncClient) -> None:
    reference = new_reference()
    created = (await create(client, payment_body(reference))).json()
    for headers in (OTHER, auth("acct_store", STORE_LIVE_KEY)):
        by_id = await client.get(f"/v1/payments/{created['id']}", headers=headers)
        assert by_id.status_code == 404
        by_ref = await client.get("/v1/payments", params={"reference": reference},
                                  headers=headers)
        assert by_ref.json() == {"data": []}


@pytest.fixture
async def slow_lookups() -> AsyncIterator[httpx.AsyncClient]:
    """acct_store/test may look up 3 times, then 1 per 100 s; acct_other is generous."""
    defaults = SandboxSettings.default().accounts
    accounts = [
        SandboxAccount(a.account, a.environment, a.api_key, a.webhook_secret,
                       lookup_rate_per_s=0.01 if a.api_key == STORE_TEST_KEY else 50,
                       lookup_burst=3 if a.api_key == STORE_TEST_KEY else 50)
        for a in defaults
    ]
    app = create_app(SandboxSettings(accounts=accounts))
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url, timeout=10) as c:
        yield c


async def test_lookup_rate_limit_is_per_account(slow_lookups: httpx.AsyncClient) -> None:
    client = slow_lookups
    params = {"reference": "ORD-x"}
    statuses = [(await client.get("/v1/payments", params=params, headers=auth())).status_code
                for _ in range(3)]
    assert statuses == [200, 200, 200]
    limited = await client.get("/v1/payments/pay_x", headers=auth())
    assert limited.status_code == 429
    assert error_of(limited)["code"] == "rate_limited"
    assert int(limited.headers["Retry-After"]) >= 1
    # Other accounts (and the live environment) are unaffected.
    for headers in (OTHER, auth("acct_store", STORE_LIVE_KEY)):
        ok = await client.get("/v1/payments", params=params, headers=headers)
        assert ok.status_code == 200
    # Creates are not lookups: still allowed.
    assert (await create(client, payment_body())).status_code == 201
    # A reset refills the bucket.
    await client.post("/_sandbox/reset")
    assert (await client.get("/v1/payments", params=params, headers=auth())).status_code == 200
