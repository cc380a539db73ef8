"""Recovery as tests run it: workers on the fake clock against the sandbox over HTTP.

Builds on the webhook stack (sandbox, checkout and intake as real HTTP servers,
three Cardco accounts). Attempts are made Unknown the way production makes them:
a checkout call whose response is lost, dropped, or arrives late.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from uuid import UUID

import asyncpg

from paycore.attempts import (
    Attempt,
    get_attempt,
    record_outcome,
)
from paycore.config import Settings
from paycore.domain import ProviderOutcome
from paycore.providers.base import StoredRequest
from paycore.providers.cardco import CardcoClient
from paycore_recovery.loop import Pass, RecoveryWorker
from paycore_recovery.metrics import RecoveryMetrics
from paycore_recovery.settings import RecoverySettings
from tests.support.attempts import recorded_attempt, started_attempt
from tests.support.stack import eventually
from tests.support.timings import REMINDER_INTERVAL
from tests.support.webhooks import TEST, WebhookStack

DEADLINE_S = 86_400 - 7_200  # the account's retention minus its margin


@dataclass
class RecoveryStack:
    hooks: WebhookStack
    recovery: RecoverySettings = field(default_factory=RecoverySettings)
    clients: list[CardcoClient] = field(default_factory=list)

    @property
    def pool(self) -> asyncpg.Pool:
        return self.hooks.pool

    @property
    def clock(self):  # type: ignore[no-untyped-def]
        return self.hooks.clock

    @property
    def sandbox(self):  # type: ignore[no-untyped-def]
        return self.hooks.sandbox

    def worker(self, owner: str = "w1", *, settings: Settings | None = None,
               recovery: RecoverySettings | None = None) -> RecoveryWorker:
        settings = settings or self.hooks.settings
        client = CardcoClient(settings.accounts, self.clock,
                              max_call_duration_s=settings.budgets.max_call_duration_s)
        self.clients.append(client)
        return RecoveryWorker(pool=self.pool, client=client, clock=self.clock, settings=settings,
                              recovery=recovery or self.recovery, metrics=RecoveryMetrics(), owner=owner)

    # -- making attempts the way production does ------------------------------------------------

    async def unknown_via_checkout(self, fault: str, **rule: Any) -> Attempt:
        """A checkout whose first send ended without an answer (``fault`` at the sandbox)."""
        return await self.unknown_via_checkout_paying("tok_visa", fault, **rule)

    async def started_attempt(self, provider_account: str = TEST, customer: str = "cus_alice",
                              method: str = "tok_visa") -> Attempt:
        """An attempt that crossed the send boundary (Started) but whose send has not happened."""
        acct = self.hooks.settings.account(provider_account)
        assert acct is not None
        order = await self.hooks.shop.as_customer(customer).create_order()
        return await started_attempt(self.pool, self.clock, acct, order, customer, method)

    async def charged_but_unknown(self, provider_account: str = TEST, customer: str = "cus_alice") -> Attempt:
        """Started, sent (the provider charged), and recorded Unknown as if the answer was lost."""
        attempt = await self.started_attempt(provider_account, customer)
        client = self.worker("sender").client
        outcome = await client.create_payment(StoredRequest.from_attempt(attempt),
                                              budget_s=15, first_send=True)
        assert outcome.kind.value == "succeeded", outcome
        return (await record_outcome(self.pool, attempt.attempt_id,
                                    ProviderOutcome.unknown("provider.no-response.caller"),
                                    now=self.clock.now(), actor="endpoint", recheck_after_s=60,
                                    reminder_interval=REMINDER_INTERVAL)).attempt

    async def make_due(self, attempt: Attempt | None = None) -> None:
        """Move the clock to the next due check (of one attempt, or of all live attempts)."""
        if attempt is not None:
            due = await self.pool.fetchval("SELECT next_check_at FROM payment_attempts WHERE attempt_id = $1",
                                           attempt.attempt_id)
        else:
            due = await self.pool.fetchval(
                "SELECT max(next_check_at) FROM payment_attempts"
                " WHERE state IN ('NotStarted', 'Started', 'Unknown')")
        if due is not None and due > self.clock.now():
            self.clock.advance((due - self.clock.now()).total_seconds())

    async def state(self, attempt: Attempt) -> str:
        return str((await get_attempt(self.pool, attempt.attempt_id)).state)

    async def history(self, attempt: Attempt) -> list[str]:
        rows = await self.pool.fetch(
            "SELECT kind FROM payment_attempt_events WHERE attempt_id = $1 ORDER BY event_id",
            attempt.attempt_id)
        return [r["kind"] for r in rows]

    async def open_escalations(self) -> list[str]:
        rows = await self.pool.fetch(
            "SELECT escalation_key FROM payment_escalations WHERE resolved_at IS NULL ORDER BY escalation_id")
        return [r["escalation_key"] for r in rows]

    async def alerts(self) -> list[str]:
        rows = await self.pool.fetch(
            "SELECT dedup_key FROM outbox_messages WHERE kind = 'operator-alert' ORDER BY message_id")
        return [r["dedup_key"] for r in rows]

    async def payments_for(self, attempt: Attempt) -> list[dict[str, Any]]:
        return [p for p in await self.sandbox.ledger() if p["reference"] == attempt.client_reference]

    async def sends_for(self, attempt: Attempt) -> list[dict[str, Any]]:
        return [q for q in await self.sandbox.create_requests() if attempt.client_reference in q["body"]]

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()

    # -- more helpers (the recovery matrix's files; reminders) -----------------------------------

    async def not_started_attempt(self, provider_account: str = TEST, customer: str = "cus_alice",
                                  method: str = "tok_visa") -> Attempt:
        """A checkout that crashed right after inserting NotStarted (never moved to Started)."""
        acct = self.hooks.settings.account(provider_account)
        assert acct is not None
        order = await self.hooks.shop.as_customer(customer).create_order()
        return await recorded_attempt(self.pool, self.clock, acct, order, customer, method)

    async def unknown_via_checkout_paying(self, method: str, fault: str, **rule: Any) -> Attempt:
        """:meth:`unknown_via_checkout`, paying with ``method`` (e.g. ``tok_3ds``)."""
        await self.sandbox.fault(fault, times=1, **rule)
        order = await self.hooks.shop.create_order()
        pending = asyncio.create_task(self.hooks.shop.pay(order, method))

        async def sent() -> bool:
            return len(await self.sandbox.create_requests()) >= 1 and self.clock.pending_timers > 0

        await eventually(sent, what="the first send to be in flight")
        self.clock.advance(self.hooks.settings.budgets.call_s)
        r = await pending
        assert r.json()["state"] == "Unknown", r.text
        return await get_attempt(self.pool, UUID(r.json()["attempt_id"]))

    async def unknown_never_sent(self, provider_account: str = TEST, customer: str = "cus_alice") -> Attempt:
        """Started and recorded Unknown, but the request never reached the provider."""
        attempt = await self.started_attempt(provider_account, customer)
        return (await record_outcome(self.pool, attempt.attempt_id,
                                    ProviderOutcome.unknown("provider.no-response.caller"),
                                    now=self.clock.now(), actor="endpoint", recheck_after_s=60,
                                    reminder_interval=REMINDER_INTERVAL)).attempt

    async def due_now(self, attempt: Attempt) -> None:
        """Make one attempt due at the current time without moving the clock."""
        await self.pool.execute("UPDATE payment_attempts SET next_check_at = $2 WHERE attempt_id = $1",
                                attempt.attempt_id, self.clock.now())

    async def current(self, attempt: Attempt) -> Attempt:
        return await get_attempt(self.pool, attempt.attempt_id)

    async def lookup_events(self, attempt: Attempt) -> list[dict[str, Any]]:
        rows = await self.pool.fetch(
            "SELECT detail FROM payment_attempt_events WHERE attempt_id = $1 AND kind = 'lookup'"
            " ORDER BY event_id", attempt.attempt_id)
        return [dict(r["detail"]) for r in rows]

    async def lookup_requests(self) -> list[dict[str, Any]]:
        return [q for q in await self.sandbox.requests()
                if q["method"] == "GET" and q["path"].startswith("/v1/payments")]

    async def escalation_rows(self) -> list[dict[str, Any]]:
        rows = await self.pool.fetch("SELECT * FROM payment_escalations ORDER BY escalation_id")
        return [dict(r) for r in rows]


def settle_s(rec: RecoveryStack) -> float:
    """Call and record budgets plus the provider's normal processing time."""
    b = rec.hooks.settings.budgets
    return b.call_s + b.record_s + rec.hooks.settings.processing_allowance_s


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


async def initial_alerts(rec: RecoveryStack) -> list[str]:
    return [key for key in await rec.alerts() if key.endswith(":initial")]


async def running_recovery_stack(hooks: WebhookStack) -> AsyncIterator[RecoveryStack]:
    stack = RecoveryStack(hooks)
    try:
        yield stack
    finally:
        await stack.aclose()


__all__ = ["DEADLINE_S", "Pass", "RecoveryStack", "initial_alerts", "running_recovery_stack", "seconds",
           "settle_s"]
