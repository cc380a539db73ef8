"""Resend conditions: when one fails (token expired, order not payable, endpoint changed,
account no longer configured) recovery escalates `resend-not-safe:<condition>`, one
episode per condition, and sends nothing.

The recovery matrix continued; setup as in test_recovery_matrix.py.
"""

from __future__ import annotations

import dataclasses

from harness.servers import serve_asgi
from paycore import orders
from paycore_recovery.loop import Pass
from paycore_recovery.settings import RecoverySettings
from paycore_sandbox.app import create_app as create_sandbox_app
from paycore_sandbox.settings import SandboxSettings
from tests.support.recovery import RecoveryStack, initial_alerts
from tests.support.webhooks import TEST

# -- Resend conditions ----------------------------------------------------------------------------


async def test_two_different_failed_resend_conditions_open_separate_escalations(rec: RecoveryStack) -> None:
    worker = rec.worker(recovery=RecoverySettings(payment_token_ttl_s=3600))
    attempt = await rec.unknown_via_checkout("drop_request")
    rec.clock.advance(3601)  # the stored token has expired; still well inside the deadline
    assert await worker.run_pass() == [Pass.ESCALATED]
    token_key = f"attempt:{attempt.attempt_id}:resend-not-safe:token-expired"
    assert await rec.open_escalations() == [token_key]

    await orders.cancel_order(rec.pool, attempt.order_id, attempt.customer_id, rec.clock.now())
    rec.clock.advance(worker.recovery.slow_cadence_s)
    assert await worker.run_pass() == [Pass.ESCALATED]
    assert await rec.open_escalations() == [
        token_key, f"attempt:{attempt.attempt_id}:resend-not-safe:order-not-payable"]
    ids = [r["escalation_id"] for r in await rec.escalation_rows()]
    assert await initial_alerts(rec) == [f"escalation:{i}:initial" for i in ids]
    assert len(await rec.sends_for(attempt)) == 1
    assert await rec.state(attempt) == "Unknown"


async def test_a_changed_endpoint_is_escalated_without_a_resend(rec: RecoveryStack) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    await rec.make_due(attempt)
    # The account now lives at another address (another Cardco host, which has no record of it).
    async with serve_asgi(create_sandbox_app(SandboxSettings.default())) as moved_url:
        settings = rec.hooks.settings
        moved = tuple(dataclasses.replace(a, base_url=moved_url) if a.provider_account == TEST else a
                      for a in settings.accounts)
        worker = rec.worker(settings=dataclasses.replace(settings, accounts=moved))
        assert await worker.run_pass() == [Pass.ESCALATED]
    assert await rec.open_escalations() == [f"attempt:{attempt.attempt_id}:resend-not-safe:endpoint-changed"]
    assert len(await rec.sends_for(attempt)) == 1  # nothing sent to the old endpoint ...
    assert (await rec.history(attempt)).count("send_intent") == 1  # ... nor anywhere else
    assert await rec.state(attempt) == "Unknown"


def without_test_account(rec: RecoveryStack):  # type: ignore[no-untyped-def]
    settings = rec.hooks.settings
    return dataclasses.replace(settings, accounts=tuple(a for a in settings.accounts
                                                        if a.provider_account != TEST))


async def test_a_stored_account_that_is_no_longer_configured_sends_nothing(rec: RecoveryStack) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    await rec.make_due(attempt)
    worker = rec.worker(settings=without_test_account(rec))
    assert await worker.run_pass() in ([Pass.LOOKUP_FAILED], [Pass.ESCALATED])
    assert len(await rec.sends_for(attempt)) == 1
    assert (await rec.history(attempt)).count("send_intent") == 1
    assert await rec.state(attempt) == "Unknown"
    after = await rec.current(attempt)
    assert after.recovery_owner is None and after.next_check_at > rec.clock.now()


async def test_a_stored_account_that_is_no_longer_configured_is_escalated_without_a_resend(
    rec: RecoveryStack,
) -> None:
    attempt = await rec.unknown_via_checkout("drop_request")
    await rec.make_due(attempt)
    worker = rec.worker(settings=without_test_account(rec))
    assert await worker.run_pass() == [Pass.ESCALATED]
    assert await rec.open_escalations() == [
        f"attempt:{attempt.attempt_id}:resend-not-safe:account-not-configured"]
    assert len(await rec.sends_for(attempt)) == 1
