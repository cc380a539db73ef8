"""The intake's edges (issue 8): framework errors as problem+json, poison bodies recorded, not refused.

A correctly signed Cardco event whose text PostgreSQL cannot store (NUL,
lone surrogates) used to be answered 500 forever and recorded nowhere; the
provider would retry for days and then drop it. It is now recorded as received
(base64), escalated to a person once per body, and acknowledged.
"""

from __future__ import annotations

import base64
import hashlib
import os
from typing import Any

import orjson
import pytest

from paycore.attempts import get_attempt
from tests.matrix.test_notification_matrix import live_attempt, succeeded_event
from tests.support.webhooks import TEST, WebhookStack, event, payment_object


async def test_unknown_paths_and_wrong_methods_are_problem_json(hooks: WebhookStack) -> None:
    r = await hooks.intake.get("/no/such/path")
    assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json"
    assert r.json()["type"] == "https://paycore.dev/problems/not-found"
    r = await hooks.intake.get("/webhooks/cardco")
    assert r.status_code == 405 and r.headers["content-type"] == "application/problem+json"
    assert r.headers["allow"] == "POST"


async def test_a_nul_in_the_path_or_query_is_400_and_nothing_is_stored(hooks: WebhookStack) -> None:
    before = await hooks.count("SELECT count(*) FROM payment_attempt_events")
    for path in ("/webhooks/cardco?x=%00", "/webhooks/card%00co"):
        r = await hooks.intake.post(path, content=b"{}", headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.headers["content-type"] == "application/problem+json", path
        assert r.json()["type"] == "https://paycore.dev/problems/invalid-text"
    assert await hooks.count("SELECT count(*) FROM payment_attempt_events") == before


def poisoned(evt: dict[str, Any], placeholder: str, escape: bytes) -> bytes:
    """The event's JSON with ``placeholder`` replaced by a raw JSON escape (orjson cannot write some)."""
    raw = orjson.dumps(evt)
    assert raw.count(placeholder.encode()) == 1
    return raw.replace(placeholder.encode(), escape)


def unmatched_with(field: str, escape: bytes) -> tuple[str, bytes]:
    pay = payment_object(payment_id="pay_poison", reference="ORD-poison", decline_code="card_declined",
                         status="declined")
    if field == "metadata-key":
        pay["metadata"] = {"POISON": 1}
    else:
        pay[field] = str(pay[field]) + "POISON"
    evt = event(pay)
    return str(evt["id"]), poisoned(evt, "POISON", escape)


async def poison_rows(hooks: WebhookStack) -> list[Any]:
    return await hooks.pool.fetch(
        "SELECT * FROM payment_attempt_events WHERE kind = 'notification' ORDER BY event_id")


async def unparseable_escalations(hooks: WebhookStack) -> list[Any]:
    return await hooks.pool.fetch(
        "SELECT * FROM payment_escalations WHERE reason = 'unparseable-notification' ORDER BY escalation_id")


@pytest.mark.parametrize(("field", "escape", "why"), [
    ("reference", b"\\u0000", "nul-character"),
    ("decline_code", b"\\u0000", "nul-character"),
    ("id", b"\\u0000", "nul-character"),
    ("metadata-key", b"\\u0000", "nul-character"),
    ("reference", b"\\ud800", "lone-surrogate"),
    ("decline_code", b"\\udfff", "lone-surrogate"),
])
async def test_a_signed_event_postgresql_cannot_store_is_recorded_raw_escalated_and_acknowledged(
    hooks: WebhookStack, field: str, escape: bytes, why: str,
) -> None:
    webhook_id, raw = unmatched_with(field, escape)
    r = await hooks.deliver(raw, msg_id=webhook_id)
    assert r.status_code == 200, r.text
    assert r.json() == {"result": "unparseable"}

    [row] = await poison_rows(hooks)
    assert row["provider_account"] == TEST and row["attempt_id"] is None
    assert row["notification_key"] == webhook_id
    assert base64.b64decode(row["detail"]["body_base64"]) == raw  # the bytes as received
    assert row["detail"]["unparseable"] == why
    [esc] = await unparseable_escalations(hooks)
    sha = hashlib.sha256(raw).hexdigest()
    assert esc["escalation_key"] == f"notification:{TEST}:unparseable:{sha}"
    assert esc["detail"]["notification_event_id"] == row["event_id"]
    assert esc["detail"]["webhook_id"] == webhook_id and esc["detail"]["why"] == why
    alerts = await hooks.count("SELECT count(*) FROM outbox_messages WHERE kind = 'operator-alert'")
    assert alerts == 1

    # Cardco redelivers (a fresh timestamp and signature): a duplicate, nothing new.
    again = await hooks.deliver(raw, msg_id=webhook_id)
    assert again.status_code == 200 and again.json() == {"result": "duplicate"}
    assert len(await poison_rows(hooks)) == 1
    assert len(await unparseable_escalations(hooks)) == 1
    assert await hooks.count("SELECT count(*) FROM outbox_messages") == 1


async def test_a_poison_event_for_a_live_attempt_resolves_nothing(hooks: WebhookStack) -> None:
    attempt = await live_attempt(hooks)
    evt = succeeded_event(attempt)
    evt["data"]["object"]["decline_code"] = "POISON"
    raw = poisoned(evt, "POISON", b"x\\u0000y")
    r = await hooks.deliver(raw, msg_id=str(evt["id"]))
    assert r.status_code == 200 and r.json() == {"result": "unparseable"}
    assert (await get_attempt(hooks.pool, attempt.attempt_id)).state.value == "Unknown"
    assert len(await unparseable_escalations(hooks)) == 1


async def test_the_same_poison_body_under_changing_webhook_ids_is_recorded_each_time_and_alerts_once(
    hooks: WebhookStack,
) -> None:
    evt = event(payment_object(payment_id="pay_poison", reference="ORD-POISON"), event_id=None)
    raw = poisoned(evt, "POISON", b"\\u0000")
    for msg_id in ("msg_first", "msg_second"):  # a provider without stable delivery ids
        r = await hooks.deliver(raw, msg_id=msg_id)
        assert r.status_code == 200 and r.json() == {"result": "unparseable"}
    assert [row["notification_key"] for row in await poison_rows(hooks)] == ["msg_first", "msg_second"]
    assert len(await unparseable_escalations(hooks)) == 1


async def test_a_poison_body_that_is_not_a_cardco_event_is_recorded_raw_too(
    hooks: WebhookStack,
) -> None:
    for n, raw in enumerate((b'{"type": "payment.succeeded\\u0000"}', b'{"note": "\\ud800"}')):
        r = await hooks.deliver(raw, msg_id=f"evt_bad_{n}")
        assert r.status_code == 200 and r.json() == {"result": "unparseable"}
    assert [base64.b64decode(row["detail"]["body_base64"]) for row in await poison_rows(hooks)] == [
        b'{"type": "payment.succeeded\\u0000"}', b'{"note": "\\ud800"}']


@pytest.mark.parametrize("amount", [2**63, 2**64 - 1])
async def test_integers_beyond_bigint_in_an_event_are_stored_as_received(
    hooks: WebhookStack, amount: int,
) -> None:
    # Checked, not a poison case: amounts are compared in Python and kept in jsonb, which
    # holds any integer; such an event is an ordinary unmatched (or mismatched) notification.
    r = await hooks.deliver(event(payment_object(payment_id="pay_big", reference="ORD-big", amount=amount)))
    assert r.status_code == 200 and r.json() == {"result": "unmatched"}
    [row] = await poison_rows(hooks)
    assert row["detail"]["amount_minor"] == amount


async def test_an_operator_cannot_attach_a_notification_stored_unparsed(hooks: WebhookStack) -> None:
    from paycore.notifications import AttachRefused, attach_notification

    attempt = await live_attempt(hooks)
    webhook_id, raw = unmatched_with("reference", b"\\u0000")
    assert (await hooks.deliver(raw, msg_id=webhook_id)).json() == {"result": "unparseable"}
    [row] = await poison_rows(hooks)
    with pytest.raises(AttachRefused, match="unparsed"):
        await attach_notification(hooks.pool, event_id=row["event_id"], attempt_id=attempt.attempt_id,
                                  operator="alice", reason="trying", now=hooks.clock.now(),
                                  reminder_interval=hooks.settings.reminder_interval, recheck_after_s=60)
    assert (await get_attempt(hooks.pool, attempt.attempt_id)).state.value == "Unknown"


def incompressible(prefix: str, size: int = 3000) -> str:
    # PostgreSQL compresses long index entries first; random text does not compress.
    return prefix + base64.b64encode(os.urandom(size)).decode()[:size]


async def test_a_signed_event_with_an_identifier_too_long_to_index_is_recorded_raw(
    hooks: WebhookStack,
) -> None:
    # PostgreSQL refuses a btree entry over ~2.7 kB: the event id (= webhook-id) is the
    # notification's unique key, so such an event was answered 500 forever.
    long_id = incompressible("evt_")
    evt = event(payment_object(payment_id="pay_long", reference="ORD-long"), event_id=long_id)
    raw = orjson.dumps(evt)
    now = int(hooks.clock.now().timestamp())
    for timestamp in (now - 60, now):  # a delivery and Cardco's redelivery, a minute later
        r = await hooks.deliver(raw, msg_id=long_id, timestamp=timestamp)
        assert r.status_code == 200 and r.json() == {"result": "unparseable"}, r.text
    replayed = await hooks.deliver(raw, msg_id=long_id, timestamp=now)  # the same signed delivery again
    assert replayed.status_code == 200 and replayed.json() == {"result": "duplicate"}
    rows = await poison_rows(hooks)
    assert [row["notification_key"] for row in rows] == [None, None]  # too long to be a key
    assert {row["detail"]["unparseable"] for row in rows} == {"identifier-too-long"}
    assert base64.b64decode(rows[0]["detail"]["body_base64"]) == raw
    assert len(await unparseable_escalations(hooks)) == 1


async def test_a_payment_id_too_long_to_index_never_reaches_the_attempt(hooks: WebhookStack) -> None:
    attempt = await live_attempt(hooks)
    r = await hooks.deliver(succeeded_event(attempt, payment_id=incompressible("pay_")))
    assert r.status_code == 200 and r.json() == {"result": "unparseable"}, r.text
    assert (await get_attempt(hooks.pool, attempt.attempt_id)).state.value == "Unknown"
