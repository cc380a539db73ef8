"""Who operators are: local accounts (``operators``), their passwords, and signing in.

An account has a name (an operator handle, the same rules as
:func:`paycore.operator_actions.validate_operator`), a role -- ``viewer`` reads,
``operator`` acts, ``refunder`` also sends money back -- and an argon2id password hash.
Accounts are added, disabled and enabled again, given a new password or role, never deleted or renamed: the
record of operator actions names them, and each change is itself recorded there
(who did it, in the same transaction). A change that ends the account's console
sessions (disabling it, a new password, a new role, an admin ending them) ends
them in that transaction too (:mod:`paycore.operator_sessions`).

:func:`authenticate` answers every failure the same way -- unknown name,
disabled account, wrong password -- and takes about as long for each: a name
without a usable account is checked against a dummy hash. Failures are counted
per name tried and client address; after ``max_failures`` inside the window the
key is refused with :class:`TooManyAttempts` (its ``retry_after_s``), even with
the right password, until enough of those failures have left the window. A
client address is capped as well, whatever names it tries: after
``max_client_failures`` inside the window it is refused for every name (one
address cannot spray many names). A refused sign-in is not counted, so an
attacker cannot extend the lock-out by retrying; a successful one clears its
key's failures.
"""

from __future__ import annotations

import enum
import hashlib
import math
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from paycore import queries
from paycore.db import transaction_on
from paycore.errors import NotFound, PaycoreError
from paycore.operator_actions import (
    ActionKind,
    InvalidOperatorAction,
    OperatorAction,
    record_action,
    validate_operator,
)
from paycore.operator_sessions import EndReason, end_sessions_of
from paycore.settings_spec import ConfigError, Count, Group, Number

PASSWORD_MIN_LENGTH = 12
# argon2 hashes any length, but a megabyte-long "password" is a cheap way to burn CPU.
PASSWORD_MAX_LENGTH = 1024
# Names the identity provider's operators act under (the console's credentials); no local account has one.
OIDC_PREFIX = "oidc:"
CLIENT_MAX_LENGTH = 128

OPERATORS = queries.load("operators")  # the accounts
FAILURES = queries.load("operator_login_failures")  # the sign-in throttle's failures

# argon2id with argon2-cffi's defaults (RFC 9106's second recommended option: t=3, 64 MiB, p=4).
# When these change, a sign-in with the right password stores a new hash (check_needs_rehash).
PASSWORD_HASHER = PasswordHasher()

SIGN_IN = Group("console: operator accounts and sign-in throttling (docs/operators.md)")
LOGIN_MAX_FAILURES = SIGN_IN.declare(
    "PAYCORE_CONSOLE_LOGIN_MAX_FAILURES", Count(maximum=1000), 5,
    "failed sign-ins of one name from one client address inside the window before that pair is "
    "refused, even with the right password")
LOGIN_MAX_CLIENT_FAILURES = SIGN_IN.declare(
    "PAYCORE_CONSOLE_LOGIN_MAX_CLIENT_FAILURES", Count(maximum=100_000), 50,
    "failed sign-ins from one client address inside the window, whatever names they tried, before "
    "that address is refused for every name; at least `PAYCORE_CONSOLE_LOGIN_MAX_FAILURES`")
LOGIN_WINDOW = SIGN_IN.declare(
    "PAYCORE_CONSOLE_LOGIN_WINDOW_S", Number("seconds", maximum=86_400.0), 900.0,
    "how long a failed sign-in counts")


class Role(enum.StrEnum):
    """What an operator may do; the database CHECKs the values (``ck_operator_role``)."""

    VIEWER = "viewer"  # reads every page
    OPERATOR = "operator"  # and acts
    # and sends money back: requests and approves refunds, captures and voids (migration 0017)
    REFUNDER = "refunder"

    def allows(self, needed: Role) -> bool:
        return _RANK[self] >= _RANK[needed]


_RANK = {Role.VIEWER: 0, Role.OPERATOR: 1, Role.REFUNDER: 2}


@dataclass(frozen=True)
class Operator:
    """A local operator account, without its password hash."""

    name: str
    role: Role
    created_at: datetime
    disabled_at: datetime | None

    @property
    def active(self) -> bool:
        return self.disabled_at is None

    @classmethod
    def from_record(cls, r: Mapping[str, Any]) -> Operator:
        return cls(r["name"], Role(r["role"]), r["created_at"], r["disabled_at"])

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role.value, "created_at": self.created_at.isoformat(),
                "disabled_at": self.disabled_at.isoformat() if self.disabled_at else None}


@dataclass(frozen=True)
class LoginThrottle:
    """How many failed sign-ins a window tolerates: of one name from one client, and from one
    client whatever the names."""

    max_failures: int = LOGIN_MAX_FAILURES.default
    window_s: float = LOGIN_WINDOW.default
    max_client_failures: int = LOGIN_MAX_CLIENT_FAILURES.default

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> LoginThrottle:
        throttle = cls(LOGIN_MAX_FAILURES.read(env), LOGIN_WINDOW.read(env),
                       LOGIN_MAX_CLIENT_FAILURES.read(env))
        if throttle.max_client_failures < throttle.max_failures:
            # Below it, the per-name limit could never be reached: say so rather than surprise.
            raise ConfigError(LOGIN_MAX_CLIENT_FAILURES.name,
                              f"must be at least {LOGIN_MAX_FAILURES.name} ({throttle.max_failures})")
        return throttle


@dataclass(frozen=True)
class AccountChanged:
    """An account as a change left it, the operator action that records it, and how many of its
    console sessions the change ended."""

    operator: Operator
    recorded: OperatorAction
    sessions_ended: int = 0


class OperatorAccountRefused(PaycoreError, ValueError):
    """An account change paycore will not make (name, role, password policy, already exists)."""


class OperatorNotFound(NotFound):
    """No operator account with that name."""


class AuthenticationFailed(PaycoreError):
    """The name or the password is wrong, or the account is disabled: deliberately not said which."""

    def __init__(self) -> None:
        super().__init__("unknown operator or wrong password")


class TooManyAttempts(PaycoreError):
    """Too many failed sign-ins of this name from this client, or from this client of any name;
    try again after ``retry_after_s``."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"too many failed sign-ins; try again in {retry_after_s} s")
        self.retry_after_s = retry_after_s


# --------------------------------------------------------------------------- rules


def account_name(name: str) -> str:
    """The handle as stored; refuses what validate_operator refuses, and the reserved ``oidc:``."""
    try:
        handle = validate_operator(name)
    except InvalidOperatorAction as exc:
        raise OperatorAccountRefused(str(exc)) from None
    if handle.startswith(OIDC_PREFIX):
        raise OperatorAccountRefused(f"names starting with {OIDC_PREFIX!r} are reserved for "
                                     "operators signed in by the identity provider")
    return handle


def parse_role(role: str) -> Role:
    try:
        return Role(role)
    except ValueError:
        *others, last = [repr(r.value) for r in Role]
        raise OperatorAccountRefused(f"role must be {', '.join(others)} or {last}, got {role!r}") from None


def check_password_policy(name: str, password: str) -> None:
    """Refuse a password shorter than 12 characters, overlong, or the name itself (any case)."""
    if len(password) < PASSWORD_MIN_LENGTH:
        raise OperatorAccountRefused(f"the password must be at least {PASSWORD_MIN_LENGTH} characters")
    if len(password) > PASSWORD_MAX_LENGTH:
        raise OperatorAccountRefused(f"the password must be at most {PASSWORD_MAX_LENGTH} characters")
    if password.strip().casefold() == name.strip().casefold():
        raise OperatorAccountRefused("the password must not be the operator's name")


# --------------------------------------------------------------------------- accounts


async def add_operator(db: asyncpg.Pool | asyncpg.Connection, name: str, password: str, role: str,
                       now: datetime, *, operator: str, reason: str | None = None,
                       hasher: PasswordHasher = PASSWORD_HASHER) -> AccountChanged:
    """Add an account (recorded as ``operator-add`` by ``operator``); refuses an existing name."""
    handle = account_name(name)
    wanted = parse_role(role)
    check_password_policy(handle, password)
    password_hash = hasher.hash(password)  # before the transaction: it takes a while, on purpose
    async with transaction_on(db) as conn:
        row = await OPERATORS.insert.fetchrow(conn, name=handle, role=wanted.value,
                                            password_hash=password_hash, now=now)
        if row is None:
            raise OperatorAccountRefused(f"an operator named {handle!r} exists already")
        added = Operator.from_record(row)
        try:
            recorded = await record_action(
                conn, action=ActionKind.OPERATOR_ADD, operator=operator, reason=reason, now=now, before={},
                after={"role": added.role.value, "disabled_at": None}, target_operator=handle)
        except InvalidOperatorAction as exc:
            raise OperatorAccountRefused(str(exc)) from None
    return AccountChanged(added, recorded)


async def disable_operator(db: asyncpg.Pool | asyncpg.Connection, name: str, now: datetime, *,
                           operator: str, reason: str) -> AccountChanged:
    """Disable an account: it can no longer sign in, and its sessions end. Recorded."""
    handle = name.strip()
    async with transaction_on(db) as conn:
        row = await OPERATORS.disable.fetchrow(conn, name=handle, now=now)
        if row is None:
            current = await get_operator(conn, handle)  # raises OperatorNotFound
            since = current.disabled_at.isoformat() if current.disabled_at else "?"
            raise OperatorAccountRefused(f"operator {handle!r} is disabled already (since {since})")
        disabled = Operator.from_record(row)
        ended = await end_sessions_of(conn, handle, now, EndReason.OPERATOR_DISABLED)
        recorded = await _record(conn, ActionKind.OPERATOR_DISABLE, operator, reason, now, handle,
                                 {"disabled_at": None},
                                 {"disabled_at": now.isoformat(), "sessions_ended": ended})
    return AccountChanged(disabled, recorded, ended)


async def _record(conn: asyncpg.Connection, action: ActionKind, operator: str, reason: str | None,
                  now: datetime, target: str, before: dict[str, Any],
                  after: dict[str, Any]) -> OperatorAction:
    try:
        return await record_action(conn, action=action, operator=operator, reason=reason, now=now,
                                   before=before, after=after, target_operator=target)
    except InvalidOperatorAction as exc:
        raise OperatorAccountRefused(str(exc)) from None


async def enable_operator(db: asyncpg.Pool | asyncpg.Connection, name: str, now: datetime, *,
                          operator: str, reason: str) -> AccountChanged:
    """Enable a disabled account again (it signs in with the password it had). Recorded."""
    handle = name.strip()
    async with transaction_on(db) as conn:
        current = await get_operator(conn, handle)  # raises OperatorNotFound
        row = await OPERATORS.enable.fetchrow(conn, name=handle)
        if row is None:
            raise OperatorAccountRefused(f"operator {handle!r} is not disabled")
        was = current.disabled_at.isoformat() if current.disabled_at else None
        recorded = await _record(conn, ActionKind.OPERATOR_ENABLE, operator, reason, now, handle,
                                 {"disabled_at": was}, {"disabled_at": None})
    return AccountChanged(Operator.from_record(row), recorded)


async def set_password(db: asyncpg.Pool | asyncpg.Connection, name: str, password: str, now: datetime, *,
                       operator: str, reason: str | None = None, keep_session: bytes | None = None,
                       hasher: PasswordHasher = PASSWORD_HASHER) -> AccountChanged:
    """Give an account a new password and end its sessions (but ``keep_session``, the hash of the
    session that changed it, if any): a leaked password ends there, the name stays. Recorded,
    never the password."""
    handle = name.strip()
    check_password_policy(handle, password)
    password_hash = hasher.hash(password)  # before the transaction: it takes a while, on purpose
    async with transaction_on(db) as conn:
        row = await OPERATORS.set_password.fetchrow(conn, name=handle, password_hash=password_hash)
        if row is None:
            raise OperatorNotFound(f"no operator named {handle!r}")
        ended = await end_sessions_of(conn, handle, now, EndReason.PASSWORD_CHANGED, keep=keep_session)
        recorded = await _record(conn, ActionKind.OPERATOR_PASSWORD, operator, reason, now, handle,
                                 {}, {"password": "changed", "sessions_ended": ended})
    return AccountChanged(Operator.from_record(row), recorded, ended)


async def set_role(db: asyncpg.Pool | asyncpg.Connection, name: str, role: str, now: datetime, *,
                   operator: str, reason: str) -> AccountChanged:
    """Change an account's role; its sessions end (they carry the old one). Recorded."""
    handle = name.strip()
    wanted = parse_role(role)
    async with transaction_on(db) as conn:
        current = await get_operator(conn, handle)  # raises OperatorNotFound
        row = await OPERATORS.set_role.fetchrow(conn, name=handle, role=wanted.value)
        if row is None:
            raise OperatorAccountRefused(f"operator {handle!r} is a {wanted.value} already")
        ended = await end_sessions_of(conn, handle, now, EndReason.ROLE_CHANGED)
        recorded = await _record(conn, ActionKind.OPERATOR_ROLE, operator, reason, now, handle,
                                 {"role": current.role.value},
                                 {"role": wanted.value, "sessions_ended": ended})
    return AccountChanged(Operator.from_record(row), recorded, ended)


async def end_sessions(db: asyncpg.Pool | asyncpg.Connection, name: str, now: datetime, *,
                       operator: str, reason: str | None = None, keep_session: bytes | None = None
                       ) -> AccountChanged:
    """End every console session of ``name`` (but ``keep_session``): the operator themselves (from
    the console) or an admin (``paycore operators end-sessions``). Recorded, with how many."""
    handle = name.strip()
    why = EndReason.ENDED_BY_OPERATOR if operator.strip() == handle else EndReason.ENDED_BY_ADMIN
    async with transaction_on(db) as conn:
        account = await get_operator(conn, handle)  # raises OperatorNotFound
        ended = await end_sessions_of(conn, handle, now, why, keep=keep_session)
        recorded = await _record(conn, ActionKind.OPERATOR_END_SESSIONS, operator, reason, now, handle,
                                 {}, {"sessions_ended": ended})
    return AccountChanged(account, recorded, ended)


async def get_operator(db: asyncpg.Pool | asyncpg.Connection, name: str) -> Operator:
    row = await OPERATORS.by_name.fetchrow(db, name=name.strip())
    if row is None:
        raise OperatorNotFound(f"no operator named {name.strip()!r}")
    return Operator.from_record(row)


async def list_operators(db: asyncpg.Pool | asyncpg.Connection) -> list[Operator]:
    rows = await OPERATORS.all.fetch(db)
    return [Operator.from_record(r) for r in rows]


# --------------------------------------------------------------------------- signing in

_dummy_hashes: dict[int, str] = {}


def dummy_hash(hasher: PasswordHasher) -> str:
    """A hash of a random password with ``hasher``'s parameters: what an unknown name is checked against."""
    key = id(hasher)
    if key not in _dummy_hashes:
        _dummy_hashes[key] = hasher.hash(secrets.token_urlsafe(24))
    return _dummy_hashes[key]


def _lock_key(client: str) -> int:
    # One advisory lock per client address: its concurrent wrong guesses, of one name or of many,
    # cannot all slip under either limit. Every (name, client) key is one client's, so this lock
    # serialises those too.
    digest = hashlib.blake2b(f"paycore.login\x1f{client}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _retry_after(failures: list[datetime], limit: int, throttle: LoginThrottle, now: datetime) -> int:
    # Open again once only limit - 1 failures remain in the window.
    unlocks_at = failures[len(failures) - limit] + timedelta(seconds=throttle.window_s)
    return max(1, math.ceil((unlocks_at - now).total_seconds()))


def _throttle_key(name: str, client: str) -> tuple[str, str]:
    key_name = name.strip()[:64] or "?"
    key_client = client.strip()[:CLIENT_MAX_LENGTH] or "?"
    return key_name, key_client


async def authenticate(db: asyncpg.Pool | asyncpg.Connection, name: str, password: str, client: str,
                       now: datetime, *, throttle: LoginThrottle = LoginThrottle(),
                       hasher: PasswordHasher = PASSWORD_HASHER) -> Operator:
    """The active operator ``name`` if ``password`` is theirs; ``client`` is the caller's address.

    Raises :class:`AuthenticationFailed` (the same for every reason) or
    :class:`TooManyAttempts`.
    """
    key_name, key_client = _throttle_key(name, client)
    decoy = dummy_hash(hasher)  # made before anything is looked up: a process's first call is no faster
    window_start = now - timedelta(seconds=throttle.window_s)
    overlong = len(password) > PASSWORD_MAX_LENGTH  # never a valid password; not worth hashing whole
    async with transaction_on(db) as conn:
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _lock_key(key_client))
        from_client = [r["failed_at"] for r in await FAILURES.of_client.fetch(
            conn, client=key_client, window_start=window_start)]
        if len(from_client) >= throttle.max_client_failures:
            raise TooManyAttempts(_retry_after(from_client, throttle.max_client_failures, throttle, now))
        failures = [r["failed_at"] for r in await FAILURES.of_name_and_client.fetch(
            conn, name=key_name, client=key_client, window_start=window_start)]
        if len(failures) >= throttle.max_failures:
            raise TooManyAttempts(_retry_after(failures, throttle.max_failures, throttle, now))
        row = await OPERATORS.for_sign_in.fetchrow(conn, name=name.strip())
        account = row if row is not None and row["disabled_at"] is None and not overlong else None
        stored = account["password_hash"] if account is not None else decoy
        try:
            # A mismatch, or a stored hash argon2 cannot read: both are a failed sign-in.
            hasher.verify(stored, password[:PASSWORD_MAX_LENGTH])
            verified = account is not None
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            verified = False
        if not verified or account is None:
            # Committed with the transaction; the failure is raised after it.
            await FAILURES.forget_old.execute(conn, window_start=window_start)
            await FAILURES.insert.execute(conn, name=key_name, client=key_client, now=now)
        else:
            await FAILURES.clear.execute(conn, name=key_name, client=key_client)
            if hasher.check_needs_rehash(stored):  # the parameters changed since this hash was made
                await OPERATORS.update_hash.execute(conn, name=account["name"],
                                                     password_hash=hasher.hash(password))
    if not verified or account is None:
        raise AuthenticationFailed()
    return Operator.from_record(account)
