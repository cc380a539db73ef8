"""Payloads the real producers write validate against the *released* schemas.

The flows are the system's own: a signed Cardco notification of a success and then of a
refund through the intake service (order-confirmation, fulfillment-request,
refund-request, written by paycore.attempts and paycore.notifications), an escalation
with and without an attempt (paycore.escalations) and the reminder job's reminders
(operator-alert, initial and reminder). Each stored payload must validate against the
snapshot consumers were built against -- "every message the new producer emits must
validate against the released schema".
"""

from __future__ import annotations

import json
from pathlib import Path

from jsonschema import Draft202012Validator

from paycore import contracts, escalations
from paycore.domain import OPERATION_EFFECTS, EscalationReason
from paycore_recovery.reminders import send_due_reminders
from tests.matrix.test_notification_matrix import account, live_attempt, succeeded_event
from tests.support.timings import REMINDER_INTERVAL
from tests.support.webhooks import WebhookStack

RELEASED = Path(__file__).parent / "released"


def released_validator(kind: str, version: int) -> Draft202012Validator:
    schema = json.loads((RELEASED / f"{kind}.v{version}.json").read_text("utf-8"))
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


async def test_every_payload_the_producers_write_validates_against_the_released_schema(
    hooks: WebhookStack,
) -> None:
    attempt = await live_attempt(hooks)
    assert (await hooks.deliver(succeeded_event(attempt, "pay_1", sequence=1))).json()["result"] == "applied"
    refund = succeeded_event(attempt, "pay_1", sequence=2, event_type="payment.refunded")
    refund["data"]["object"]["amount_refunded"] = attempt.amount_minor
    assert (await hooks.deliver(refund)).json()["result"] == "applied"
    other = await live_attempt(hooks, account(hooks).provider_account, customer="cus_bob")
    async with hooks.pool.acquire() as conn, conn.transaction():
        for key, reason, attempt_id in (
                (f"attempt:{other.attempt_id}:deadline", EscalationReason.DEADLINE, other.attempt_id),
                ("notification:cardco:acct_store:test:unmatched:evt_1", EscalationReason.UNMATCHED_PAYMENT,
                 None)):
            await escalations.raise_escalation(conn, key=key, reason=reason, now=hooks.clock.now(),
                                               attempt_id=attempt_id, reminder_interval=REMINDER_INTERVAL)
    hooks.clock.advance(REMINDER_INTERVAL.total_seconds())
    settings = hooks.settings
    assert await send_due_reminders(hooks.pool, hooks.clock, settings) >= 2

    rows = await hooks.pool.fetch("SELECT kind, payload FROM outbox_messages ORDER BY message_id")
    # Every contract of the outbox exercised; `incident` pages come from the incidents agent
    # instead (tests/incidents: the alert worker checks each one on receipt), the operations'
    # and a hold's lapse from their own flows (tests/operations/test_effect_contracts.py), a
    # reconciled settlement batch from its helper (tests/contracts/test_settlement_effects.py).
    assert {r["kind"] for r in rows} == contracts.kinds() - {"incident", "authorization-lapsed",
                                                             "settlement-reconciled",
                                                             *OPERATION_EFFECTS.values()}
    assert any(r["payload"].get("alert") == "reminder" for r in rows)
    assert any(r["kind"] == "operator-alert" and r["payload"]["attempt_id"] is None for r in rows)
    for r in rows:
        payload = r["payload"]
        assert payload["schema_version"] == contracts.SCHEMA_VERSION and payload["kind"] == r["kind"]
        validator = released_validator(r["kind"], payload["schema_version"])
        problems = [e.message for e in validator.iter_errors(payload)]
        assert problems == [], (r["kind"], problems)
        assert contracts.validate(payload) == []
