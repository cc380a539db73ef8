"""The recovery worker's lookup and resend counters, by result, as the provider answers over HTTP.

Each test drives one attempt through a real pass against the sandbox (tests/support/recovery.py)
and reads the worker's own registry: the label on-call filters by must be the one the answer
deserves, and nothing else may count.
"""

from __future__ import annotations

from paycore_recovery.loop import Pass, RecoveryWorker
from tests.support.recovery import RecoveryStack


def by_result(worker: RecoveryWorker, counter: str) -> dict[str, float]:
    """``{result: count}`` of ``counter`` (``paycore_recovery_lookups``) in the worker's registry."""
    return {sample.labels["result"]: sample.value
            for metric in worker.metrics.registry.collect() if metric.name == counter
            for sample in metric.samples if sample.name == f"{counter}_total"}


async def test_a_lookup_that_finds_the_payment_counts_found_and_nothing_is_resent(rec: RecoveryStack) -> None:
    attempt = await rec.unknown_via_checkout("lose_response")
    await rec.make_due(attempt)
    worker = rec.worker()
    assert await worker.run_pass() == [Pass.RESOLVED]
    assert by_result(worker, "paycore_recovery_lookups") == {"found": 1}
    assert by_result(worker, "paycore_recovery_resends") == {}


async def test_not_found_then_a_resend_that_succeeds(rec: RecoveryStack) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    await rec.make_due(attempt)
    worker = rec.worker()
    assert await worker.run_pass() == [Pass.RESENT]
    assert await rec.state(attempt) == "Succeeded"
    assert by_result(worker, "paycore_recovery_lookups") == {"not_found": 1}
    assert by_result(worker, "paycore_recovery_resends") == {"succeeded": 1}


async def test_failed_lookups_count_failed_until_one_finds_the_payment(rec: RecoveryStack) -> None:
    attempt = await rec.unknown_via_checkout("lose_response")
    await rec.make_due(attempt)
    await rec.sandbox.fault("not_processed_503", times=2, match={"operation": "lookup"})
    worker = rec.worker()
    assert await worker.run_pass() == [Pass.LOOKUP_FAILED]
    rec.clock.advance(60)
    assert await worker.run_pass() == [Pass.LOOKUP_FAILED]
    assert by_result(worker, "paycore_recovery_lookups") == {"failed": 2}
    rec.clock.advance(120)
    assert await worker.run_pass() == [Pass.RESOLVED]
    assert by_result(worker, "paycore_recovery_lookups") == {"failed": 2, "found": 1}
    assert by_result(worker, "paycore_recovery_resends") == {}


async def test_a_429_on_a_lookup_counts_rate_limited(rec: RecoveryStack) -> None:
    attempt = await rec.charged_but_unknown()
    await rec.make_due(attempt)
    await rec.sandbox.fault("rate_limit", times=1, match={"operation": "lookup"})
    worker = rec.worker()
    assert await worker.run_pass() == [Pass.PAUSED]
    assert by_result(worker, "paycore_recovery_lookups") == {"rate_limited": 1}


async def test_a_resend_answered_with_a_replayed_500_counts_unknown(rec: RecoveryStack) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    await rec.make_due(attempt)
    await rec.sandbox.fault("error_500_after", times=1, match={"operation": "create"})
    worker = rec.worker()
    assert await worker.run_pass() == [Pass.RESENT]
    assert await rec.state(attempt) == "Unknown"
    assert by_result(worker, "paycore_recovery_resends") == {"unknown": 1}


async def test_a_resend_refused_before_execution_counts_rejected(rec: RecoveryStack) -> None:
    # The stored card is one the provider refuses at validation: a documented rejection of this send.
    attempt = await rec.unknown_via_checkout_paying("tok_expired", "drop_request")
    await rec.make_due(attempt)
    worker = rec.worker()
    assert await worker.run_pass() == [Pass.RESENT]
    assert (await rec.sends_for(attempt))[-1]["status"] == 400
    assert by_result(worker, "paycore_recovery_resends") == {"rejected": 1}


async def test_a_resend_answered_503_not_processed_counts_unknown_not_rejected(rec: RecoveryStack) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    await rec.make_due(attempt)
    await rec.sandbox.fault("not_processed_503", times=1, match={"operation": "create"})
    worker = rec.worker()
    assert await worker.run_pass() == [Pass.RESENT]
    assert await rec.state(attempt) == "Unknown"
    assert by_result(worker, "paycore_recovery_resends") == {"unknown": 1}
