"""Customer tokens as real identity providers issue them; subjects PostgreSQL cannot store.

Keycloak and Auth0 (like Okta and Entra) put ``aud`` in every access token;
checkout pins the audience and the issuer. Their key sets are served by a real
local HTTP server at the path each provider uses. A subject holding NUL, another
control character or a lone surrogate is refused at the boundary with a 401,
and the storefront's keep-alive connection survives it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import jwt
import pytest

from harness.servers import serve_asgi
from paycore.config import ConfigError
from tests.support.identity_provider import IdentityProvider
from tests.support.stack import JWT_SECRET, Stack, checkout_settings, running_stack

# ---------------------------------------------------------------------------
# Token shapes


def keycloak_claims(issuer: str, **overrides: Any) -> dict[str, Any]:
    """An access token of realm ``shop`` for the storefront client (an audience mapper adds ours)."""
    now = int(time.time())
    claims: dict[str, Any] = {
        "exp": now + 300, "iat": now, "auth_time": now, "jti": f"onrtac:{uuid.uuid4()}",
        "iss": issuer, "aud": ["account", "paycore-checkout"],
        "sub": "3f0c9c4e-8a51-4d0e-9f57-1d6a2b7c8e90", "typ": "Bearer", "azp": "storefront",
        "sid": str(uuid.uuid4()), "acr": "1", "allowed-origins": ["https://shop.example"],
        "realm_access": {"roles": ["default-roles-shop", "offline_access", "uma_authorization"]},
        "resource_access": {"account": {"roles": ["manage-account", "view-profile"]}},
        "scope": "openid profile email", "email_verified": True, "preferred_username": "alice",
    }
    return _apply(claims, overrides)


AUTH0_TENANT = "https://paycore-test.eu.auth0.com/"
AUTH0_API = "https://api.paycore.example/checkout"
AUTH0_CLIENT = "Qx7m2N9pL4kR8sT1vW3yZ6aB5cD0eF2g"


def auth0_claims(issuer: str, **overrides: Any) -> dict[str, Any]:
    """An access token for the API identifier, requested with the ``openid`` scope."""
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": issuer, "sub": "auth0|65f0c2a1b3d4e5f6a7b8c9d0",
        "aud": [AUTH0_API, f"{AUTH0_TENANT}userinfo"],
        "iat": now, "exp": now + 86_400, "scope": "openid profile email", "azp": AUTH0_CLIENT,
    }
    return _apply(claims, overrides)


def _apply(claims: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    claims.update(overrides)
    return {k: v for k, v in claims.items() if v is not None}  # an override of None removes the claim


@dataclass(frozen=True)
class Shape:
    """How one identity provider publishes keys and shapes tokens, and the mistakes seen with it."""

    jwks_path: str
    kid: str
    audience: str  # what checkout is configured with
    issuer: Callable[[str], str]  # from the local server's URL
    wrong_issuer: Callable[[str], str]
    wrong_audience: Any
    claims: Callable[..., dict[str, Any]]


SHAPES = {
    "keycloak": Shape(
        jwks_path="/realms/shop/protocol/openid-connect/certs", kid="Vq3v0s8yHx1kZtR2m9bW4cN7pQe6aJfL",
        audience="paycore-checkout",
        issuer=lambda url: f"{url}/realms/shop", wrong_issuer=lambda url: f"{url}/realms/staff",
        wrong_audience=["account"],  # a token for the account console only
        claims=keycloak_claims),
    "auth0": Shape(
        jwks_path="/.well-known/jwks.json", kid="n3Yk0dQmT8rW5zX2vB7cL1pH4sJ9gF6e",
        audience=AUTH0_API,
        issuer=lambda url: AUTH0_TENANT,
        wrong_issuer=lambda url: AUTH0_TENANT.rstrip("/"),  # Auth0's iss ends in '/': exact match
        wrong_audience=AUTH0_CLIENT,  # an ID token sent by mistake
        claims=auth0_claims),
}


@dataclass
class Provider:
    shape: Shape
    idp: IdentityProvider
    idp_url: str
    stack: Stack

    @property
    def issuer(self) -> str:
        return self.shape.issuer(self.idp_url)

    def token(self, **overrides: Any) -> str:
        return self.idp.sign(self.shape.claims(self.issuer, **overrides), self.shape.kid)

    async def create_order(self, token: str) -> httpx.Response:
        return await self.stack.shop.http.post(
            "/orders", json={"amount_minor": 4999, "currency": "EUR"},
            headers={"Authorization": f"Bearer {token}"})


@pytest.fixture(params=sorted(SHAPES))
async def provider(request: pytest.FixtureRequest, pool: asyncpg.Pool, db_dsn: str,
                   ) -> AsyncIterator[Provider]:
    shape = SHAPES[request.param]
    idp = IdentityProvider()
    idp.add_rsa_key(shape.kid)
    async with serve_asgi(idp.app(shape.jwks_path)) as idp_url:
        async for stack in running_stack(
            pool, db_dsn, PAYCORE_JWT_SECRET="", PAYCORE_JWKS_URL=idp_url + shape.jwks_path,
            PAYCORE_JWT_AUDIENCE=shape.audience, PAYCORE_JWT_ISSUER=shape.issuer(idp_url),
        ):
            yield Provider(shape, idp, idp_url, stack)


def assert_401(r: httpx.Response, detail_mentions: str = "") -> None:
    assert r.status_code == 401, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["type"].endswith("unauthenticated")
    assert detail_mentions in body["detail"], body


async def order_owners(stack: Stack) -> list[str]:
    return [r["customer_id"] for r in await stack.pool.fetch("SELECT customer_id FROM orders")]


# ---------------------------------------------------------------------------
# Keycloak- and Auth0-shaped tokens from a JWKS


async def test_an_access_token_for_the_configured_audience_and_issuer_is_accepted(
    provider: Provider,
) -> None:
    claims = provider.shape.claims(provider.issuer)
    r = await provider.create_order(provider.token())
    assert r.status_code == 201, r.text
    assert await order_owners(provider.stack) == [claims["sub"]]


@pytest.mark.parametrize(("case", "mentions"), [
    ("wrong-audience", "audience"),
    ("missing-audience", "audience"),
    ("wrong-issuer", "issuer"),
    ("missing-issuer", "issuer"),
])
async def test_a_token_for_another_audience_or_issuer_is_401_problem(
    provider: Provider, case: str, mentions: str,
) -> None:
    # The right token passes first: the refusal below is about the one claim changed.
    assert (await provider.create_order(provider.token())).status_code == 201
    overrides = {
        "wrong-audience": {"aud": provider.shape.wrong_audience},
        "missing-audience": {"aud": None},
        "wrong-issuer": {"iss": provider.shape.wrong_issuer(provider.idp_url)},
        "missing-issuer": {"iss": None},
    }[case]
    assert_401(await provider.create_order(provider.token(sub="cus_mallory", **overrides)), mentions)
    assert "cus_mallory" not in await order_owners(provider.stack)


def jwks_env(**env: str) -> dict[str, str]:
    return {"PAYCORE_JWT_SECRET": "", "PAYCORE_JWKS_URL": "http://127.0.0.1:9/certs", **env}


@pytest.mark.parametrize(("env", "variable"), [
    (jwks_env(PAYCORE_JWT_ISSUER=AUTH0_TENANT), "PAYCORE_JWT_AUDIENCE"),
    (jwks_env(PAYCORE_JWT_AUDIENCE=AUTH0_API), "PAYCORE_JWT_ISSUER"),
    (jwks_env(), "PAYCORE_JWT_AUDIENCE"),
    # The flag waives the audience only: a key set may serve many issuers (Entra's common keys).
    (jwks_env(PAYCORE_JWT_ALLOW_ANY_AUDIENCE="true"), "PAYCORE_JWT_ISSUER"),
    # The JWKS wins over an HS256 secret, so it needs its claims configured all the same.
    (jwks_env(PAYCORE_JWT_SECRET=JWT_SECRET), "PAYCORE_JWT_AUDIENCE"),
])
def test_a_jwks_without_audience_or_issuer_fails_start_up_naming_the_variable(
    env: dict[str, str], variable: str,
) -> None:
    with pytest.raises(ConfigError) as exc:
        checkout_settings("http://127.0.0.1:1", "postgresql://x", **env)
    assert exc.value.variable == variable


async def test_allow_any_audience_is_explicit_logged_at_start_up_and_still_checks_the_issuer(
    pool: asyncpg.Pool, db_dsn: str, caplog: pytest.LogCaptureFixture,
) -> None:
    shape = SHAPES["auth0"]
    idp = IdentityProvider()
    idp.add_rsa_key(shape.kid)
    caplog.set_level(logging.WARNING, logger="paycore.checkout.auth")
    async with serve_asgi(idp.app(shape.jwks_path)) as idp_url:
        async for stack in running_stack(
            pool, db_dsn, PAYCORE_JWT_SECRET="", PAYCORE_JWKS_URL=idp_url + shape.jwks_path,
            PAYCORE_JWT_ISSUER=AUTH0_TENANT, PAYCORE_JWT_ALLOW_ANY_AUDIENCE="true",
        ):
            p = Provider(shape, idp, idp_url, stack)
            assert any("PAYCORE_JWT_ALLOW_ANY_AUDIENCE" in r.getMessage() and "not verified" in r.getMessage()
                       for r in caplog.records), caplog.text
            assert (await p.create_order(p.token(aud=["https://another.api.example"]))).status_code == 201
            assert (await p.create_order(p.token(aud=None))).status_code == 201
            assert_401(await p.create_order(p.token(iss="https://evil.eu.auth0.com/")), "issuer")


# ---------------------------------------------------------------------------
# HS256: enforced when set; an aud nobody configured is a clear 401


def hs256(**claims: Any) -> str:
    now = int(time.time())
    return jwt.encode({"sub": "cus_alice", "iat": now, "exp": now + 3600, **claims}, JWT_SECRET,
                      algorithm="HS256")


async def create_order(stack: Stack, token: str) -> httpx.Response:
    return await stack.shop.http.post("/orders", json={"amount_minor": 4999, "currency": "EUR"},
                                      headers={"Authorization": f"Bearer {token}"})


async def test_hs256_token_with_an_aud_but_no_audience_configured_is_401_telling_the_operator(
    stack: Stack,
) -> None:
    assert (await create_order(stack, hs256())).status_code == 201
    assert_401(await create_order(stack, hs256(aud="paycore-checkout")), "PAYCORE_JWT_AUDIENCE")


async def test_hs256_audience_list_and_issuer_are_enforced_when_set(pool: asyncpg.Pool, db_dsn: str) -> None:
    iss = "https://shop.example/auth"
    async for stack in running_stack(pool, db_dsn, PAYCORE_JWT_AUDIENCE="paycore-checkout, storefront-api",
                                     PAYCORE_JWT_ISSUER=iss):
        for aud in ("storefront-api", ["account", "paycore-checkout"]):
            assert (await create_order(stack, hs256(aud=aud, iss=iss))).status_code == 201
        assert_401(await create_order(stack, hs256(aud="account", iss=iss)), "audience")
        assert_401(await create_order(stack, hs256(iss=iss)), "audience")
        assert_401(await create_order(stack, hs256(aud="storefront-api", iss=iss + "/")), "issuer")
        assert_401(await create_order(stack, hs256(aud="storefront-api")), "issuer")


async def test_hs256_with_allow_any_audience_accepts_a_token_with_any_aud(
    pool: asyncpg.Pool, db_dsn: str,
) -> None:
    async for stack in running_stack(pool, db_dsn, PAYCORE_JWT_ALLOW_ANY_AUDIENCE="true"):
        assert (await create_order(stack, hs256(aud="whatever"))).status_code == 201
        assert (await create_order(stack, hs256())).status_code == 201


# ---------------------------------------------------------------------------
# Leeway: PyJWT checks exp/nbf/iat against the wall clock, so the times are relative to now


async def test_the_default_leeway_tolerates_a_little_clock_skew_and_no_more(stack: Stack) -> None:
    now = int(time.time())
    for accepted in (hs256(exp=now - 10), hs256(nbf=now + 10), hs256(iat=now + 10)):
        assert (await create_order(stack, accepted)).status_code == 201
    for refused in (hs256(exp=now - 60), hs256(nbf=now + 60), hs256(iat=now + 60)):
        assert_401(await create_order(stack, refused))


@pytest.mark.parametrize(("leeway", "expired_for", "accepted"), [("120", 60, True), ("0", 10, False)])
async def test_the_leeway_is_configurable(pool: asyncpg.Pool, db_dsn: str, leeway: str, expired_for: int,
                                          accepted: bool) -> None:
    # One stack per database: each stack's sandbox has its own URL, and a database
    # registers one configuration per provider account.
    async for stack in running_stack(pool, db_dsn, PAYCORE_JWT_LEEWAY_S=leeway):
        response = await create_order(stack, hs256(exp=int(time.time()) - expired_for))
        if accepted:
            assert response.status_code == 201
        else:
            assert_401(response)


@pytest.mark.parametrize(("variable", "value", "named"), [
    ("PAYCORE_JWT_LEEWAY_S", "-1", "PAYCORE_JWT_LEEWAY_S"),
    ("PAYCORE_JWT_LEEWAY_S", "301", "PAYCORE_JWT_LEEWAY_S"),
    ("PAYCORE_JWT_LEEWAY_S", "nan", "PAYCORE_JWT_LEEWAY_S"),
    ("PAYCORE_JWT_LEEWAY_S", "soon", "PAYCORE_JWT_LEEWAY_S"),
    ("PAYCORE_JWT_AUDIENCE", "paycore-checkout,,account", "PAYCORE_JWT_AUDIENCE"),
    ("PAYCORE_JWT_ISSUER", "https://idp.example/\x00", "PAYCORE_JWT_ISSUER"),
    ("PAYCORE_JWT_ALLOW_ANY_AUDIENCE", "maybe", "PAYCORE_JWT_ALLOW_ANY_AUDIENCE"),
])
def test_invalid_jwt_claim_settings_fail_at_start_up_naming_the_variable(
    variable: str, value: str, named: str,
) -> None:
    with pytest.raises(ConfigError) as exc:
        checkout_settings("http://127.0.0.1:1", "postgresql://x", **{variable: value})
    assert exc.value.variable == named


def test_an_audience_together_with_allow_any_audience_is_a_contradiction() -> None:
    with pytest.raises(ConfigError) as exc:
        checkout_settings("http://127.0.0.1:1", "postgresql://x", PAYCORE_JWT_AUDIENCE="paycore-checkout",
                          PAYCORE_JWT_ALLOW_ANY_AUDIENCE="true")
    assert exc.value.variable == "PAYCORE_JWT_ALLOW_ANY_AUDIENCE"


# ---------------------------------------------------------------------------
# Subjects PostgreSQL cannot store (or nobody should): 401 at the boundary, connection kept


def local_port(r: httpx.Response) -> int | None:
    """The client port of the connection that carried ``r``; None once that connection is closed."""
    try:
        port: int = r.extensions["network_stream"].get_extra_info("client_addr")[1]
    except OSError:
        return None
    return port


@pytest.mark.parametrize("sub", [
    "cus\u0000x",  # PostgreSQL refuses NUL in text
    "cus\ud800x",  # a lone surrogate cannot be encoded as UTF-8
    "\udc00",
    "cus\u0007x",  # other control characters: C0, DEL, C1
    "cus\nx",
    "cus\u007f",
    "cus\u0085x",
])
async def test_a_subject_with_nul_a_control_character_or_a_lone_surrogate_is_401_keeping_the_connection(
    stack: Stack, sub: str, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    refused = await create_order(stack, hs256(sub=sub))
    refused_on = local_port(refused)
    assert_401(refused, "subject")
    accepted = await create_order(stack, hs256())
    assert accepted.status_code == 201, accepted.text
    # The same keep-alive connection carried both: the refusal did not reset it.
    assert refused_on is not None and local_port(accepted) == refused_on
    assert await order_owners(stack) == ["cus_alice"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
