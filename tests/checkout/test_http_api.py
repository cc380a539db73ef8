"""Checkout's HTTP contract: input validation, inbound Idempotency-Key, health and metrics.

Bad input gets RFC 9457 problem+json and writes nothing.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from paycore.config import ConfigError, load_settings
from tests.support.stack import Stack, checkout_settings, eventually


async def row_counts(stack: Stack) -> tuple[int, int, int]:
    return (
        await stack.pool.fetchval("SELECT count(*) FROM orders"),
        await stack.pool.fetchval("SELECT count(*) FROM payment_attempts"),
        await stack.pool.fetchval("SELECT count(*) FROM idempotency_records"),
    )


def assert_problem(r: httpx.Response, status: int) -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["status"] == status and body["type"].startswith("https://") and body["title"]


@pytest.mark.parametrize(
    "body",
    [
        {"amount_minor": 4999, "currency": "EUR", "coupon": "x"},  # unknown field
        {"amount_minor": "4999", "currency": "EUR"},  # wrong type
        {"amount_minor": 49.99, "currency": "EUR"},  # never a float
        {"amount_minor": 0, "currency": "EUR"},  # non-positive
        {"amount_minor": -5, "currency": "EUR"},
        {"amount_minor": True, "currency": "EUR"},  # a bool is not an amount
        {"amount_minor": 4999, "currency": "eur"},  # bad currency
        {"amount_minor": 4999, "currency": "EURO"},
        {"amount_minor": 4999},
        # an account this checkout does not have
        {"amount_minor": 4999, "currency": "EUR", "provider_account": "stripe:default:test"},
        {"amount_minor": 4999, "currency": "EUR", "provider_account": 7},
    ],
)
async def test_invalid_order_is_a_400_problem_and_writes_nothing(
    stack: Stack, body: dict[str, object]
) -> None:
    r = await stack.shop.http.post("/orders", json=body, headers=stack.shop.auth)
    assert_problem(r, 400)
    assert await row_counts(stack) == (0, 0, 0)


@pytest.mark.parametrize(
    "body",
    [
        {"payment_method": "tok_visa", "amount_minor": 1},  # unknown field
        {"payment_method": 42},
        {"payment_method": "4242424242424242"},  # card data is refused and never echoed
        {"payment_method": "4242 4242 4242 4242"},
        {"payment_method": "tok_4242424242424242"},  # a card number inside a token's shape
        {"payment_method": "tok_5555555555554444"},
        {"payment_method": {"type": "scheme", "number": "4242424242424242"}},  # a card field in the clear
        {"payment_method": {"type": "scheme", "encryptedCardNumber": "4242-4242-4242-4242"}},
        {"payment_method": {"type": "scheme", "encryptedCardNumber": "tok_visa"}},  # Cardco takes tokens only
        {"payment_method": ["tok_visa"]},
        {},
    ],
)
async def test_invalid_payment_request_is_a_400_problem_and_writes_nothing(
    stack: Stack, body: dict[str, object]
) -> None:
    order = await stack.shop.create_order()
    r = await stack.shop.http.post(f"/orders/{order}/payment", json=body, headers=stack.shop.auth)
    assert_problem(r, 400)
    assert "4242424242424242" not in r.text and "5555555555554444" not in r.text
    assert await row_counts(stack) == (1, 0, 0)
    assert await stack.sandbox.requests() == []


async def test_malformed_json_and_non_object_bodies_are_400(stack: Stack) -> None:
    order = await stack.shop.create_order()
    for raw in (b"{not json", b"[1, 2]", b'"tok_visa"'):
        r = await stack.shop.http.post(f"/orders/{order}/payment", content=raw,
                                       headers={**stack.shop.auth, "content-type": "application/json"})
        assert_problem(r, 400)
    assert await row_counts(stack) == (1, 0, 0)


async def test_oversize_body_is_413_and_writes_nothing(stack: Stack) -> None:
    order = await stack.shop.create_order()
    big = b'{"payment_method": "tok_visa", "pad": "' + b"x" * (64 * 1024) + b'"}'
    r = await stack.shop.http.post(f"/orders/{order}/payment", content=big,
                                   headers={**stack.shop.auth, "content-type": "application/json"})
    assert_problem(r, 413)
    assert await row_counts(stack) == (1, 0, 0)


@pytest.mark.parametrize("header", [None, "Bearer", "Bearer not-a-jwt", "Basic dXNlcjpwYXNz"])
async def test_missing_or_invalid_auth_is_401_problem(stack: Stack, header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    r = await stack.shop.http.post("/orders", json={"amount_minor": 1, "currency": "EUR"}, headers=headers)
    assert_problem(r, 401)
    assert await row_counts(stack) == (0, 0, 0)


async def test_token_signed_with_another_secret_is_rejected(stack: Stack) -> None:
    from tests.support.stack import token_for

    bad = token_for("cus_alice", secret="another-secret-another-secret-another")
    r = await stack.shop.http.post("/orders", json={"amount_minor": 1, "currency": "EUR"},
                                   headers={"Authorization": f"Bearer {bad}"})
    assert_problem(r, 401)


async def test_idempotency_key_replays_the_stored_response(stack: Stack) -> None:
    order = await stack.shop.create_order()
    headers = {"Idempotency-Key": "checkout-7f3c1e8a"}
    first = await stack.shop.pay(order, headers=headers)
    replay = await stack.shop.pay(order, headers=headers)
    assert first.status_code == replay.status_code == 200
    assert replay.content == first.content
    assert replay.headers["idempotent-replayed"] == "true"
    assert len(await stack.sandbox.create_requests()) == 1


async def test_idempotency_key_with_a_different_request_is_422(stack: Stack) -> None:
    order = await stack.shop.create_order()
    headers = {"Idempotency-Key": "checkout-key-1"}
    await stack.shop.pay(order, "tok_visa", headers=headers)
    other = await stack.shop.pay(order, "tok_decline", headers=headers)
    assert_problem(other, 422)


async def test_idempotency_key_reused_for_another_order_is_422_and_pays_nothing(stack: Stack) -> None:
    # The same customer's key, first for order A, then for order B: B's request is another
    # intent. Replaying A's stored "Succeeded" would tell the storefront B was paid.
    order_a, order_b = await stack.shop.create_order(), await stack.shop.create_order()
    headers = {"Idempotency-Key": "checkout-one-key-two-orders"}
    first = await stack.shop.pay(order_a, headers=headers)
    assert first.status_code == 200 and first.json()["order_id"] == order_a
    other = await stack.shop.pay(order_b, headers=headers)
    assert_problem(other, 422)
    assert "idempotent-replayed" not in other.headers
    assert (await stack.shop.status(order_b)).status_code == 404  # no attempt for B
    assert len(await stack.sandbox.create_requests()) == 1


async def test_idempotency_key_in_flight_is_409_with_retry_after(stack: Stack) -> None:
    await stack.sandbox.fault("delay", delay_ms=400, times=1)
    order = await stack.shop.create_order()
    headers = {"Idempotency-Key": "checkout-in-flight"}
    first = asyncio.create_task(stack.shop.pay(order, headers=headers))

    async def in_flight() -> bool:
        return bool(await stack.sandbox.create_requests())

    await eventually(in_flight, what="first request at the provider")
    second = await stack.shop.pay(order, headers=headers)
    assert_problem(second, 409)
    assert second.headers["retry-after"] == "1"
    assert (await first).status_code == 200
    assert len(await stack.sandbox.create_requests()) == 1


async def test_idempotency_key_is_scoped_per_customer(stack: Stack) -> None:
    alice_order = await stack.shop.create_order()
    bob = stack.shop.as_customer("cus_bob")
    bob_order = await bob.create_order()
    headers = {"Idempotency-Key": "same-key"}
    a = await stack.shop.pay(alice_order, headers=headers)
    b = await bob.pay(bob_order, headers=headers)
    assert a.status_code == b.status_code == 200
    assert a.json()["order_id"] == alice_order and b.json()["order_id"] == bob_order
    assert len(await stack.sandbox.ledger()) == 2


async def test_idempotency_key_expires_after_24_hours(stack: Stack) -> None:
    order = await stack.shop.create_order()
    headers = {"Idempotency-Key": "checkout-expiring"}
    first = await stack.shop.pay(order, "tok_expired", headers=headers)
    assert first.json()["state"] == "NotApplied"
    stack.clock.advance(24 * 3600 + 1)
    after = await stack.shop.pay(order, "tok_visa", headers=headers)  # a new request now
    assert after.status_code == 200 and after.json()["state"] == "Succeeded"
    assert "idempotent-replayed" not in after.headers


async def test_invalid_idempotency_key_is_400(stack: Stack) -> None:
    order = await stack.shop.create_order()
    r = await stack.shop.pay(order, headers={"Idempotency-Key": "x" * 256})
    assert_problem(r, 400)
    assert await row_counts(stack) == (1, 0, 0)


async def test_health_readiness_and_metrics(stack: Stack) -> None:
    http = stack.shop.http
    assert (await http.get("/healthz")).json() == {"status": "ok"}
    assert (await http.get("/readyz")).json() == {"status": "ready"}
    order = await stack.shop.create_order()
    await stack.shop.pay(order)
    assert (await http.get("/metrics")).status_code == 404  # only on the admin port
    text = stack.metrics_text()
    assert ('paycore_http_request_duration_seconds_count{method="POST",route="/orders/{order_id}/payment",'
            'service="checkout",status="200"} 1.0') in text
    assert "paycore_checkout_requests_total" not in text  # folded into the histogram's _count
    assert "paycore_checkout_attempts_created_total 1.0" in text
    assert 'paycore_checkout_outcomes_total{reason="",state="Succeeded"} 1.0' in text
    assert ('paycore_checkout_provider_call_seconds_count{outcome="succeeded",'
            'provider_account="cardco:acct_store:test"} 1.0') in text  # which provider is slow


@pytest.mark.parametrize("value", ["0", "-1", "1e12", "nan", "abc"])
def test_max_call_duration_zero_negative_or_out_of_range_fails_at_startup(value: str) -> None:
    with pytest.raises(ConfigError) as exc:
        checkout_settings("http://127.0.0.1:1", "postgresql://x", PAYCORE_MAX_CALL_DURATION_S=value)
    assert exc.value.variable == "PAYCORE_MAX_CALL_DURATION_S"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("PAYCORE_START_BUDGET_S", "0"),
        ("PAYCORE_CALL_BUDGET_S", "-3"),
        ("PAYCORE_RECORD_BUDGET_S", "inf"),
        ("PAYCORE_CARDCO_ENVIRONMENT", "prod"),
        ("PAYCORE_CARDCO_BASE_URL", "not a url"),
        ("PAYCORE_CARDCO_API_KEY", "sk_live_wrong_mode"),
        ("PAYCORE_JWT_SECRET", "short"),
        ("PAYCORE_CARDCO_ESCALATION_MARGIN_S", "90000"),
    ],
)
def test_invalid_settings_fail_at_startup_naming_the_variable(variable: str, value: str) -> None:
    with pytest.raises(ConfigError) as exc:
        checkout_settings("http://127.0.0.1:1", "postgresql://x", **{variable: value})
    assert exc.value.variable == variable


def test_secrets_never_appear_in_settings_repr() -> None:
    settings = load_settings({
        "PAYCORE_CARDCO_BASE_URL": "http://127.0.0.1:1", "PAYCORE_CARDCO_ACCOUNT": "acct_store",
        "PAYCORE_CARDCO_API_KEY": "sk_test_supersecretvalue",
        "PAYCORE_CARDCO_WEBHOOK_SECRET": "whsec_c2VjcmV0c2VjcmV0",
        "PAYCORE_JWT_SECRET": "jwt-secret-jwt-secret-jwt-secret-jwt",
    })
    shown = repr(settings)
    for secret in ("sk_test_supersecretvalue", "whsec_c2VjcmV0c2VjcmV0", "jwt-secret-jwt-secret"):
        assert secret not in shown
