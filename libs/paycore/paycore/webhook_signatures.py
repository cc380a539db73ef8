"""Standard Webhooks signatures: signing (the sandbox) and strict verification (intake).

A signature is ``v1,`` + base64(HMAC-SHA256(secret, f"{id}.{timestamp}.{body}"))
where the secret is the base64 after ``whsec_``. Verification:

- requires ``webhook-id``, ``webhook-timestamp`` (integer seconds) and
  ``webhook-signature`` (space-separated, possibly several ``v1,`` entries);
- rejects a timestamp more than :data:`TOLERANCE_S` from the verifier's clock,
  so a captured delivery cannot be replayed later;
- compares in constant time, and never raises on malformed input: it answers
  "not verified".

We implement it here rather than use the ``standardwebhooks`` package because
that one reads the wall clock (tests need the application clock) and raises
on some malformed headers; a test checks both agree on valid signatures.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from paycore.errors import PaycoreError

TOLERANCE_S = 300
SECRET_PREFIX = "whsec_"
K = TypeVar("K")


class InvalidSecret(PaycoreError, ValueError):
    """A webhook secret that is not ``whsec_`` + base64."""


def decode_secret(secret: str) -> bytes:
    if not secret.startswith(SECRET_PREFIX):
        raise InvalidSecret("a webhook secret starts with 'whsec_'")
    try:
        raw = base64.b64decode(secret[len(SECRET_PREFIX):], validate=True)
    except (binascii.Error, ValueError):
        raise InvalidSecret("a webhook secret is 'whsec_' followed by base64") from None
    if len(raw) < 16:
        raise InvalidSecret("a webhook secret has at least 16 bytes")
    return raw


def _mac(key: bytes, msg_id: str, timestamp: int, body: bytes) -> bytes:
    return hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header value for one delivery."""
    return "v1," + base64.b64encode(_mac(decode_secret(secret), msg_id, timestamp, body)).decode()


def signed_headers(secret: str, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secret, msg_id, timestamp, body),
        "content-type": "application/json",
    }


class VerificationFailed(PaycoreError):
    """Why a delivery was not verified (never includes secrets or signatures)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class _Candidate(Generic[K]):
    key: K
    secret: bytes


class Verifier(Generic[K]):
    """Verifies a delivery against several secrets; returns whose secret verified it.

    ``K`` identifies the secret's owner (for paycore: the provider account), so
    the account of a notification is *which secret verified it*, never a field
    of the payload.
    """

    def __init__(self, secrets: Iterable[tuple[K, str]]) -> None:
        self._candidates = [_Candidate(key, decode_secret(secret)) for key, secret in secrets]

    def verify(self, headers: Mapping[str, str], body: bytes, *, now: datetime) -> K:
        msg_id = headers.get("webhook-id", "").strip()
        raw_ts = headers.get("webhook-timestamp", "").strip()
        raw_sigs = headers.get("webhook-signature", "").strip()
        if not msg_id or not raw_ts or not raw_sigs:
            raise VerificationFailed("missing-headers")
        if not raw_ts.isdigit() or len(raw_ts) > 12:
            raise VerificationFailed("invalid-timestamp")
        timestamp = int(raw_ts)
        if abs(now.timestamp() - timestamp) > TOLERANCE_S:
            raise VerificationFailed("timestamp-outside-tolerance")
        offered: list[bytes] = []
        for entry in raw_sigs.split():
            version, _, value = entry.partition(",")
            if version != "v1" or not value:
                continue
            try:
                offered.append(base64.b64decode(value, validate=True))
            except (binascii.Error, ValueError):
                continue
        if not offered:
            raise VerificationFailed("no-v1-signature")
        for candidate in self._candidates:
            expected = _mac(candidate.secret, msg_id, timestamp, body)
            # Check every offered signature, constant-time each.
            if any(hmac.compare_digest(expected, sig) for sig in offered):
                return candidate.key
        raise VerificationFailed("no-matching-signature")
