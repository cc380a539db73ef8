"""Recovery's task for holds: a payment held for manual capture that nobody captures or voids.

:func:`paycore.domain.decide_hold` decides for each held payment (its order Authorized): a
person is asked to capture or void it ``PAYCORE_HOLD_LAPSE_WARNING_S`` before its provider's
hold period ends (``authorization-lapsing``), and once it has ended the lapse is recorded
(:func:`paycore.holds.record_lapse`: the order Voided, ``authorization-lapsed`` for the store).
A capture or cancel still in flight decides instead, by its own evidence.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import asyncpg

from paycore import holds
from paycore.clock import Clock
from paycore.config import Settings
from paycore.domain import HoldStep, decide_hold
from paycore.logs import bind_log_context
from paycore.providers.base import PaymentCalls
from paycore_recovery.settings import RecoverySettings

__all__ = ["HoldWatch"]

log = logging.getLogger("paycore.recovery.holds")


class HoldWatch:
    def __init__(self, *, pool: asyncpg.Pool, client: PaymentCalls, clock: Clock, settings: Settings,
                 recovery: RecoverySettings) -> None:
        self.pool = pool
        self.client = client
        self.clock = clock
        self.settings = settings
        self.recovery = recovery

    async def run_pass(self) -> list[HoldStep]:
        """Every held payment once (up to ``batch``); what was done with each."""
        steps: list[HoldStep] = []
        for held in await holds.held_payments(self.pool, self.recovery.batch):
            with bind_log_context(order_id=held.order_id, attempt_id=held.attempt_id):
                now = self.clock.now()
                lapse_s = self.client.capabilities_of(held.provider_account).hold_lapse_s
                step = decide_hold(held_since=held.first_sent_at, now=now, lapse_s=lapse_s,
                                   warn_before_s=self.recovery.hold_lapse_warning_s,
                                   capture_or_cancel_live=held.capture_or_cancel_live)
                if step is HoldStep.WARN:
                    lapses_at = held.first_sent_at + timedelta(seconds=lapse_s)
                    if await holds.warn_lapsing(self.pool, held, lapses_at=lapses_at, now=now,
                                                reminder_interval=self.settings.reminder_interval):
                        log.warning("hold of payment %s lapses at %s: capture or void it",
                                    held.attempt_id, lapses_at.isoformat())
                elif step is HoldStep.LAPSED and await holds.record_lapse(self.pool, held, now=now):
                    log.warning("hold of payment %s lapsed uncaptured: order %s Voided",
                                held.attempt_id, held.order_id)
                steps.append(step)
        return steps
