"""paycore.webhook_signatures at its edges: what a delivery must carry to be verified.

The intake's tests deliver real signed requests; these pin the verifier's bounds one by one
(the generated mutation run, issue 26, found each of them unguarded): a secret's length and
alphabet, each header required on its own, the timestamp's digits and the tolerance at its
boundary, and which ``webhook-signature`` entries count.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

import pytest

from paycore.webhook_signatures import (
    TOLERANCE_S,
    InvalidSecret,
    VerificationFailed,
    Verifier,
    decode_secret,
    sign,
    signed_headers,
)

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123").decode()
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TS = int(NOW.timestamp())
BODY = b'{"type": "payment.succeeded"}'


def verify(headers: dict[str, str], *, now: datetime = NOW) -> str:
    return Verifier([("acct", SECRET)]).verify(headers, BODY, now=now)


def refused(headers: dict[str, str], *, now: datetime = NOW) -> str:
    with pytest.raises(VerificationFailed) as failed:
        verify(headers, now=now)
    return failed.value.reason


def test_a_secret_has_at_least_16_bytes_of_strict_base64() -> None:
    assert decode_secret("whsec_" + base64.b64encode(b"x" * 16).decode()) == b"x" * 16
    with pytest.raises(InvalidSecret, match="at least 16 bytes"):
        decode_secret("whsec_" + base64.b64encode(b"x" * 15).decode())
    with pytest.raises(InvalidSecret, match="followed by base64"):  # not silently stripped
        decode_secret("whsec_" + base64.b64encode(b"x" * 16).decode()[:8] + "$$" + "eHh4eHh4eHg=")


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_each_header_is_required_on_its_own(missing: str) -> None:
    headers = signed_headers(SECRET, "msg_1", TS, BODY)
    assert verify(headers) == "acct"
    del headers[missing]
    assert refused(headers) == "missing-headers"


def test_a_timestamp_is_at_most_twelve_digits() -> None:
    assert refused(signed_headers(SECRET, "msg_1", TS, BODY) | {"webhook-timestamp": "1" * 13}) \
        == "invalid-timestamp"
    twelve = 10**11  # 12 digits: judged by the tolerance, not refused as malformed
    assert refused(signed_headers(SECRET, "msg_1", twelve, BODY)) == "timestamp-outside-tolerance"
    assert verify(signed_headers(SECRET, "msg_1", twelve, BODY),
                  now=datetime.fromtimestamp(twelve, UTC)) == "acct"


def test_the_tolerance_admits_its_boundary_and_nothing_past_it() -> None:
    headers = signed_headers(SECRET, "msg_1", TS, BODY)
    assert verify(headers, now=NOW + timedelta(seconds=TOLERANCE_S)) == "acct"
    assert verify(headers, now=NOW - timedelta(seconds=TOLERANCE_S)) == "acct"
    assert refused(headers, now=NOW + timedelta(seconds=TOLERANCE_S + 1)) == "timestamp-outside-tolerance"
    assert TOLERANCE_S == 300  # the Standard Webhooks default the senders expect


def test_only_well_formed_v1_entries_count_and_a_later_one_still_verifies() -> None:
    good = sign(SECRET, "msg_1", TS, BODY)
    value = good.removeprefix("v1,")
    headers = signed_headers(SECRET, "msg_1", TS, BODY)
    # Entries that do not count, before the one that verifies: another version, an empty value,
    # a value that is not base64.
    headers["webhook-signature"] = f"v2,{value} v1, v1,not*base64 {good}"
    assert verify(headers) == "acct"
    for alone in (f"v2,{value}", "v1,", f"v1,{value[:10]}*{value[10:]}"):
        headers["webhook-signature"] = alone
        assert refused(headers) == "no-v1-signature", alone
