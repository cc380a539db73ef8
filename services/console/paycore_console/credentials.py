"""How an operator proves who they are to the console: sessions, CSRF tokens, identity-provider tokens.

**Sessions** are signed tokens naming a row: ``<payload>.<mac>``, the payload
base64url JSON (a random session id, the operator's name and role, issued-at
and expiry), the mac HMAC-SHA256 over it with a key derived from
``PAYCORE_CONSOLE_SECRET``. Signing in records the session server-side
(:mod:`paycore.operator_sessions`, the id's hash only). Verification checks the
mac (constant time) and the expiry on the application clock, then the row: not
ended (signing out, "end my sessions", an admin, a disabled account, a new
password or role end it), and seen within ``PAYCORE_CONSOLE_SESSION_IDLE_S`` (an
idle session is ended then); then the operator's row: a disabled operator's
sessions, or a session whose role is no longer the account's, stop at once.

**CSRF tokens** are HMAC-SHA256 of the session id under a second derived key,
not a double-submitted cookie: a form carries the token, and it is valid only
for the session it was made for, so neither a token from another session nor
one made up without the secret passes. Nothing is stored for it.

**Bearer tokens** from the identity provider are verified with the same key set
and issuer as customers' (``PAYCORE_JWKS_URL``, ``PAYCORE_JWT_ISSUER``,
:class:`paycore.bearer_tokens.TokenVerifier`) but against an audience of their
own, ``PAYCORE_CONSOLE_AUDIENCE``, which must not be a customer audience: a
customer's token never opens the console. The role is read from the claim
``PAYCORE_CONSOLE_ROLE_CLAIM`` (``viewer`` or ``operator``; anything else is
refused) and the operator acts as ``oidc:<sub>``, a name no local account may
take. Only a key set signs them: the HS256 customer secret never makes an
operator.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

import asyncpg
import jwt
import orjson

from paycore.bearer_tokens import TokenVerifier
from paycore.config import JWKS_REFETCH_COOLDOWN, JWKS_URL, JWT_AUDIENCE, JWT_ISSUER, JWT_LEEWAY
from paycore.errors import PaycoreError
from paycore.operator_actions import InvalidOperatorAction, validate_operator
from paycore.operator_sessions import (
    TOUCH_EVERY_S,
    EndReason,
    end_session,
    find_session,
    open_session,
    session_hash,
    touch,
)
from paycore.operators import OIDC_PREFIX, OperatorNotFound, Role, get_operator
from paycore.settings_spec import ConfigError, Group, Number, Secret, SecretText, Text

CONSOLE = Group("console: sessions and operators' identity-provider tokens (docs/operators.md)")
CONSOLE_SECRET = CONSOLE.declare(
    "PAYCORE_CONSOLE_SECRET", SecretText(min_length=32), None,
    "signs console sessions and CSRF tokens; changing it ends every session",
    shown_default="— (required by the console)")
SESSION_TTL = CONSOLE.declare(
    "PAYCORE_CONSOLE_SESSION_TTL_S", Number("seconds", maximum=7 * 86_400.0), 8 * 3600.0,
    "a console session's lifetime from sign-in")
SESSION_IDLE = CONSOLE.declare(
    "PAYCORE_CONSOLE_SESSION_IDLE_S", Number("seconds", maximum=7 * 86_400.0), 1800.0,
    "a console session unused this long ends, besides its lifetime (its use is marked at most once a "
    "minute, or every half of this when shorter)")
CONSOLE_AUDIENCE = CONSOLE.declare(
    "PAYCORE_CONSOLE_AUDIENCE", Text(printable=True), None,
    "with `PAYCORE_JWKS_URL`: the `aud` operators' bearer tokens must name (never a customer audience); "
    "unset, the console takes no bearer tokens",
    shown_default="— (no bearer tokens)")
ROLE_CLAIM = CONSOLE.declare(
    "PAYCORE_CONSOLE_ROLE_CLAIM", Text(printable=True), "paycore_role",
    "the claim of an operator's bearer token that holds `viewer`, `operator` or `refunder`")

TOKEN_VERSION = 1
SESSION_ID_BYTES = 16


class ConsoleAuthError(PaycoreError):
    """Base of the console's authentication refusals."""


class SessionRefused(ConsoleAuthError):
    """No usable session: sign in (again). ``str()`` never holds the token."""


class CsrfRefused(ConsoleAuthError):
    """A form's CSRF token is missing or was not made for this session."""


class OperatorTokenRefused(ConsoleAuthError):
    """An identity-provider token that does not make an operator (invalid, or no operator role)."""


class AuthKeysUnavailable(ConsoleAuthError):
    """The identity provider's key set could not be fetched: the server's problem, retry shortly."""


class Forbidden(ConsoleAuthError):
    """The operator is signed in but their role does not allow this."""


@dataclass(frozen=True)
class Principal:
    """Who is acting: their name (as recorded in operator_actions), role, and how they signed in."""

    name: str
    role: Role
    via: Literal["session", "bearer"]


@dataclass(frozen=True)
class Session:
    principal: Principal
    session_id: str
    issued_at: datetime
    expires_at: datetime

    @property
    def hashed(self) -> bytes:
        """How ``operator_sessions`` knows this session."""
        return session_hash(self.session_id)


def require(role_needed: Role, principal: Principal) -> Principal:
    """``principal`` if its role allows ``role_needed``; else :class:`Forbidden`."""
    if not principal.role.allows(role_needed):
        raise Forbidden(f"{principal.name} is a {principal.role.value}; this needs the "
                        f"{role_needed.value} role")
    return principal


@dataclass(frozen=True)
class ConsoleAuthSettings:
    secret: Secret
    session_ttl_s: float = SESSION_TTL.default
    session_idle_s: float = SESSION_IDLE.default
    role_claim: str = ROLE_CLAIM.default
    # Bearer tokens: all three set, or audience None (the console takes none).
    audience: str | None = None
    jwks_url: str | None = None
    issuer: str | None = None
    jwks_refetch_cooldown_s: float = JWKS_REFETCH_COOLDOWN.default
    leeway_s: float = JWT_LEEWAY.default

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ConsoleAuthSettings:
        secret = CONSOLE_SECRET.require(env, ": the console signs its sessions with it (≥ 32 characters)")
        audience = CONSOLE_AUDIENCE.get(env)
        jwks_url = issuer = None
        if audience is not None:
            jwks_url = JWKS_URL.require(env, " with PAYCORE_CONSOLE_AUDIENCE: operators' tokens are "
                                             "verified against the identity provider's key set")
            issuer = JWT_ISSUER.require(env, " with PAYCORE_CONSOLE_AUDIENCE")
            if audience in JWT_AUDIENCE.read(env):
                raise ConfigError(CONSOLE_AUDIENCE.name, "must not be one of PAYCORE_JWT_AUDIENCE: a "
                                                         "customer's token must never open the console")
        return cls(secret=secret, session_ttl_s=SESSION_TTL.read(env), session_idle_s=SESSION_IDLE.read(env),
                   role_claim=ROLE_CLAIM.read(env),
                   audience=audience, jwks_url=jwks_url, issuer=issuer,
                   jwks_refetch_cooldown_s=JWKS_REFETCH_COOLDOWN.read(env), leeway_s=JWT_LEEWAY.read(env))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _subkey(secret: Secret, purpose: str) -> bytes:
    # One key per purpose: a session mac can never pass as a CSRF token, nor the other way round.
    label = f"paycore console {purpose} v1".encode()
    return hmac.new(secret.reveal().encode(), label, hashlib.sha256).digest()


class ConsoleAuth:
    """Issues and checks sessions and CSRF tokens; verifies operators' bearer tokens."""

    def __init__(self, settings: ConsoleAuthSettings) -> None:
        self.settings = settings
        self._session_key = _subkey(settings.secret, "session")
        self._csrf_key = _subkey(settings.secret, "csrf")
        self._verifier = (TokenVerifier(secret=None, jwks_url=settings.jwks_url,
                                        jwks_refetch_cooldown_s=settings.jwks_refetch_cooldown_s,
                                        leeway_s=settings.leeway_s)
                          if settings.audience is not None and settings.jwks_url is not None else None)

    # -- sessions -------------------------------------------------------------------------------

    async def issue_session(self, db: asyncpg.Pool | asyncpg.Connection, name: str, role: Role,
                            now: datetime) -> str:
        """A session token for an operator who just signed in (:func:`paycore.operators.authenticate`),
        its session recorded."""
        sid = _b64(secrets.token_bytes(SESSION_ID_BYTES))
        expires = int((now + timedelta(seconds=self.settings.session_ttl_s)).timestamp())
        await open_session(db, sid, name, now, expires - now.timestamp())
        payload = orjson.dumps({"v": TOKEN_VERSION, "sid": sid, "sub": name, "role": role.value,
                                "iat": int(now.timestamp()), "exp": expires})
        body = _b64(payload)
        return f"{body}.{self._mac(body)}"

    async def end_session(self, db: asyncpg.Pool | asyncpg.Connection, session: Session, now: datetime,
                          reason: EndReason = EndReason.SIGNED_OUT) -> None:
        """End ``session`` (signing out): its cookie, sent again, opens nothing."""
        await end_session(db, session.hashed, now, reason)

    def _mac(self, body: str) -> str:
        return _b64(hmac.new(self._session_key, body.encode("ascii"), hashlib.sha256).digest())

    async def verify_session(self, db: asyncpg.Pool | asyncpg.Connection, token: str | None,
                             now: datetime) -> Session:
        """The session ``token`` stands for, if its mac, expiry and operator still hold."""
        if not token:
            raise SessionRefused("not signed in")
        body, dot, mac = token.partition(".")
        try:
            body.encode("ascii")
            mac.encode("ascii")
        except UnicodeEncodeError:
            raise SessionRefused("malformed session") from None
        if not dot or not hmac.compare_digest(mac, self._mac(body)):
            raise SessionRefused("session signature does not verify")
        try:
            claims = orjson.loads(_unb64(body))
            sid, name, role = str(claims["sid"]), str(claims["sub"]), Role(claims["role"])
            issued_at = datetime.fromtimestamp(int(claims["iat"]), UTC)
            expires_at = datetime.fromtimestamp(int(claims["exp"]), UTC)
            if claims["v"] != TOKEN_VERSION:
                raise ValueError("version")
        except (ValueError, KeyError, TypeError, binascii.Error, orjson.JSONDecodeError):
            raise SessionRefused("malformed session") from None
        if now >= expires_at:
            raise SessionRefused("session expired")
        stored = await find_session(db, sid)
        if stored is None or stored.operator != name:
            raise SessionRefused("no such session")
        if stored.ended_at is not None:
            raise SessionRefused(f"session ended ({stored.end_reason})")
        if now >= stored.expires_at:
            raise SessionRefused("session expired")
        if (now - stored.last_seen_at).total_seconds() > self.settings.session_idle_s:
            await end_session(db, stored.session_hash, now, EndReason.IDLE)
            raise SessionRefused("session ended (idle)")
        try:
            account = await get_operator(db, name)
        except OperatorNotFound:
            raise SessionRefused("no such operator") from None
        if not account.active:
            raise SessionRefused("operator disabled")
        if account.role is not role:
            raise SessionRefused("operator's role changed; sign in again")
        await touch(db, stored, now, every_s=min(TOUCH_EVERY_S, self.settings.session_idle_s / 2))
        return Session(Principal(name, role, "session"), sid, issued_at, expires_at)

    # -- CSRF -----------------------------------------------------------------------------------

    def csrf_token(self, session: Session) -> str:
        """The token every form of this session carries."""
        return _b64(hmac.new(self._csrf_key, session.session_id.encode(), hashlib.sha256).digest())

    def check_csrf(self, session: Session, submitted: str | None) -> None:
        """Refuse a form whose token is missing or was not made for this session."""
        if not submitted:
            raise CsrfRefused("the form has no CSRF token")
        try:
            submitted.encode("ascii")
        except UnicodeEncodeError:
            raise CsrfRefused("the form's CSRF token is not valid for this session") from None
        if not hmac.compare_digest(submitted, self.csrf_token(session)):
            raise CsrfRefused("the form's CSRF token is not valid for this session")

    # -- identity-provider tokens ---------------------------------------------------------------

    @property
    def takes_bearer_tokens(self) -> bool:
        return self._verifier is not None

    async def bearer_principal(self, token: str) -> Principal:
        """The operator an identity-provider token names, with the role its role claim holds."""
        if self._verifier is None:
            raise OperatorTokenRefused("this console takes no bearer tokens "
                                       "(PAYCORE_CONSOLE_AUDIENCE is unset)")
        assert self.settings.audience is not None
        try:
            claims = await self._verifier.decode(token.strip(), audiences=(self.settings.audience,),
                                                 issuer=self.settings.issuer,
                                                 require=("sub", "exp", "iss", "aud"))
        except jwt.PyJWKClientConnectionError:
            raise AuthKeysUnavailable("the identity provider's keys could not be fetched") from None
        except jwt.PyJWTError:
            raise OperatorTokenRefused("the bearer token is not valid for this console") from None
        role_value = claims.get(self.settings.role_claim)
        if not isinstance(role_value, str) or role_value not in {r.value for r in Role}:
            raise OperatorTokenRefused(f"the token's {self.settings.role_claim!r} claim is not "
                                       "'viewer', 'operator' or 'refunder'")
        sub = claims.get("sub")
        # Verbatim: a subject that is empty, or that trimming would change, names nobody.
        name = OIDC_PREFIX + sub if isinstance(sub, str) and sub and sub.strip() == sub else ""
        try:
            validate_operator(name)
        except InvalidOperatorAction:
            raise OperatorTokenRefused("the token's subject cannot be an operator name") from None
        return Principal(name, Role(role_value), "bearer")
