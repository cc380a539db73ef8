"""The intake's HTTP contract: signatures, size and shape checks, health and metrics.

Anything unverifiable or malformed is refused with problem+json and stores nothing.
"""

from __future__ import annotations

import base64
import math
import time
from datetime import UTC, datetime

import orjson
import pytest
import standardwebhooks

from paycore.webhook_signatures import TOLERANCE_S, VerificationFailed, Verifier, sign, signed_headers
from tests.support.webhooks import TEST, WebhookStack, event, payment_object, sandbox_secrets


async def stored(hooks: WebhookStack) -> int:
    return await hooks.count("SELECT count(*) FROM payment_attempt_events")


def an_event() -> dict[str, object]:
    return event(payment_object(payment_id="pay_1", reference="ORD-x-a1"))


async def test_a_forged_signature_is_rejected_and_nothing_is_stored(hooks: WebhookStack) -> None:
    forged = "whsec_" + base64.b64encode(b"not-the-real-secret-0123").decode()
    r = await hooks.deliver(an_event(), secret=forged)
    assert r.status_code == 401
    assert r.headers["content-type"] == "application/problem+json"
    assert await stored(hooks) == 0


async def test_a_stale_signature_is_rejected(hooks: WebhookStack) -> None:
    old = int(hooks.clock.now().timestamp()) - TOLERANCE_S - 1
    r = await hooks.deliver(an_event(), timestamp=old)
    assert r.status_code == 401 and r.json()["detail"] == "timestamp-outside-tolerance"
    assert await stored(hooks) == 0


@pytest.mark.parametrize("skew_s", [TOLERANCE_S + 1, 365 * 86_400])
async def test_a_signature_dated_ahead_of_the_tolerance_is_rejected(hooks: WebhookStack, skew_s: int) -> None:
    # The tolerance holds both ways (Standard Webhooks): a signature dated a year ahead is no
    # fresher than one a year old.
    ahead = int(hooks.clock.now().timestamp()) + skew_s
    r = await hooks.deliver(an_event(), timestamp=ahead)
    assert r.status_code == 401 and r.json()["detail"] == "timestamp-outside-tolerance"
    assert await stored(hooks) == 0


async def test_a_signature_at_the_edges_of_the_tolerance_verifies(hooks: WebhookStack) -> None:
    now = hooks.clock.now().timestamp()  # headers carry whole seconds: stay inside by the fraction
    for at in (math.ceil(now) - TOLERANCE_S, math.floor(now) + TOLERANCE_S):
        r = await hooks.deliver(an_event(), timestamp=at)
        assert r.status_code == 200, r.text


async def test_a_delivery_replayed_later_with_its_old_timestamp_is_rejected(hooks: WebhookStack) -> None:
    evt = an_event()
    body = orjson.dumps(evt)
    now = int(hooks.clock.now().timestamp())
    headers = signed_headers(sandbox_secrets()[TEST], str(evt["id"]), now, body)
    first = await hooks.intake.post("/webhooks/cardco", content=body, headers=headers)
    assert first.status_code == 200
    hooks.clock.advance(TOLERANCE_S + 1)  # an attacker replays the captured bytes and headers later
    replay = await hooks.intake.post("/webhooks/cardco", content=body, headers=headers)
    assert replay.status_code == 401
    assert await stored(hooks) == 1


async def test_a_body_changed_after_signing_is_rejected(hooks: WebhookStack) -> None:
    body = orjson.dumps(an_event())
    headers = signed_headers(sandbox_secrets()[TEST], "evt_x", int(time.time()), body)
    r = await hooks.intake.post("/webhooks/cardco", content=body.replace(b"4999", b"1"), headers=headers)
    assert r.status_code == 401
    assert await stored(hooks) == 0


async def test_missing_signature_headers_are_400(hooks: WebhookStack) -> None:
    r = await hooks.intake.post("/webhooks/cardco", content=orjson.dumps(an_event()))
    assert r.status_code == 400 and r.json()["detail"] == "missing-headers"
    assert await stored(hooks) == 0


async def test_several_signatures_in_one_header_verify_when_one_matches(hooks: WebhookStack) -> None:
    evt = an_event()
    body = orjson.dumps(evt)
    ts = int(time.time())
    good = sign(sandbox_secrets()[TEST], str(evt["id"]), ts, body)
    bogus = "v1," + base64.b64encode(b"x" * 32).decode()
    headers = {"webhook-id": str(evt["id"]), "webhook-timestamp": str(ts),
               "webhook-signature": f"v1a,zzz {bogus} {good}", "content-type": "application/json"}
    r = await hooks.intake.post("/webhooks/cardco", content=body, headers=headers)
    assert r.status_code == 200


async def test_an_oversize_body_is_413_and_nothing_is_stored(hooks: WebhookStack) -> None:
    big = orjson.dumps({**an_event(), "pad": "x" * (256 * 1024)})
    r = await hooks.deliver(big, msg_id="evt_big")
    assert r.status_code == 413
    assert await stored(hooks) == 0


@pytest.mark.parametrize(
    "raw",
    [b"not json", b"[]", b'{"type": "payment.succeeded"}', b'{"type": "charge.created", "data": {}}',
     orjson.dumps({**event(payment_object(payment_id="pay_1", reference="r")), "sequence": "3"})],
)
async def test_a_verified_body_that_is_not_a_cardco_event_is_recorded_raw_escalated_and_acknowledged(
    hooks: WebhookStack, raw: bytes,
) -> None:
    # The provider signed it: a 400 would only make it retry for days and then drop it.
    for _ in range(2):  # a redelivery (same webhook-id) is a duplicate
        r = await hooks.deliver(raw, msg_id="evt_bad")
        assert r.status_code == 200 and r.json()["result"] in ("unparseable", "duplicate")
    [row] = await hooks.pool.fetch("SELECT attempt_id, detail FROM payment_attempt_events"
                                   " WHERE kind = 'notification'")
    assert row["attempt_id"] is None and row["detail"]["unparseable"].startswith("not-a-cardco-event:")
    assert base64.b64decode(row["detail"]["body_base64"]) == raw
    [episode] = await hooks.pool.fetch("SELECT reason FROM payment_escalations WHERE resolved_at IS NULL")
    assert episode["reason"] == "unparseable-notification"


async def test_an_event_id_that_differs_from_the_webhook_id_header_is_recorded_raw_not_applied(
    hooks: WebhookStack,
) -> None:
    r = await hooks.deliver(an_event(), msg_id="evt_other")
    assert r.status_code == 200 and r.json()["result"] == "unparseable"


async def test_a_verified_event_with_a_key_repeated_in_one_object_is_never_guessed_at(
    hooks: WebhookStack,
) -> None:
    evt = an_event()
    raw = orjson.dumps(evt).replace(b'"amount":', b'"amount":1,"amount":', 1)
    r = await hooks.deliver(raw, msg_id=evt["id"])
    assert r.status_code == 200 and r.json()["result"] == "unparseable"
    [row] = await hooks.pool.fetch("SELECT detail FROM payment_attempt_events WHERE kind = 'notification'")
    assert row["detail"]["unparseable"] == "not-a-cardco-event:duplicate-key"


async def test_health_readiness_and_delivery_metrics(hooks: WebhookStack) -> None:
    assert (await hooks.intake.get("/healthz")).status_code == 200
    assert (await hooks.intake.get("/readyz")).json() == {"status": "ready"}
    body = an_event()
    await hooks.deliver(body)
    await hooks.deliver(body)
    await hooks.deliver(body, secret="whsec_" + base64.b64encode(b"0" * 24).decode())
    assert (await hooks.intake.get("/metrics")).status_code == 404  # only on the admin port
    text = hooks.intake_metrics_text()
    assert 'paycore_webhook_deliveries_total{result="unmatched"} 1.0' in text
    assert 'paycore_webhook_deliveries_total{result="duplicate"} 1.0' in text
    assert 'paycore_webhook_deliveries_total{result="rejected-signature"} 1.0' in text


def test_signatures_interoperate_with_the_standardwebhooks_library() -> None:
    secret = sandbox_secrets()[TEST]
    body = orjson.dumps(an_event())
    ts = int(time.time())
    headers = signed_headers(secret, "evt_interop", ts, body)
    standardwebhooks.Webhook(secret).verify(body, headers)  # raises if it disagrees
    theirs = standardwebhooks.Webhook(secret).sign("evt_interop", datetime.fromtimestamp(ts, UTC),
                                                    body.decode())
    ours = Verifier([("acct", secret)])
    assert ours.verify({"webhook-id": "evt_interop", "webhook-timestamp": str(ts),
                        "webhook-signature": theirs}, body, now=datetime.now(UTC)) == "acct"


@pytest.mark.parametrize(
    "signature",
    ["", "v1,", "v1,%%%notbase64", "garbage", "v2," + base64.b64encode(b"x" * 32).decode(), "v1"],
)
def test_malformed_signature_headers_fail_verification_without_raising_anything_else(signature: str) -> None:
    secret = sandbox_secrets()[TEST]
    verifier = Verifier([("acct", secret)])
    with pytest.raises(VerificationFailed):
        verifier.verify({"webhook-id": "evt", "webhook-timestamp": str(int(time.time())),
                         "webhook-signature": signature}, b"{}", now=datetime.now(UTC))
