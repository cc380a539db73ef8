"""The guards of every POST: a CSRF token made for this session, and the operator role.

The routes are read from the app itself, so a POST route added without its guard fails here.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import jwt
import pytest
from starlette.routing import Route

from harness.servers import serve_asgi
from paycore.clock import FakeClock
from paycore_console.app import create_app
from paycore_console.settings import ConsoleSettings
from tests.console.conftest import SECRET, ConsoleRig, MakeRig
from tests.support.identity_provider import IdentityProvider

ISSUER = "https://idp.example/"
AUDIENCE = "paycore-console"
CUSTOMER_AUDIENCE = "paycore-checkout"


def post_routes() -> list[str]:
    app = create_app(ConsoleSettings.from_env({"PAYCORE_DATABASE_URL": "postgresql://unused/x",
                                               "PAYCORE_CONSOLE_SECRET": SECRET}))
    paths = [r.path for r in app.routes if isinstance(r, Route) and "POST" in (r.methods or ())]
    assert len(paths) >= 15, paths  # the table below would pass vacuously if the routes went missing
    return paths


def concrete(path: str) -> str:
    """A path to POST to: the checks come before anything looks the id up."""
    path = re.sub(r"\{\w+:id\}", "1", path)
    return re.sub(r"\{\w+:uuid\}", str(uuid.uuid4()), path)


POSTS = post_routes()
# Signing out and ending your own sessions are open to viewers too: they change no payment.
ACTIONS = [p for p in POSTS if p not in ("/login", "/logout", "/sessions/end")]


async def post(client: Any, path: str, token: str | None) -> Any:
    if path.startswith("/api/"):
        headers = {"X-CSRF-Token": token} if token is not None else {}
        return await client.post(concrete(path), json={"reason": "r"}, headers=headers)
    data = {"reason": "r", **({"csrf_token": token} if token is not None else {})}
    return await client.post(concrete(path), data=data)


@pytest.mark.parametrize("path", POSTS)
async def test_every_post_refuses_a_missing_or_forged_csrf_token(rig: ConsoleRig, path: str) -> None:
    browser = await rig.browser("ops-1")
    other = await rig.browser("ops-2")  # a valid token, but made for another session
    for token in (None, "", other.csrf, browser.csrf[:-2] + "xx"):
        answer = await post(browser.client, path, token)
        assert answer.status_code == 403, (path, token, answer.status_code, answer.text[:200])
        assert "CSRF" in answer.text
    assert await rig.actions() == []
    assert (await browser.client.get("/")).status_code == 200  # still signed in: no logout happened


@pytest.mark.parametrize("path", ACTIONS)
async def test_a_viewer_can_see_but_not_act(rig: ConsoleRig, path: str) -> None:
    viewer = await rig.browser("watcher", role="viewer")
    answer = await post(viewer.client, path, viewer.csrf)
    assert answer.status_code == 403, (path, answer.status_code, answer.text[:200])
    assert "viewer" in answer.text
    if path.startswith("/api/"):
        assert answer.headers["content-type"] == "application/problem+json"
    assert await rig.actions() == []


@dataclass
class Idp:
    provider: IdentityProvider
    url: str

    def token(self, role: str, sub: str = "ops-1", audience: str = AUDIENCE) -> str:
        import time

        now = int(time.time())
        return self.provider.sign({"iss": ISSUER, "aud": audience, "sub": sub, "iat": now, "exp": now + 300,
                                   "paycore_role": role}, "rsa-1")


@pytest.fixture
async def idp() -> AsyncIterator[Idp]:
    provider = IdentityProvider()
    provider.add_rsa_key("rsa-1")
    async with serve_asgi(provider.app()) as url:
        yield Idp(provider, url)


async def bearer_rig(make_rig: MakeRig, clock: FakeClock, idp: Idp) -> ConsoleRig:
    return await make_rig(clock, PAYCORE_JWKS_URL=f"{idp.url}/.well-known/jwks.json",
                          PAYCORE_JWT_ISSUER=ISSUER,
                          PAYCORE_CONSOLE_AUDIENCE=AUDIENCE, PAYCORE_JWT_AUDIENCE=CUSTOMER_AUDIENCE,
                          PAYCORE_JWKS_REFETCH_COOLDOWN_S="0")


async def test_a_bearer_operator_acts_without_csrf_and_is_recorded_as_oidc_sub(
    make_rig: MakeRig, clock: FakeClock, idp: Idp,
) -> None:
    from tests.console.test_actions import dead_end_episode
    from tests.matrix.helpers import seed_account

    rig = await bearer_rig(make_rig, clock, idp)
    _, eid = await dead_end_episode(rig.pool, clock, await seed_account(rig.pool, clock))
    client = rig.client()
    auth = {"Authorization": f"Bearer {idp.token('operator')}"}
    assert (await client.get(f"/api/v1/escalations/{eid}", headers=auth)).status_code == 200
    acked = await client.post(f"/api/v1/escalations/{eid}/ack", json={"reason": "runbook"}, headers=auth)
    assert acked.status_code == 200, acked.text
    assert [(r["operator"], r["action"]) for r in await rig.actions()] == [
        ("oidc:ops-1", "escalation-acknowledge")]
    viewer = {"Authorization": f"Bearer {idp.token('viewer', sub='watcher')}"}
    refused = await client.post(f"/api/v1/escalations/{eid}/resolve", json={"reason": "x"}, headers=viewer)
    assert refused.status_code == 403
    assert len(await rig.actions()) == 1
    # A bearer token opens the API, not the pages (they take the session cookie only).
    assert (await client.get("/", headers=auth)).status_code == 303


async def test_a_token_of_another_audience_a_forged_one_or_an_unknown_role_is_401(
    make_rig: MakeRig, clock: FakeClock, idp: Idp,
) -> None:
    rig = await bearer_rig(make_rig, clock, idp)
    client = rig.client()
    assert (await client.get("/api/v1/overview",
                             headers={"Authorization": f"Bearer {idp.token('operator')}"})).status_code == 200
    # Signed by the same identity provider with the operator role, but for the customers' audience
    # (checkout's): a customer's token never opens the console.
    customers = idp.token("operator", audience=CUSTOMER_AUDIENCE)
    forged = jwt.encode({"sub": "x", "paycore_role": "operator"}, "k" * 32, algorithm="HS256")
    for token in (customers, idp.token("operator", audience="some-other-service"), forged,
                  idp.token("admin")):
        answer = await client.get("/api/v1/overview", headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 401, answer.text
        assert answer.headers["content-type"] == "application/problem+json"
