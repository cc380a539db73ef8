"""The back office's service credentials: every write to ``service_credentials``.

paycore issues a credential (``paycore credentials issue``) and shows its secret once; the
table keeps the SHA-256 of the whole secret, so a copy of it calls nothing. The secret names
its row (``pcsc_<credential id>_<random>``): a request is checked against that one row's hash
with a constant-time compare, and a revoked row is refused at once (every request reads it).
Rotation is a second credential, deployed, then the first revoked; both are valid meanwhile
(docs/decisions/0009-back-office-credentials.md). A use is marked at most once a minute
(:data:`TOUCH_EVERY_S`), so a busy back office is not a write per request.

Nothing here logs or returns a secret but :func:`issue`, once, to its caller.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import re
import secrets
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from paycore import queries
from paycore.errors import NotFound, PaycoreError

__all__ = ["CREDENTIALS", "SECRET_PREFIX", "TOUCH_EVERY_S", "Credential", "CredentialNotFound",
           "CredentialRefused", "InvalidCredential", "Issued", "Scope", "authenticate", "find_credential",
           "issue", "list_credentials", "looks_like_secret", "revoke", "touch"]

CREDENTIALS = queries.load("service_credentials")  # every statement on service_credentials

# What every secret starts with, so a leaked one is recognised (by a secret scanner, by a person).
SECRET_PREFIX = "pcsc_"
_SECRET = re.compile(rf"^{SECRET_PREFIX}([0-9a-f]{{32}})_([A-Za-z0-9_-]{{43}})$")
SECRET_BYTES = 32  # 256 random bits, base64url: 43 characters
TOUCH_EVERY_S = 60.0
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# Compared against when the named row is missing or revoked, so every refusal does the same work.
_DUMMY_HASH = hashlib.sha256(b"no such credential").digest()


class Scope(enum.StrEnum):
    """What a credential may do; the database CHECKs the values (``ck_service_credential_scopes``)."""

    REFUNDS = "refunds"
    CAPTURES = "captures"
    VOIDS = "voids"
    READ = "read"  # read operations and an order's operations


class CredentialRefused(PaycoreError, ValueError):
    """A credential paycore will not issue or revoke (a name, the scopes, already revoked)."""


class InvalidCredential(CredentialRefused):
    """What was given is not a credential's: its name, its scopes, or who issues or revokes it."""


class CredentialNotFound(NotFound):
    """No credential has that name or id."""


@dataclass(frozen=True)
class Credential:
    """A row of ``service_credentials``, without its hash."""

    credential_id: UUID
    name: str
    scopes: frozenset[Scope]
    client: str  # the back office it stands for, shared across rotations (Idempotency-Key scope)
    issued_at: datetime
    issued_by: str
    last_used_at: datetime | None
    revoked_at: datetime | None
    revoked_by: str | None

    @property
    def requester(self) -> str:
        """What an operation it asks for records as ``requested_by``."""
        return f"backoffice:{self.name}"

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def allows(self, scope: Scope) -> bool:
        return scope in self.scopes

    def as_json(self) -> dict[str, Any]:
        return {"credential_id": str(self.credential_id), "name": self.name,
                "scopes": sorted(s.value for s in self.scopes), "issued_at": self.issued_at.isoformat(),
                "issued_by": self.issued_by,
                "last_used_at": self.last_used_at.isoformat() if self.last_used_at else None,
                "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
                "revoked_by": self.revoked_by}

    @classmethod
    def from_record(cls, r: Mapping[str, Any]) -> Credential:
        return cls(r["credential_id"], r["name"], frozenset(Scope(s) for s in r["scopes"]), r["client"],
                   r["issued_at"], r["issued_by"], r["last_used_at"], r["revoked_at"], r["revoked_by"])


@dataclass(frozen=True)
class Issued:
    """A new credential and its secret: the only time the secret exists outside its holder."""

    credential: Credential
    secret: str

    def __repr__(self) -> str:  # never the secret in a traceback or a log line
        return f"Issued(credential={self.credential!r}, secret='{SECRET_PREFIX}…')"


def secret_hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


def looks_like_secret(token: str) -> bool:
    """Whether ``token`` has a service credential's shape (not whether it is one)."""
    return token.startswith(SECRET_PREFIX)


def checked_name(name: str) -> str:
    handle = name.strip()
    if not _NAME.match(handle):
        raise InvalidCredential("a credential's name is 1 to 64 letters, digits, '.', '_' or '-', "
                                "starting with a letter or a digit")
    try:
        UUID(handle)
    except ValueError:
        return handle
    raise InvalidCredential("a credential's name cannot be a UUID (revoke takes a name or an id)")


def checked_scopes(scopes: Iterable[str]) -> frozenset[Scope]:
    chosen = list(scopes)
    known = {s.value for s in Scope}
    if unknown := sorted(set(chosen) - known):
        raise InvalidCredential(f"unknown scope {', '.join(unknown)}: "
                                f"one of {', '.join(s.value for s in Scope)}")
    if not chosen:
        raise InvalidCredential("a credential needs at least one scope")
    return frozenset(Scope(s) for s in chosen)


async def issue(db: asyncpg.Pool | asyncpg.Connection, name: str, scopes: Iterable[str], *, issued_by: str,
                now: datetime, client: str | None = None) -> Issued:
    """A new credential named ``name`` with ``scopes``, and its secret (shown once), for the back
    office ``client`` (default: ``name``). A rotation issues the next credential for the same
    client: Idempotency-Keys are scoped to the client, so a retry after the switch is the same
    request.

    :raises CredentialRefused: the name is not one, or is taken (by a revoked one too: a name
        is never reused), or the scopes are empty or unknown.
    """
    handle, chosen = checked_name(name), checked_scopes(scopes)
    stands_for = checked_name(client) if client is not None else handle
    if not issued_by.strip():
        raise InvalidCredential("who issues it must be named")
    credential_id = uuid.uuid4()
    secret = f"{SECRET_PREFIX}{credential_id.hex}_{secrets.token_urlsafe(SECRET_BYTES)}"
    try:
        row = await CREDENTIALS.insert.fetchrow(
            db, credential_id=credential_id, name=handle, client=stands_for, secret_hash=secret_hash(secret),
            scopes=sorted(s.value for s in chosen), now=now, issued_by=issued_by.strip())
    except asyncpg.UniqueViolationError:
        raise CredentialRefused(f"a credential named {handle} exists already (names are never reused, "
                                "revoked ones included)") from None
    assert row is not None
    return Issued(Credential.from_record(row), secret)


async def list_credentials(db: asyncpg.Pool | asyncpg.Connection) -> list[Credential]:
    """Every credential, revoked ones too, oldest first."""
    return [Credential.from_record(r) for r in await CREDENTIALS.every.fetch(db)]


async def find_credential(db: asyncpg.Pool | asyncpg.Connection, name_or_id: str) -> Credential:
    """The credential ``name_or_id`` names (an id when it is a UUID, else a name).

    :raises CredentialNotFound: none does.
    """
    text = name_or_id.strip()
    try:
        row = await CREDENTIALS.by_id.fetchrow(db, credential_id=UUID(text))
    except ValueError:
        row = await CREDENTIALS.by_name.fetchrow(db, name=text)
    if row is None:
        raise CredentialNotFound(f"no credential {text}")
    return Credential.from_record(row)


async def revoke(db: asyncpg.Pool | asyncpg.Connection, name_or_id: str, *, revoked_by: str,
                 now: datetime) -> Credential:
    """Revoke the credential ``name_or_id`` names; its next request is refused.

    :raises CredentialNotFound: no such credential.
    :raises CredentialRefused: it was revoked already.
    """
    if not revoked_by.strip():
        raise InvalidCredential("who revokes it must be named")
    found = await find_credential(db, name_or_id)
    row = await CREDENTIALS.revoke.fetchrow(db, credential_id=found.credential_id, now=now,
                                            revoked_by=revoked_by.strip())
    if row is None:
        again = await find_credential(db, str(found.credential_id))
        raise CredentialRefused(f"credential {found.name} was revoked already"
                                + (f" (by {again.revoked_by})" if again.revoked_by else ""))
    return Credential.from_record(row)


async def authenticate(db: asyncpg.Pool | asyncpg.Connection, presented: str,
                       now: datetime) -> Credential | None:
    """The unrevoked credential whose secret is ``presented``, its use marked; ``None`` for
    anything else (not a secret's shape, no such row, a wrong secret, revoked) -- deliberately
    not said which."""
    shape = _SECRET.match(presented)
    row = None
    if shape is not None:
        row = await CREDENTIALS.by_id.fetchrow(db, credential_id=UUID(shape.group(1)))
    usable = row is not None and row["revoked_at"] is None
    stored = bytes(row["secret_hash"]) if row is not None and usable else _DUMMY_HASH
    # Compared even when there is nothing to match, so every refusal costs the same.
    if not hmac.compare_digest(secret_hash(presented), stored) or row is None or not usable:
        return None
    credential = Credential.from_record(row)
    await touch(db, credential, now)
    return credential


async def touch(db: asyncpg.Pool | asyncpg.Connection, credential: Credential, now: datetime, *,
                every_s: float = TOUCH_EVERY_S) -> None:
    """Mark ``credential`` used now, if its mark is ``every_s`` old."""
    if credential.last_used_at is None or (now - credential.last_used_at).total_seconds() >= every_s:
        await CREDENTIALS.touch.execute(db, credential_id=credential.credential_id, now=now, every_s=every_s)
