"""Started attempts waiting for the customer (3-D Secure): never resent.

Looked at again at the action's expiry or the poll, whichever comes first; escalated at the
deadline whether or not the customer acts. An action whose provider states no expiry (Stripe's
``next_action``) is looked up by its payment id at each poll, since it never expires by itself;
a provider that cannot be asked (Adyen) or does not answer leaves it waiting.
"""

from __future__ import annotations

import dataclasses

from paycore.attempts import Attempt
from paycore.domain import Lookups, PassKind, Step
from paycore_recovery.rescuers.base import PassState, Rescuer, distinct_payment_ids


class CustomerActionRescuer(Rescuer):
    kind = PassKind.CUSTOMER_ACTION

    async def gather(self, step: Step, attempt: Attempt, state: PassState) -> None:
        if step is not Step.LOOK_UP_ACTION:
            return await super().gather(step, attempt, state)
        assert attempt.provider_payment_id is not None
        await self.paced(attempt)
        by_id = await self.w.client.get_payment(attempt.provider_account, attempt.provider_payment_id,
                                                budget_s=self.w.settings.budgets.call_s)
        if by_id.kind != "unsupported":
            state.looked.append(self.lookup_event(by_id, "id", None))
        if by_id.kind == "found" and by_id.payment is not None:
            state.found = by_id
        state.facts = dataclasses.replace(state.facts,
                                          action_status=Lookups(by_id.kind, distinct_payment_ids(by_id)))
