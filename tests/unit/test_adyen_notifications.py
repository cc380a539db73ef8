"""Adyen notifications: basic auth, per-item HMAC proven equal to the Adyen SDK's, batches,
the verifying account, event mapping and deduplication keys.

The SDK (``Adyen==16.0.0``, ``Adyen.util``) is the reference the vectors are checked against:
every signature here is computed by both, and each verifies the other's.
"""

from __future__ import annotations

import base64
import copy
import uuid
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from Adyen.util import generate_notification_sig, is_valid_hmac_notification  # type: ignore[import-untyped]

from paycore.clock import FakeClock
from paycore.config import ConfigError, Secret
from paycore.domain import OutcomeKind
from paycore.evidence import judge
from paycore.providers.adyen import (
    ACKNOWLEDGEMENT,
    ADYEN_EVENTS,
    AdyenProvider,
    InvalidItem,
    item_signature,
    parse_notification,
)
from paycore.providers.adyen.notifications import hmac_key_bytes, signing_string
from paycore.providers.adyen.provider import AdyenAccountConfig
from paycore.providers.base import (
    Notification,
    NotificationFormat,
    NotificationUnverified,
    OperationNotification,
    Provider,
    VerifiedDelivery,
)
from paycore.providers.registry import ProviderFactory

HMAC_KEY = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
OTHER_HMAC_KEY = "0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF"
USER, PASSWORD = "paycore", "s3cret-webhook-password"
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def account(name: str = "PaycoreECOM", *, hmac_key: str | None = HMAC_KEY, user: str | None = USER,
            password: str | None = PASSWORD) -> AdyenAccountConfig:
    return AdyenAccountConfig(
        provider="adyen", account=name, environment="test", base_url="https://checkout-test.adyen.com",
        api_key=Secret("AQE_key"), webhook_secret=Secret(hmac_key) if hmac_key is not None else None,
        api_version="v71", webhook_username=user,
        webhook_password=Secret(password) if password is not None else None,
        return_url="https://shop.example/return")


def item(**overrides: Any) -> dict[str, Any]:
    """An unsigned NotificationRequestItem (override any field; ``None`` drops it)."""
    obj: dict[str, Any] = {
        "pspReference": "NC6HT9CRT65ZGN82", "originalReference": "", "merchantAccountCode": "PaycoreECOM",
        "merchantReference": "ORD-5521-a1", "amount": {"value": 4999, "currency": "EUR"},
        "eventCode": "AUTHORISATION", "success": "true", "eventDate": "2026-11-29T12:00:00+01:00",
        "paymentMethod": "visa", "reason": "033899:1111:03/2030",
    }
    obj.update(overrides)
    return {k: v for k, v in obj.items() if v is not None}


def signed(it: dict[str, Any], key: str = HMAC_KEY) -> dict[str, Any]:
    """``it`` signed by the Adyen SDK (the reference implementation)."""
    out = copy.deepcopy(it)
    extra = dict(out.pop("additionalData", {}))
    extra["hmacSignature"] = generate_notification_sig(copy.deepcopy(out), key).decode("ascii")
    out["additionalData"] = extra
    return out


def batch(*items: dict[str, Any], live: str = "false") -> bytes:
    return orjson.dumps({"live": live, "notificationItems": [{"NotificationRequestItem": i} for i in items]})


def basic(user: str = USER, password: str = PASSWORD) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return {"authorization": f"Basic {token}"}


@pytest.fixture
def provider() -> AdyenProvider:
    return AdyenProvider([account(), account("OtherECOM", hmac_key=OTHER_HMAC_KEY, user="other",
                                             password="other-password")],
                         FakeClock(), max_call_duration_s=30)


def verify(provider: AdyenProvider, body: bytes, headers: dict[str, str] | None = None) -> tuple[
        VerifiedDelivery, ...]:
    return provider.verify_deliveries(basic() if headers is None else headers, body, now=NOW)


def parsed(d: VerifiedDelivery) -> Notification:
    assert isinstance(d.parsed, Notification), d.parsed
    return d.parsed


# ---------------------------------------------------------------------------
# HMAC: equal to the SDK's


VECTORS = {
    "authorisation": item(),
    "original-reference-absent": item(originalReference=None),
    "original-reference-empty": item(originalReference=""),
    "refund-with-original": item(eventCode="REFUND", pspReference="QFQTPCQ8HXSKGK82",
                                 originalReference="NC6HT9CRT65ZGN82",
                                 amount={"value": 1000, "currency": "EUR"}),
    "non-ascii-reference": item(merchantReference="Bestellung-ÄÖÜ-café-日本-🛒"),
    "value-zero": item(amount={"value": 0, "currency": "EUR"}),
    "failed": item(success="false", reason="Refused"),
    "colon-in-reference": item(merchantReference="ORD:55:21"),
    "empty-merchant-reference": item(merchantReference=""),
    "live-currency-jpy": item(amount={"value": 12000, "currency": "JPY"}),
}


@pytest.mark.parametrize("name", sorted(VECTORS))
@pytest.mark.parametrize("key", [HMAC_KEY, OTHER_HMAC_KEY, HMAC_KEY.lower()])
def test_signature_equals_the_sdks(name: str, key: str) -> None:
    it = VECTORS[name]
    ours = item_signature(it, hmac_key_bytes(key))
    sdk = generate_notification_sig(copy.deepcopy(it), key).decode("ascii")
    assert ours == sdk
    # And each verifies the other's: the SDK accepts ours, we accept the SDK's.
    mine = copy.deepcopy(it) | {"additionalData": {"hmacSignature": ours}}
    assert is_valid_hmac_notification({"notificationItems": [{"NotificationRequestItem": mine}]}, key)


def test_the_signing_string_is_the_documented_one() -> None:
    it = VECTORS["refund-with-original"]
    assert signing_string(it) == ("QFQTPCQ8HXSKGK82:NC6HT9CRT65ZGN82:PaycoreECOM:ORD-5521-a1:1000:EUR:"
                                  "REFUND:true")
    assert signing_string(VECTORS["original-reference-absent"]) == (
        "NC6HT9CRT65ZGN82::PaycoreECOM:ORD-5521-a1:4999:EUR:AUTHORISATION:true")


@pytest.mark.parametrize("name", sorted(VECTORS))
def test_verifying_with_the_wrong_key_fails(provider: AdyenProvider, name: str) -> None:
    it = signed(VECTORS[name], OTHER_HMAC_KEY)  # OtherECOM's key, sent with PaycoreECOM's password
    assert not is_valid_hmac_notification({"notificationItems": [{"NotificationRequestItem": it}]}, HMAC_KEY)
    with pytest.raises(NotificationUnverified) as exc:
        verify(provider, batch(it))
    assert (exc.value.reason, exc.value.malformed) == ("signature-mismatch", False)


def test_every_vector_signed_by_the_sdk_verifies(provider: AdyenProvider) -> None:
    deliveries = verify(provider, batch(*(signed(v) for v in VECTORS.values())))
    assert len(deliveries) == len(VECTORS)
    assert {d.account.provider_account for d in deliveries} == {"adyen:PaycoreECOM:test"}


@pytest.mark.parametrize("tamper", [
    {"amount": {"value": 5000, "currency": "EUR"}}, {"success": "false"}, {"merchantReference": "ORD-other"},
    {"pspReference": "OTHER00000000000"}, {"originalReference": "X"}, {"merchantAccountCode": "OtherECOM"},
    {"eventCode": "CANCELLATION"}, {"amount": {"value": 4999, "currency": "USD"}},
])
def test_a_tampered_item_fails(provider: AdyenProvider, tamper: dict[str, Any]) -> None:
    it = signed(item()) | tamper
    with pytest.raises(NotificationUnverified, match="signature-mismatch"):
        verify(provider, batch(it))


@pytest.mark.parametrize("extra", [None, {}, {"hmacSignature": ""}, {"hmacSignature": 7}])
def test_an_item_without_a_signature_fails(provider: AdyenProvider, extra: Any) -> None:
    it = item() if extra is None else item(additionalData=extra)
    with pytest.raises(NotificationUnverified, match="signature-mismatch"):
        verify(provider, batch(it))


# ---------------------------------------------------------------------------
# Basic auth


@pytest.mark.parametrize(("headers", "reason"), [
    ({}, "missing-basic-auth"),
    ({"authorization": "Bearer abc"}, "not-basic-auth"),
    ({"authorization": "Basic"}, "not-basic-auth"),
    ({"authorization": "Basic !!!not-base64"}, "invalid-basic-auth"),
    ({"authorization": "Basic " + base64.b64encode(b"no-colon").decode()}, "invalid-basic-auth"),
])
def test_missing_or_malformed_basic_auth_is_malformed(
    provider: AdyenProvider, headers: dict[str, str], reason: str
) -> None:
    with pytest.raises(NotificationUnverified) as exc:
        verify(provider, batch(signed(item())), headers)
    assert (exc.value.reason, exc.value.malformed) == (reason, True)  # the intake answers 400


@pytest.mark.parametrize(("user", "password"), [(USER, "wrong"), ("nobody", PASSWORD), (USER, ""),
                                                (USER, PASSWORD + "x"), ("other", PASSWORD)])
def test_wrong_credentials_are_unverified(provider: AdyenProvider, user: str, password: str) -> None:
    with pytest.raises(NotificationUnverified) as exc:
        verify(provider, batch(signed(item())), basic(user, password))
    assert (exc.value.reason, exc.value.malformed) == ("basic-auth-failed", False)  # the intake answers 401


def test_the_basic_auth_scheme_is_case_insensitive(provider: AdyenProvider) -> None:
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert len(verify(provider, batch(signed(item())), {"authorization": f"basic {token}"})) == 1


@pytest.mark.parametrize("body", [b"", b"not json", b"[]", b'{"live":"false"}', b'{"notificationItems":[]}',
                                  b'{"notificationItems":[{"Other":{}}]}', b'{"notificationItems":[1]}'])
def test_a_body_that_is_not_a_batch_is_malformed(provider: AdyenProvider, body: bytes) -> None:
    with pytest.raises(NotificationUnverified) as exc:
        verify(provider, body)
    assert exc.value.malformed


# ---------------------------------------------------------------------------
# Batches and the verifying account


def test_a_batch_of_several_items_gives_one_delivery_each(provider: AdyenProvider) -> None:
    items = [signed(item(pspReference=f"PSP{i:013d}", merchantReference=f"ORD-{i}")) for i in range(4)]
    deliveries = verify(provider, batch(*items))
    assert [parsed(d).payment_id for d in deliveries] == [f"PSP{i:013d}" for i in range(4)]
    assert [parsed(d).reference for d in deliveries] == [f"ORD-{i}" for i in range(4)]
    assert len({d.key for d in deliveries}) == 4
    assert all(d.replay is None and d.key == d.delivery_id for d in deliveries)


@pytest.mark.parametrize("bad_index", [0, 2, 3])
def test_one_bad_item_leaves_the_whole_batch_unverified(provider: AdyenProvider, bad_index: int) -> None:
    items = [signed(item(pspReference=f"PSP{i:013d}")) for i in range(4)]
    items[bad_index]["amount"] = {"value": 1, "currency": "EUR"}
    with pytest.raises(NotificationUnverified, match="signature-mismatch"):
        verify(provider, batch(*items))


def test_a_batch_signed_with_two_keys_is_unverified(provider: AdyenProvider) -> None:
    body = batch(signed(item()), signed(item(pspReference="PSP2"), OTHER_HMAC_KEY))
    for headers in (basic(), basic("other", "other-password")):
        with pytest.raises(NotificationUnverified):
            verify(provider, body, headers)


def test_the_account_is_the_one_whose_credentials_verified_it(provider: AdyenProvider) -> None:
    # The items say PaycoreECOM; OtherECOM's password and key verify them: the account is OtherECOM,
    # and the claim still carries what the item said, for judge() to find the mismatch.
    [d] = verify(provider, batch(signed(item(), OTHER_HMAC_KEY)), basic("other", "other-password"))
    assert d.account.provider_account == "adyen:OtherECOM:test"
    assert parsed(d).outcome.evidence().accounts == ("PaycoreECOM",)


def test_accounts_sharing_a_webhook_user_are_told_apart_by_their_hmac_key() -> None:
    shared = AdyenProvider([account(), account("OtherECOM", hmac_key=OTHER_HMAC_KEY)], FakeClock(),
                           max_call_duration_s=30)
    [d] = shared.verify_deliveries(basic(), batch(signed(item(), OTHER_HMAC_KEY)), now=NOW)
    assert d.account.provider_account == "adyen:OtherECOM:test"
    [d] = shared.verify_deliveries(basic(), batch(signed(item())), now=NOW)
    assert d.account.provider_account == "adyen:PaycoreECOM:test"


def test_verify_notification_takes_a_batch_of_one(provider: AdyenProvider) -> None:
    d = provider.verify_notification(basic(), batch(signed(item())), now=NOW)
    assert parsed(d).payment_id == "NC6HT9CRT65ZGN82"
    with pytest.raises(NotificationUnverified) as exc:
        provider.verify_notification(basic(), batch(signed(item()), signed(item(pspReference="P2"))), now=NOW)
    assert exc.value.malformed


def test_secrets_are_checked_at_start_up() -> None:
    clock = FakeClock()
    AdyenProvider([account()], clock, max_call_duration_s=30).check_notification_secrets()
    for incomplete in (account(hmac_key=None), account(user=None), account(password=None)):
        with pytest.raises(ConfigError):
            AdyenProvider([incomplete], clock, max_call_duration_s=30).check_notification_secrets()
    with pytest.raises(ValueError, match="hexadecimal"):
        AdyenProvider([account(hmac_key="not-hex")], clock,
                      max_call_duration_s=30).check_notification_secrets()


def test_the_acknowledgement_is_accepted_in_brackets() -> None:
    assert ACKNOWLEDGEMENT == b"[accepted]"


# ---------------------------------------------------------------------------
# Event mapping


@pytest.mark.parametrize(("fields", "kind", "reason", "event_type", "payment_id"), [
    ({}, OutcomeKind.SUCCEEDED, None, "payment.succeeded", "NC6HT9CRT65ZGN82"),
    ({"success": "false", "reason": "Refused"}, OutcomeKind.FAILED, "declined", "payment.failed",
     "NC6HT9CRT65ZGN82"),
    ({"eventCode": "OFFER_CLOSED"}, OutcomeKind.FAILED, "offer-closed", "payment.failed", "NC6HT9CRT65ZGN82"),
    ({"eventCode": "CANCELLATION", "pspReference": "CNCL000000000001",
      "originalReference": "NC6HT9CRT65ZGN82"},
     OutcomeKind.FAILED, "canceled", "payment.canceled", "NC6HT9CRT65ZGN82"),
    ({"eventCode": "CANCEL_OR_REFUND", "pspReference": "CNCL000000000001",
      "originalReference": "NC6HT9CRT65ZGN82", "additionalData": {"modification.action": "cancel"}},
     OutcomeKind.FAILED, "canceled", "payment.canceled", "NC6HT9CRT65ZGN82"),
], ids=["authorisation-true", "authorisation-false", "offer-closed", "cancellation",
        "cancel-or-refund-cancel"])
def test_event_mapping(provider: AdyenProvider, fields: dict[str, Any], kind: OutcomeKind, reason: str | None,
                       event_type: str, payment_id: str) -> None:
    [d] = verify(provider, batch(signed(item(**fields))))
    n = parsed(d)
    assert (n.outcome.kind, n.outcome.reason, n.event_type, n.payment_id) == (
        kind, reason, event_type, payment_id)
    assert n.outcome.provider_payment_id == payment_id
    claim = n.outcome.evidence()
    assert (claim.provider_payment_id, claim.reference, claim.amount_minor, claim.currency) == (
        payment_id, "ORD-5521-a1", 4999, "EUR")
    assert (claim.accounts, claim.livemodes) == (("PaycoreECOM",), (False,))
    assert (n.payload_account, n.payload_livemode, n.event_id) == ("PaycoreECOM", False, None)
    assert not n.is_refund


@pytest.mark.parametrize("fields", [
    {"eventCode": "REFUND"},
    {"eventCode": "CANCEL_OR_REFUND", "additionalData": {"modification.action": "refund"}},
])
def test_a_refund_names_the_payment_and_states_no_payment_amount(
    provider: AdyenProvider, fields: dict[str, Any]
) -> None:
    it = item(pspReference="RFND000000000001", originalReference="NC6HT9CRT65ZGN82",
              amount={"value": 1000, "currency": "EUR"}, **fields)
    [d] = verify(provider, batch(signed(it)))
    n = parsed(d)
    assert n.is_refund and n.event_type == "payment.refunded"
    assert (n.payment_id, n.amount_refunded, n.amount_minor) == ("NC6HT9CRT65ZGN82", 1000, None)
    assert n.outcome.kind is OutcomeKind.SUCCEEDED
    assert n.outcome.evidence().amount_minor is None  # a partial refund is not an amount mismatch


@pytest.mark.parametrize(("fields", "why"), [
    ({"eventCode": "CAPTURE"}, "not-applicable:CAPTURE:true"),
    ({"eventCode": "REPORT_AVAILABLE"}, "not-applicable:REPORT_AVAILABLE:true"),
    ({"eventCode": "SOMETHING_NEW"}, "not-applicable:SOMETHING_NEW:true"),
    ({"eventCode": "CANCEL_OR_REFUND", "originalReference": "NC6"}, "not-applicable:CANCEL_OR_REFUND:true"),
    ({"eventCode": "REFUND"}, "modification-without-original-reference"),
    ({"success": "maybe"}, "invalid-fields"),
    ({"amount": {"value": 100, "currency": "eur"}}, "invalid-amount"),
])
def test_items_paycore_does_not_act_on_are_kept_not_applied(
    provider: AdyenProvider, fields: dict[str, Any], why: str
) -> None:
    [d] = verify(provider, batch(signed(item(**fields))))
    assert isinstance(d.parsed, InvalidItem) and str(d.parsed) == why
    assert d.key is None and d.delivery_id  # kept raw under its synthesized id, never applied


@pytest.mark.parametrize(("code", "kind"), [("REFUND", "refund"), ("CANCELLATION", "cancel")])
def test_a_failed_refund_or_cancel_is_an_operations_news_not_the_payments(
    provider: AdyenProvider, code: str, kind: str
) -> None:
    # Of no payment, but of a refund or cancel paycore may have sent: read as that operation's
    # (the intake applies it to one of paycore's, or keeps it and tells a person).
    [d] = verify(provider, batch(signed(item(eventCode=code, success="false", originalReference="NC6"))))
    assert isinstance(d.parsed, OperationNotification) and d.key is not None
    assert (d.parsed.outcome.operation.value, d.parsed.outcome.ending.value) == (kind, "failed")


def test_a_live_batch_says_live(provider: AdyenProvider) -> None:
    [d] = verify(provider, batch(signed(item()), live="true"))
    assert parsed(d).outcome.evidence().livemodes == (True,)


# ---------------------------------------------------------------------------
# Deduplication keys and the stored event


def test_the_key_is_stable_across_redeliveries(provider: AdyenProvider) -> None:
    first = verify(provider, batch(signed(item())))[0]
    # A redelivery: the same item, alone or in another batch, with other unsigned fields changed.
    again = verify(provider, batch(signed(item(eventDate="2026-11-30T08:00:00+01:00")),
                                   signed(item(pspReference="OTHER"))))[0]
    assert first.key is not None and first.key == again.key
    assert first.key.startswith("v1:")


def test_the_key_differs_for_success_true_and_false(provider: AdyenProvider) -> None:
    ok, failed = verify(provider, batch(signed(item()), signed(item(success="false"))))
    assert ok.key != failed.key


@pytest.mark.parametrize("change", [{"pspReference": "OTHER"}, {"eventCode": "OFFER_CLOSED"},
                                    {"merchantReference": "ORD-other"}])
def test_the_key_differs_for_another_event(provider: AdyenProvider, change: dict[str, Any]) -> None:
    a, b = verify(provider, batch(signed(item()), signed(item(**change))))
    assert a.key != b.key


def test_the_stored_event_reparses_to_the_same_notification(provider: AdyenProvider) -> None:
    events = ADYEN_EVENTS
    for d in verify(provider, batch(signed(item()), signed(item(eventCode="REFUND", pspReference="R1",
                                                                originalReference="NC6HT9CRT65ZGN82")))):
        n = parsed(d)
        again = events.parse_notification(orjson.dumps(n.event))
        assert again == n
        assert events.notification_key(again) == d.key
        assert events.name == "adyen"


@pytest.mark.parametrize("body", [b"not json", batch(item(), item())])
def test_a_stored_event_that_is_not_one_item_is_invalid(body: bytes) -> None:
    with pytest.raises(InvalidItem):
        parse_notification(body)


# ---------------------------------------------------------------------------
# Fit with the core: the interface, and the judge


def test_the_provider_fits_the_interface_and_the_factory() -> None:
    # Checked by mypy (strict) as much as at run time: the registry can hold it as any provider.
    factory: ProviderFactory = AdyenProvider
    p: Provider = factory([account()], FakeClock(), max_call_duration_s=30)
    fmt: NotificationFormat = ADYEN_EVENTS
    assert (p.name, fmt.name) == ("adyen", "adyen")


@pytest.mark.parametrize(("fields", "live", "verdict"), [
    ({}, "false", None),
    ({"merchantAccountCode": "OtherECOM"}, "false", "account"),
    ({}, "true", "environment"),
    ({"merchantReference": "ORD-other"}, "false", "reference"),
    ({"amount": {"value": 100, "currency": "EUR"}}, "false", "amount"),
])
def test_a_notification_is_judged_against_the_attempt(
    provider: AdyenProvider, fields: dict[str, Any], live: str, verdict: str | None
) -> None:
    [d] = verify(provider, batch(signed(item(**fields)), live=live))
    subject = SimpleNamespace(attempt_id=uuid.uuid4(), provider_account="adyen:PaycoreECOM:test",
                              client_reference="ORD-5521-a1", amount_minor=4999, currency="EUR")
    assert judge(subject, parsed(d).outcome.evidence()).attribute == verdict
