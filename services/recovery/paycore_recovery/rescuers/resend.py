"""The same-key resend of an Unknown attempt, step by step as in the reference.

1. Commit a send intent under the order lock, while this worker owns the lease, the order is
   payable, the attempt unchanged and before the deadline (an unknown commit: send nothing).
2. The final local check, just before dispatch: still the owner, still before the deadline.
3. The stored request, byte for byte, under its own key and call budget.
4. Its answer through the one writer of outcomes; a resend refused before execution is
   escalated there and never repeated: only lookups go on, on the slow cadence.
"""

from __future__ import annotations

import logging

from paycore import attempts, leases
from paycore.attempts import Attempt, record_outcome
from paycore.domain import FINAL_STATES, Escalation, EscalationReason, Pass
from paycore.errors import MAY_HAVE_COMMITTED
from paycore.leases import Lease
from paycore.providers.base import StoredRequest
from paycore_recovery.rescuers.base import Worker, escalate

log = logging.getLogger("paycore.recovery")


async def resend(w: Worker, attempt: Attempt, lease: Lease, backoff: float) -> Pass:
    attempt_id = attempt.attempt_id
    try:
        committed, why = await attempts.commit_send_intent(w.pool, attempt, lease, w.clock.now(), w.actor)
    except MAY_HAVE_COMMITTED as exc:
        # Unknown commit: send nothing and do not finish (ownership cannot be confirmed). The
        # next claimed pass finds the intent present or absent and acts on that.
        log.warning("send intent for %s unconfirmed (%s)", attempt_id, type(exc).__name__)
        return Pass.INTENT_UNKNOWN
    if committed is not attempts.IntentResult.COMMITTED:
        log.info("send intent for %s refused: %s", attempt_id, why)
        await leases.finish(w.pool, attempt_id, lease, w.clock.now(), backoff)
        return Pass.INTENT_REFUSED

    await w.before_final_check(attempt)
    # The final local check, just before dispatch.
    now = w.clock.now()
    if not await leases.owns(w.pool, attempt_id, lease, now):
        await attempts.record_send_abandoned(w.pool, attempt_id, now, w.actor, "lease-lost")
        return Pass.ABANDONED  # the new owner schedules it
    if attempt.past_deadline(now):
        await attempts.record_send_abandoned(w.pool, attempt_id, now, w.actor, "deadline-passed")
        await escalate(w, attempt, lease, Escalation(EscalationReason.DEADLINE), w.recovery.slow_cadence_s)
        return Pass.ABANDONED
    await w.after_final_check(attempt)

    # The stored request, unchanged, under its own key and its own call budget.
    try:
        outcome = await w.client.create_payment(StoredRequest.from_attempt(attempt),
                                                budget_s=w.settings.budgets.call_s, first_send=False)
    except BaseException:
        w.metrics.resends.labels("error").inc()
        raise
    w.metrics.resends.labels("rejected" if outcome.request_rejected else outcome.kind.value).inc()
    recheck = w.recovery.slow_cadence_s if outcome.request_rejected else backoff
    recorded = await record_outcome(w.pool, attempt_id, outcome, now=w.clock.now(), actor=w.actor,
                                    recheck_after_s=recheck, from_send=True, lease=lease,
                                    reminder_interval=w.settings.reminder_interval)
    if not recorded.written:  # a write already scheduled the next check and released the lease
        await leases.finish(w.pool, attempt_id, lease, w.clock.now(), recheck)
    if recorded.attempt.state in FINAL_STATES:
        w.metrics.resolved.labels(recorded.attempt.state.value).inc()
    return Pass.RESENT
