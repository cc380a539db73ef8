"""Checkout authenticating customers with keys from a JWKS endpoint.

The identity provider is a real HTTP server whose key set a test can rotate or
take down; checkout fetches it over HTTP exactly as in production.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import httpx
import jwt
import pytest

from harness.servers import serve_asgi
from tests.support.identity_provider import IdentityProvider
from tests.support.stack import Stack, running_stack


@dataclass
class JwksStack:
    idp: IdentityProvider
    stack: Stack

    async def create_order(self, token: str) -> httpx.Response:
        return await self.stack.shop.http.post(
            "/orders", json={"amount_minor": 4999, "currency": "EUR"},
            headers={"Authorization": f"Bearer {token}"})


# With a JWKS, checkout requires the audience and issuer its tokens must name.
ISSUER = "https://idp.example/"
AUDIENCE = "paycore-checkout"
IDP_ENV = {"PAYCORE_JWT_SECRET": "", "PAYCORE_JWT_ISSUER": ISSUER, "PAYCORE_JWT_AUDIENCE": AUDIENCE}


def identity_provider() -> IdentityProvider:
    idp = IdentityProvider(claims={"iss": ISSUER, "aud": AUDIENCE})
    idp.add_rsa_key("rsa-1")
    return idp


@pytest.fixture
async def jwks(pool: asyncpg.Pool, db_dsn: str) -> AsyncIterator[JwksStack]:
    idp = identity_provider()
    async with serve_asgi(idp.app()) as idp_url:
        # No HS256 secret at all: the JWKS is the only way in.
        async for stack in running_stack(pool, db_dsn, **IDP_ENV,
                                         PAYCORE_JWKS_URL=f"{idp_url}/.well-known/jwks.json",
                                         PAYCORE_JWKS_REFETCH_COOLDOWN_S="0"):
            yield JwksStack(idp, stack)


def assert_problem(r: httpx.Response, status: int, kind: str) -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["type"].endswith(kind)


async def test_an_rs256_token_from_the_jwks_authenticates_the_customer_by_its_subject(
    jwks: JwksStack,
) -> None:
    r = await jwks.create_order(jwks.idp.token("cus_alice", "rsa-1"))
    assert r.status_code == 201, r.text
    owner = await jwks.stack.pool.fetchval("SELECT customer_id FROM orders WHERE order_id = $1",
                                           r.json()["order_id"])
    assert owner == "cus_alice"
    # The order is the subject's: another customer's token does not see it.
    other = await jwks.stack.shop.http.get(
        f"/orders/{r.json()['order_id']}",
        headers={"Authorization": f"Bearer {jwks.idp.token('cus_bob', 'rsa-1')}"})
    assert_problem(other, 404, "order-not-found")


async def test_an_es256_key_in_the_set_is_accepted_too(jwks: JwksStack) -> None:
    jwks.idp.add_ec_key("ec-1")
    r = await jwks.create_order(jwks.idp.token("cus_alice", "ec-1"))
    assert r.status_code == 201, r.text


async def test_keys_are_cached_between_requests(jwks: JwksStack) -> None:
    token = jwks.idp.token("cus_alice", "rsa-1")
    for _ in range(5):
        assert (await jwks.create_order(token)).status_code == 201
    assert jwks.idp.fetches == 1


async def test_a_key_rotated_in_after_the_first_fetch_is_found_by_refetching(jwks: JwksStack) -> None:
    assert (await jwks.create_order(jwks.idp.token("cus_alice", "rsa-1"))).status_code == 201
    jwks.idp.add_rsa_key("rsa-2")
    r = await jwks.create_order(jwks.idp.token("cus_alice", "rsa-2"))
    assert r.status_code == 201, r.text
    assert jwks.idp.fetches == 2


async def test_a_key_rotated_in_inside_the_cooldown_is_not_fetched_for(
    pool: asyncpg.Pool, db_dsn: str,
) -> None:
    # The production default: unknown kids cannot make checkout hammer the identity provider.
    idp = identity_provider()
    async with serve_asgi(idp.app()) as idp_url:
        async for stack in running_stack(pool, db_dsn, **IDP_ENV,
                                         PAYCORE_JWKS_URL=f"{idp_url}/.well-known/jwks.json"):
            s = JwksStack(idp, stack)
            assert (await s.create_order(idp.token("cus_alice", "rsa-1"))).status_code == 201
            idp.add_rsa_key("rsa-2")
            for _ in range(3):
                assert_problem(await s.create_order(idp.token("cus_alice", "rsa-2")), 401, "unauthenticated")
            assert idp.fetches == 1


async def test_a_token_signed_by_a_key_the_set_does_not_publish_is_401(jwks: JwksStack) -> None:
    jwks.idp.add_rsa_key("rogue", publish=False)
    r = await jwks.create_order(jwks.idp.token("cus_alice", "rogue"))
    assert_problem(r, 401, "unauthenticated")


async def test_an_expired_token_from_a_published_key_is_401(jwks: JwksStack) -> None:
    r = await jwks.create_order(jwks.idp.token("cus_alice", "rsa-1", exp_in_s=-60))
    assert_problem(r, 401, "unauthenticated")


async def test_an_hs256_token_is_refused_when_only_the_jwks_is_configured(jwks: JwksStack) -> None:
    # Algorithm confusion: an HMAC token must never be checked against a public key.
    now = int(time.time())
    forged = jwt.encode({"sub": "cus_alice", "exp": now + 60, "iss": ISSUER, "aud": AUDIENCE},
                        "x" * 32, algorithm="HS256",
                        headers={"kid": "rsa-1"})
    assert_problem(await jwks.create_order(forged), 401, "unauthenticated")


async def test_an_unreachable_key_set_is_503_with_retry_after_not_401(jwks: JwksStack) -> None:
    jwks.idp.down = True
    r = await jwks.create_order(jwks.idp.token("cus_alice", "rsa-1"))
    assert_problem(r, 503, "auth-keys-unavailable")
    assert r.headers["retry-after"] == "5"
    # Nothing was created for a request that could not be authenticated.
    assert await jwks.stack.pool.fetchval("SELECT count(*) FROM orders") == 0
