"""The pay flow: the reference's checkout endpoint, step by step.

1. Under the order lock, return the order's live attempt or record a new
   NotStarted one (its key, reference and exact request body fixed now).
2. Anything not NotStarted was already sent by someone: only report it.
3. NotStarted -> Started, with its send intent, under the start budget. An
   unconfirmed commit reloads the durable state (NotStarted means nobody sends).
4. Send once, under the call budget. Every ending without an answer is Unknown.
5. Record the outcome under the record budget. An unconfirmed write reports
   the durable state; recovery establishes the rest.

Each step is its own short transaction; none stays open across the provider call.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg
from prometheus_client import CollectorRegistry, Counter, Histogram

from paycore.attempts import (
    Attempt,
    StartResult,
    get_attempt,
    get_or_create_live_attempt,
    latest_attempt,
    record_outcome,
    try_mark_started,
)
from paycore.clock import Clock
from paycore.config import ProviderAccountConfig, Settings
from paycore.domain import AttemptState, ProviderOutcome
from paycore.errors import MAY_HAVE_COMMITTED
from paycore.logs import bind, bind_log_context
from paycore.orders import OrderNotPayable, get_order, order_account
from paycore.providers.base import PaymentCalls, PaymentMethod, StoredRequest

log = logging.getLogger("paycore.checkout")


@dataclass(frozen=True)
class PaymentStatus:
    """What the page is told about the order's attempt."""

    order_id: str
    attempt_id: str
    state: AttemptState
    provider_status: str | None
    provider_payment_id: str | None
    next_action: dict[str, Any] | None
    outcome_reason: str | None
    status_url: str

    @classmethod
    def of(cls, attempt: Attempt, now: datetime) -> PaymentStatus:
        return cls(
            order_id=attempt.order_id,
            attempt_id=str(attempt.attempt_id),
            state=attempt.state,
            provider_status=attempt.provider_status,
            provider_payment_id=attempt.provider_payment_id,
            # An expired or superseded action is never shown; Unknown never shows one.
            next_action=attempt.next_action if attempt.action_is_current(now) else None,
            outcome_reason=attempt.outcome_reason,
            status_url=f"/orders/{attempt.order_id}/payment/status",
        )

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["state"] = self.state.value
        return body


class CheckoutMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.attempts_created = Counter("paycore_checkout_attempts_created", "Attempts created",
                                        registry=registry)
        self.outcomes = Counter("paycore_checkout_outcomes", "Recorded outcomes by state and reason",
                                ["state", "reason"], registry=registry)
        # By account (bounded: only configured accounts take attempts), so on-call sees which is slow.
        self.provider_latency = Histogram(
            "paycore_checkout_provider_call_seconds", "Provider create-payment call latency",
            ["provider_account", "outcome"], registry=registry,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30),
        )
        self.unconfirmed = Counter("paycore_checkout_unconfirmed_writes", "Writes not confirmed",
                                   ["step"], registry=registry)


class CheckoutPayments:
    def __init__(self, *, pool: asyncpg.Pool, client: PaymentCalls, clock: Clock, settings: Settings,
                 metrics: CheckoutMetrics) -> None:
        self.pool = pool
        self.client = client
        self.clock = clock
        self.settings = settings
        self.metrics = metrics

    async def _account_of(self, order_id: str) -> tuple[ProviderAccountConfig, bool]:
        """The account the order is paid on (the one it names, else the default) and whether its
        payment is held for a capture later. An order never changes either, so reading them
        before the order is locked is safe."""
        named, manual_capture = await order_account(self.pool, order_id)
        if named is None:
            return self.settings.default_account, manual_capture
        account = self.settings.account(named)
        if account is None:  # configured when the order was created, removed since
            raise OrderNotPayable(order_id, "account-not-configured")
        return account, manual_capture

    async def pay(self, order_id: str, customer_id: str, payment_method: PaymentMethod) -> PaymentStatus:
        """Pay for an order, at most once; returns the attempt's durable status."""
        with bind_log_context(order_id=order_id):  # every line of this payment names the order ...
            return await self._pay(order_id, customer_id, payment_method)

    async def _pay(self, order_id: str, customer_id: str, payment_method: PaymentMethod) -> PaymentStatus:
        account, manual_capture = await self._account_of(order_id)
        budgets = self.settings.budgets

        def body(reference: str, amount_minor: int, currency: str) -> str:
            # The provider's contract refusing a value raises InvalidPaymentMethod: nothing is
            # recorded and the route answers 400. Anything else it raises is a bug, and surfaces.
            return self.client.build_request_body(account, amount_minor=amount_minor, currency=currency,
                                                  payment_method=payment_method, reference=reference,
                                                  description=f"order {order_id}",
                                                  manual_capture=manual_capture)

        created_at = self.clock.now()
        try:
            attempt = await get_or_create_live_attempt(
                self.pool, order_id=order_id, customer_id=customer_id, account=account, build_body=body,
                now=created_at, abandonment_threshold_s=self.settings.abandonment_threshold_s,
            )
        except OrderNotPayable as exc:
            return await self._not_payable(order_id, customer_id, exc)
        bind(attempt_id=attempt.attempt_id)  # ... and, from here, the attempt (until pay's block ends)
        if attempt.state is not AttemptState.NOT_STARTED:
            return self._status(attempt)  # someone already sent it: this click only reports
        if attempt.created_at == created_at:
            self.metrics.attempts_created.inc()

        # The start transition runs under its own budget, never the customer's connection.
        try:
            async with self.clock.budget(budgets.start_s):
                now = self.clock.now()
                result, started = await try_mark_started(
                    self.pool, attempt, now=now,
                    next_check_at=now + timedelta(seconds=budgets.call_s + budgets.record_s
                                                  + self.settings.processing_allowance_s),
                )
        except MAY_HAVE_COMMITTED as exc:
            self.metrics.unconfirmed.labels("start").inc()
            log.warning("start of attempt %s not confirmed (%s); reporting durable state",
                        attempt.attempt_id, type(exc).__name__)
            return await self._reload(attempt)
        if result is StartResult.ORDER_NOT_PAYABLE:
            order = await get_order(self.pool, order_id, customer_id)
            why = order.not_payable_reason or "cancelled"
            return await self._not_payable(order_id, customer_id, OrderNotPayable(order_id, why))
        if result is StartResult.CONFLICT or started is None:
            return await self._reload(attempt)

        outcome = await self._send(started)

        try:
            async with self.clock.budget(budgets.record_s):
                recorded = (await record_outcome(
                    self.pool, started.attempt_id, outcome, now=self.clock.now(), actor="endpoint",
                    recheck_after_s=self.settings.recheck_after_s,
                    reminder_interval=self.settings.reminder_interval,
                )).attempt
        except MAY_HAVE_COMMITTED as exc:
            self._report_outcome_not_recorded(started, outcome, exc)
            return await self._reload(started)
        self.metrics.outcomes.labels(recorded.state.value, outcome.reason or "").inc()
        return self._status(recorded)

    async def _send(self, attempt: Attempt) -> ProviderOutcome:
        started_at = time.perf_counter()
        outcome = await self.client.create_payment(
            StoredRequest.from_attempt(attempt), budget_s=self.settings.budgets.call_s,
            first_send=True,
        )
        elapsed = time.perf_counter() - started_at
        self.metrics.provider_latency.labels(attempt.provider_account, outcome.kind.value).observe(elapsed)
        return outcome

    def _report_outcome_not_recorded(self, attempt: Attempt, outcome: ProviderOutcome,
                                     exc: BaseException) -> None:
        # Best effort: with the database failing a durable alert could fail too.
        # This must never raise past the status return.
        try:
            self.metrics.unconfirmed.labels("record").inc()
            log.error("outcome %s of attempt %s not recorded (%s); recovery will establish it",
                      outcome.kind.value, attempt.attempt_id, type(exc).__name__)
        except Exception:
            pass

    async def _not_payable(self, order_id: str, customer_id: str, exc: OrderNotPayable) -> PaymentStatus:
        # A retry after success only reports the payment that took effect.
        paid = await latest_attempt(self.pool, order_id, customer_id) if exc.why == "paid" else None
        if paid is None or paid.state is not AttemptState.SUCCEEDED:
            raise exc
        return self._status(paid)

    async def _reload(self, attempt: Attempt) -> PaymentStatus:
        return self._status(await get_attempt(self.pool, attempt.attempt_id))

    def _status(self, attempt: Attempt) -> PaymentStatus:
        return PaymentStatus.of(attempt, self.clock.now())

    async def status(self, order_id: str, customer_id: str) -> PaymentStatus | None:
        """Observation only: never sends."""
        attempt = await latest_attempt(self.pool, order_id, customer_id)
        return self._status(attempt) if attempt is not None else None
