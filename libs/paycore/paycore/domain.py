"""The rules of an attempt, as pure functions and values: what may happen, decided without I/O.

Nothing here reads a database or a clock: ``now`` is passed in. Everything that writes
asks this module first and then does exactly what it was told (:mod:`paycore.writer`):

- the states and the one transition table (:data:`ALLOWED_TRANSITIONS`);
- the attempt as a value (:class:`Attempt`): ``is_final``, ``past_deadline(now)``;
- every reason a person is asked to look (:class:`EscalationReason`), evidence's included;
- what a provider said (:class:`ProviderOutcome`, the :class:`Claim` inside it, the
  :class:`Verdict` on it);
- :func:`decide_outcome`: what an outcome does to an attempt -- the writer executes it and the
  operator's preview shows it, so the two cannot disagree;
- :func:`decide_pass`: what one recovery pass over a claimed attempt does next, from the facts
  gathered so far (the rescuers gather, this decides).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

if TYPE_CHECKING:  # providers.base imports this module; the outcome is only read here
    from paycore.providers.base import OperationOutcome

# -- states and the transition table --------------------------------------------------------------


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
# and payment_attempts_due say exactly this, and every query of live attempts (the named
# queries' files too) spells it this way; tests/test_layout.py pins all of them.
LIVE_STATE_PREDICATE = "state IN ('NotStarted', 'Started', 'Unknown')"

RESOLVABLE_STATES: frozenset[AttemptState] = frozenset(
    {AttemptState.STARTED, AttemptState.UNKNOWN}
)


def past_escalation_deadline(escalation_deadline: datetime | None, now: datetime) -> bool:
    """At or past a stamped escalation deadline, when no send may go out any more: the one rule
    for an attempt (:meth:`Attempt.past_deadline`) and an operation (:func:`decide_operation_step`).

    No deadline counts as past: one is stamped when the first send is recorded (the schema ties
    it to ``first_sent_at``), so without one nothing may be sent either.
    """
    return escalation_deadline is None or now >= escalation_deadline


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


# -- after the payment: captures, cancels and refunds ---------------------------------------------
# An operation on a payment is an outbound call with the payment's own problem, so it has the
# payment's states and protocol (docs/architecture.md, "The next operations"); what differs per
# kind is written here, next to the attempt's table, and nowhere else.


class OperationKind(enum.StrEnum):
    CAPTURE = "capture"  # charge (part of) an authorization's hold, once
    CANCEL = "cancel"  # release an uncaptured hold (a void)
    REFUND = "refund"  # give back (part of) what was captured; several, up to the capture


class OperationState(enum.StrEnum):
    NOT_STARTED = "NotStarted"
    STARTED = "Started"
    UNKNOWN = "Unknown"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    NOT_APPLIED = "NotApplied"
    # A succeeded refund that the card network sent back days later (a closed card): the
    # customer did not get the money, and its amount is refundable again.
    RETURNED = "Returned"


LIVE_OPERATION_STATES: frozenset[OperationState] = frozenset(
    {OperationState.NOT_STARTED, OperationState.STARTED, OperationState.UNKNOWN}
)
# What an operation may still move: live ones may yet take effect, a succeeded one did.
# Every claim on a payment's money counts these (a refund's headroom; one capture or cancel).
HOLDING_OPERATION_STATES: frozenset[OperationState] = LIVE_OPERATION_STATES | {OperationState.SUCCEEDED}

_PAYMENT_LIKE: dict[OperationState, frozenset[OperationState]] = {
    OperationState.NOT_STARTED: frozenset({OperationState.STARTED, OperationState.NOT_APPLIED}),
    OperationState.STARTED: frozenset({OperationState.STARTED, OperationState.UNKNOWN,
                                       OperationState.SUCCEEDED, OperationState.FAILED,
                                       OperationState.NOT_APPLIED}),
    OperationState.UNKNOWN: frozenset({OperationState.STARTED, OperationState.UNKNOWN,
                                       OperationState.SUCCEEDED, OperationState.FAILED}),
    OperationState.SUCCEEDED: frozenset(),
    OperationState.FAILED: frozenset(),
    OperationState.NOT_APPLIED: frozenset(),
    OperationState.RETURNED: frozenset(),
}

# Each kind's whole state machine: the attempt's, and for a refund one way out of Succeeded.
# Only Cardco's refunds are "not always final"; a capture or a cancel that succeeded stays so.
OPERATION_TRANSITIONS: dict[OperationKind, dict[OperationState, frozenset[OperationState]]] = {
    OperationKind.CAPTURE: _PAYMENT_LIKE,
    OperationKind.CANCEL: _PAYMENT_LIKE,
    OperationKind.REFUND: {**_PAYMENT_LIKE, OperationState.SUCCEEDED: frozenset({OperationState.RETURNED})},
}


def can_transition_operation(kind: OperationKind, current: OperationState, target: OperationState) -> bool:
    """Whether an operation of ``kind`` in ``current`` may become ``target``."""
    return target in OPERATION_TRANSITIONS[kind][current]


@dataclass(frozen=True)
class HeldAmount:
    """One operation's claim on a payment's money: its kind, state and amount."""

    kind: OperationKind
    state: OperationState
    amount_minor: int


@dataclass(frozen=True)
class Headroom:
    """What a payment can still give: a capture (of the hold) and refunds (of the capture)."""

    captured_minor: int  # charged: up front, or by a capture that holds (live or Succeeded)
    capturable_minor: int  # still held and free: 0 once a capture or a cancel holds the payment
    refundable_minor: int  # captured less every refund that holds


def headroom(*, authorized_minor: int, captured_upfront_minor: int,
             operations: Sequence[HeldAmount]) -> Headroom:
    """Never more back than was taken: what a payment can still capture and refund.

    For a Succeeded payment: ``authorized_minor`` is its amount, ``captured_upfront_minor``
    what it charged when it succeeded (all of it with automatic capture, 0 for a hold); a
    payment that did not succeed has neither (pass 0 for both). A live or Unknown
    operation holds its amount until evidence frees it: an Unknown refund may have been paid,
    so counting it as paid is the only side that never gives back twice.
    """
    holding = [op for op in operations if op.state in HOLDING_OPERATION_STATES]
    captures = [op for op in holding if op.kind is OperationKind.CAPTURE]
    cancels = [op for op in holding if op.kind is OperationKind.CANCEL]
    captured = captured_upfront_minor + sum(op.amount_minor for op in captures)
    refunded = sum(op.amount_minor for op in holding if op.kind is OperationKind.REFUND)
    capturable = 0 if captures or cancels or captured_upfront_minor else authorized_minor
    return Headroom(captured_minor=captured, capturable_minor=capturable,
                    refundable_minor=max(captured - refunded, 0))


class OperationRefusal(enum.StrEnum):
    """Why an operation is refused before it is recorded (nothing sent, nothing held)."""

    NOT_CAPTURED = "payment-not-captured"  # a refund of a hold, or of a payment not Succeeded
    EXCEEDS_REFUNDABLE = "amount-exceeds-refundable"
    NOT_CAPTURABLE = "payment-not-capturable"  # not a hold, or already captured or cancelled
    EXCEEDS_CAPTURABLE = "amount-exceeds-capturable"
    NOT_CANCELABLE = "payment-not-cancelable"
    AMOUNT_NOT_POSITIVE = "amount-not-positive"


def refuse_operation(kind: OperationKind, amount_minor: int, room: Headroom) -> OperationRefusal | None:
    """Whether a new operation of ``kind`` for ``amount_minor`` is refused, decided against the
    payment's :func:`headroom` under the payment's lock (so two concurrent partial refunds
    cannot both pass); ``None``: it may be recorded."""
    if amount_minor <= 0:
        return OperationRefusal.AMOUNT_NOT_POSITIVE
    if kind is OperationKind.REFUND:
        if room.captured_minor == 0:
            return OperationRefusal.NOT_CAPTURED
        if amount_minor > room.refundable_minor:
            return OperationRefusal.EXCEEDS_REFUNDABLE
        return None
    if kind is OperationKind.CAPTURE:
        if room.capturable_minor == 0:
            return OperationRefusal.NOT_CAPTURABLE
        if amount_minor > room.capturable_minor:
            return OperationRefusal.EXCEEDS_CAPTURABLE
        return None
    if room.capturable_minor == 0 or amount_minor != room.capturable_minor:
        return OperationRefusal.NOT_CANCELABLE  # a cancel releases the whole hold, or nothing
    return None


# What each ending (``providers.base.OperationEnding``, keyed by its value: that module imports
# this one) makes of an operation.
OPERATION_ENDING_TARGET: dict[str, OperationState] = {
    "succeeded": OperationState.SUCCEEDED,
    "pending": OperationState.STARTED,
    "failed": OperationState.FAILED,
    "rejected-before-execution": OperationState.NOT_APPLIED,
    "unknown": OperationState.UNKNOWN,
}
FINAL_OPERATION_STATES: frozenset[OperationState] = frozenset(OperationState) - LIVE_OPERATION_STATES


@dataclass(frozen=True)
class OperationWrite:
    """The conditional UPDATE an operation's outcome makes, on the version and state read."""

    target: OperationState
    version: int  # the version read: the write happens only while the row still has it
    provider_status: str | None
    outcome_reason: str | None
    provider_operation_id: str | None  # kept when the operation recorded one already (COALESCE)
    next_check_at: datetime


@dataclass(frozen=True)
class OperationDecision:
    """What :func:`decide_operation_outcome` decided: the operation goes from ``from_state`` to
    ``to_state`` by ``write`` (``None``: nothing is written); ``refused``: nothing may be done,
    and why; ``escalation``: a person is asked to look."""

    from_state: OperationState
    to_state: OperationState
    write: OperationWrite | None = None
    refused: str | None = None
    escalation: EscalationReason | None = None

    @property
    def written(self) -> bool:
        return self.write is not None


def decide_operation_outcome(kind: OperationKind, state: OperationState, version: int,
                             outcome: OperationOutcome, *, provider_status: str | None, now: datetime,
                             recheck_after_s: float) -> OperationDecision:
    """What ``outcome`` does to an operation of ``kind`` read in ``state`` at ``version`` (with
    the ``provider_status`` it recorded), in this order, as :func:`decide_outcome` for a payment:

    - a final state never changes; a final ending that contradicts it (Succeeded and a
      reported failure, Failed and a reported success, …) is escalated as a contradiction --
      except a Succeeded refund reported failed: the network sent it back, so it is
      ``Returned`` (its amount refundable again) and a person is told (``refund-returned``);
      a Returned refund reported failed, or succeeded (the report of its success arriving
      late), agrees with it;
    - a NotStarted operation takes no outcome (only a sender that started it has one);
    - Unknown never overwrites Unknown, nor a Started operation whose provider status was
      seen (nothing is written); else Started becomes Unknown;
    - ``pending`` keeps (or makes) the operation Started, its provider status recorded;
    - ``rejected-before-execution`` is NotApplied, ``succeeded`` Succeeded, ``failed`` Failed;
    - the kind's transition table decides the rest (NotApplied only from Started, the only
      send): what it refuses is a refusal. A live operation is looked at again after
      ``recheck_after_s``.
    """
    target = OPERATION_ENDING_TARGET[outcome.ending]
    if state in FINAL_OPERATION_STATES:
        if kind is OperationKind.REFUND and state is OperationState.SUCCEEDED \
                and target is OperationState.FAILED:
            target = OperationState.RETURNED
            write = _operation_write(target, version, outcome, now, recheck_after_s)
            return OperationDecision(state, target, write, escalation=EscalationReason.REFUND_RETURNED)
        # A Returned refund did succeed first: a late report of its success, or of its failure,
        # agrees with its history.
        agrees = target is state or (state is OperationState.RETURNED
                                     and target in (OperationState.FAILED, OperationState.SUCCEEDED))
        if target in FINAL_OPERATION_STATES and not agrees:
            return OperationDecision(state, state, escalation=EscalationReason.CONTRADICTION)
        return OperationDecision(state, state)
    if state is OperationState.NOT_STARTED:
        return OperationDecision(state, state,
                                 refused=f"{kind.value} is NotStarted; no outcome can be recorded")
    if target is OperationState.UNKNOWN and (state is OperationState.UNKNOWN or provider_status is not None):
        return OperationDecision(state, state)
    if not can_transition_operation(kind, state, target):
        return OperationDecision(state, state, refused=f"transition {state} -> {target} is not allowed")
    return OperationDecision(state, target, _operation_write(target, version, outcome, now, recheck_after_s))


class OperationStep(enum.StrEnum):
    """What recovery does with a due operation (:func:`decide_operation_step`)."""

    CLOSE_NEVER_SENT = "close-never-sent"  # its sender died before the send intent: nothing sent
    APPLY_FOUND = "apply-found"  # a lookup found it: the object is the evidence
    RESEND = "resend"  # the same bytes under the same key, inside the key window
    WAIT = "wait"  # the provider has it, or the lookup failed: look again later
    ESCALATE_DEADLINE = "escalate-deadline"  # the key window is closing and nothing proves an ending
    ESCALATE_MULTIPLE = "escalate-multiple"  # a lookup found several for one reference


def decide_operation_step(state: OperationState, *, provider_status: str | None,
                          escalation_deadline: datetime | None, lookup: str, found: int,
                          found_pending: bool, now: datetime) -> OperationStep:
    """Recovery's one decision for a due live operation, the payment's rules (the reference's
    recovery loop) for what follows it:

    - NotStarted and due: its sender never committed the send intent -> closed, never sent;
    - a lookup (``lookup`` is ``found``, ``not_found``, ``unsupported`` -- the provider has
      none, so a same-key resend is the only evidence -- or ``unavailable``) that found exactly
      one object applies it; several for one reference is a person's to untangle; one still
      pending (``found_pending``) that the operation already knows as pending, past the deadline,
      is a person's too: the provider has it, so nothing is resent, but it has not ended in the
      time paycore allows (the customer has not got the money), and looking on changes nothing;
    - otherwise past the deadline (``first_sent_at`` + key retention - margin; none is past:
      a live sent operation always has one) is escalated: after it a resend could be a new
      operation;
    - an operation the provider acknowledged (a provider status was recorded) or a failed lookup
      waits: the provider has it, or nothing was learnt;
    - else (not found, or no lookup) the same request is sent again under the same key.
    """
    if state is OperationState.NOT_STARTED:
        return OperationStep.CLOSE_NEVER_SENT
    past_deadline = past_escalation_deadline(escalation_deadline, now)
    if lookup == "found":
        if found != 1:
            return OperationStep.ESCALATE_MULTIPLE
        if found_pending and provider_status is not None and past_deadline:
            return OperationStep.ESCALATE_DEADLINE
        return OperationStep.APPLY_FOUND
    if past_deadline:
        return OperationStep.ESCALATE_DEADLINE
    if provider_status is not None or lookup == "unavailable":
        return OperationStep.WAIT
    return OperationStep.RESEND


def _operation_write(target: OperationState, version: int, outcome: OperationOutcome, now: datetime,
                     recheck_after_s: float) -> OperationWrite:
    return OperationWrite(target=target, version=version, provider_status=outcome.provider_status,
                          outcome_reason=outcome.reason, provider_operation_id=outcome.provider_operation_id,
                          next_check_at=now + timedelta(seconds=recheck_after_s))


class OrderStatus(enum.StrEnum):
    OPEN = "Open"
    PAID = "Paid"
    CANCELLED = "Cancelled"
    # After the payment (issue 29): what its operations made of a paid (or held) order.
    AUTHORIZED = "Authorized"  # a hold: the amount is reserved, nothing charged yet
    PARTIALLY_REFUNDED = "PartiallyRefunded"
    REFUNDED = "Refunded"  # everything captured was given back
    VOIDED = "Voided"  # the hold was released, nothing charged


# The provider status of a payment authorized for manual capture (a hold): Succeeded, nothing
# charged yet; every provider's client reports its hold so (Cardco's and Stripe's own word).
# Any other Succeeded payment charged its whole amount when it succeeded.
HOLD_STATUS = "requires_capture"
# What a hold's payment reports when the hold ends without a charge (voided, or lapsed).
HOLD_RELEASED_STATUS = "canceled"


# Orders whose payment took effect (charged or held): never payable again, never cancelled.
PAID_ORDER_STATUSES: frozenset[OrderStatus] = frozenset({
    OrderStatus.PAID, OrderStatus.AUTHORIZED, OrderStatus.PARTIALLY_REFUNDED, OrderStatus.REFUNDED})
_REFUND_STATUSES: frozenset[OrderStatus] = frozenset({
    OrderStatus.PAID, OrderStatus.PARTIALLY_REFUNDED, OrderStatus.REFUNDED})


class HoldStep(enum.StrEnum):
    """What recovery's hold task does with a held payment (:func:`decide_hold`)."""

    WAIT = "wait"
    WARN = "warn"  # the hold lapses soon: a person is asked to capture or void it
    LAPSED = "lapsed"  # the hold lapsed uncaptured: the order is Voided, the store told


def decide_hold(*, held_since: datetime, now: datetime, lapse_s: float, warn_before_s: float,
                capture_or_cancel_live: bool) -> HoldStep:
    """A held payment (its order Authorized) ``held_since`` its authorization: after ``lapse_s``
    the provider released it, and the order is Voided; ``warn_before_s`` earlier a person is
    told. A capture or cancel still in flight decides instead: it may yet have charged or
    released the hold, and its own evidence will say."""
    if capture_or_cancel_live:
        return HoldStep.WAIT
    lapses_at = held_since + timedelta(seconds=lapse_s)
    if now >= lapses_at:
        return HoldStep.LAPSED
    if now >= lapses_at - timedelta(seconds=warn_before_s):
        return HoldStep.WARN
    return HoldStep.WAIT


def order_status_after_operation(current: OrderStatus, kind: OperationKind, target: OperationState, *,
                                 captured_minor: int, refunded_minor: int) -> OrderStatus:
    """The order's status once an operation of ``kind`` became ``target``: Paid ->
    PartiallyRefunded -> Refunded by what its Succeeded refunds add up to (``refunded_minor``,
    of ``captured_minor``; a Returned refund no longer counts, so the order goes back);
    Authorized -> Paid by a capture (or straight to PartiallyRefunded or Refunded when a refund
    of that capture succeeded first, the capture's own answer lost), Authorized -> Voided by a
    cancel. An Authorized order's refund waits for its capture; a cancelled order stays
    cancelled (its refund answers a payment that came too late), and nothing else moves it."""
    def by_refunds() -> OrderStatus:
        if refunded_minor <= 0:
            return OrderStatus.PAID
        return OrderStatus.REFUNDED if refunded_minor >= captured_minor else OrderStatus.PARTIALLY_REFUNDED

    if kind is OperationKind.REFUND and target in (OperationState.SUCCEEDED, OperationState.RETURNED):
        return by_refunds() if current in _REFUND_STATUSES else current
    if current is OrderStatus.AUTHORIZED and target is OperationState.SUCCEEDED:
        return by_refunds() if kind is OperationKind.CAPTURE else OrderStatus.VOIDED
    return current


# The effect each final state of each kind puts on ``payments.effects`` (its contract:
# paycore/contracts/schemas/<effect>.v1.json), after the payment's own effects.
OPERATION_EFFECTS: dict[tuple[OperationKind, OperationState], str] = {
    (OperationKind.REFUND, OperationState.SUCCEEDED): "refund-succeeded",
    (OperationKind.REFUND, OperationState.FAILED): "refund-failed",
    (OperationKind.REFUND, OperationState.NOT_APPLIED): "refund-failed",
    (OperationKind.REFUND, OperationState.RETURNED): "refund-returned",
    (OperationKind.CAPTURE, OperationState.SUCCEEDED): "captured",
    (OperationKind.CAPTURE, OperationState.FAILED): "capture-failed",
    (OperationKind.CAPTURE, OperationState.NOT_APPLIED): "capture-failed",
    (OperationKind.CANCEL, OperationState.SUCCEEDED): "voided",
    (OperationKind.CANCEL, OperationState.FAILED): "void-failed",
    (OperationKind.CANCEL, OperationState.NOT_APPLIED): "void-failed",
}


# -- the attempt, as a value ----------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """A ``payment_attempts`` row."""

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
    def from_record(cls, r: Mapping[str, Any]) -> Attempt:
        """From a row (an ``asyncpg.Record`` or any mapping of the table's columns)."""
        values = dict(r)
        values["state"] = AttemptState(values["state"])
        return cls(**values)

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def is_live(self) -> bool:
        return self.state in LIVE_STATES

    def past_deadline(self, now: datetime) -> bool:
        """At or past the stamped escalation deadline (:func:`past_escalation_deadline`).

        An attempt without one never crossed the send boundary, so nothing may be sent for it
        either: it counts as past.
        """
        return past_escalation_deadline(self.escalation_deadline, now)

    def action_is_current(self, now: datetime) -> bool:
        """A customer action is shown only on a Started attempt and only before it expires."""
        return (
            self.state is AttemptState.STARTED
            and self.next_action is not None
            and (self.next_action_expires_at is None or self.next_action_expires_at > now)
        )


# -- escalations: why a person must look ----------------------------------------------------------


class EscalationReason(enum.StrEnum):
    """Every reason paycore asks a person to look, the one vocabulary (``payment_escalations.reason``)."""

    # Evidence about another payment (paycore.evidence.judge / identify).
    MISMATCH = "mismatch"  # account, environment, reference, amount or currency not the attempt's
    PROVIDER_ID_CONFLICT = "provider-id-conflict"  # another payment id than recorded, or another's
    IDENTITY_CONFLICT = "identity-conflict"  # a notification's reference and payment id name two attempts
    MULTIPLE_PAYMENTS = "multiple-provider-payments"  # a lookup found several for one reference
    # What an outcome meets.
    CONTRADICTION = "contradiction"  # a final outcome against another recorded final state
    SUCCEEDED_AFTER_CANCEL = "succeeded-after-cancel"  # charged after the order was cancelled
    REFUND_RETURNED = "refund-returned"  # a succeeded refund the network sent back: not paid out
    AUTHORIZATION_LAPSING = "authorization-lapsing"  # a hold lapses soon: capture or void it
    # Recovery's dead ends (the attempt stays Unknown; dead_ends closes them).
    DEADLINE = "deadline"  # the key window is closing or closed
    RESEND_REJECTED = "resend-rejected"  # a resend refused before execution: never again
    RESEND_NOT_SAFE = "resend-not-safe"  # a resend condition fails (``resend-not-safe:<which>``)
    # Inputs nothing could be matched to or stored.
    UNMATCHED_PAYMENT = "unmatched-payment"
    UNMATCHED_OPERATION = "unmatched-operation"  # a refund or capture notification of nothing of ours
    UNPARSEABLE_NOTIFICATION = "unparseable-notification"
    OUTBOX_DEAD_LETTER = "outbox-dead-letter"
    CONSUMER_POISON_MESSAGE = "consumer-poison-message"
    # What a provider's settlement report and the books disagree on (``settlement-exception:<kind>``).
    SETTLEMENT_EXCEPTION = "settlement-exception"


# The reasons that say evidence was about another payment (a verdict's reason).
EVIDENCE_REASONS: frozenset[EscalationReason] = frozenset({
    EscalationReason.MISMATCH, EscalationReason.PROVIDER_ID_CONFLICT, EscalationReason.IDENTITY_CONFLICT,
    EscalationReason.MULTIPLE_PAYMENTS})
# Recovery gives up with these, the attempt still Unknown: no evidence either way.
DEAD_END_REASONS: frozenset[EscalationReason] = frozenset({
    EscalationReason.DEADLINE, EscalationReason.RESEND_REJECTED, EscalationReason.RESEND_NOT_SAFE})


@dataclass(frozen=True)
class Escalation:
    """An episode to open about an attempt: ``reason[:qualifier]``, keyed per piece of evidence
    (``per_evidence``: a notification's key joins the episode key, so two alert separately)."""

    reason: EscalationReason
    detail: Mapping[str, Any] = field(default_factory=dict)
    qualifier: str | None = None  # resend-not-safe's failing condition
    per_evidence: bool = True

    @property
    def text(self) -> str:
        """As stored and keyed: ``deadline``, ``resend-not-safe:order-not-payable``."""
        return reason_text(self.reason, self.qualifier)


def reason_text(reason: EscalationReason, qualifier: str | None = None) -> str:
    """An episode's reason as ``payment_escalations.reason`` stores it: the reason, or
    ``<reason>:<qualifier>`` (``resend-not-safe:order-not-payable``,
    ``settlement-exception:<kind>``); the text before any ``:`` is always a member."""
    return reason.value if qualifier is None else f"{reason.value}:{qualifier}"


# -- what a provider said ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """What a piece of evidence says about the payment it describes; ``None``: it does not say.

    ``accounts`` and ``livemodes`` hold every statement of the provider account label and
    mode the evidence makes (a notification's envelope and the payment object inside it
    are two statements, and both must agree).
    """

    provider_payment_id: str | None = None
    reference: str | None = None
    amount_minor: int | None = None
    currency: str | None = None
    accounts: tuple[str, ...] = ()
    livemodes: tuple[bool, ...] = ()

    def as_detail(self) -> dict[str, Any]:
        """For history and escalations: identifiers only, never card data."""
        return {"provider_payment_id": self.provider_payment_id, "reference": self.reference,
                "amount_minor": self.amount_minor, "currency": self.currency,
                "accounts": list(self.accounts), "livemodes": list(self.livemodes)}


@dataclass(frozen=True)
class Verdict:
    """Whether a claim is evidence about an attempt (:func:`paycore.evidence.judge`); ``reason``
    is ``None`` when it is, else one of :data:`EVIDENCE_REASONS`."""

    reason: EscalationReason | None = None
    attribute: str | None = None  # which attribute disagrees: account, environment, reference, ...
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def accepted(self) -> bool:
        return self.reason is None


ACCEPTED = Verdict()


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
    def refused_before_execution(cls, code: str, *, first_send: bool, resend_reason: str,
                                 **kw: Any) -> ProviderOutcome:
        """The provider refused the request before executing it, so nothing was stored under its key
        (a validation error, a rate limit, an authentication failure, where its documentation says
        so). On the attempt's only send that proves nothing happened: NotApplied
        (``rejected:<code>``). On a resend, or an answer replayed from the key, it says nothing about
        the earlier send: Unknown (``resend_reason``). Every provider's client asks here, with the
        answer's ``replayed`` among ``kw`` where its provider says so."""
        if first_send and not kw.get("replayed", False):
            return cls.not_applied(f"rejected:{code}", **kw)
        return cls.unknown(resend_reason, **kw)

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


# -- decide_outcome: what an outcome does to an attempt -------------------------------------------


@dataclass(frozen=True)
class OutcomeWrite:
    """The conditional UPDATE an outcome makes (``apply_outcome``), on the version and state read."""

    target: AttemptState
    provider_status: str | None
    next_action: dict[str, Any] | None
    next_action_expires_at: datetime | None
    outcome_reason: str | None
    provider_payment_id: str | None  # kept when the attempt recorded one already (COALESCE)
    next_check_at: datetime


@dataclass(frozen=True)
class StartWrite:
    """NotStarted -> Started (``mark_started``): the first send's boundary, with its send intent;
    the key window is stamped from the provider account's row in force."""

    next_check_at: datetime


@dataclass(frozen=True)
class CloseWrite:
    """A live attempt closed with no provider outcome: never sent (recovery, only while its lease
    is owned: ``close_never_sent``) or not charged (a person: ``close_as_not_charged``)."""

    target: AttemptState
    outcome_reason: str
    under_lease: bool


Write = OutcomeWrite | StartWrite | CloseWrite


@dataclass(frozen=True)
class Decision:
    """What a ``decide_*`` function decided: executed by :func:`paycore.writer.execute`, shown
    by the operator's preview.

    ``refused``: nothing may be done (the caller says why: ``TransitionRefused``, a conflict, a
    refused close). Else the attempt goes from ``before`` to ``after`` (``write`` None: nothing
    is written), its transition event carrying ``detail`` too, the ``escalations`` are opened,
    on Succeeded the order is marked Paid (``order_paid``; Authorized when ``order_held``: the
    payment holds the amount for a later capture) and ``effects`` are queued in order;
    ``finish_after_s``: a writer holding a lease schedules the next look and releases it in the
    same transaction (escalate and finish).
    """

    before: AttemptState
    after: AttemptState
    write: Write | None = None
    escalations: tuple[Escalation, ...] = ()
    refused: str | None = None
    order_paid: bool = False
    order_held: bool = False  # the payment is a hold: the order is Authorized, not Paid
    effects: tuple[str, ...] = ()
    finish_after_s: float | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)

    @property
    def written(self) -> bool:
        """A new version, even when the state stays (Started -> Started)."""
        return self.write is not None

    @property
    def resolves_escalations(self) -> bool:
        """A final state written resolves the attempt's open escalations."""
        return self.written and self.after in FINAL_STATES


def _refused(attempt: Attempt, why: str) -> Decision:
    return Decision(attempt.state, attempt.state, refused=why)


def decide_start(attempt: Attempt, *, order_payable: bool, next_check_at: datetime) -> Decision:
    """The first send's Started transition for ``attempt`` as the sender read it: only from
    NotStarted, only for an order still payable under its lock (``order-not-payable``)."""
    if attempt.state is not AttemptState.NOT_STARTED:
        return _refused(attempt, "conflict")
    if not order_payable:
        return _refused(attempt, "order-not-payable")
    return Decision(attempt.state, AttemptState.STARTED, StartWrite(next_check_at))


def decide_close_never_sent(attempt: Attempt) -> Decision:
    """Recovery closes an abandoned NotStarted attempt as never sent (NotApplied), under its lease:
    nothing was sent, so nothing can have been charged."""
    target = AttemptState.NOT_APPLIED
    if attempt.state is not AttemptState.NOT_STARTED or not can_transition(attempt.state, target):
        return _refused(attempt, f"attempt {attempt.attempt_id} is {attempt.state.value}, not NotStarted")
    return Decision(attempt.state, target, CloseWrite(target, "never-sent", under_lease=True))


CLOSED_NOT_CHARGED = "operator-closed-not-charged"


def decide_close_not_charged(attempt: Attempt, *, dead_ends: Sequence[int], evidence: Sequence[str],
                             detail: Mapping[str, Any]) -> Decision:
    """A person closes an escalated Unknown attempt as not charged (Failed): only an Unknown attempt,
    only with an open dead-end escalation (``dead_ends``: recovery has given up), only with no
    evidence of a payment anywhere (``evidence``). ``detail`` (who, why, what they checked) goes
    on the transition event."""
    target = AttemptState.FAILED
    if attempt.state is not AttemptState.UNKNOWN or not can_transition(attempt.state, target):
        return _refused(attempt, f"attempt {attempt.attempt_id} is {attempt.state.value}; only an Unknown "
                                 f"attempt can be closed as not charged")
    if not dead_ends:
        return _refused(attempt, f"attempt {attempt.attempt_id} has no open dead-end escalation (deadline, "
                                 f"resend-rejected, resend-not-safe); recovery is still working on it")
    if evidence:
        return _refused(attempt, f"attempt {attempt.attempt_id} has evidence of a payment: "
                                 f"{', '.join(evidence)}; it cannot be closed as not charged")
    return Decision(attempt.state, target, CloseWrite(target, CLOSED_NOT_CHARGED, under_lease=False),
                    detail={**detail, "dead_end_escalations": list(dead_ends)})


def decide_escalation(attempt: Attempt, escalation: Escalation, *, recheck_after_s: float) -> Decision:
    """Recovery asks a person about a live attempt and looks again after ``recheck_after_s`` (escalate
    and finish): no state change, so a concurrent outcome write never retries because of it. A
    settled attempt is nobody's worry: nothing is raised."""
    if attempt.state not in RESOLVABLE_STATES:
        return _refused(attempt, f"attempt {attempt.attempt_id} is {attempt.state.value}")
    return Decision(attempt.state, attempt.state, escalations=(escalation,), finish_after_s=recheck_after_s)


@dataclass(frozen=True)
class OrderFacts:
    """What of the order an outcome's decision needs, read under the order lock."""

    status: OrderStatus
    cancel_requested: bool
    manual_capture: bool = False  # the order asked for its payment to be held for a capture


def decide_outcome(attempt: Attempt, outcome: ProviderOutcome, verdict: Verdict, now: datetime, *,
                   order: OrderFacts, recheck_after_s: float, actor: str,
                   escalated_recheck_after_s: float | None = None) -> Decision:
    """What ``outcome`` (judged ``verdict`` by :func:`paycore.evidence.judge`) does to ``attempt``.

    In this order, every writer of outcomes the same:

    - evidence about another payment resolves nothing and is escalated under the verdict's
      reason, whatever the state; with ``escalated_recheck_after_s`` (a writer holding a lease)
      the next look is scheduled then. An Unknown answer about another payment still counts
      as Unknown, with nothing of that payment on it;
    - a final state never changes; a final outcome that contradicts it is escalated;
    - a NotStarted attempt takes no outcome (only a sender that started it has one);
    - a resend refused before execution stays Unknown and is escalated (never resent);
    - Unknown never overwrites Unknown, nor a Started attempt whose provider status was seen;
    - the transition table decides the rest; a current customer action schedules the next
      look at its expiry if that comes first;
    - Succeeded marks an open order Paid and queues its confirmation, and its fulfilment
      unless the customer cancelled after the send intent (then a person is told).
    """
    raised: list[Escalation] = []
    finish_after_s: float | None = None
    state = attempt.state
    if not verdict.accepted:
        assert verdict.reason is not None
        raised.append(Escalation(verdict.reason, {**verdict.detail, "actor": actor}))
        finish_after_s = escalated_recheck_after_s
        if outcome.kind is not OutcomeKind.UNKNOWN or state in FINAL_STATES:
            return Decision(state, state, escalations=tuple(raised), finish_after_s=finish_after_s)
        outcome = dataclasses.replace(outcome, claim=None, provider_payment_id=None, provider_status=None)

    target = outcome.target_state
    if state in FINAL_STATES:
        if hold_ended(attempt, outcome):
            # The hold was captured, voided or lapsed: its operations (and the lapse task) say
            # what that does; the payment's own record stays what it was.
            return Decision(state, state, escalations=tuple(raised), finish_after_s=finish_after_s)
        if outcome.is_final and target is not state:
            raised.append(Escalation(EscalationReason.CONTRADICTION,
                                     {"recorded": state.value, "reported": target.value, "actor": actor}))
        return Decision(state, state, escalations=tuple(raised), finish_after_s=finish_after_s)
    if state is AttemptState.NOT_STARTED:
        return Decision(state, state, refused=f"attempt {attempt.attempt_id} is NotStarted; no outcome can "
                                              f"be recorded")

    if outcome.kind is OutcomeKind.UNKNOWN and outcome.request_rejected:
        detail = {"reason": outcome.reason, "http_status": outcome.http_status, "actor": actor}
        raised.append(Escalation(EscalationReason.RESEND_REJECTED, detail, per_evidence=False))
    if outcome.kind is OutcomeKind.UNKNOWN and (state is AttemptState.UNKNOWN
                                               or attempt.provider_status is not None):
        return Decision(state, state, escalations=tuple(raised), finish_after_s=finish_after_s)
    if not can_transition(state, target):
        return Decision(state, state, refused=f"transition {state} -> {target} is not allowed")

    next_check_at = now + timedelta(seconds=recheck_after_s)
    expires_at = outcome.next_action_expires_at
    keeps_action = outcome.kind is OutcomeKind.REQUIRES_ACTION
    if keeps_action and expires_at is not None and expires_at > now:
        # An action already expired keeps the ordinary delay rather than a zero one.
        next_check_at = min(next_check_at, expires_at)
    write = OutcomeWrite(
        target=target, provider_status=outcome.provider_status,
        next_action=outcome.next_action if keeps_action else None,
        next_action_expires_at=expires_at if keeps_action else None,
        outcome_reason=outcome.reason, provider_payment_id=outcome.provider_payment_id,
        next_check_at=next_check_at)
    held = target is AttemptState.SUCCEEDED and (order.manual_capture
                                                 or outcome.provider_status == HOLD_STATUS)
    if held:
        # A hold, whatever the provider calls its success (Adyen says "Authorised" for both):
        # the order asked for one, and every reader of the attempt knows it by this status.
        write = dataclasses.replace(write, provider_status=HOLD_STATUS)
    if target is not AttemptState.SUCCEEDED:
        return Decision(state, target, write, tuple(raised), finish_after_s=finish_after_s)
    fulfil = order.status is OrderStatus.OPEN and not order.cancel_requested
    if not fulfil:
        # The customer cancelled after the send intent: the charge stands, and a refund is
        # its own operation, decided by a person.
        raised.append(Escalation(EscalationReason.SUCCEEDED_AFTER_CANCEL, {"order_id": attempt.order_id},
                                 per_evidence=False))
    return Decision(state, target, write, tuple(raised), order_paid=order.status is OrderStatus.OPEN,
                    order_held=held,
                    effects=("order-confirmation", *(("fulfillment-request",) if fulfil else ())),
                    finish_after_s=finish_after_s)


def hold_ended(attempt: Attempt, outcome: ProviderOutcome) -> bool:
    """Whether ``outcome`` only says that a Succeeded hold ended: charged (a capture made the
    payment ``succeeded``) or released (a void or a lapse made it ``canceled``). Neither
    contradicts the payment's Succeeded: the hold's operations record what happened to it."""
    if attempt.state is not AttemptState.SUCCEEDED or attempt.provider_status != HOLD_STATUS:
        return False
    if outcome.provider_payment_id is not None and outcome.provider_payment_id != attempt.provider_payment_id:
        return False
    return outcome.kind is OutcomeKind.SUCCEEDED or (
        outcome.kind is OutcomeKind.FAILED and outcome.provider_status == HOLD_RELEASED_STATUS)


# -- decide_pass: one recovery pass over a claimed attempt ----------------------------------------


class PassKind(enum.StrEnum):
    """The kinds of stuck work recovery rescues; each has its own rescuer (in the recovery service)."""

    NOT_STARTED = "not-started"  # recorded, never moved to Started: closed once abandoned
    CUSTOMER_ACTION = "customer-action"  # Started, the customer's action current: never resent
    SETTLING = "settling"  # Started, its send's answer may still arrive: wait
    UNKNOWN = "unknown"  # Unknown, or a stalled Started attempt: look up, then resend or escalate


def kind_of(attempt: Attempt, now: datetime, settle_s: float) -> PassKind:
    """Which rescuer a claimed attempt goes to. An expired or superseded action proves nothing and
    permits no resend: such an attempt is reconciled like an Unknown one."""
    if attempt.state is AttemptState.NOT_STARTED:
        return PassKind.NOT_STARTED
    if attempt.action_is_current(now):
        return PassKind.CUSTOMER_ACTION
    sent = attempt.first_sent_at
    if attempt.state is AttemptState.STARTED and attempt.next_action is None and sent is not None \
            and now < sent + timedelta(seconds=settle_s):
        return PassKind.SETTLING
    return PassKind.UNKNOWN


@dataclass(frozen=True)
class Timing:
    """Recovery's policy numbers, as a pass needs them (the recovery service's settings)."""

    abandonment_s: float  # a NotStarted attempt this old is closed as never sent
    settle_s: float  # a Started attempt's answer may still come this long after its first send
    action_poll_s: float  # how often a pending customer action is looked at
    slow_cadence_s: float  # the read-only cadence after the backoff, and of escalated attempts
    backoff_s: tuple[float, ...]  # delays after the 1st, 2nd, … lookup

    def backoff(self, step: int) -> float:
        """The delay after ``step`` earlier lookups, then the slow cadence."""
        return self.backoff_s[step] if step < len(self.backoff_s) else self.slow_cadence_s


LookupKind = str  # found | not_found | failed | rate_limited | unsupported (providers.base.LookupResult)


@dataclass(frozen=True)
class Lookups:
    """What a pass's lookups said: the deciding one's kind, the distinct payments it found, the
    retry delay of a 429, and when a miss by reference will prove something (search lag)."""

    kind: LookupKind
    payment_ids: tuple[str, ...] = ()
    retry_after_s: float | None = None
    inconclusive_until: datetime | None = None


@dataclass(frozen=True)
class PassFacts:
    """What a pass has gathered so far (``None``: not yet). :func:`decide_pass` asks for the next."""

    account_configured: bool = True
    lookups_so_far: int | None = None  # from the attempt's history (with the scope's pause)
    paused_until: datetime | None = None
    lookups: Lookups | None = None
    action_status: Lookups | None = None  # a current action without expiry, looked up by id
    resend_was_rejected: bool | None = None
    failing_resend_condition: str | None = None  # a resend condition that fails: its name
    resend_conditions_checked: bool = False
    lost_close_to: Attempt | None = None  # the endpoint started it while recovery closed it


class Step(enum.StrEnum):
    """What a pass does next: a fact to gather, or an act that ends the pass."""

    # Gather, then decide again.
    READ_HISTORY = "read-history"  # lookups so far and the scope's pause
    LOOK_UP = "look-up"  # by recorded payment id, then by reference
    LOOK_UP_ACTION = "look-up-action"  # a current action without expiry: by payment id
    CHECK_RESEND = "check-resend"  # an earlier rejected resend, then the resend conditions
    # Act.
    CLOSE_NEVER_SENT = "close-never-sent"
    FINISH = "finish"  # schedule the next look, release the lease
    ESCALATE = "escalate"  # open the episode, schedule, release: one transaction
    APPLY = "apply"  # the found payment through the one writer of outcomes
    PAUSE = "pause"  # the account's lookups pause (a 429), then finish
    RESEND = "resend"  # the stored request, under its key, inside its window
    DONE = "done"  # nothing more: what happened is written


class Pass(enum.StrEnum):
    """How one claimed pass over an attempt ended: what a sweep returns, what the tests assert."""

    NOT_CLAIMED = "not-claimed"
    CLOSED_NEVER_SENT = "closed-never-sent"
    RESCHEDULED = "rescheduled"
    INCONCLUSIVE = "inconclusive"  # a miss by reference inside the search lag: looked at again after it
    RESOLVED = "resolved"
    OBSERVED = "observed"  # processing / customer action recorded, still live
    ESCALATED = "escalated"
    LOOKUP_FAILED = "lookup-failed"
    PAUSED = "paused"
    RESENT = "resent"
    INTENT_REFUSED = "intent-refused"
    INTENT_UNKNOWN = "intent-unknown"
    ABANDONED = "abandoned"
    FAILED = "failed"  # this pass raised; logged, counted, and the lease left to expire


@dataclass(frozen=True)
class PassDecision:
    """:func:`decide_pass`'s answer: the ``step``, with the delay of the next look, the escalation,
    and how the pass ends when it does."""

    step: Step
    delay_s: float = 0.0
    escalation: Escalation | None = None
    result: Pass | None = None  # None: a fact to gather first


def _finish(delay_s: float, result: Pass) -> PassDecision:
    return PassDecision(Step.FINISH, max(delay_s, 0.0), result=result)


def _escalate(reason: EscalationReason, delay_s: float, *, qualifier: str | None = None,
              detail: Mapping[str, Any] | None = None) -> PassDecision:
    return PassDecision(Step.ESCALATE, delay_s, Escalation(reason, detail or {}, qualifier), Pass.ESCALATED)


def action_delay(attempt: Attempt, now: datetime, timing: Timing) -> float:
    """When to look at a pending customer action again: the poll, or its expiry if sooner."""
    if attempt.next_action_expires_at is None:
        return timing.action_poll_s
    return min((attempt.next_action_expires_at - now).total_seconds(), timing.action_poll_s)


def decide_pass(attempt: Attempt, facts: PassFacts, now: datetime, timing: Timing) -> PassDecision:
    """The reference's pass over one claimed attempt, as a table: what to gather or do next.

    The rescuer gathers what is asked (``READ_HISTORY``, ``LOOK_UP``, …), adds it to ``facts``
    and asks again (with a fresh ``now``), until an act ends the pass. Recovery never creates an
    attempt and never sends anything but the stored request under its own key, never for a
    NotStarted attempt, never while a customer action is pending, never past the deadline.
    """
    kind = kind_of(attempt, now, timing.settle_s)
    if kind is PassKind.NOT_STARTED:
        return _decide_not_started(attempt, facts, now, timing)
    if kind is PassKind.CUSTOMER_ACTION:
        return _decide_customer_action(attempt, facts, now, timing)
    if kind is PassKind.SETTLING:
        assert attempt.first_sent_at is not None
        settled_at = attempt.first_sent_at + timedelta(seconds=timing.settle_s)
        return _finish((settled_at - now).total_seconds(), Pass.RESCHEDULED)
    return _decide_unknown(attempt, facts, now, timing)


def _decide_not_started(attempt: Attempt, facts: PassFacts, now: datetime, timing: Timing) -> PassDecision:
    age = (now - attempt.created_at).total_seconds()
    if age < timing.abandonment_s:
        # The endpoint is about to send it; recovery never sends a first attempt.
        return _finish(timing.abandonment_s - age, Pass.RESCHEDULED)
    current = facts.lost_close_to
    if current is None:
        return PassDecision(Step.CLOSE_NEVER_SENT, result=Pass.CLOSED_NEVER_SENT)
    # The endpoint started it first: schedule it for its new state, once.
    if current.is_live:
        started = current.state is AttemptState.STARTED
        return _finish(timing.settle_s if started else timing.backoff(0), Pass.RESCHEDULED)
    return PassDecision(Step.DONE, result=Pass.RESCHEDULED)


def _decide_customer_action(attempt: Attempt, facts: PassFacts, now: datetime,
                            timing: Timing) -> PassDecision:
    # Never resend: the customer's step is pending. The key window closes whether or not they act.
    waiting = _escalate(EscalationReason.DEADLINE, action_delay(attempt, now, timing)) \
        if attempt.past_deadline(now) else _finish(action_delay(attempt, now, timing), Pass.RESCHEDULED)
    if attempt.past_deadline(now) or attempt.next_action_expires_at is not None \
            or attempt.provider_payment_id is None:
        return waiting
    # An action whose provider states no expiry (Stripe's next_action) never expires by itself:
    # look it up by its payment id at each poll. A provider that cannot be asked, or does not
    # answer, leaves it waiting.
    status = facts.action_status
    if status is None:
        return PassDecision(Step.LOOK_UP_ACTION)
    if status.kind == "found":
        return PassDecision(Step.APPLY, action_delay(attempt, now, timing), result=Pass.OBSERVED)
    return waiting


def _decide_unknown(attempt: Attempt, facts: PassFacts, now: datetime, timing: Timing) -> PassDecision:
    slow = timing.slow_cadence_s
    if facts.lookups_so_far is None:
        return PassDecision(Step.READ_HISTORY)
    if not facts.account_configured:
        # No credentials to look it up or resend it: a person must restore the account.
        return _escalate(EscalationReason.RESEND_NOT_SAFE, slow, qualifier="account-not-configured")
    backoff = timing.backoff(facts.lookups_so_far)
    if facts.paused_until is not None:
        return _finish((facts.paused_until - now).total_seconds(), Pass.PAUSED)

    found = facts.lookups
    if found is None:
        return PassDecision(Step.LOOK_UP)
    if found.kind == "found":
        if len(found.payment_ids) > 1:
            # Several provider payments for one attempt's reference: a person must look.
            return _escalate(EscalationReason.MULTIPLE_PAYMENTS, slow,
                             detail={"provider_payment_ids": list(found.payment_ids)})
        return PassDecision(Step.APPLY, backoff, result=Pass.RESOLVED)
    if found.kind == "failed":
        # Not "not found": the attempt stays as it is. Past the deadline a person must know even
        # while the provider cannot answer; the lookups go on, on the slow read-only cadence.
        if attempt.past_deadline(now):
            return PassDecision(Step.ESCALATE, slow, Escalation(EscalationReason.DEADLINE),
                                Pass.LOOKUP_FAILED)
        return _finish(backoff, Pass.LOOKUP_FAILED)
    if found.kind == "rate_limited":
        # Pause this rate-limit scope only (the account); other accounts go on.
        return PassDecision(Step.PAUSE, found.retry_after_s or 1.0, result=Pass.PAUSED)

    # Not found, or no lookup by reference (then only a notification or a same-key resend inside
    # the key window can tell): it stays Unknown.
    if attempt.past_deadline(now):
        # Past the safe cutoff: send nothing, under any key; keep looking on the slow cadence.
        # (A miss inside the search lag changes nothing here: the deadline is time, not evidence.)
        return _escalate(EscalationReason.DEADLINE, slow)
    if found.inconclusive_until is not None and found.kind == "not_found":
        # The search lag: a payment the last send created may not be indexed yet, so this miss is
        # no evidence that the request never arrived. Conclude nothing -- no resend, no
        # resend-rejected or resend-not-safe escalation (each presumes "not found") -- and look
        # again when the miss will be conclusive, or at the deadline if that is sooner.
        assert attempt.escalation_deadline is not None
        again = min(found.inconclusive_until, attempt.escalation_deadline)
        return _finish((again - now).total_seconds(), Pass.INCONCLUSIVE)
    if not facts.resend_conditions_checked:
        return PassDecision(Step.CHECK_RESEND)
    if facts.resend_was_rejected:
        # An earlier resend of these bytes was refused before execution: never again.
        return _escalate(EscalationReason.RESEND_REJECTED, slow)
    if facts.failing_resend_condition is not None:
        return _escalate(EscalationReason.RESEND_NOT_SAFE, slow, qualifier=facts.failing_resend_condition)
    return PassDecision(Step.RESEND, backoff, result=Pass.RESENT)
