"""paycore.evidence, table by table: every reason a piece of evidence is not about an attempt,
and the one way it is (pure functions, no database)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import pytest

from paycore.domain import ACCEPTED, Claim, EscalationReason, Verdict
from paycore.evidence import distinct_payments, identify, judge, judge_operation

ATTEMPT_ID = uuid.UUID("00000000-0000-4000-8000-000000000001")
OTHER_ID = uuid.UUID("00000000-0000-4000-8000-000000000002")


@dataclass(frozen=True)
class Subject:
    attempt_id: UUID = ATTEMPT_ID
    provider_account: str = "cardco:acct_store:test"
    client_reference: str = "ord_1-a1"
    amount_minor: int = 4999
    currency: str = "EUR"


ABOUT_IT = Claim(provider_payment_id="pay_1", reference="ord_1-a1", amount_minor=4999, currency="eur",
                 accounts=("acct_store",), livemodes=(False,))


def claim(**changes: Any) -> Claim:
    return Claim(**{**ABOUT_IT.__dict__, **changes})


# (case, claim, recorded payment id, owner of the claim's payment id, reason, attribute)
CASES: list[tuple[str, Claim, str | None, UUID | None, EscalationReason | None, str | None]] = [
    ("every statement agrees", ABOUT_IT, None, None, None, None),
    ("the recorded id, its own reference", ABOUT_IT, "pay_1", None, None, None),
    ("owned by this attempt", ABOUT_IT, None, ATTEMPT_ID, None, None),
    ("says nothing", Claim(), "pay_1", None, None, None),
    ("currency compared case-blind", claim(currency="EUR"), None, None, None, None),
    ("another account", claim(accounts=("acct_other",)), None, None, EscalationReason.MISMATCH, "account"),
    ("one of two statements of the account differs", claim(accounts=("acct_store", "acct_other")),
     None, None, EscalationReason.MISMATCH, "account"),
    ("live evidence for a test account", claim(livemodes=(True,)), None, None, EscalationReason.MISMATCH,
     "environment"),
    ("another reference", claim(reference="ord_2-a1"), None, None, EscalationReason.MISMATCH, "reference"),
    ("another amount", claim(amount_minor=5000), None, None, EscalationReason.MISMATCH, "amount"),
    ("another currency", claim(currency="usd"), None, None, EscalationReason.MISMATCH, "currency"),
    ("another id than the recorded one", claim(provider_payment_id="pay_2"), "pay_1", None,
     EscalationReason.PROVIDER_ID_CONFLICT, "provider_payment_id"),
    ("an id another attempt owns", ABOUT_IT, None, OTHER_ID, EscalationReason.PROVIDER_ID_CONFLICT,
     "provider_payment_id"),
    ("the recorded id carries another reference", claim(reference="ord_2-a1"), "pay_1", None,
     EscalationReason.PROVIDER_ID_CONFLICT, "reference"),
    # The id conflict is decided before the attributes: it names what a person must look at.
    ("another id and another amount", claim(provider_payment_id="pay_2", amount_minor=1), "pay_1", None,
     EscalationReason.PROVIDER_ID_CONFLICT, "provider_payment_id"),
]


@pytest.mark.parametrize(("evidence", "recorded", "owner", "reason", "attribute"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_judge(evidence: Claim, recorded: str | None, owner: UUID | None, reason: EscalationReason | None,
               attribute: str | None) -> None:
    verdict = judge(Subject(), evidence, recorded_payment_id=recorded, payment_id_owner=owner)
    assert (verdict.reason, verdict.attribute) == (reason, attribute)
    assert verdict.accepted is (reason is None)
    if reason is None:
        assert verdict == ACCEPTED


def test_a_mismatch_keeps_what_the_evidence_said_identifiers_only() -> None:
    verdict = judge(Subject(), claim(amount_minor=5000))
    assert verdict.detail == {"field": "amount", "provider_payment_id": "pay_1", "reference": "ord_1-a1",
                              "amount_minor": 5000, "currency": "eur", "accounts": ["acct_store"],
                              "livemodes": [False]}


def test_a_live_account_refuses_test_evidence() -> None:
    verdict = judge(Subject(provider_account="cardco:acct_store:live"), ABOUT_IT)
    assert (verdict.reason, verdict.attribute) == (EscalationReason.MISMATCH, "environment")


@dataclass(frozen=True)
class Matched:
    attempt_id: UUID


ONE, TWO = Matched(ATTEMPT_ID), Matched(OTHER_ID)


@pytest.mark.parametrize(("by_reference", "by_payment_id", "attempt", "reason"), [
    (None, None, None, None),  # unmatched: no attempt, no conflict
    (ONE, None, ONE, None),
    (None, ONE, ONE, None),
    (ONE, Matched(ATTEMPT_ID), ONE, None),  # the same attempt, found twice
    (ONE, TWO, None, EscalationReason.IDENTITY_CONFLICT),
], ids=["unmatched", "by reference", "by payment id", "both agree", "two attempts"])
def test_identify(by_reference: Matched | None, by_payment_id: Matched | None, attempt: Matched | None,
                  reason: EscalationReason | None) -> None:
    identified = identify(by_reference, by_payment_id)
    assert identified.attempt == attempt
    assert identified.verdict.reason is reason


def test_an_identity_conflict_names_both_attempts() -> None:
    assert identify(ONE, TWO).verdict == Verdict(
        EscalationReason.IDENTITY_CONFLICT, "attempt",
        {"reference_attempt_id": str(ATTEMPT_ID), "provider_payment_id_attempt_id": str(OTHER_ID)})


def test_several_payments_for_one_reference_are_told_apart_by_their_ids() -> None:
    claims = [claim(provider_payment_id="pay_2"), ABOUT_IT, claim(), Claim(provider_payment_id=None)]
    assert distinct_payments(claims) == ["pay_1", "pay_2"]
    assert distinct_payments([ABOUT_IT, ABOUT_IT]) == ["pay_1"]  # one payment: no MULTIPLE_PAYMENTS


# judge_operation: (case, reported payment id, reported operation id, recorded operation id, claim,
# reason, attribute). The operation (a refund of 4999 on pay_1) is the Subject above.
OPERATION_CASES: list[tuple[str, str | None, str | None, str | None, Claim | None, EscalationReason | None,
                            str | None]] = [
    ("the payment and the refund it recorded", "pay_1", "re_1", "re_1", ABOUT_IT, None, None),
    ("no refund id recorded yet: the answer names it", "pay_1", "re_1", None, ABOUT_IT, None, None),
    # An answer that names no refund (a timeout's, a cancel's) says nothing against the one
    # recorded: it is judged by what it does say.
    ("the answer names no refund, one is recorded", "pay_1", None, "re_1", ABOUT_IT, None, None),
    ("nothing named at all", None, None, None, None, None, None),
    ("another refund than the recorded one", "pay_1", "re_2", "re_1", ABOUT_IT,
     EscalationReason.PROVIDER_ID_CONFLICT, "provider_operation_id"),
    ("another payment", "pay_2", "re_1", "re_1", ABOUT_IT, EscalationReason.PROVIDER_ID_CONFLICT,
     "provider_payment_id"),
    ("another amount", "pay_1", "re_1", "re_1", claim(amount_minor=1), EscalationReason.MISMATCH, "amount"),
]


@pytest.mark.parametrize(("reported_payment", "reported_op", "recorded_op", "evidence", "reason",
                          "attribute"),
                         [case[1:] for case in OPERATION_CASES], ids=[case[0] for case in OPERATION_CASES])
def test_judge_operation(reported_payment: str | None, reported_op: str | None, recorded_op: str | None,
                         evidence: Claim | None, reason: EscalationReason | None,
                         attribute: str | None) -> None:
    verdict = judge_operation(Subject(), evidence, reported_payment_id=reported_payment, payment_id="pay_1",
                              reported_operation_id=reported_op, recorded_operation_id=recorded_op)
    assert (verdict.reason, verdict.attribute) == (reason, attribute)
    if reason is None:
        assert verdict == ACCEPTED
