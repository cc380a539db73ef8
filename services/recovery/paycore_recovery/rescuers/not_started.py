"""Abandoned NotStarted attempts: recorded, never moved to Started (a checkout that crashed).

Recovery never sends a first attempt: it waits the abandonment threshold, then closes the attempt
as never sent (NotApplied), unless the endpoint started it meanwhile -- then it schedules it for
its new state, once.
"""

from __future__ import annotations

import dataclasses

from paycore import attempts
from paycore.attempts import Attempt, get_attempt
from paycore.domain import Pass, PassDecision, PassKind, Step
from paycore.leases import Lease
from paycore_recovery.rescuers.base import PassState, Rescuer


class NotStartedRescuer(Rescuer):
    kind = PassKind.NOT_STARTED

    async def act(self, d: PassDecision, attempt: Attempt, lease: Lease, state: PassState) -> Pass | None:
        if d.step is not Step.CLOSE_NEVER_SENT:
            return await super().act(d, attempt, lease, state)
        w = self.w
        if await attempts.close_never_sent(w.pool, attempt, lease, w.clock.now(), w.actor) is not None:
            w.metrics.closed_never_sent.inc()
            return Pass.CLOSED_NEVER_SENT
        # The endpoint's Started transition won: decide again on what it left.
        current = await get_attempt(w.pool, attempt.attempt_id)
        state.facts = dataclasses.replace(state.facts, lost_close_to=current)
        return None
