"""Rotating webhook secrets and API keys without touching attempts or losing a notification.

During a webhook-secret rotation the intake is configured with the new secret and, as
``…_PREVIOUS``, the old one, while the provider may still sign with the old one: the
sandbox here keeps signing with its own (old) credentials. Each test runs the sandbox,
checkout and the intake as real HTTP servers on real PostgreSQL, once per provider.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import orjson
import pytest

from paycore.accounts import register_provider_accounts
from paycore.notifications import AttachRefused, attach_notification
from paycore.settings_spec import Secret
from tests.providers.test_flows import succeeded_event, wait_until
from tests.support.providers import PROVIDERS, RETURN_URL, ProviderStack, adyen_batch, running_provider_stack
from tests.support.timings import REMINDER_INTERVAL
from tests.unit.test_stripe_events import account as stripe_account


def whsec() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def hmac_key() -> str:
    return secrets.token_hex(32).upper()


def password() -> str:
    return "adyen_" + secrets.token_hex(12)


# The variables a rotation changes, per provider: each gets a new value, the old one goes to _PREVIOUS.
ROTATED = {
    "cardco": ("PAYCORE_CARDCO_WEBHOOK_SECRET",),
    "stripe": ("PAYCORE_STRIPE_WEBHOOK_SECRET",),
    "adyen": ("PAYCORE_ADYEN_HMAC_KEY", "PAYCORE_ADYEN_WEBHOOK_PASSWORD"),
}
NEW = {"PAYCORE_CARDCO_WEBHOOK_SECRET": whsec, "PAYCORE_STRIPE_WEBHOOK_SECRET": whsec,
       "PAYCORE_ADYEN_HMAC_KEY": hmac_key, "PAYCORE_ADYEN_WEBHOOK_PASSWORD": password}


@dataclasses.dataclass
class Rotating:
    """A stack mid-rotation: ``new`` holds the new value of each rotated variable."""

    stack: ProviderStack
    new: dict[str, str]


@pytest.fixture(params=PROVIDERS)
async def rotating(request: pytest.FixtureRequest, pool: asyncpg.Pool,
                   db_dsn: str) -> AsyncIterator[Rotating]:
    new = {name: NEW[name]() for name in ROTATED[request.param]}

    def rotate(env: dict[str, str]) -> None:
        for name, value in new.items():
            env[f"{name}_PREVIOUS"] = env[name]  # the sandbox (the provider) still signs with it
            env[name] = value

    async for s in running_provider_stack(request.param, pool, db_dsn, rotate):
        yield Rotating(s, new)


async def previous_secret_count(flows: ProviderStack, provider_account: str) -> float:
    """The intake's count of notifications an account's previous secret verified (admin ``/metrics``)."""
    text = flows.intake_metrics_text()
    line = f'paycore_webhook_previous_secret_total{{provider_account="{provider_account}"}} '
    return sum(float(row.removeprefix(line)) for row in text.splitlines() if row.startswith(line))


def signed(flows: ProviderStack, event: dict[str, Any], *, secret: str | None = None,
           password: str | None = None) -> tuple[bytes, dict[str, str]]:
    """The sandbox's event signed with ``secret`` (Adyen: as HMAC key, and ``password`` for basic
    auth), as the provider would send it; ``None``: the sandbox's own credentials."""
    at = flows.now_s()
    name = flows.wire.name
    if name == "cardco":
        body = orjson.dumps({k: v for k, v in event.items() if k != "notificationItem"})
        return body, flows.signer.cardco(body, secret=secret, at=at)
    if name == "stripe":
        body = orjson.dumps(event)
        return body, flows.signer.stripe(body, secret=secret, at=at)
    body = adyen_batch(flows.signer.adyen_item(event["notificationItem"], hmac_key=secret))
    return body, flows.signer.adyen_auth(password=password)


async def pending_3ds(flows: ProviderStack) -> tuple[str, dict[str, Any]]:
    """A Started 3-D Secure attempt whose customer completed the action, and the provider's success
    event for it (not delivered: no endpoint is subscribed yet)."""
    r = await flows.pay("3ds")
    assert (r.status_code, r.json().get("state")) == (200, "Started"), r.text
    [payment] = await flows.sandbox.ledger()
    await flows.sandbox.complete_action(payment["id"])
    return r.json()["attempt_id"], await succeeded_event(flows, payment["id"])


async def state(flows: ProviderStack, attempt_id: str) -> str:
    return str(await flows.pool.fetchval("SELECT state FROM payment_attempts WHERE attempt_id = $1",
                                         attempt_id))


async def test_during_a_rotation_the_previous_secret_is_applied_the_new_one_too_and_any_other_refused(
    rotating: Rotating,
) -> None:
    flows, new = rotating.stack, rotating.new
    attempt_id, event = await pending_3ds(flows)
    before = await flows.stored_rows()

    # Neither the new nor the previous secret (Adyen: neither key, or neither password): refused.
    forged = [signed(flows, event, secret=whsec() if flows.wire.name != "adyen" else hmac_key())]
    if flows.wire.name == "adyen":
        forged.append(signed(flows, event, password=password()))
    for body, headers in forged:
        r = await flows.intake.post(f"/webhooks/{flows.wire.name}", content=body, headers=headers)
        assert r.status_code == 401, r.text
    assert await flows.stored_rows() == before
    assert await state(flows, attempt_id) == "Started"

    # The provider still signs with the previous secret: applied as any notification.
    await flows.subscribe()
    await flows.sandbox.redeliver(event["id"])
    await wait_until(flows, attempt_id, "Succeeded")
    account = flows.wire.provider_account
    assert await previous_secret_count(flows, account) == 1

    # Once the provider switched, the new secret verifies (the same event: a duplicate), uncounted.
    body, headers = signed(flows, event, secret=new[ROTATED[flows.wire.name][0]],
                           password=new.get("PAYCORE_ADYEN_WEBHOOK_PASSWORD"))
    r = await flows.intake.post(f"/webhooks/{flows.wire.name}", content=body, headers=headers)
    assert r.status_code == 200, r.text
    assert await flows.delivered_count("duplicate") == 1
    assert await previous_secret_count(flows, account) == 1
    assert len(await flows.notifications()) == 1


# ------------------------------------------------------------------- another account's previous secret

OTHER = {"cardco": "cardco:acct_other:test", "stripe": "stripe:acct_other:test",
         "adyen": "adyen:OtherECOM:test"}


@dataclasses.dataclass
class TwoAccounts:
    """The sandbox's account (the default) and another account of the same provider, mid-rotation."""

    stack: ProviderStack
    other_previous: str  # the other account's previous secret (Adyen: HMAC key)
    other_previous_password: str  # Adyen: the other account's previous password


@pytest.fixture(params=PROVIDERS)
async def two_accounts(request: pytest.FixtureRequest, pool: asyncpg.Pool, db_dsn: str,
                       tmp_path: Path) -> AsyncIterator[TwoAccounts]:
    provider = request.param
    fresh = hmac_key if provider == "adyen" else whsec
    previous, previous_password = fresh(), password()

    def add_other(env: dict[str, str]) -> None:
        entry: dict[str, Any] = {
            "provider": provider, "account": "OtherECOM" if provider == "adyen" else "acct_other",
            "environment": "test", "api_key_env": "OTHER_API_KEY", "webhook_secret_env": "OTHER_SECRET",
            "webhook_secret_previous_env": "OTHER_SECRET_PREVIOUS"}
        env.update(OTHER_API_KEY="sk_test_other", OTHER_SECRET=fresh(), OTHER_SECRET_PREVIOUS=previous)
        if provider == "cardco":
            entry["base_url"] = env["PAYCORE_CARDCO_BASE_URL"]
        elif provider == "stripe":
            entry["base_url"] = env["PAYCORE_STRIPE_API_BASE"]
        else:
            # The same basic-auth user as the sandbox's account: only passwords and keys tell them apart.
            entry.update(base_url=env["PAYCORE_ADYEN_BASE_URL"], return_url=RETURN_URL,
                         webhook_username=env["PAYCORE_ADYEN_WEBHOOK_USERNAME"],
                         webhook_password_env="OTHER_PASSWORD",
                         webhook_password_previous_env="OTHER_PASSWORD_PREVIOUS")
            env.update(OTHER_API_KEY="AQE_other", OTHER_PASSWORD=password(),
                       OTHER_PASSWORD_PREVIOUS=previous_password)
        path = tmp_path / "accounts.json"
        path.write_bytes(orjson.dumps([entry]))
        env["PAYCORE_ACCOUNTS_FILE"] = str(path)

    async for s in running_provider_stack(provider, pool, db_dsn, add_other):
        yield TwoAccounts(s, previous, previous_password)


async def notification_accounts(flows: ProviderStack) -> list[str]:
    rows = await flows.pool.fetch("SELECT provider_account FROM payment_attempt_events"
                                  " WHERE kind = 'notification' ORDER BY event_id")
    return [r["provider_account"] for r in rows]


async def test_another_accounts_previous_secret_never_verifies_for_this_account(
    two_accounts: TwoAccounts,
) -> None:
    """The store's payment's event signed with the other account's previous secret is that other
    account's (Cardco, Stripe: recorded for it, never matched to the store's attempt), or, for
    Adyen, whose account is its basic-auth password and HMAC key together, refused unless both
    are the other account's."""
    flows = two_accounts.stack
    attempt_id, event = await pending_3ds(flows)
    other = OTHER[flows.wire.name]
    before = await flows.stored_rows()

    if flows.wire.name == "adyen":
        mixed = [signed(flows, event, secret=two_accounts.other_previous),  # the store's password
                 signed(flows, event, password=two_accounts.other_previous_password)]  # the store's key
        for body, headers in mixed:
            r = await flows.intake.post("/webhooks/adyen", content=body, headers=headers)
            assert r.status_code == 401, r.text
        assert await flows.stored_rows() == before
    body, headers = signed(flows, event, secret=two_accounts.other_previous,
                           password=two_accounts.other_previous_password)
    r = await flows.intake.post(f"/webhooks/{flows.wire.name}", content=body, headers=headers)
    assert r.status_code == 200, r.text
    assert await notification_accounts(flows) == [other]
    assert await previous_secret_count(flows, other) == 1
    assert await previous_secret_count(flows, flows.wire.provider_account) == 0
    assert await state(flows, attempt_id) == "Started"

    await flows.subscribe()  # the provider's own delivery, with the store's secret, applies it
    await flows.sandbox.redeliver(event["id"])
    await wait_until(flows, attempt_id, "Succeeded")


async def test_a_notification_verified_for_another_account_cannot_be_attached_to_this_accounts_attempt(
    two_accounts: TwoAccounts,
) -> None:
    """The store's payment's event, verified by the other account's secret, is that account's
    unmatched notification. An operator attaching it to the store's attempt is refused: for Stripe,
    whose PaymentIntent names no account, the verifying account is the only barrier between it and
    an order marked Paid with no money received."""
    flows = two_accounts.stack
    attempt_id, event = await pending_3ds(flows)
    other = OTHER[flows.wire.name]
    body, headers = signed(flows, event, secret=two_accounts.other_previous,
                           password=two_accounts.other_previous_password)
    r = await flows.intake.post(f"/webhooks/{flows.wire.name}", content=body, headers=headers)
    assert r.status_code == 200, r.text
    event_id = await flows.pool.fetchval(
        "SELECT event_id FROM payment_attempt_events WHERE kind = 'notification' AND provider_account = $1"
        " AND attempt_id IS NULL", other)
    assert event_id is not None
    with pytest.raises(AttachRefused, match="verified for another provider account"):
        await attach_notification(flows.pool, event_id=event_id, attempt_id=UUID(attempt_id),
                                  operator="ops-1", reason="looks like ours", now=flows.clock.now(),
                                  reminder_interval=REMINDER_INTERVAL, recheck_after_s=60)
    assert await state(flows, attempt_id) == "Started"
    assert await flows.pool.fetchval("SELECT status FROM orders o JOIN payment_attempts a USING (order_id)"
                                     " WHERE a.attempt_id = $1", attempt_id) == "Open"
    assert await flows.pool.fetchval("SELECT count(*) FROM operator_actions") == 0


# --------------------------------------------------------------------------- Stripe's own roll


@pytest.fixture
async def stripe_flows(pool: asyncpg.Pool, db_dsn: str) -> AsyncIterator[ProviderStack]:
    async for s in running_provider_stack("stripe", pool, db_dsn):
        yield s


async def test_a_stripe_header_with_a_stale_and_a_valid_v1_verifies_and_is_applied(
    stripe_flows: ProviderStack,
) -> None:
    """While Stripe rolls an endpoint's secret it signs each event with the old and the new one
    (two ``v1``); the intake knows only one of them (here the second)."""
    flows = stripe_flows
    attempt_id, event = await pending_3ds(flows)
    body, at = orjson.dumps(event), flows.now_s()
    current = flows.signer.credentials["stripe"]["webhook_secret"]
    stale, valid = (hmac.new(key.encode(), f"{at}.".encode() + body, hashlib.sha256).hexdigest()
                    for key in (whsec(), current))
    r = await flows.intake.post("/webhooks/stripe", content=body, headers={
        "Stripe-Signature": f"t={at},v1={stale},v1={valid}", "Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    assert await state(flows, attempt_id) == "Succeeded"
    assert await previous_secret_count(flows, flows.wire.provider_account) == 0


# --------------------------------------------------------------------------- nothing registers a secret


async def test_a_new_api_key_or_webhook_secret_never_stops_a_service_from_starting(
    pool: asyncpg.Pool,
) -> None:
    """Registration compares the account's settings, never its credentials: a rolling restart
    with a new API key or webhook secret starts, and the registered row holds no secret."""
    now = datetime.now(UTC)
    first = stripe_account("acct_store", "whsec_first_0a1b2c3d4e5f6a7b")
    await register_provider_accounts(pool, [first], now)
    rotated = dataclasses.replace(first, api_key=Secret("sk_test_rotated"),
                                  webhook_secret=Secret("whsec_second_9f8e7d6c5b4a"),
                                  webhook_secret_previous=first.webhook_secret)
    await register_provider_accounts(pool, [rotated], now)  # no AccountConfigurationDiffers
    row = str(dict(await pool.fetchrow("SELECT * FROM provider_accounts")))
    assert not any(s in row for s in ("sk_test_x", "sk_test_rotated", "whsec_"))
