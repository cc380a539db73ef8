"""Console sessions, kept server-side: every write to ``operator_sessions``.

A password sign-in opens a row; the cookie carries a random session id inside a signed token
(:mod:`paycore.console_auth`), and the table keeps only the id's SHA-256, so a copy of it opens
nothing. A session is usable while it is not ended, before its absolute expiry, and while it
was seen within the idle timeout (the policy is :meth:`paycore.console_auth.ConsoleAuth.verify_session`'s;
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


COLUMNS = "session_hash, operator, created_at, last_seen_at, expires_at, ended_at, end_reason"

INSERT_SESSION = """
INSERT INTO operator_sessions (session_hash, operator, created_at, last_seen_at, expires_at)
VALUES ($1, $2, $3, $3, $4)
"""
PURGE_OLD = "DELETE FROM operator_sessions WHERE expires_at < $1"


async def open_session(db: asyncpg.Pool | asyncpg.Connection, session_id: str, operator: str,
                       now: datetime, lifetime_s: float) -> None:
    """Record a new session of ``operator`` (and purge rows long past their expiry)."""
    await db.execute(PURGE_OLD, now - timedelta(days=KEEP_DAYS))
    await db.execute(INSERT_SESSION, session_hash(session_id), operator, now,
                     now + timedelta(seconds=lifetime_s))


SELECT_SESSION = f"SELECT {COLUMNS} FROM operator_sessions WHERE session_hash = $1"  # noqa: S608


async def find_session(db: asyncpg.Pool | asyncpg.Connection, session_id: str) -> StoredSession | None:
    row = await db.fetchrow(SELECT_SESSION, session_hash(session_id))
    return StoredSession.from_record(row) if row is not None else None


# Only forward, only while open, and only when the last mark is a minute old.
TOUCH = """
UPDATE operator_sessions SET last_seen_at = $2
WHERE session_hash = $1 AND ended_at IS NULL AND last_seen_at <= $2::timestamptz - make_interval(secs => $3)
"""


async def touch(db: asyncpg.Pool | asyncpg.Connection, stored: StoredSession, now: datetime, *,
                every_s: float = TOUCH_EVERY_S) -> None:
    """Mark the session seen now, if its mark is ``every_s`` old."""
    if (now - stored.last_seen_at).total_seconds() >= every_s:
        await db.execute(TOUCH, stored.session_hash, now, every_s)


END_SESSION = """
UPDATE operator_sessions SET ended_at = $2, end_reason = $3
WHERE session_hash = $1 AND ended_at IS NULL
"""


async def end_session(db: asyncpg.Pool | asyncpg.Connection, hashed: bytes, now: datetime,
                      reason: EndReason) -> bool:
    """End one session (by its hash); False if it had ended already."""
    status: str = await db.execute(END_SESSION, hashed, now, reason.value)
    return status.endswith(" 1")


END_OPERATORS_SESSIONS = """
UPDATE operator_sessions SET ended_at = $2, end_reason = $3
WHERE operator = $1 AND ended_at IS NULL AND session_hash IS DISTINCT FROM $4
"""


async def end_sessions_of(db: asyncpg.Pool | asyncpg.Connection, operator: str, now: datetime,
                          reason: EndReason, *, keep: bytes | None = None) -> int:
    """End every open session of ``operator`` but ``keep`` (a session hash); how many ended."""
    status: str = await db.execute(END_OPERATORS_SESSIONS, operator, now, reason.value, keep)
    return int(status.rsplit(" ", 1)[1])


OPEN_SESSIONS = f"""
SELECT {COLUMNS} FROM operator_sessions
WHERE operator = $1 AND ended_at IS NULL AND expires_at > $2
  AND last_seen_at > $2::timestamptz - make_interval(secs => $3)
ORDER BY last_seen_at DESC, created_at DESC
"""  # noqa: S608


async def open_sessions(db: asyncpg.Pool | asyncpg.Connection, operator: str, now: datetime,
                        idle_s: float) -> list[StoredSession]:
    """``operator``'s usable sessions now (not ended, not expired, not idle), most recent first."""
    rows = await db.fetch(OPEN_SESSIONS, operator, now, idle_s)
    return [StoredSession.from_record(r) for r in rows]
