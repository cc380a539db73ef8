"""The ``payment_attempts`` row as the library returns it, and reading one by id.

Kept apart from the writers (:mod:`paycore.attempts`, :mod:`paycore.leases`) so
both can return it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from paycore.domain import AttemptState
from paycore.errors import AttemptNotFound

SELECT_ATTEMPT = "SELECT * FROM payment_attempts WHERE attempt_id = $1"


@dataclass(frozen=True)
class Attempt:
    attempt_id: UUID
    order_id: str
    customer_id: str
    attempt_number: int
    provider_account: str
    endpoint: str
    api_version: str
    client_reference: str
    idempotency_key: str
    request_body: str
    amount_minor: int
    currency: str
    state: AttemptState
    provider_status: str | None
    next_action: dict[str, Any] | None
    next_action_expires_at: datetime | None
    outcome_reason: str | None
    created_at: datetime
    first_sent_at: datetime | None
    escalation_deadline: datetime | None
    provider_payment_id: str | None
    recovery_owner: str | None
    lease_token: UUID | None
    lease_acquired_at: datetime | None
    lease_expires_at: datetime | None
    next_check_at: datetime
    version: int

    @classmethod
    def from_record(cls, r: asyncpg.Record) -> Attempt:
        values = dict(r)
        values["state"] = AttemptState(values["state"])
        return cls(**values)

    def action_is_current(self, now: datetime) -> bool:
        """A customer action is shown only on a Started attempt and only before it expires."""
        return (
            self.state is AttemptState.STARTED
            and self.next_action is not None
            and (self.next_action_expires_at is None or self.next_action_expires_at > now)
        )



async def get_attempt(conn: asyncpg.Connection | asyncpg.Pool, attempt_id: UUID) -> Attempt:
    row = await conn.fetchrow(SELECT_ATTEMPT, attempt_id)
    if row is None:
        raise AttemptNotFound(f"attempt {attempt_id} not found")
    return Attempt.from_record(row)
