"""Console sessions, kept server-side: every write to ``operator_sessions``.

A password sign-in opens a row; the cookie carries a random session id inside a signed token
(the console's credentials), and the table keeps only the id's SHA-256, so
a copy of it opens nothing. A session is usable while it is not ended, before its absolute expiry,
and while it was seen within the idle timeout (the policy is the console's ``verify_session``;
``last_seen_at`` moves at most once a minute, :data:`TOUCH_EVERY_S`, so reading a page is not a
write each time). Ending a session is final: signing out, its operator ending them all, an
admin ending someone's, a disabled account, a new password or a new role (:class:`EndReason`).
Rows are kept :data:`KEEP_DAYS` past their expiry, then purged at a sign-in.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg

from paycore import queries

SESSIONS = queries.load("operator_sessions")  # every statement on operator_sessions

TOUCH_EVERY_S = 60.0
KEEP_DAYS = 30


class EndReason(enum.StrEnum):
    """Why a session ended; the database CHECKs the values (``ck_session_end_reason``)."""

    SIGNED_OUT = "signed-out"
    IDLE = "idle"
    ENDED_BY_OPERATOR = "ended-by-operator"  # the operator ended their own sessions
    ENDED_BY_ADMIN = "ended-by-admin"  # someone else ended them (paycore operators end-sessions)
    OPERATOR_DISABLED = "operator-disabled"
    PASSWORD_CHANGED = "password-changed"
    ROLE_CHANGED = "role-changed"


@dataclass(frozen=True)
class StoredSession:
    """A row of ``operator_sessions``; ``handle`` names it (the hash's first hex digits) on pages."""

    session_hash: bytes
    operator: str
    created_at: datetime
    last_seen_at: datetime
    expires_at: datetime
    ended_at: datetime | None
    end_reason: EndReason | None

    @property
    def handle(self) -> str:
        return self.session_hash.hex()[:16]

    @classmethod
    def from_record(cls, r: asyncpg.Record) -> StoredSession:
        reason = r["end_reason"]
        return cls(bytes(r["session_hash"]), r["operator"], r["created_at"], r["last_seen_at"],
                   r["expires_at"], r["ended_at"], EndReason(reason) if reason is not None else None)


def session_hash(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode("ascii")).digest()


async def open_session(db: asyncpg.Pool | asyncpg.Connection, session_id: str, operator: str,
                       now: datetime, lifetime_s: float) -> None:
    """Record a new session of ``operator`` (and purge rows long past their expiry)."""
    await SESSIONS.purge_expired.execute(db, expired_before=now - timedelta(days=KEEP_DAYS))
    await SESSIONS.insert.execute(db, session_hash=session_hash(session_id), operator=operator, now=now,
                                  expires_at=now + timedelta(seconds=lifetime_s))


async def find_session(db: asyncpg.Pool | asyncpg.Connection, session_id: str) -> StoredSession | None:
    row = await SESSIONS.by_hash.fetchrow(db, session_hash=session_hash(session_id))
    return StoredSession.from_record(row) if row is not None else None


async def touch(db: asyncpg.Pool | asyncpg.Connection, stored: StoredSession, now: datetime, *,
                every_s: float = TOUCH_EVERY_S) -> None:
    """Mark the session seen now, if its mark is ``every_s`` old."""
    if (now - stored.last_seen_at).total_seconds() >= every_s:
        await SESSIONS.touch.execute(db, session_hash=stored.session_hash, now=now, every_s=every_s)


async def end_session(db: asyncpg.Pool | asyncpg.Connection, hashed: bytes, now: datetime,
                      reason: EndReason) -> bool:
    """End one session (by its hash); False if it had ended already."""
    status = await SESSIONS.end_one.execute(db, session_hash=hashed, now=now, reason=reason.value)
    return status.endswith(" 1")


async def end_sessions_of(db: asyncpg.Pool | asyncpg.Connection, operator: str, now: datetime,
                          reason: EndReason, *, keep: bytes | None = None) -> int:
    """End every open session of ``operator`` but ``keep`` (a session hash); how many ended."""
    status = await SESSIONS.end_of_operator.execute(db, operator=operator, now=now, reason=reason.value,
                                                    keep=keep)
    return int(status.rsplit(" ", 1)[1])


async def open_sessions(db: asyncpg.Pool | asyncpg.Connection, operator: str, now: datetime,
                        idle_s: float) -> list[StoredSession]:
    """``operator``'s usable sessions now (not ended, not expired, not idle), most recent first."""
    rows = await SESSIONS.open_of_operator.fetch(db, operator=operator, now=now, idle_s=idle_s)
    return [StoredSession.from_record(r) for r in rows]
