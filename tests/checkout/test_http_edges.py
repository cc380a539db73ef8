"""Checkout's edges (issue 8): ambiguous bodies, currencies, framework errors, order-create retries.

A payment API never guesses: anything it cannot read one way only is a
problem+json answer and writes nothing.
"""

from __future__ import annotations

import httpx
import pytest

from tests.support.stack import Stack


def assert_problem(r: httpx.Response, status: int) -> dict[str, object]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body: dict[str, object] = r.json()
    assert body["status"] == status and str(body["type"]).startswith("https://") and body["title"]
    return body


async def counts(stack: Stack) -> tuple[int, int]:
    return (await stack.pool.fetchval("SELECT count(*) FROM orders"),
            await stack.pool.fetchval("SELECT count(*) FROM payment_attempts"))


JSON = {"content-type": "application/json"}


# -- bodies: duplicate keys, content type -------------------------------------------------

@pytest.mark.parametrize("raw", [
    b'{"amount_minor": 1, "amount_minor": 777, "currency": "EUR"}',
    b'{"amount_minor": 777, "currency": "EUR", "currency": "USD"}',
])
async def test_a_duplicate_key_in_an_order_body_is_400_and_nothing_is_created(
    stack: Stack, raw: bytes,
) -> None:
    r = await stack.shop.http.post("/orders", content=raw, headers={**stack.shop.auth, **JSON})
    body = assert_problem(r, 400)
    assert body["type"] == "https://paycore.dev/problems/duplicate-key"
    assert await counts(stack) == (0, 0)


async def test_a_duplicate_key_in_a_payment_body_is_400_and_nothing_is_sent(stack: Stack) -> None:
    order = await stack.shop.create_order()
    raw = b'{"payment_method": "tok_decline", "payment_method": "tok_visa"}'
    r = await stack.shop.http.post(f"/orders/{order}/payment", content=raw,
                                   headers={**stack.shop.auth, **JSON})
    assert_problem(r, 400)
    assert await counts(stack) == (1, 0)
    assert await stack.sandbox.requests() == []


async def test_a_body_without_content_type_is_415_like_text_plain(stack: Stack) -> None:
    raw = b'{"amount_minor": 4999, "currency": "EUR"}'
    for headers in ({}, {"content-type": "text/plain"}):
        r = await stack.shop.http.post("/orders", content=raw, headers={**stack.shop.auth, **headers})
        assert_problem(r, 415)
    order = await stack.shop.create_order()
    r = await stack.shop.http.post(f"/orders/{order}/payment", content=b'{"payment_method": "tok_visa"}',
                                   headers=stack.shop.auth)
    assert_problem(r, 415)
    assert await counts(stack) == (1, 0)


# -- the framework's own answers ------------------------------------------------------------

async def test_unknown_paths_are_404_problem_json(stack: Stack) -> None:
    r = await stack.shop.http.get("/no/such/path", headers=stack.shop.auth)
    body = assert_problem(r, 404)
    assert body["type"] == "https://paycore.dev/problems/not-found"


async def test_a_wrong_method_is_405_problem_json_with_allow(stack: Stack) -> None:
    r = await stack.shop.http.delete("/orders", headers=stack.shop.auth)
    assert_problem(r, 405)
    assert r.headers["allow"] == "POST"


# -- currencies ---------------------------------------------------------------------------

@pytest.mark.parametrize("currency", [
    "ZZZ", "XXX", "XTS",  # not a currency, no currency, the testing code
    "XAU", "XAG", "XPT", "XPD", "XDR", "XSU", "XUA",  # metals and units without minor units
    "BOV", "CHE", "CHW", "CLF", "COU", "MXV", "USN", "UYI",  # fund codes
    "XAD", "UYW",  # units of account
    "DEM", "HRK", "ZWL", "BGN",  # withdrawn
])
async def test_a_currency_that_is_not_an_active_iso_4217_currency_is_refused(
    stack: Stack, currency: str,
) -> None:
    r = await stack.shop.http.post("/orders", json={"amount_minor": 4999, "currency": currency},
                                   headers=stack.shop.auth)
    body = assert_problem(r, 400)
    assert [e["field"] for e in body["errors"]] == ["currency"]  # type: ignore[attr-defined]
    assert await counts(stack) == (0, 0)


@pytest.mark.parametrize(("currency", "exponent"), [("JPY", 0), ("EUR", 2), ("KWD", 3), ("CLP", 0),
                                                    ("BHD", 3), ("USD", 2), ("XOF", 0)])
async def test_an_order_reports_its_currency_exponent(stack: Stack, currency: str, exponent: int) -> None:
    r = await stack.shop.http.post("/orders", json={"amount_minor": 4999, "currency": currency},
                                   headers=stack.shop.auth)
    assert r.status_code == 201, r.text
    assert r.json()["currency_exponent"] == exponent
    again = await stack.shop.http.get(f"/orders/{r.json()['order_id']}", headers=stack.shop.auth)
    assert again.json()["currency_exponent"] == exponent


@pytest.mark.parametrize(("currency", "largest"), [("JPY", 10**10), ("EUR", 10**12), ("KWD", 10**13)])
async def test_the_largest_amount_is_ten_billion_major_units_of_the_currency(
    stack: Stack, currency: str, largest: int,
) -> None:
    ok = await stack.shop.http.post("/orders", json={"amount_minor": largest, "currency": currency},
                                    headers=stack.shop.auth)
    assert ok.status_code == 201, ok.text
    over = await stack.shop.http.post("/orders", json={"amount_minor": largest + 1, "currency": currency},
                                      headers=stack.shop.auth)
    body = assert_problem(over, 400)
    assert [e["field"] for e in body["errors"]] == ["amount_minor"]  # type: ignore[attr-defined]
    assert await counts(stack) == (1, 0)


# -- Idempotency-Key on order creation ------------------------------------------------------

async def test_a_retried_order_create_with_the_same_idempotency_key_makes_one_order(stack: Stack) -> None:
    headers = {**stack.shop.auth, "Idempotency-Key": "create-7f3c1e8a"}
    body = {"amount_minor": 4999, "currency": "EUR"}
    first = await stack.shop.http.post("/orders", json=body, headers=headers)
    retry = await stack.shop.http.post("/orders", json=body, headers=headers)
    assert first.status_code == retry.status_code == 201
    assert retry.content == first.content
    assert retry.headers["location"] == first.headers["location"]
    assert retry.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert await counts(stack) == (1, 0)


async def test_an_order_create_key_reused_with_a_different_body_is_422(stack: Stack) -> None:
    headers = {**stack.shop.auth, "Idempotency-Key": "create-reused"}
    await stack.shop.http.post("/orders", json={"amount_minor": 4999, "currency": "EUR"}, headers=headers)
    other = await stack.shop.http.post("/orders", json={"amount_minor": 5000, "currency": "EUR"},
                                       headers=headers)
    assert_problem(other, 422)
    assert await counts(stack) == (1, 0)


async def test_an_order_create_key_is_its_own_scope_per_endpoint_and_customer(stack: Stack) -> None:
    key = {"Idempotency-Key": "shared-key"}
    body = {"amount_minor": 4999, "currency": "EUR"}
    mine = await stack.shop.http.post("/orders", json=body, headers={**stack.shop.auth, **key})
    bob = stack.shop.as_customer("cus_bob")
    bobs = await bob.http.post("/orders", json=body, headers={**bob.auth, **key})
    assert mine.status_code == bobs.status_code == 201
    assert mine.json()["order_id"] != bobs.json()["order_id"]
    paid = await stack.shop.pay(mine.json()["order_id"], headers=key)  # the pay endpoint's own scope
    assert paid.status_code == 200 and paid.json()["state"] == "Succeeded"


async def test_an_invalid_order_create_idempotency_key_is_400(stack: Stack) -> None:
    r = await stack.shop.http.post("/orders", json={"amount_minor": 4999, "currency": "EUR"},
                                   headers={**stack.shop.auth, "Idempotency-Key": "x" * 256})
    assert_problem(r, 400)
    assert await counts(stack) == (0, 0)


async def test_a_key_whose_request_died_holding_it_is_taken_over_once_stale(stack: Stack) -> None:
    # A request that claimed its key and never released it: the database went away
    # between the claim and the release, or the process was killed.
    from paycore_checkout import inbound_idempotency as idem

    body = {"amount_minor": 4999, "currency": "EUR"}
    scope = idem.KeyScope("create-orphaned", "POST /orders", stack.shop.customer)
    await idem.claim(stack.pool, scope, idem.fingerprint({"body": body}), now=stack.clock.now(), ttl_s=86400)
    headers = {**stack.shop.auth, "Idempotency-Key": "create-orphaned"}
    in_flight = await stack.shop.http.post("/orders", json=body, headers=headers)
    assert_problem(in_flight, 409)
    budgets = stack.settings.budgets
    stack.clock.advance(2 * (budgets.start_s + budgets.max_call_duration_s + budgets.record_s) + 1)
    retried = await stack.shop.http.post("/orders", json=body, headers=headers)
    assert retried.status_code == 201, retried.text  # not 409 for the rest of the 24 hours
    replay = await stack.shop.http.post("/orders", json=body, headers=headers)
    assert replay.content == retried.content and replay.headers["idempotent-replayed"] == "true"
    assert await counts(stack) == (1, 0)


async def test_a_request_whose_stale_claim_was_taken_over_cannot_overwrite_or_release_its_successor(
    stack: Stack,
) -> None:
    from paycore_checkout import inbound_idempotency as idem

    scope = idem.KeyScope("taken-over", "POST /orders", "cus_alice")
    first_at = stack.clock.now()
    assert (await idem.claim(stack.pool, scope, "a" * 64, now=first_at, ttl_s=86400, stale_after_s=80))[0] \
        is idem.Claim.PROCEED
    stack.clock.advance(81)
    second_at = stack.clock.now()
    assert (await idem.claim(stack.pool, scope, "a" * 64, now=second_at, ttl_s=86400, stale_after_s=80))[0] \
        is idem.Claim.PROCEED
    # The first request, still alive after all, finishes late: neither its answer nor its release counts.
    await idem.complete(stack.pool, scope, idem.StoredResponse(201, {}, b"first"), claimed_at=first_at)
    await idem.release(stack.pool, scope, claimed_at=first_at)
    assert (await idem.claim(stack.pool, scope, "a" * 64, now=second_at, ttl_s=86400))[0] \
        is idem.Claim.IN_PROGRESS
    await idem.complete(stack.pool, scope, idem.StoredResponse(201, {}, b"second"), claimed_at=second_at)
    claim, stored = await idem.claim(stack.pool, scope, "a" * 64, now=second_at, ttl_s=86400)
    assert claim is idem.Claim.REPLAY and stored is not None and stored.body == b"second"


@pytest.mark.parametrize("path", ["/orders/ord_x%00y", "/orders/ord_x/payment/status?at=%00"])
async def test_a_nul_in_the_path_or_a_query_parameter_is_400_problem_json(stack: Stack, path: str) -> None:
    answer = await stack.shop.http.get(path, headers=stack.shop.auth)
    assert answer.status_code == 400 and answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["type"].endswith("/invalid-text") and answer.headers["x-request-id"]
