"""Adyen's wire readers at their edges: what a generated mutation run found untested (issue 26).

An amount of zero is read, not refused as unreadable: the answer then names a payment or a
modification whose amount is not ours, which evidence judges (and escalates) with what it said.
"""

from __future__ import annotations

from typing import Any

from paycore.providers.adyen import wire


def payment(**changes: Any) -> dict[str, Any]:
    base = {"pspReference": "PSP0001", "resultCode": "Authorised", "merchantReference": "ref-1",
            "merchantAccount": "StoreECOM", "amount": {"value": 4999, "currency": "EUR"}}
    return {**base, **changes}


def modification(**changes: Any) -> dict[str, Any]:
    base = {"pspReference": "PSPR001", "paymentPspReference": "PSP0001", "status": "received",
            "reference": "ref-r", "merchantAccount": "StoreECOM", "amount": {"value": 100, "currency": "EUR"}}
    return {**base, **changes}


def test_a_payment_answer_of_amount_zero_is_read_for_evidence_to_judge() -> None:
    zero = wire.parse_payment(payment(amount={"value": 0, "currency": "EUR"}))
    assert zero is not None and zero.amount_minor == 0
    assert wire.parse_payment(payment(amount={"value": -1, "currency": "EUR"})) is None


def test_a_modification_answer_of_amount_zero_is_read_for_evidence_to_judge() -> None:
    zero = wire.parse_modification(modification(amount={"value": 0, "currency": "EUR"}))
    assert zero is not None and zero.amount_minor == 0
    assert wire.parse_modification(modification(amount={"value": -1, "currency": "EUR"})) is None


def test_an_error_body_may_omit_its_type_but_not_give_another_kind() -> None:
    untyped = wire.parse_error({"status": 422, "errorCode": "14_030", "message": "Return URL is missing."})
    assert untyped is not None
    typed = wire.parse_error({"errorCode": "14_030", "errorType": "validation", "message": "x"})
    assert typed is not None
    assert wire.parse_error({"status": 422, "errorCode": "14_030", "errorType": 5, "message": "x"}) is None
