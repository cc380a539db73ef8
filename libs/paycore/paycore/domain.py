"""Attempt states, the transitions allowed between them, and provider outcomes.

This module is the one place that says which state may become which. Every
writer (checkout, the notification handler, recovery) asks :func:`can_transition`
before its conditional UPDATE, and the UPDATE itself is conditional on the
state and version it read.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from paycore.evidence import Claim, Verdict


class AttemptState(enum.StrEnum):
    NOT_STARTED = "NotStarted"
    STARTED = "Started"
    UNKNOWN = "Unknown"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    NOT_APPLIED = "NotApplied"


LIVE_STATES: frozenset[AttemptState] = frozenset(
    {AttemptState.NOT_STARTED, AttemptState.STARTED, AttemptState.UNKNOWN}
)
FINAL_STATES: frozenset[AttemptState] = frozenset(
    {AttemptState.SUCCEEDED, AttemptState.FAILED, AttemptState.NOT_APPLIED}
)
# The live states in SQL, written once: the partial indexes one_live_attempt_per_order
# and payment_attempts_due say exactly this (a test pins it), and every query of
# live attempts uses it so a migration cannot change one without the others.
LIVE_STATE_PREDICATE = "state IN ('NotStarted', 'Started', 'Unknown')"

RESOLVABLE_STATES: frozenset[AttemptState] = frozenset(
    {AttemptState.STARTED, AttemptState.UNKNOWN}
)

# The whole state machine. A final state has no way out; Unknown never becomes
# NotApplied (a later no-effect rejection proves nothing about an earlier send);
# NotStarted becomes NotApplied only when recovery closes it as never-sent.
ALLOWED_TRANSITIONS: dict[AttemptState, frozenset[AttemptState]] = {
    AttemptState.NOT_STARTED: frozenset({AttemptState.STARTED, AttemptState.NOT_APPLIED}),
    AttemptState.STARTED: frozenset(
        {
            AttemptState.STARTED,
            AttemptState.UNKNOWN,
            AttemptState.SUCCEEDED,
            AttemptState.FAILED,
            AttemptState.NOT_APPLIED,
        }
    ),
    AttemptState.UNKNOWN: frozenset(
        {AttemptState.STARTED, AttemptState.UNKNOWN, AttemptState.SUCCEEDED, AttemptState.FAILED}
    ),
    AttemptState.SUCCEEDED: frozenset(),
    AttemptState.FAILED: frozenset(),
    AttemptState.NOT_APPLIED: frozenset(),
}


def can_transition(current: AttemptState, target: AttemptState) -> bool:
    """Whether ``current`` may become ``target``."""
    return target in ALLOWED_TRANSITIONS[current]


class OrderStatus(enum.StrEnum):
    OPEN = "Open"
    PAID = "Paid"
    CANCELLED = "Cancelled"


class OutcomeKind(enum.StrEnum):
    """How one provider call (or one piece of evidence) ended."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"  # declined by the issuer, or failed: a final outcome
    NOT_APPLIED = "not_applied"  # rejected before execution on the only send
    REQUIRES_ACTION = "requires_action"  # Started, with the customer's next action
    PROCESSING = "processing"  # Started: the provider has it
    UNKNOWN = "unknown"  # no answer: only evidence resolves it


OUTCOME_TARGET_STATE: dict[OutcomeKind, AttemptState] = {
    OutcomeKind.SUCCEEDED: AttemptState.SUCCEEDED,
    OutcomeKind.FAILED: AttemptState.FAILED,
    OutcomeKind.NOT_APPLIED: AttemptState.NOT_APPLIED,
    OutcomeKind.REQUIRES_ACTION: AttemptState.STARTED,
    OutcomeKind.PROCESSING: AttemptState.STARTED,
    OutcomeKind.UNKNOWN: AttemptState.UNKNOWN,
}


@dataclass(frozen=True)
class ProviderOutcome:
    """The classified ending of a provider call.

    Build one with the constructors (``ProviderOutcome.unknown(reason)`` and so
    on). ``reason`` is a short machine-readable string kept for telemetry and the
    attempt's ``outcome_reason``; it never carries card data or secrets.
    """

    kind: OutcomeKind
    reason: str | None = None
    provider_payment_id: str | None = None
    provider_status: str | None = None
    amount_minor: int | None = None
    currency: str | None = None
    next_action: dict[str, Any] | None = None
    next_action_expires_at: datetime | None = None
    http_status: int | None = None
    replayed: bool = False
    # What the provider said about the payment this outcome is about (its id,
    # reference, amount, account, mode), for paycore.evidence to judge. An answer
    # that described another payment is Unknown, never carries that payment's id or
    # status, and keeps what it said here for the escalation.
    claim: Claim | None = None
    # The provider refused this very request as invalid before executing it (a
    # documented validation rejection). The same bytes will be refused again, so a
    # rejected resend is never repeated; on the only send it is NotApplied.
    request_rejected: bool = False
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def target_state(self) -> AttemptState:
        return OUTCOME_TARGET_STATE[self.kind]

    @property
    def is_final(self) -> bool:
        return self.target_state in FINAL_STATES

    def evidence(self) -> Claim:
        """What this outcome claims about its payment (its own fields when no claim came with it)."""
        if self.claim is not None:
            return self.claim
        return Claim(provider_payment_id=self.provider_payment_id, amount_minor=self.amount_minor,
                     currency=self.currency)

    @classmethod
    def unknown(cls, reason: str, **kw: Any) -> ProviderOutcome:
        return cls(OutcomeKind.UNKNOWN, reason=reason, **kw)

    @classmethod
    def succeeded(cls, provider_payment_id: str, amount_minor: int, currency: str,
                  **kw: Any) -> ProviderOutcome:
        return cls(OutcomeKind.SUCCEEDED, provider_payment_id=provider_payment_id,
                   provider_status=kw.pop("provider_status", "succeeded"),
                   amount_minor=amount_minor, currency=currency, **kw)

    @classmethod
    def failed(cls, reason: str, **kw: Any) -> ProviderOutcome:
        return cls(OutcomeKind.FAILED, reason=reason, **kw)

    @classmethod
    def not_applied(cls, reason: str, **kw: Any) -> ProviderOutcome:
        return cls(OutcomeKind.NOT_APPLIED, reason=reason, **kw)

    @classmethod
    def processing(cls, provider_payment_id: str, **kw: Any) -> ProviderOutcome:
        return cls(OutcomeKind.PROCESSING, provider_payment_id=provider_payment_id,
                   provider_status=kw.pop("provider_status", "processing"), **kw)

    @classmethod
    def requires_action(cls, provider_payment_id: str, next_action: dict[str, Any],
                        expires_at: datetime | None, **kw: Any) -> ProviderOutcome:
        return cls(OutcomeKind.REQUIRES_ACTION, provider_payment_id=provider_payment_id,
                   provider_status=kw.pop("provider_status", "requires_action"),
                   next_action=next_action, next_action_expires_at=expires_at, **kw)


def provider_account_id(provider: str, account: str, environment: str) -> str:
    """The internal provider-account id, e.g. ``cardco:acct_store:test``."""
    return f"{provider}:{account}:{environment}"


# -- what an outcome would do, without doing it -------------------------------------------------


@dataclass(frozen=True)
class Foreseen:
    """What :func:`paycore.attempts.apply_outcome` would do with an outcome (:func:`foresee_outcome`).

    ``refused``: it would raise :class:`paycore.errors.TransitionRefused` with this reason and
    change nothing. Otherwise the attempt goes from ``before`` to ``after`` (``written``: a new
    version, even when the state stays, as Started -> Started does), the escalations named are
    raised, and on Succeeded the order is marked Paid (``order_paid``) and ``effects`` queued.
    """

    before: AttemptState
    after: AttemptState
    written: bool = False
    escalations: tuple[str, ...] = ()
    refused: str | None = None
    order_paid: bool = False
    effects: tuple[str, ...] = ()

    @property
    def resolves_escalations(self) -> bool:
        """A final outcome written resolves the attempt's open escalations."""
        return self.written and self.after in FINAL_STATES


def foresee_outcome(state: AttemptState, provider_status: str | None, outcome: ProviderOutcome,
                    verdict: Verdict, *, order_status: OrderStatus, cancel_requested: bool) -> Foreseen:
    """The decisions of :func:`paycore.attempts.apply_outcome`, in its order, for an attempt in
    ``state`` (with ``provider_status`` observed) whose order is ``order_status``, given the
    evidence ``verdict`` on ``outcome``: pure, for a person to see before confirming an action.

    A write can still find the state changed underneath and then decides again on what it finds;
    ``tests/operators/test_attach_preview.py`` applies each case and compares.
    """
    raised: list[str] = []
    if not verdict.accepted:
        assert verdict.reason is not None
        raised.append(verdict.reason.value)
        if outcome.kind is not OutcomeKind.UNKNOWN or state in FINAL_STATES:
            return Foreseen(state, state, escalations=tuple(raised))
        outcome = dataclasses.replace(outcome, claim=None, provider_payment_id=None, provider_status=None)
    target = outcome.target_state
    if state in FINAL_STATES:
        if outcome.is_final and target is not state:
            raised.append("contradiction")
        return Foreseen(state, state, escalations=tuple(raised))
    if state is AttemptState.NOT_STARTED:
        return Foreseen(state, state, refused=f"the attempt is {state}; no outcome can be recorded")
    if outcome.kind is OutcomeKind.UNKNOWN and outcome.request_rejected:
        raised.append("resend-rejected")
    if outcome.kind is OutcomeKind.UNKNOWN and (state is AttemptState.UNKNOWN or provider_status is not None):
        return Foreseen(state, state, escalations=tuple(raised))
    if not can_transition(state, target):
        return Foreseen(state, state, refused=f"transition {state} -> {target} is not allowed")
    if target is not AttemptState.SUCCEEDED:
        return Foreseen(state, target, written=True, escalations=tuple(raised))
    fulfil = order_status is OrderStatus.OPEN and not cancel_requested
    if not fulfil:
        raised.append("succeeded-after-cancel")
    return Foreseen(state, target, written=True, escalations=tuple(raised),
                    order_paid=order_status is OrderStatus.OPEN,
                    effects=("order-confirmation", *(("fulfillment-request",) if fulfil else ())))
