"""What counts as evidence about an attempt: one module, one vocabulary of reasons.

A provider's answer, a lookup or a notification says things about a payment: its
id, the reference it carries, its amount and currency, and (often) the account
and mode it belongs to. It is evidence about an attempt only when every one of
those agrees with the attempt (whose account and mode come from the verified
provider account, never from the payload) and no other attempt owns its payment
id. Anything else is evidence about a *different* payment: it resolves nothing,
records nothing on the attempt, and a person is told.

:func:`judge` is pure and is the only place that decides it. The provider client
uses it to never hand a foreign payment's id or status back as this attempt's;
:func:`paycore.attempts.apply_outcome`, the one writer of outcomes, enforces it
and escalates a rejected verdict under its reason; the webhook handler and the
recovery loop ask the same question to say what happened. Before any attempt is
chosen, :func:`identify` decides which attempt a notification's two identities
name (the webhook handler matches each independently).

The claim and the verdict are values of :mod:`paycore.domain`, and the reasons are the
evidence reasons of its one vocabulary, :class:`paycore.domain.EscalationReason` (each an
escalation reason, ``attempt:<id>:<reason>[:<evidence key>]``):

========================  ==================================================================
``mismatch``              the payment's account, environment, reference, amount or
                          currency is not the attempt's (``attribute`` says which)
``provider-id-conflict``  the payment id is not the one the attempt recorded, or another
                          attempt of the account owns it, or the payment the recorded id
                          names carries another reference (the recorded id may be wrong)
``identity-conflict``     a notification's reference and payment id identify two different
                          attempts (decided when matching, before any attempt is chosen)
``multiple-provider-payments``  a lookup found several payments for one attempt's reference
========================  ==================================================================
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar
from uuid import UUID

from paycore.domain import ACCEPTED, Claim, EscalationReason, Verdict


class Subject(Protocol):
    """What evidence is judged against: an attempt (or the stored request of one)."""

    @property
    def attempt_id(self) -> UUID: ...
    @property
    def provider_account(self) -> str: ...  # 'cardco:acct_store:test': provider, account label, mode
    @property
    def client_reference(self) -> str: ...
    @property
    def amount_minor(self) -> int: ...
    @property
    def currency(self) -> str: ...


def account_and_mode(provider_account: str) -> tuple[str, bool]:
    """The account label and whether it is live, from ``provider:account:environment``."""
    _, account, environment = provider_account.rsplit(":", 2)
    return account, environment == "live"


def judge(subject: Subject, claim: Claim, *, recorded_payment_id: str | None = None,
          payment_id_owner: UUID | None = None) -> Verdict:
    """Whether ``claim`` is evidence about ``subject``.

    :param recorded_payment_id: the provider payment id the attempt already recorded.
    :param payment_id_owner: the attempt of this account that owns ``claim``'s payment
        id, when one does (the caller looks it up; the unique index admits one).
    """
    pid = claim.provider_payment_id
    if pid is not None and recorded_payment_id is not None and pid != recorded_payment_id:
        return Verdict(EscalationReason.PROVIDER_ID_CONFLICT, "provider_payment_id",
                       {"recorded": recorded_payment_id, "reported": pid})
    if pid is not None and payment_id_owner is not None and payment_id_owner != subject.attempt_id:
        return Verdict(EscalationReason.PROVIDER_ID_CONFLICT, "provider_payment_id",
                       {"reported": pid, "owned_by_attempt": str(payment_id_owner)})
    if (pid is not None and pid == recorded_payment_id and claim.reference is not None
            and claim.reference != subject.client_reference):
        # The payment the recorded id names carries another reference: the recorded id
        # itself may be wrong, which is a conflict about the id, not a stray payment.
        return Verdict(EscalationReason.PROVIDER_ID_CONFLICT, "reference",
                       {"recorded": recorded_payment_id, "reported_reference": claim.reference})
    mismatch = _first_mismatch(subject, claim)
    if mismatch is not None:
        return Verdict(EscalationReason.MISMATCH, mismatch, {"field": mismatch, **claim.as_detail()})
    return ACCEPTED


def _first_mismatch(subject: Subject, claim: Claim) -> str | None:
    account, live = account_and_mode(subject.provider_account)
    if any(a != account for a in claim.accounts):
        return "account"
    if any(m != live for m in claim.livemodes):
        return "environment"
    if claim.reference is not None and claim.reference != subject.client_reference:
        return "reference"
    if claim.amount_minor is not None and claim.amount_minor != subject.amount_minor:
        return "amount"
    if claim.currency is not None and claim.currency.upper() != subject.currency:
        return "currency"
    return None


def distinct_payments(claims: Iterable[Claim]) -> list[str]:
    """The distinct payment ids among ``claims`` (several for one reference: a person must look)."""
    return sorted({c.provider_payment_id for c in claims if c.provider_payment_id is not None})


class Identified(Protocol):
    """An attempt a notification's reference or payment id matched."""

    @property
    def attempt_id(self) -> UUID: ...


A = TypeVar("A", bound=Identified)


@dataclass(frozen=True)
class Identification(Generic[A]):
    """Which attempt a notification is about, from its two identities matched independently."""

    attempt: A | None  # the one attempt named; None when none is (unmatched) or two are (a conflict)
    verdict: Verdict = ACCEPTED  # IDENTITY_CONFLICT when the two identities name different attempts


def identify(by_reference: A | None, by_payment_id: A | None) -> Identification[A]:
    """The attempt a notification's reference and payment id name, or an identity conflict.

    Two different attempts -- the reference names one, the payment id another -- is a
    conflict: the notification is evidence about neither and a person must choose (the
    detail names both). Otherwise the attempt either names, or none.
    """
    if by_reference is not None and by_payment_id is not None \
            and by_reference.attempt_id != by_payment_id.attempt_id:
        return Identification(None, Verdict(
            EscalationReason.IDENTITY_CONFLICT, "attempt",
            {"reference_attempt_id": str(by_reference.attempt_id),
             "provider_payment_id_attempt_id": str(by_payment_id.attempt_id)}))
    return Identification(by_reference or by_payment_id)


def judge_operation(operation: Subject, claim: Claim | None, *, reported_payment_id: str | None,
                    payment_id: str | None, reported_operation_id: str | None,
                    recorded_operation_id: str | None) -> Verdict:
    """Whether what a capture's, cancel's or refund's answer, lookup or notification says is
    evidence about ``operation`` (its own reference, amount, currency, account and mode: the
    :class:`Subject`), on the payment whose provider id is ``payment_id``: an answer about
    another payment, or another refund than the one recorded, is a conflict about ids; any
    other difference is a mismatch. Neither resolves anything."""
    if reported_payment_id is not None and payment_id is not None and reported_payment_id != payment_id:
        return Verdict(EscalationReason.PROVIDER_ID_CONFLICT, "provider_payment_id",
                       {"recorded": payment_id, "reported": reported_payment_id})
    if (reported_operation_id is not None and recorded_operation_id is not None
            and reported_operation_id != recorded_operation_id):
        return Verdict(EscalationReason.PROVIDER_ID_CONFLICT, "provider_operation_id",
                       {"recorded": recorded_operation_id, "reported": reported_operation_id})
    mismatch = _first_mismatch(operation, claim) if claim is not None else None
    if mismatch is not None:
        assert claim is not None
        return Verdict(EscalationReason.MISMATCH, mismatch, {"field": mismatch, **claim.as_detail()})
    return ACCEPTED
