"""One intake, several providers: a route per configured provider, each with its own
authentication, and Adyen's batches recorded item by item and answered ``[accepted]``.

The Adyen deliveries are signed by the Adyen SDK's own HMAC routine and POSTed over HTTP to
the real intake app on real PostgreSQL.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import httpx
import pytest

from harness.servers import serve_asgi
from paycore.clock import FakeClock
from paycore.config import ConfigError, Settings
from paycore_webhooks.app import create_app as create_webhooks_app
from tests.support.webhooks import intake_settings
from tests.unit.test_adyen_notifications import account, basic, batch, item, signed

ADYEN = "adyen:PaycoreECOM:test"


def with_adyen(settings: Settings, **changes: object) -> Settings:
    adyen = dataclasses.replace(account(), **changes)
    return dataclasses.replace(settings, accounts=(*settings.accounts, adyen))


@pytest.fixture
async def intake(pool: asyncpg.Pool, db_dsn: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = with_adyen(intake_settings("http://127.0.0.1:9", db_dsn))
    app = create_webhooks_app(settings, clock=FakeClock(current=datetime.now(UTC)), pool=pool)
    async with serve_asgi(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        yield http


async def notifications(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    return list(await pool.fetch(
        "SELECT provider_account, notification_key FROM payment_attempt_events"
        " WHERE kind = 'notification' ORDER BY notification_key"))


async def test_an_adyen_batch_is_recorded_item_by_item_and_accepted(intake: httpx.AsyncClient,
                                                                    pool: asyncpg.Pool) -> None:
    body = batch(signed(item(pspReference="PSP1", merchantReference="ORD-1-a1")),
                 signed(item(pspReference="PSP2", merchantReference="ORD-2-a1", success="false")))
    r = await intake.post("/webhooks/adyen", content=body, headers=basic())
    assert (r.status_code, r.text) == (200, "[accepted]")
    first = await notifications(pool)
    assert [row["provider_account"] for row in first] == [ADYEN, ADYEN]
    assert all(row["notification_key"].startswith("v1:") for row in first)

    again = await intake.post("/webhooks/adyen", content=body, headers=basic())  # Adyen's redelivery
    assert (again.status_code, again.text) == (200, "[accepted]")
    assert await notifications(pool) == first


async def test_one_forged_item_refuses_the_whole_batch_and_stores_nothing(intake: httpx.AsyncClient,
                                                                          pool: asyncpg.Pool) -> None:
    forged = signed(item(pspReference="PSP2"), key="00" * 32)
    r = await intake.post("/webhooks/adyen", content=batch(signed(item()), forged), headers=basic())
    assert r.status_code == 401
    assert r.headers["content-type"] == "application/problem+json"
    assert await notifications(pool) == []


@pytest.mark.parametrize(("headers", "status"), [({}, 400), (basic(password="wrong"), 401)])
async def test_adyen_deliveries_without_the_basic_auth_are_refused(
        intake: httpx.AsyncClient, pool: asyncpg.Pool, headers: dict[str, str], status: int) -> None:
    r = await intake.post("/webhooks/adyen", content=batch(signed(item())), headers=headers)
    assert r.status_code == status
    assert await notifications(pool) == []


async def test_each_configured_provider_has_its_route_and_no_other(intake: httpx.AsyncClient) -> None:
    assert (await intake.post("/webhooks/cardco", content=b"{}")).status_code == 400  # there, unsigned
    assert (await intake.post("/webhooks/stripe", content=b"{}")).status_code == 404  # not configured


@pytest.mark.parametrize("missing", [{"webhook_secret": None},
                                     {"webhook_username": None, "webhook_password": None}])
def test_the_intake_does_not_start_while_a_provider_cannot_verify_its_webhooks(
        db_dsn: str, missing: dict[str, None]) -> None:
    settings = with_adyen(intake_settings("http://127.0.0.1:9", db_dsn), **missing)
    with pytest.raises(ConfigError):
        create_webhooks_app(settings, clock=FakeClock())
