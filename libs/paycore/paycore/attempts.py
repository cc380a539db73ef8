"""The attempt repository: where an attempt is created, started and resolved.

Every function here is one short transaction, and every state change is
conditional on the state and version read. Lock order is fixed: the order row,
then the attempt row, then escalation, event and outbox rows. This module is
the one place where ``Unknown`` becomes ``Succeeded`` (:func:`record_outcome`),
whichever writer brought the evidence: the checkout endpoint, the notification
handler or the recovery loop.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg

from paycore import leases
from paycore.attempt_row import ATTEMPTS, Attempt, get_attempt
from paycore.config import ProviderAccountConfig
from paycore.db import transaction_on
from paycore.domain import (
    RESOLVABLE_STATES,
    AttemptState,
    OrderFacts,
    ProviderOutcome,
    Verdict,
    decide_close_never_sent,
    decide_outcome,
    decide_start,
)
from paycore.errors import OutcomeNotConfirmed, TransitionRefused
from paycore.events import EventKind, append_event, append_events
from paycore.evidence import judge
from paycore.leases import Lease
from paycore.orders import OrderNotPayable, lock_order, lock_order_of_attempt
from paycore.writer import Escalator, History, LostRace, execute

__all__ = [
    "Attempt", "IntentResult", "OutcomeNotConfirmed", "OutcomeResult", "StartResult", "apply_outcome",
    "close_never_sent", "commit_send_intent", "find_by_reference_and_payment_id", "get_attempt",
    "get_or_create_live_attempt", "judge_outcome", "latest_attempt", "record_outcome",
    "record_send_abandoned", "try_mark_started",
]

log = logging.getLogger("paycore.attempts")

# The statements are paycore/queries/payment_attempts.sql's (ATTEMPTS).

MAX_REAPPLY = 5


class StartResult(enum.Enum):
    STARTED = "started"  # this caller moved NotStarted -> Started and may send
    CONFLICT = "conflict"  # confirmed conditional miss: another writer moved it
    ORDER_NOT_PAYABLE = "order-not-payable"  # cancelled or paid under the order lock


async def latest_attempt(
    conn: asyncpg.Connection | asyncpg.Pool, order_id: str, customer_id: str
) -> Attempt | None:
    """The order's most recent attempt for this customer (observation only)."""
    row = await ATTEMPTS.latest_of_customer.fetchrow(conn, order_id=order_id, customer_id=customer_id)
    return Attempt.from_record(row) if row is not None else None


async def find_by_reference_and_payment_id(
    conn: asyncpg.Connection, provider_account: str, reference: str | None, provider_payment_id: str | None
) -> tuple[Attempt | None, Attempt | None]:
    """The attempts this account's client reference and provider payment id identify, independently.

    Returns ``(by_reference, by_payment_id)``; both are the same attempt when
    the identities agree, and two different attempts are an identity conflict
    for the caller to escalate.
    """
    rows = await ATTEMPTS.by_reference_or_payment_id.fetch(
        conn, account=provider_account, reference=reference, payment_id=provider_payment_id)
    found = [Attempt.from_record(row) for row in rows]
    by_reference = next((a for a in found if reference is not None and a.client_reference == reference), None)
    by_payment_id = next((a for a in found if provider_payment_id is not None
                          and a.provider_payment_id == provider_payment_id), None)
    return by_reference, by_payment_id


BodyBuilder = Callable[[str, int, str], str]
"""(client_reference, amount_minor, currency) -> the serialized request body."""


async def get_or_create_live_attempt(
    pool: asyncpg.Pool,
    *,
    order_id: str,
    customer_id: str,
    account: ProviderAccountConfig,
    build_body: BodyBuilder,
    now: datetime,
    abandonment_threshold_s: float,
    actor: str = "endpoint",
) -> Attempt:
    """Return the order's live attempt, or record attempt N+1 (NotStarted) with a new key.

    Runs under the order lock, so a double click, second tab or browser retry
    gets the same attempt. Raises :class:`~paycore.orders.OrderNotFound` for
    another customer's order and :class:`~paycore.orders.OrderNotPayable` for a
    paid or cancelled one. A writer that skipped the order lock can still win
    the partial unique index; then ``ON CONFLICT … DO NOTHING`` returns no row,
    the transaction is still usable, and the winner is reloaded.
    """
    async with pool.acquire() as conn, conn.transaction():
        order = await lock_order(conn, order_id, customer_id)
        live = await ATTEMPTS.live_of_order.fetchrow(conn, order_id=order_id)
        if live is not None:
            return Attempt.from_record(live)
        why = order.not_payable_reason
        if why is not None:
            raise OrderNotPayable(order_id, why)
        number: int = await ATTEMPTS.next_attempt_number.fetchval(conn, order_id=order_id)
        reference = f"{order_id}-a{number}"
        row = await ATTEMPTS.insert_live.fetchrow(
            conn, attempt_id=uuid.uuid4(), order_id=order_id, customer_id=customer_id, attempt_number=number,
            account=account.provider_account, endpoint=account.payments_endpoint,
            api_version=account.api_version, reference=reference,
            idempotency_key=str(uuid.uuid4()),  # the attempt's idempotency key: generated once, here
            request_body=build_body(reference, order.amount_minor, order.currency),
            amount_minor=order.amount_minor, currency=order.currency, now=now,
            next_check_at=now + timedelta(seconds=abandonment_threshold_s))
        if row is None:
            winner = await ATTEMPTS.live_of_order.fetchrow(conn, order_id=order_id)
            if winner is None:  # the winner already left the live states; let the caller retry
                raise OutcomeNotConfirmed(f"live attempt for {order_id} changed during insert")
            return Attempt.from_record(winner)
        attempt = Attempt.from_record(row)
        await append_event(
            conn, attempt_id=attempt.attempt_id, kind=EventKind.TRANSITION, actor=actor, now=now,
            detail={"from": None, "to": AttemptState.NOT_STARTED.value, "attempt_number": number},
        )
        return attempt


async def try_mark_started(
    pool: asyncpg.Pool,
    attempt: Attempt,
    *,
    now: datetime,
    next_check_at: datetime,
    actor: str = "endpoint",
) -> tuple[StartResult, Attempt | None]:
    """Move ``attempt`` NotStarted -> Started on the version its sender read, and commit the send
    intent (:func:`paycore.domain.decide_start`, executed by :func:`paycore.writer.execute`).

    Stamps ``first_sent_at``, the escalation deadline from the provider
    account's configuration in force now, and ``next_check_at``; re-checks under
    the order lock that the order is still payable. Exactly one caller gets
    ``STARTED``; a caller whose version is stale gets ``CONFLICT`` even when the
    order has meanwhile been paid, so it reports the attempt rather than
    refusing. A database failure or unconfirmed commit raises: the write may
    have committed, so the caller reloads the durable state.
    """
    async with pool.acquire() as conn, conn.transaction():
        order = await lock_order_of_attempt(conn, attempt.attempt_id)
        decision = decide_start(attempt, order_payable=order.not_payable_reason is None,
                                next_check_at=next_check_at)
        if decision.refused == "order-not-payable":
            # The attempt's own version decides first: when another caller already
            # started it (and perhaps paid the order), this caller only reports.
            current = await get_attempt(conn, attempt.attempt_id)
            if current.version != attempt.version or current.state is not AttemptState.NOT_STARTED:
                return StartResult.CONFLICT, None
            return StartResult.ORDER_NOT_PAYABLE, None
        if decision.refused is not None:
            return StartResult.CONFLICT, None
        history: History = []
        try:
            started = (await execute(conn, attempt, decision, now=now, actor=actor, history=history)).attempt
        except LostRace:
            return StartResult.CONFLICT, None
        assert started is not None
        await append_events(conn, attempt_id=attempt.attempt_id, actor=actor, now=now, events=history)
        return StartResult.STARTED, started


def _send_result_detail(outcome: ProviderOutcome) -> dict[str, Any]:
    detail = {
        "outcome": outcome.kind.value,
        "reason": outcome.reason,
        "http_status": outcome.http_status,
        "replayed": outcome.replayed,
        "provider_payment_id": outcome.provider_payment_id,
        "provider_status": outcome.provider_status,
        "request_rejected": outcome.request_rejected,
    }
    if "reported_payment" in outcome.detail:  # an answer about another payment: what it said
        detail["reported_payment"] = outcome.detail["reported_payment"]
    return detail


@dataclass(frozen=True)
class OutcomeResult:
    """What an outcome write leaves: the durable attempt, and the verdict on the evidence it brought."""

    attempt: Attempt
    verdict: Verdict
    # Whether this write moved the attempt (a new version): it then also scheduled the next
    # check and released a lease the writer presented and still owned.
    written: bool = False


async def record_outcome(
    pool: asyncpg.Pool,
    attempt_id: UUID,
    outcome: ProviderOutcome,
    *,
    now: datetime,
    actor: str,
    recheck_after_s: float,
    reminder_interval: timedelta,
    from_send: bool = True,
    lease: Lease | None = None,
    escalated_recheck_after_s: float | None = None,
    evidence_key: str | None = None,
    max_reapply: int = MAX_REAPPLY,
    evidence_events: Sequence[tuple[EventKind, dict[str, Any]]] = (),
) -> OutcomeResult:
    """Record a provider outcome in its own transaction; see :func:`apply_outcome`.

    This writer owns its transaction, so a lost race rolls the whole transaction back and
    reapplies in a new one, with no savepoint around each try (two round trips fewer).
    ``evidence_events`` (recovery's lookups that found this outcome) are appended in the same
    transaction, ahead of the write's own events, whatever the write decides; a write that
    raises appends none of them.
    """
    return await _apply(
        pool, attempt_id, outcome, now=now, actor=actor, recheck_after_s=recheck_after_s,
        reminder_interval=reminder_interval, from_send=from_send, lease=lease,
        escalated_recheck_after_s=escalated_recheck_after_s, evidence_key=evidence_key,
        max_reapply=max_reapply, evidence_events=evidence_events,
    )


async def apply_outcome(
    conn: asyncpg.Connection,
    attempt_id: UUID,
    outcome: ProviderOutcome,
    *,
    now: datetime,
    actor: str,
    recheck_after_s: float,
    reminder_interval: timedelta,
    from_send: bool = True,
    lease: Lease | None = None,
    escalated_recheck_after_s: float | None = None,
    evidence_key: str | None = None,
    max_reapply: int = MAX_REAPPLY,
) -> OutcomeResult:
    """Apply a provider outcome to a Started or Unknown attempt: the one writer of outcomes.

    Runs inside the caller's transaction (the notification handler records its
    notification in the same one), each try in a savepoint. Conditional on the
    state and version read:

    - the evidence is judged first (:mod:`paycore.evidence`): a payment id other
      than the recorded one or owned by another attempt, or an account, mode,
      reference, amount or currency that is not the attempt's, resolves nothing
      and is escalated under the verdict's reason, whatever the attempt's state;
      given a ``lease`` and ``escalated_recheck_after_s``, the next check is
      scheduled and the lease released in the same transaction (escalate and
      finish). An Unknown answer about another payment still records Unknown,
      never that payment's id;
    - a final winner (a notification or lookup got there first) is returned
      unchanged; a final outcome that contradicts it is escalated, never written;
    - ``Unknown`` never overwrites a known outcome, nor a Started attempt whose
      provider status was observed;
    - a resend refused before execution (``outcome.request_rejected``) stays
      Unknown and is escalated ``resend-rejected``: the same bytes would be
      refused again, so recovery stops resending;
    - on ``Succeeded`` the order is marked Paid and the effect-keyed outbox rows
      ``attempt:<id>:order-confirmation`` and ``attempt:<id>:fulfillment-request``
      are queued; any final outcome resolves the attempt's open escalations;
    - losing a race to a Started or Unknown winner rolls back that try's
      savepoint only and reapplies against the new version, in at most
      ``max_reapply`` tries in all, then raises :class:`OutcomeNotConfirmed`.
      Constraint violations are not retried.

    ``from_send`` appends a ``send_result`` event (the answer to a send this
    writer made). A matching ``lease`` is released in the same write.
    """
    return await _apply(
        conn, attempt_id, outcome, now=now, actor=actor, recheck_after_s=recheck_after_s,
        reminder_interval=reminder_interval, from_send=from_send, lease=lease,
        escalated_recheck_after_s=escalated_recheck_after_s, evidence_key=evidence_key,
        max_reapply=max_reapply,
    )


async def _apply(
    db: asyncpg.Pool | asyncpg.Connection,
    attempt_id: UUID,
    outcome: ProviderOutcome,
    *,
    now: datetime,
    actor: str,
    recheck_after_s: float,
    reminder_interval: timedelta,
    from_send: bool,
    lease: Lease | None,
    escalated_recheck_after_s: float | None,
    evidence_key: str | None,
    max_reapply: int,
    evidence_events: Sequence[tuple[EventKind, dict[str, Any]]] = (),
) -> OutcomeResult:
    """Tries of :func:`_apply_once` until one does not lose a race, at most ``max_reapply``.

    Each try is one transaction on a pool's connection (:func:`record_outcome`) or a
    savepoint in the caller's (:func:`apply_outcome`), so a lost race rolls back that try
    only, its events included; a caller's earlier writes, such as a notification record,
    stay. A try's history events are appended together, in the order they happened, after
    its writes (one round trip; a try that raises appends nothing).
    """
    for _ in range(max_reapply):
        try:
            async with transaction_on(db) as conn:
                history: list[tuple[EventKind, dict[str, Any]]] = list(evidence_events)
                result = await _apply_once(
                    conn, attempt_id, outcome, now=now, actor=actor, recheck_after_s=recheck_after_s,
                    from_send=from_send, lease=lease, escalated_recheck_after_s=escalated_recheck_after_s,
                    escalator=Escalator(conn, attempt_id, now, evidence_key, reminder_interval),
                    history=history,
                )
                await append_events(conn, attempt_id=attempt_id, actor=actor, now=now, events=history)
                return result
        except LostRace:
            log.info("outcome write for %s lost a race; reapplying", attempt_id)
    raise OutcomeNotConfirmed(f"attempt {attempt_id}: outcome not confirmed after {max_reapply} tries")


async def _apply_once(
    conn: asyncpg.Connection,
    attempt_id: UUID,
    outcome: ProviderOutcome,
    *,
    now: datetime,
    actor: str,
    recheck_after_s: float,
    from_send: bool,
    lease: Lease | None,
    escalated_recheck_after_s: float | None,
    escalator: Escalator,
    history: list[tuple[EventKind, dict[str, Any]]],
) -> OutcomeResult:
    """One try of :func:`apply_outcome`: read under the order lock, judge, decide
    (:func:`paycore.domain.decide_outcome`), execute (:func:`paycore.writer.execute`);
    its events added to ``history``. Raises :class:`~paycore.writer.LostRace` to roll back and
    reapply."""
    order = await lock_order_of_attempt(conn, attempt_id)
    attempt = await get_attempt(conn, attempt_id)
    if from_send:
        history.append((EventKind.SEND_RESULT, _send_result_detail(outcome)))
    verdict = await judge_outcome(conn, attempt, outcome)
    decision = decide_outcome(
        attempt, outcome, verdict, now, order=OrderFacts(order.status, order.cancel_requested_at is not None,
                                          order.capture == "manual"),
        recheck_after_s=recheck_after_s, actor=actor,
        escalated_recheck_after_s=escalated_recheck_after_s if lease is not None else None)
    if decision.refused is not None:
        raise TransitionRefused(decision.refused)
    updated = (await execute(conn, attempt, decision, now=now, actor=actor, lease=lease, escalator=escalator,
                             history=history)).attempt
    return OutcomeResult(updated or attempt, verdict, written=updated is not None)


async def judge_outcome(conn: asyncpg.Connection | asyncpg.Pool, attempt: Attempt,
                        outcome: ProviderOutcome) -> Verdict:
    """:func:`paycore.evidence.judge` for this outcome, with the owner of its payment id looked up."""
    claim = outcome.evidence()
    pid = claim.provider_payment_id
    # An id this attempt already recorded is its own: the unique index
    # (provider_account, provider_payment_id) admits no other owner.
    owner = None
    if pid is not None and pid != attempt.provider_payment_id:
        owner = await ATTEMPTS.payment_id_owner.fetchval(
            conn, account=attempt.provider_account, payment_id=pid, attempt_id=attempt.attempt_id)
    return judge(attempt, claim, recorded_payment_id=attempt.provider_payment_id, payment_id_owner=owner)


# -- recovery's writes: closing a never-sent attempt, committing a resend's intent --------------

async def close_never_sent(pool: asyncpg.Pool, attempt: Attempt, lease: Lease, now: datetime,
                           actor: str) -> Attempt | None:
    """NotStarted -> NotApplied(never-sent), releasing the lease (:func:`paycore.domain.
    decide_close_never_sent`); ``None`` if the endpoint's Started transition won."""
    decision = decide_close_never_sent(attempt)
    if decision.refused is not None:
        return None
    async with pool.acquire() as conn, conn.transaction():
        await lock_order(conn, attempt.order_id)  # the endpoint's Started transition takes it too
        history: History = []
        try:
            closed = (await execute(conn, attempt, decision, now=now, actor=actor, lease=lease,
                                     history=history)).attempt
        except LostRace:
            return None
        await append_events(conn, attempt_id=attempt.attempt_id, actor=actor, now=now, events=history)
        return closed


class IntentResult(enum.Enum):
    COMMITTED = "committed"
    REFUSED = "refused"  # confirmed not committed: nothing may be sent this cycle


async def commit_send_intent(
    pool: asyncpg.Pool, attempt: Attempt, lease: Lease, now: datetime, actor: str
) -> tuple[IntentResult, str | None]:
    """Commit a resend's ``send_intent`` under the order lock, or refuse it.

    Requires that this worker owns the lease, the order is still payable, the
    attempt is still sendable (Started or Unknown, unchanged since it was read),
    and ``now`` is before the stamped escalation deadline. A database error or an
    unconfirmed commit raises: the caller must not send and must not finish.
    """
    async with pool.acquire() as conn, conn.transaction():
        order = await lock_order(conn, attempt.order_id)
        if order.not_payable_reason is not None:
            return IntentResult.REFUSED, "order-not-payable"
        current = await leases.lock_owned(conn, attempt.attempt_id, lease, now)
        if current is None:
            return IntentResult.REFUSED, "lease-lost"
        if current.state not in RESOLVABLE_STATES:
            return IntentResult.REFUSED, "not-sendable"
        if current.version != attempt.version:
            return IntentResult.REFUSED, "changed"
        if current.past_deadline(now):
            return IntentResult.REFUSED, "deadline-passed"
        await append_event(
            conn, attempt_id=attempt.attempt_id, kind=EventKind.SEND_INTENT, actor=actor, now=now,
            detail={"endpoint": current.endpoint, "api_version": current.api_version,
                    "provider_account": current.provider_account, "first_send": False,
                    "lease_token": str(lease.token)},
        )
        return IntentResult.COMMITTED, None


async def record_send_abandoned(pool: asyncpg.Pool, attempt_id: UUID, now: datetime, actor: str,
                                why: str) -> None:
    """This worker chose not to dispatch after its intent; it proves nothing about the payment."""
    async with pool.acquire() as conn:
        await append_event(conn, attempt_id=attempt_id, kind=EventKind.SEND_ABANDONED, actor=actor,
                           now=now, detail={"why": why})
