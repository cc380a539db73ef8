"""Idempotency keys: header parsing, body fingerprints and the key store.

Keys are scoped to (account, environment), and for Cardco also to the endpoint: each
``POST`` has its own keys (a dialect's scope names its dialect). A record remembers the body
fingerprint, when the key was first seen (sandbox clock) and, once the first
request finished, the exact status and body to replay.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import orjson
from starlette.responses import Response

from paycore_sandbox.errors import ApiError, invalid_param

MAX_KEY_LENGTH = 255
KEY_HEADER = "Idempotency-Key"

# RFC 9110 tchar plus ":" and "/" (sf-token). We accept a leading digit too,
# because bare UUIDs are the common unquoted key.
_TOKEN_CHARS = frozenset(
    "!#$%&'*+-.^_`|~:/"
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


def parse_idempotency_key(raw: str | None) -> str:
    """The key's value from a Structured Field String or a bare token."""
    if raw is None or not raw.strip():
        raise ApiError(400, "invalid_request", "missing_idempotency_key",
                       "An Idempotency-Key header is required on every POST.")
    text = raw.strip(" \t")
    value = _parse_sf_string(text) if text.startswith('"') else _parse_token(text)
    if not value:
        raise invalid_param(KEY_HEADER, "Idempotency-Key must not be empty.")
    if len(value) > MAX_KEY_LENGTH:
        raise invalid_param(KEY_HEADER,
                            f"Idempotency-Key must be at most {MAX_KEY_LENGTH} characters.")
    return value


def _parse_sf_string(text: str) -> str:
    out: list[str] = []
    i = 1
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            if i + 1 >= len(text) or text[i + 1] not in '"\\':
                raise invalid_param(KEY_HEADER, 'Only \\" and \\\\ escapes are allowed.')
            out.append(text[i + 1])
            i += 2
            continue
        if ch == '"':
            if i != len(text) - 1:
                raise invalid_param(KEY_HEADER, "Unexpected characters after closing quote.")
            return "".join(out)
        if not 0x20 <= ord(ch) <= 0x7E:
            raise invalid_param(KEY_HEADER, "Idempotency-Key must be printable ASCII.")
        out.append(ch)
        i += 1
    raise invalid_param(KEY_HEADER, "Unterminated quoted Idempotency-Key.")


def _parse_token(text: str) -> str:
    if any(ch not in _TOKEN_CHARS for ch in text):
        raise invalid_param(KEY_HEADER,
                            "Idempotency-Key must be a quoted string or a bare token.")
    return text


def fingerprint(body: Any) -> str:
    """SHA-256 of the canonical JSON (sorted keys, no whitespace) of the body."""
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


@dataclass(frozen=True)
class StoredResponse:
    status: int
    body: bytes

    def to_response(self, *, replayed: bool) -> Response:
        headers = {"Idempotent-Replayed": "true"} if replayed else {}
        return Response(self.body, status_code=self.status, headers=headers,
                        media_type="application/json")

    @classmethod
    def of_error(cls, error: ApiError) -> StoredResponse:
        return cls(error.status, error.body())


@dataclass
class KeyRecord:
    scope: tuple[str, ...]
    key: str
    fingerprint: str
    first_seen: float
    response: StoredResponse | None = None
    payment_id: str | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def in_progress(self) -> bool:
        return self.response is None


class Claim(Enum):
    FRESH = "fresh"          # this request executes
    REPLAY = "replay"        # completed earlier: send the stored answer
    IN_PROGRESS = "in_progress"
    MISMATCH = "mismatch"    # same key, different body


class IdempotencyStore:
    def __init__(self, retention_s: int) -> None:
        self._retention_s = retention_s
        self._records: dict[tuple[str, ...], KeyRecord] = {}
        # Check-and-claim must be one step so two same-key requests can never
        # both execute; the lock makes that explicit rather than relying on
        # the absence of awaits.
        self._lock = asyncio.Lock()

    async def claim(self, scope: tuple[str, ...], key: str, fp: str,
                    now: float) -> tuple[Claim, KeyRecord]:
        async with self._lock:
            slot = (*scope, key)
            record = self._records.get(slot)
            if record is not None and self._expired(record, now):
                del self._records[slot]
                record = None
            if record is None:
                record = KeyRecord(scope=scope, key=key, fingerprint=fp, first_seen=now)
                self._records[slot] = record
                return Claim.FRESH, record
            if record.fingerprint != fp:
                return Claim.MISMATCH, record
            if record.in_progress:
                return Claim.IN_PROGRESS, record
            return Claim.REPLAY, record

    def _expired(self, record: KeyRecord, now: float) -> bool:
        # Only completed keys age out: an in-flight execution keeps its key.
        return not record.in_progress and now - record.first_seen >= self._retention_s

    def complete(self, record: KeyRecord, response: StoredResponse) -> None:
        record.response = response
        record.done.set()

    def abandon(self, record: KeyRecord) -> None:
        """Forget a key whose execution never started (nothing to replay)."""
        slot = (*record.scope, record.key)
        if self._records.get(slot) is record:
            del self._records[slot]
        record.done.set()
