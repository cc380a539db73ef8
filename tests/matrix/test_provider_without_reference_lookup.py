"""Recovery against a provider that has no lookup by reference (``ReferenceLookup.UNSUPPORTED``):
the windowed same-key resend (no search lag to wait out), the deadline escalation, a wrong id.

The provider is the real Cardco client against the sandbox, seen through a provider
that answers every lookup by reference ``unsupported`` without sending it, as a
provider without such a lookup does. Only the interface's answer is replaced, never
the wire: creates, resends and lookups by id still go over HTTP to the sandbox.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from paycore.domain import AttemptState
from paycore.providers.base import Capabilities, LookupResult, Provider, ReferenceLookup
from paycore_recovery.loop import Pass, RecoveryWorker
from tests.support.recovery import DEADLINE_S, RecoveryStack


class WithoutReferenceLookup:
    """``inner``, but with no lookup by reference."""

    def __init__(self, inner: Provider) -> None:
        self._inner = inner
        self.reference_lookups = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @property
    def capabilities(self) -> Capabilities:
        return dataclasses.replace(self._inner.capabilities, lookup_by_reference=ReferenceLookup.UNSUPPORTED)

    def capabilities_of(self, provider_account: str) -> Capabilities:
        return dataclasses.replace(self._inner.capabilities_of(provider_account),
                                   lookup_by_reference=ReferenceLookup.UNSUPPORTED)

    async def find_by_reference(self, provider_account: str, reference: str, *,
                                budget_s: float | None) -> LookupResult:
        self.reference_lookups += 1
        return LookupResult("unsupported")


def worker_without_reference_lookup(rec: RecoveryStack) -> tuple[RecoveryWorker, WithoutReferenceLookup]:
    worker = rec.worker("w1")
    provider = WithoutReferenceLookup(worker.client)
    worker.client = provider  # type: ignore[assignment]
    return worker, provider


async def test_an_unanswered_attempt_is_resolved_by_a_same_key_resend_when_no_lookup_by_reference_exists(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.charged_but_unknown()  # charged, answer lost, no payment id recorded
    await rec.make_due(attempt)
    worker, provider = worker_without_reference_lookup(rec)

    # Well inside what would be a search lag: an unsupported lookup has no lag to wait out
    # (waiting would never make it conclusive), so the windowed resend happens now.
    assert attempt.first_sent_at is not None
    assert rec.clock.now() < attempt.first_sent_at + timedelta(seconds=worker.recovery.search_lag_s)
    assert await worker.run_pass() == [Pass.RESENT]

    assert provider.reference_lookups == 1
    assert [e["result"] for e in await rec.lookup_events(attempt)] == ["unsupported"]
    assert await rec.state(attempt) == "Succeeded"  # the key's stored answer, replayed
    assert len(await rec.sends_for(attempt)) == 2 and len(await rec.sandbox.ledger()) == 1


async def test_a_recorded_id_naming_another_attempts_payment_escalates_when_no_lookup_by_reference_exists(
    rec: RecoveryStack,
) -> None:
    # A was charged; B never sent, yet records A's payment id (a wrong id).
    a = await rec.charged_but_unknown()
    b = await rec.started_attempt(customer="cus_bob")
    [payment] = await rec.payments_for(a)
    await rec.pool.execute("UPDATE payment_attempts SET provider_payment_id = $2 WHERE attempt_id = $1",
                           b.attempt_id, payment["id"])
    await rec.pool.execute("UPDATE payment_attempts SET next_check_at = $2 WHERE attempt_id = $1",
                           a.attempt_id, rec.clock.now() + timedelta(days=1))
    b_settings = rec.hooks.settings
    rec.clock.advance(b_settings.budgets.call_s + b_settings.budgets.record_s
                      + b_settings.processing_allowance_s)  # B is a stalled Started attempt now
    await rec.due_now(b)
    worker, _ = worker_without_reference_lookup(rec)

    # The record the recorded id points at decides, as after a reference lookup that misses:
    # no "unsupported" answer may turn it into a resend of B's request.
    assert await worker.run_pass() == [Pass.ESCALATED]

    assert await rec.open_escalations() == [f"attempt:{b.attempt_id}:provider-id-conflict"]
    after = await rec.current(b)
    assert after.state is AttemptState.STARTED and after.provider_payment_id == payment["id"]
    assert await rec.sends_for(b) == [] and len(await rec.sandbox.ledger()) == 1


async def test_past_the_deadline_an_attempt_without_a_lookup_by_reference_escalates_and_sends_nothing(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")  # never arrived; no evidence will come
    rec.clock.advance(DEADLINE_S)  # past the stamped escalation deadline
    worker, provider = worker_without_reference_lookup(rec)

    assert await worker.run_pass() == [Pass.ESCALATED]

    assert provider.reference_lookups == 1
    assert [e["result"] for e in await rec.lookup_events(attempt)] == ["unsupported"]
    assert await rec.open_escalations() == [f"attempt:{attempt.attempt_id}:deadline"]
    assert len(await rec.sends_for(attempt)) == 1 and await rec.sandbox.ledger() == []  # nothing resent
    after = await rec.current(attempt)
    assert after.state is AttemptState.UNKNOWN and after.recovery_owner is None
    assert after.next_check_at == rec.clock.now() + timedelta(seconds=worker.recovery.slow_cadence_s)
