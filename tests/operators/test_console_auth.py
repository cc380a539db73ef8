"""Console sign-in primitives: signed sessions, session-bound CSRF tokens, operators' bearer tokens.

Sessions are checked against real PostgreSQL (a disabled operator's sessions stop); bearer
tokens against a real identity provider serving an RS256 key set over HTTP on a free port.
"""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import asyncpg
import jwt
import orjson
import pytest

from harness.servers import serve_asgi
from paycore.clock import FakeClock
from paycore.operators import (
    AuthenticationFailed,
    Role,
    add_operator,
    authenticate,
    disable_operator,
    end_sessions,
    set_password,
    set_role,
)
from paycore.settings_spec import ConfigError, Secret
from paycore_console.credentials import (
    AuthKeysUnavailable,
    ConsoleAuth,
    ConsoleAuthSettings,
    CsrfRefused,
    Forbidden,
    OperatorTokenRefused,
    Principal,
    Session,
    SessionRefused,
    require,
)
from tests.support.identity_provider import IdentityProvider

SECRET = "s" * 16 + "e" * 16 + "cret"
PASSWORD = "correct horse battery"
ISSUER = "https://idp.example/"
CONSOLE_AUDIENCE = "paycore-console"
CUSTOMER_AUDIENCE = "paycore-checkout"


def console(secret: str = SECRET, **env: str) -> ConsoleAuth:
    return ConsoleAuth(ConsoleAuthSettings.from_env({"PAYCORE_CONSOLE_SECRET": secret, **env}))


async def signed_in(pool: asyncpg.Pool, clock: FakeClock, auth: ConsoleAuth, name: str = "alice",
                    role: str = "operator") -> str:
    await add_operator(pool, name, PASSWORD, role, clock.now(), operator="root")
    account = await authenticate(pool, name, PASSWORD, "203.0.113.7", clock.now())
    return await auth.issue_session(pool, account.name, account.role, clock.now())


def _reshaped(token: str, **changes: Any) -> str:
    """The token with its payload changed and the old mac kept: what a forger can make."""
    body, _, mac = token.partition(".")
    claims = orjson.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    new_body = base64.urlsafe_b64encode(orjson.dumps({**claims, **changes})).rstrip(b"=").decode()
    return f"{new_body}.{mac}"


# --------------------------------------------------------------------------- sessions


async def test_a_session_names_its_operator_and_role_until_it_expires(
    pool: asyncpg.Pool, clock: FakeClock,
) -> None:
    auth = console(PAYCORE_CONSOLE_SESSION_IDLE_S="86400")  # the lifetime alone ends it here
    token = await signed_in(pool, clock, auth)
    issued = clock.now()
    session = await auth.verify_session(pool, token, clock.now())
    assert session.principal == Principal("alice", Role.OPERATOR, "session")
    assert (session.expires_at - issued).total_seconds() == 8 * 3600  # the default lifetime

    clock.advance(8 * 3600 - 1)
    assert (await auth.verify_session(pool, token, clock.now())).principal.name == "alice"
    clock.advance(1)
    with pytest.raises(SessionRefused, match="expired"):
        await auth.verify_session(pool, token, clock.now())


async def test_the_tokens_own_expiry_holds_whatever_its_session_row_says(
    pool: asyncpg.Pool, clock: FakeClock,
) -> None:
    # Each check stands alone: a row that outlives its token (written by hand, say) opens nothing.
    auth = console(PAYCORE_CONSOLE_SESSION_IDLE_S="86400")
    token = await signed_in(pool, clock, auth)
    await pool.execute("UPDATE operator_sessions SET expires_at = expires_at + interval '1 day'")
    clock.advance(8 * 3600)
    with pytest.raises(SessionRefused, match="expired"):
        await auth.verify_session(pool, token, clock.now())


async def test_the_lifetime_is_a_setting(pool: asyncpg.Pool, clock: FakeClock) -> None:
    auth = console(PAYCORE_CONSOLE_SESSION_TTL_S="60")
    token = await signed_in(pool, clock, auth)
    clock.advance(60)
    with pytest.raises(SessionRefused, match="expired"):
        await auth.verify_session(pool, token, clock.now())


async def test_a_tampered_session_is_refused(pool: asyncpg.Pool, clock: FakeClock) -> None:
    auth = console()
    token = await signed_in(pool, clock, auth, "victor", role="viewer")
    body, _, mac = token.partition(".")
    flipped = mac[:-2] + ("A" if mac[-2] != "A" else "B") + mac[-1]
    for forged in (
        _reshaped(token, role="operator"),  # a viewer promoting themselves
        _reshaped(token, exp=2_000_000_000),  # or living longer
        _reshaped(token, sub="alice"),  # or becoming someone else
        f"{body}.{flipped}",
        body, f"{body}.", f".{mac}", "", "not a token", f"{body}.{mac}é",
    ):
        with pytest.raises(SessionRefused):
            await auth.verify_session(pool, forged, clock.now())
    with pytest.raises(SessionRefused, match="not signed in"):
        await auth.verify_session(pool, None, clock.now())
    assert (await auth.verify_session(pool, token, clock.now())).principal.role is Role.VIEWER


async def test_a_session_signed_with_another_secret_is_refused(pool: asyncpg.Pool, clock: FakeClock) -> None:
    token = await signed_in(pool, clock, console())
    with pytest.raises(SessionRefused, match="signature"):
        await console("another secret of at least 32 chars").verify_session(pool, token, clock.now())


async def test_a_disabled_operators_sessions_stop_at_once(pool: asyncpg.Pool, clock: FakeClock) -> None:
    auth = console()
    token = await signed_in(pool, clock, auth)
    await auth.verify_session(pool, token, clock.now())
    await disable_operator(pool, "alice", clock.now(), operator="root", reason="left")
    with pytest.raises(SessionRefused, match="disabled"):
        await auth.verify_session(pool, token, clock.now())


async def test_a_disabled_account_opens_nothing_even_when_its_sessions_were_not_ended(
    pool: asyncpg.Pool, clock: FakeClock,
) -> None:
    # Disabling ends the sessions too (above); the account's own state is checked regardless.
    auth = console()
    token = await signed_in(pool, clock, auth)
    await pool.execute("UPDATE operators SET disabled_at = $1 WHERE name = 'alice'", clock.now())
    with pytest.raises(SessionRefused, match="operator disabled"):
        await auth.verify_session(pool, token, clock.now())


async def test_a_session_of_a_role_the_account_no_longer_has_is_refused(
    pool: asyncpg.Pool, clock: FakeClock,
) -> None:
    auth = console()
    token = await signed_in(pool, clock, auth)
    await pool.execute("UPDATE operators SET role = 'viewer' WHERE name = 'alice'")
    with pytest.raises(SessionRefused, match="role changed"):
        await auth.verify_session(pool, token, clock.now())


async def test_a_signed_session_that_was_never_opened_is_refused(
    pool: asyncpg.Pool, clock: FakeClock,
) -> None:
    # Signed with the right secret (a leaked secret, say), but no sign-in recorded it.
    auth = console()
    token = await signed_in(pool, clock, auth)
    for forged in (_resigned(auth, token, sid="bm90LWEtcmVhbC1zZXNzaW9u"),
                   _resigned(auth, token, sub="ghost")):
        with pytest.raises(SessionRefused, match="no such session"):
            await auth.verify_session(pool, forged, clock.now())


def _resigned(auth: ConsoleAuth, token: str, **changes: Any) -> str:
    """The token with its payload changed and signed again with the console's secret."""
    body = _reshaped(token, **changes).partition(".")[0]
    return f"{body}.{auth._mac(body)}"


# --------------------------------------------------------------------------- sessions kept server-side


async def test_a_session_ended_by_signing_out_is_refused_when_its_token_comes_back(
    pool: asyncpg.Pool, clock: FakeClock,
) -> None:
    auth = console()
    token = await signed_in(pool, clock, auth)
    session = await auth.verify_session(pool, token, clock.now())
    await auth.end_session(pool, session, clock.now())
    with pytest.raises(SessionRefused, match=r"session ended \(signed-out\)"):
        await auth.verify_session(pool, token, clock.now())
    # The table holds the id's hash only: nothing in it is a session id or a token.
    [row] = await pool.fetch("SELECT * FROM operator_sessions")
    assert row["session_hash"] == session.hashed and len(row["session_hash"]) == 32
    assert session.session_id.encode() not in b"".join(str(v).encode() for v in row.values())


async def test_an_unused_session_ends_after_the_idle_timeout_and_a_used_one_lives_on(
    pool: asyncpg.Pool, clock: FakeClock,
) -> None:
    auth = console(PAYCORE_CONSOLE_SESSION_IDLE_S="600")
    used, unused = await signed_in(pool, clock, auth), await signed_in(pool, clock, auth, "bob")
    for _ in range(3):  # used every 5 minutes for 15 minutes: longer than the timeout, never idle
        clock.advance(300)
        await auth.verify_session(pool, used, clock.now())
    with pytest.raises(SessionRefused, match=r"session ended \(idle\)"):
        await auth.verify_session(pool, unused, clock.now())
    with pytest.raises(SessionRefused, match=r"session ended \(idle\)"):  # ended, not only refused
        await auth.verify_session(pool, unused, clock.now() - timedelta(seconds=900))
    clock.advance(601)
    with pytest.raises(SessionRefused, match="idle"):
        await auth.verify_session(pool, used, clock.now())


async def test_a_new_password_ends_the_accounts_other_sessions_and_keeps_the_one_that_changed_it(
    pool: asyncpg.Pool, clock: FakeClock,
) -> None:
    auth = console()
    here, laptop, phone = (await signed_in(pool, clock, auth),
                           await _again(pool, clock, auth), await _again(pool, clock, auth))
    mine = await auth.verify_session(pool, here, clock.now())
    changed = await set_password(pool, "alice", "a brand new passphrase", clock.now(), operator="alice",
                                 keep_session=mine.hashed)
    assert changed.sessions_ended == 2
    for stale in (laptop, phone):
        with pytest.raises(SessionRefused, match="password-changed"):
            await auth.verify_session(pool, stale, clock.now())
    assert (await auth.verify_session(pool, here, clock.now())).principal.name == "alice"
    with pytest.raises(AuthenticationFailed):
        await authenticate(pool, "alice", PASSWORD, "203.0.113.7", clock.now())
    await authenticate(pool, "alice", "a brand new passphrase", "203.0.113.7", clock.now())
    assert (changed.recorded.action.value, changed.recorded.state_after) == (
        "operator-password", {"password": "changed", "sessions_ended": 2})


async def test_an_admin_ends_anyones_sessions_a_role_change_and_disabling_end_them_too(
    pool: asyncpg.Pool, clock: FakeClock,
) -> None:
    auth = console()
    alice = await signed_in(pool, clock, auth)
    ended = await end_sessions(pool, "alice", clock.now(), operator="root", reason="laptop stolen")
    assert ended.sessions_ended == 1 and ended.recorded.operator == "root"
    with pytest.raises(SessionRefused, match="ended-by-admin"):
        await auth.verify_session(pool, alice, clock.now())

    again = await _again(pool, clock, auth)
    await set_role(pool, "alice", "viewer", clock.now(), operator="root", reason="moved to support")
    with pytest.raises(SessionRefused, match="role-changed"):
        await auth.verify_session(pool, again, clock.now())

    viewer = await _again(pool, clock, auth)
    await disable_operator(pool, "alice", clock.now(), operator="root", reason="left")
    with pytest.raises(SessionRefused, match="operator-disabled"):
        await auth.verify_session(pool, viewer, clock.now())
    assert await pool.fetchval("SELECT count(*) FROM operator_sessions WHERE ended_at IS NULL") == 0


async def _again(pool: asyncpg.Pool, clock: FakeClock, auth: ConsoleAuth, name: str = "alice") -> str:
    account = await authenticate(pool, name, PASSWORD, "203.0.113.7", clock.now())
    return await auth.issue_session(pool, account.name, account.role, clock.now())


# --------------------------------------------------------------------------- CSRF


@dataclass
class TwoSessions:
    auth: ConsoleAuth
    mine: Session
    other: Session


@pytest.fixture
async def sessions(pool: asyncpg.Pool, clock: FakeClock) -> TwoSessions:
    auth = console()
    first = await signed_in(pool, clock, auth)
    account = await authenticate(pool, "alice", PASSWORD, "203.0.113.7", clock.now())
    second = await auth.issue_session(pool, account.name, account.role, clock.now())  # signed in again
    return TwoSessions(auth, await auth.verify_session(pool, first, clock.now()),
                       await auth.verify_session(pool, second, clock.now()))


def test_a_forms_csrf_token_passes_for_its_own_session(sessions: TwoSessions) -> None:
    token = sessions.auth.csrf_token(sessions.mine)
    sessions.auth.check_csrf(sessions.mine, token)
    assert sessions.auth.csrf_token(sessions.mine) == token  # stable for the session: nothing stored


def test_a_missing_csrf_token_is_refused(sessions: TwoSessions) -> None:
    for missing in (None, ""):
        with pytest.raises(CsrfRefused, match="no CSRF token"):
            sessions.auth.check_csrf(sessions.mine, missing)


def test_a_forged_csrf_token_is_refused(sessions: TwoSessions) -> None:
    auth, mine = sessions.auth, sessions.mine
    real = auth.csrf_token(mine)
    for forged in ("A" * len(real), real[:-1], real + "A", mine.session_id, "ünïcode",
                   console("another secret of at least 32 chars").csrf_token(mine)):
        with pytest.raises(CsrfRefused, match="not valid for this session"):
            auth.check_csrf(mine, forged)


def test_a_csrf_token_from_another_session_is_refused(sessions: TwoSessions) -> None:
    assert sessions.mine.session_id != sessions.other.session_id
    with pytest.raises(CsrfRefused):
        sessions.auth.check_csrf(sessions.mine, sessions.auth.csrf_token(sessions.other))


# --------------------------------------------------------------------------- roles


def test_a_viewer_reads_and_an_operator_acts() -> None:
    viewer = Principal("victor", Role.VIEWER, "session")
    operator = Principal("alice", Role.OPERATOR, "bearer")
    assert require(Role.VIEWER, viewer) is viewer
    assert require(Role.VIEWER, operator) is operator
    assert require(Role.OPERATOR, operator) is operator
    with pytest.raises(Forbidden, match="victor is a viewer"):
        require(Role.OPERATOR, viewer)


# --------------------------------------------------------------------------- settings


def test_the_secret_is_required_long_and_never_shown() -> None:
    with pytest.raises(ConfigError) as missing:
        ConsoleAuthSettings.from_env({})
    assert missing.value.variable == "PAYCORE_CONSOLE_SECRET"
    with pytest.raises(ConfigError, match="at least 32 characters"):
        ConsoleAuthSettings.from_env({"PAYCORE_CONSOLE_SECRET": "x" * 31})
    settings = ConsoleAuthSettings.from_env({"PAYCORE_CONSOLE_SECRET": SECRET})
    assert settings.secret == Secret(SECRET) and SECRET not in repr(settings)
    assert (settings.session_ttl_s, settings.role_claim, settings.audience) == (28800, "paycore_role", None)


@pytest.mark.parametrize(("env", "variable"), [
    ({"PAYCORE_CONSOLE_AUDIENCE": CONSOLE_AUDIENCE}, "PAYCORE_JWKS_URL"),
    ({"PAYCORE_CONSOLE_AUDIENCE": CONSOLE_AUDIENCE, "PAYCORE_JWKS_URL": "https://idp.example/jwks"},
     "PAYCORE_JWT_ISSUER"),
    ({"PAYCORE_CONSOLE_AUDIENCE": CUSTOMER_AUDIENCE, "PAYCORE_JWKS_URL": "https://idp.example/jwks",
      "PAYCORE_JWT_ISSUER": ISSUER, "PAYCORE_JWT_AUDIENCE": f"other,{CUSTOMER_AUDIENCE}"},
     "PAYCORE_CONSOLE_AUDIENCE"),
])
def test_bearer_tokens_need_the_key_set_the_issuer_and_an_audience_of_their_own(
    env: dict[str, str], variable: str,
) -> None:
    with pytest.raises(ConfigError) as refused:
        ConsoleAuthSettings.from_env({"PAYCORE_CONSOLE_SECRET": SECRET, **env})
    assert refused.value.variable == variable


# --------------------------------------------------------------------------- bearer tokens


@dataclass
class Idp:
    provider: IdentityProvider
    url: str

    def env(self, **more: str) -> dict[str, str]:
        return {"PAYCORE_JWKS_URL": f"{self.url}/.well-known/jwks.json", "PAYCORE_JWT_ISSUER": ISSUER,
                "PAYCORE_JWT_AUDIENCE": CUSTOMER_AUDIENCE, "PAYCORE_CONSOLE_AUDIENCE": CONSOLE_AUDIENCE,
                "PAYCORE_JWKS_REFETCH_COOLDOWN_S": "0", **more}

    def token(self, *, kid: str = "rsa-1", **claims: Any) -> str:
        now = int(time.time())
        base = {"iss": ISSUER, "aud": CONSOLE_AUDIENCE, "sub": "ops-1", "iat": now, "exp": now + 300}
        return self.provider.sign({k: v for k, v in {**base, **claims}.items() if v is not None}, kid)


@pytest.fixture
async def idp() -> AsyncIterator[Idp]:
    provider = IdentityProvider()
    provider.add_rsa_key("rsa-1")
    async with serve_asgi(provider.app()) as url:
        yield Idp(provider, url)


@pytest.mark.parametrize(("role", "expected"), [("viewer", Role.VIEWER), ("operator", Role.OPERATOR)])
async def test_the_role_claim_makes_a_viewer_or_an_operator(idp: Idp, role: str, expected: Role) -> None:
    auth = console(**idp.env())
    assert auth.takes_bearer_tokens
    principal = await auth.bearer_principal(idp.token(paycore_role=role))
    assert principal == Principal("oidc:ops-1", expected, "bearer")
    assert idp.provider.fetches == 1  # the key set came over HTTP


@pytest.mark.parametrize("role", [None, "admin", "Operator", "", ["operator"], {"role": "operator"}, 1])
async def test_a_token_without_a_known_role_is_refused(idp: Idp, role: Any) -> None:
    with pytest.raises(OperatorTokenRefused, match="'paycore_role' claim"):
        await console(**idp.env()).bearer_principal(idp.token(paycore_role=role))


async def test_the_role_claims_name_is_a_setting(idp: Idp) -> None:
    auth = console(**idp.env(PAYCORE_CONSOLE_ROLE_CLAIM="https://paycore.example/role"))
    token = idp.token(**{"https://paycore.example/role": "viewer"})
    assert (await auth.bearer_principal(token)).role is Role.VIEWER
    with pytest.raises(OperatorTokenRefused):  # the default claim name no longer counts
        await auth.bearer_principal(idp.token(paycore_role="operator"))


@pytest.mark.parametrize("claims", [
    {"aud": CUSTOMER_AUDIENCE},  # a customer's token, even one carrying a role
    {"aud": None},
    {"iss": "https://other-idp.example/"},
    {"exp": int(time.time()) - 3600},
    {"sub": None},
    {"sub": ""},
    {"sub": " ops-1"},
    {"sub": "x" * 60},  # oidc:<sub> would pass 64 characters
])
async def test_a_token_not_meant_for_this_console_is_refused(idp: Idp, claims: dict[str, Any]) -> None:
    with pytest.raises(OperatorTokenRefused):
        await console(**idp.env()).bearer_principal(idp.token(paycore_role="operator", **claims))


async def test_a_key_the_set_does_not_publish_or_an_hmac_token_is_refused(idp: Idp) -> None:
    auth = console(**idp.env(PAYCORE_JWT_SECRET="h" * 40))
    idp.provider.add_rsa_key("rogue", publish=False)
    with pytest.raises(OperatorTokenRefused):
        await auth.bearer_principal(idp.token(kid="rogue", paycore_role="operator"))
    now = int(time.time())
    # Signed with the customer-token secret: it never makes an operator.
    hs256 = jwt.encode({"iss": ISSUER, "aud": CONSOLE_AUDIENCE, "sub": "ops-1", "exp": now + 60,
                        "paycore_role": "operator"}, "h" * 40, algorithm="HS256", headers={"kid": "rsa-1"})
    with pytest.raises(OperatorTokenRefused):
        await auth.bearer_principal(hs256)


async def test_an_unreachable_key_set_is_the_servers_problem(idp: Idp) -> None:
    idp.provider.down = True
    with pytest.raises(AuthKeysUnavailable):
        await console(**idp.env()).bearer_principal(idp.token(paycore_role="operator"))


async def test_without_a_console_audience_no_bearer_token_is_taken(idp: Idp) -> None:
    env = idp.env()
    del env["PAYCORE_CONSOLE_AUDIENCE"]
    auth = console(**env)
    assert not auth.takes_bearer_tokens
    with pytest.raises(OperatorTokenRefused, match="takes no bearer tokens"):
        await auth.bearer_principal(idp.token(paycore_role="operator"))
    assert idp.provider.fetches == 0
