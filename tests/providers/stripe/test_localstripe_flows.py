"""The black-box flows against localstripe, an independent Stripe fake: checkout, the webhook intake
and recovery as a store runs them, with Stripe alone configured by its ``PAYCORE_STRIPE_*``
settings and localstripe (1.15.10) as its API, behind a dropping proxy
(``tests/support/localstripe_stack.py``).

What runs here, and how each flow is resolved:

- **lost response → Unknown → resolved once**: localstripe charges, the proxy loses its answer,
  checkout says 202 Unknown (``provider.transport.RemoteProtocolError``). Recovery cannot resolve
  it against localstripe: the attempt has no payment id (the answer was lost), so the only lookup
  is Search by ``metadata['paycore_reference']``, which localstripe does not implement (404): a
  failed lookup, which is never "not found", so recovery resends nothing (localstripe ignores
  idempotency keys: a resend there *would* charge twice). localstripe's own
  ``payment_intent.succeeded`` webhook, its signed bytes posted to ``/webhooks/stripe``,
  resolves it: one intent, one transition, one notification.
- **past the key window → escalation, nothing sent**: the create never reaches localstripe; past
  the deadline recovery escalates ``deadline``. No create reaches localstripe; the one request
  that does is recovery's read-only Search (answered 404).
- **duplicate webhook**: localstripe's signed delivery posted twice: ``duplicate``, stored once.
- **forged webhook**: localstripe's bytes under a signature of another secret, or its signature
  over other bytes: 401, nothing stored; its genuine delivery then resolves the attempt.

What cannot run against localstripe, and where it runs instead (``docs/conformance.md``, Per
provider): the request that never arrived → same-key resend → one payment, the late original
answered from the key, a 500 or 503 answered under the key, a 409 in progress — every flow that
rests on ``Idempotency-Key`` (localstripe ignores it: a resend is a second payment) — and every
flow that rests on Search (absent): the sandbox's Stripe dialect, ``tests/providers/test_flows.py``.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest

from paycore_recovery.loop import Pass
from tests.support.localstripe_stack import (
    LocalstripeStack,
    intents_with_reference,
    payment_method,
    running_localstripe,
    running_localstripe_stack,
)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """localstripe's private directory: its state file is there."""
    return tmp_path_factory.mktemp("localstripe")


@pytest.fixture(scope="module")
def localstripe(workdir: Path) -> Iterator[str]:
    """One localstripe for the module."""
    with running_localstripe(workdir) as base_url:
        yield base_url


@pytest.fixture
async def flows(localstripe: str, pool: asyncpg.Pool, db_dsn: str) -> AsyncIterator[LocalstripeStack]:
    async for stack in running_localstripe_stack(localstripe, pool, db_dsn):
        yield stack


async def test_localstripe_keeps_its_state_in_its_private_directory(localstripe: str, workdir: Path) -> None:
    """Not in the ``/tmp/localstripe.pickle`` it hard-codes: two suites on one machine never share it."""
    pm = await payment_method(localstripe, "visa")  # a POST: localstripe writes its store
    state = await asyncio.to_thread((workdir / "localstripe.pickle").read_bytes)
    assert pm.encode() in state


async def test_a_lost_response_is_unknown_then_resolved_once_by_localstripes_own_webhook(
    flows: LocalstripeStack,
) -> None:
    flows.proxy.lose_next_create()
    attempt, r = await flows.pay("visa")
    assert (r.status_code, r.json()["state"]) == (202, "Unknown"), r.text
    assert r.json()["outcome_reason"] == "provider.transport.RemoteProtocolError"
    [intent] = await intents_with_reference(flows.localstripe, attempt.client_reference)
    assert intent["status"] == "succeeded"  # localstripe charged; checkout never heard
    assert (await flows.current(attempt)).provider_payment_id is None

    # Recovery's only lookup is Search, which localstripe lacks: failed, never "not found",
    # so nothing is resent (a resend there would be a second payment: no idempotency keys).
    worker = flows.worker()
    await flows.make_due(attempt)
    assert await worker.run_pass() == [Pass.LOOKUP_FAILED]
    assert [s.path for s in flows.proxy.reached_localstripe()[-1:]] == ["/v1/payment_intents/search"]
    assert len(flows.proxy.creates()) == 1
    assert (await flows.current(attempt)).state.value == "Unknown"

    # localstripe's payment_intent.succeeded, as it signed it, through /webhooks/stripe.
    delivery = await flows.recorder.event_about(attempt.client_reference)
    answered = await flows.deliver(delivery)
    assert (answered.status_code, answered.json()) == (200, {"result": "applied"}), answered.text

    after = await flows.current(attempt)
    assert (after.state.value, after.provider_payment_id) == ("Succeeded", intent["id"])
    assert await flows.transitions_to(attempt, "Succeeded") == 1
    assert len(await flows.notifications(attempt)) == 1
    assert len(await intents_with_reference(flows.localstripe, attempt.client_reference)) == 1
    assert len(flows.proxy.creates()) == 1  # one send in all
    status = await flows.shop.status(attempt.order_id)
    assert status.status_code == 200 and status.json()["state"] == "Succeeded"


async def test_past_the_key_window_recovery_escalates_and_no_create_reaches_localstripe(
    flows: LocalstripeStack,
) -> None:
    flows.proxy.drop_next_create()
    attempt, r = await flows.pay("visa")
    assert (r.status_code, r.json()["state"]) == (202, "Unknown"), r.text
    assert attempt.escalation_deadline is not None and attempt.first_sent_at is not None
    assert (attempt.escalation_deadline - attempt.first_sent_at).total_seconds() == 86_400 - 7_200
    seen_before = len(flows.proxy.seen)

    flows.clock.advance((attempt.escalation_deadline - flows.clock.now()).total_seconds() + 1)
    # Search fails (localstripe has none); past the deadline a person is told all the same.
    assert await flows.worker().run_pass() == [Pass.LOOKUP_FAILED]

    assert await flows.open_escalations() == [f"attempt:{attempt.attempt_id}:deadline"]
    assert (await flows.current(attempt)).state.value == "Unknown"
    later = flows.proxy.seen[seen_before:]
    assert [(s.method, s.path) for s in later] == [("GET", "/v1/payment_intents/search")]  # read-only
    assert [s.fate for s in flows.proxy.creates()] == ["dropped"]  # no create ever reached it
    assert await intents_with_reference(flows.localstripe, attempt.client_reference) == []


async def test_a_duplicate_of_localstripes_webhook_is_answered_duplicate_and_stored_once(
    flows: LocalstripeStack,
) -> None:
    attempt, r = await flows.pay("visa")
    assert (r.status_code, r.json()["state"]) == (200, "Succeeded"), r.text
    delivery = await flows.recorder.event_about(attempt.client_reference)

    first = await flows.deliver(delivery)
    assert (first.status_code, first.json()) == (200, {"result": "applied"}), first.text
    before = await flows.stored_rows()
    again = await flows.deliver(delivery)  # the same signed bytes, as a redelivery would be
    assert (again.status_code, again.json()) == (200, {"result": "duplicate"}), again.text

    assert await flows.stored_rows() == before
    assert flows.delivered_count("duplicate") == 1
    assert len(await flows.notifications(attempt)) == 1
    assert await flows.transitions_to(attempt, "Succeeded") == 1


async def test_a_forged_webhook_is_refused_and_localstripes_genuine_one_resolves_the_attempt(
    flows: LocalstripeStack,
) -> None:
    flows.proxy.lose_next_create()
    attempt, r = await flows.pay("visa")
    assert (r.status_code, r.json()["state"]) == (202, "Unknown"), r.text
    headers, body = await flows.recorder.event_about(attempt.client_reference)
    timestamp = headers["stripe-signature"].split(",")[0].removeprefix("t=")
    wrong = hmac.new(b"whsec_someone_else", f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    before = await flows.stored_rows()

    forgeries = [
        ({**headers, "stripe-signature": f"t={timestamp},v1={wrong}"}, body),  # another secret
        (headers, body.replace(b'"succeeded"', b'"succeeded" ', 1)),  # localstripe's signature, other bytes
    ]
    for forged in forgeries:
        refused = await flows.deliver(forged)
        assert refused.status_code == 401, refused.text
        assert refused.headers["content-type"] == "application/problem+json"
    assert await flows.stored_rows() == before
    assert flows.delivered_count("rejected-signature") == len(forgeries)
    assert (await flows.current(attempt)).state.value == "Unknown"

    genuine = await flows.deliver((headers, body))
    assert (genuine.status_code, genuine.json()) == (200, {"result": "applied"}), genuine.text
    assert (await flows.current(attempt)).state.value == "Succeeded"
