"""Adyen's notification items at their edges: what the generated mutation run over
``providers/adyen/notifications.py`` found untested (issue 26), each seen red against its mutant.

An amount of zero is read (Adyen notifies zero-value authorisations, a card's verification),
for evidence to judge against the attempt's amount; only a negative one is unreadable. A
refund's notification states the refund's amount, never the payment's.
"""

from __future__ import annotations

import dataclasses
import logging

import pytest

from paycore.clock import FakeClock
from paycore.domain import OperationKind
from paycore.providers.adyen import AdyenProvider, InvalidItem
from paycore.providers.adyen.notifications import (
    hmac_key_bytes,
    item_verifies,
    notification_key,
    parse_item,
    parse_notification,
    parse_operation_item,
    parse_operation_notification,
    signing_string,
)
from paycore.providers.base import NotificationUnverified
from paycore.settings_spec import Secret
from tests.unit.test_adyen_notifications import (
    HMAC_KEY,
    PASSWORD,
    account,
    basic,
    batch,
    item,
    provider,
    signed,
    verify,
)

__all__ = ["provider"]  # the fixture, shared with the notifications' own tests


def test_an_authorisation_of_amount_zero_is_read_and_a_negative_one_refused() -> None:
    zero = parse_item("false", item(amount={"value": 0, "currency": "EUR"}))
    assert zero.amount_minor == 0 and zero.outcome.amount_minor == 0
    with pytest.raises(InvalidItem, match="invalid-amount"):
        parse_item("false", item(amount={"value": -1, "currency": "EUR"}))


def test_a_modification_of_amount_zero_is_read_and_a_negative_one_refused() -> None:
    def capture(value: int) -> dict[str, object]:
        return item(eventCode="CAPTURE", originalReference="NC6HT9CRT65ZGN82", pspReference="CAP0001",
                    amount={"value": value, "currency": "EUR"})

    zero = parse_operation_item("false", capture(0))
    assert zero is not None and zero.outcome.operation is OperationKind.CAPTURE
    assert zero.outcome.amount_minor == 0
    with pytest.raises(InvalidItem, match="invalid-amount"):
        parse_operation_item("false", capture(-1))


def test_a_payments_notification_carries_its_amount_and_a_refunds_none_of_the_payments() -> None:
    paid = parse_item("false", item())
    assert (paid.outcome.amount_minor, paid.outcome.claim and paid.outcome.claim.amount_minor) == (4999, 4999)
    refund = parse_item("false", item(eventCode="REFUND", originalReference="NC6HT9CRT65ZGN82",
                                      pspReference="REF0001", amount={"value": 1000, "currency": "EUR"}))
    assert (refund.outcome.amount_minor, refund.outcome.claim and refund.outcome.claim.amount_minor) == (
        None, None)


@pytest.mark.parametrize(("live", "livemode"),
                         [("true", True), (True, True), ("false", False), (False, False)])
def test_a_batchs_live_flag_is_read_as_text_or_as_a_json_boolean(live: object, livemode: bool) -> None:
    assert parse_item(live, item()).payload_livemode is livemode


def test_basic_auth_with_a_character_outside_base64_is_malformed(provider: AdyenProvider) -> None:
    token = basic()["authorization"].removeprefix("Basic ")
    with pytest.raises(NotificationUnverified) as refused:
        verify(provider, batch(signed(item())), {"authorization": f"Basic {token[:4]}!{token[4:]}"})
    assert (refused.value.reason, refused.value.malformed) == ("invalid-basic-auth", True)


def test_a_delivery_under_the_current_password_and_key_logs_nothing_of_a_previous_one(
    provider: AdyenProvider, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    [delivery] = verify(provider, batch(signed(item())))
    assert not delivery.previous_secret
    assert [r.getMessage() for r in caplog.records if "previous" in r.getMessage()] == []


@pytest.mark.parametrize("unsignable", [
    pytest.param({"amount": None}, id="amount-missing"),
    pytest.param({"amount": {"value": "4999", "currency": "EUR"}}, id="amount-value-text"),
    pytest.param({"pspReference": 42}, id="psp-reference-a-number"),
])
def test_an_item_whose_fields_cannot_be_signed_never_verifies(unsignable: dict[str, object]) -> None:
    # Signed as it should be, then changed so that no signing string exists: its signature
    # (any text at all) must not verify it.
    it = signed(item())
    it.update(unsignable)
    it = {k: v for k, v in it.items() if v is not None}
    assert not item_verifies(it, hmac_key_bytes(HMAC_KEY))


@pytest.mark.parametrize("amount", [
    pytest.param({"value": True, "currency": "EUR"}, id="value-a-boolean"),
    pytest.param({"value": 4999, "currency": 978}, id="currency-a-number"),
])
def test_an_amount_of_the_wrong_types_has_no_signing_string(amount: dict[str, object]) -> None:
    assert signing_string(item(amount=amount)) is None


@pytest.mark.parametrize("blank", [{"pspReference": "  "}, {"eventCode": ""}])
def test_an_item_without_a_psp_reference_or_an_event_code_is_refused(blank: dict[str, str]) -> None:
    with pytest.raises(InvalidItem, match="invalid-fields"):
        parse_item("false", item(**blank))


def test_a_notification_whose_event_is_not_one_item_has_no_key() -> None:
    n = parse_item("false", item())
    one = n.event["notificationItems"][0]
    assert notification_key(n) is not None
    assert notification_key(dataclasses.replace(n, event={"notificationItems": [one, one]})) is None
    assert notification_key(dataclasses.replace(n, event={"notificationItems": one})) is None


def test_an_account_without_webhook_credentials_leaves_the_next_ones_verifying() -> None:
    verifier = AdyenProvider([account("NoHooksECOM", hmac_key=None), account()], FakeClock(),
                             max_call_duration_s=30)
    [delivery] = verify(verifier, batch(signed(item())))
    assert delivery.account.account == "PaycoreECOM"


def test_only_a_refunds_notification_says_something_was_refunded() -> None:
    # The intake compares amount_refunded with paycore's own refunds: anything above them is a
    # refund made outside paycore, and is acted on.
    assert parse_item("false", item()).amount_refunded == 0
    refund = parse_item("false", item(eventCode="REFUND", originalReference="NC6HT9CRT65ZGN82",
                                      pspReference="REF0001", amount={"value": 1000, "currency": "EUR"}))
    assert refund.amount_refunded == 1000


@pytest.mark.parametrize("body", [b"not json", b"{}", b'{"live": "false", "notificationItems": 3}'])
def test_a_stored_body_that_is_no_batch_is_an_invalid_item_for_both_readers(body: bytes) -> None:
    with pytest.raises(InvalidItem):
        parse_operation_notification(body)
    with pytest.raises(InvalidItem):
        parse_notification(body)


def test_a_password_that_is_both_current_and_previous_is_taken_as_the_current() -> None:
    both = dataclasses.replace(account(), webhook_password_previous=Secret(PASSWORD))
    [delivery] = verify(AdyenProvider([both], FakeClock(), max_call_duration_s=30), batch(signed(item())))
    assert not delivery.previous_secret
