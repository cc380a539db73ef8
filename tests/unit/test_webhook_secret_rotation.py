"""Previous webhook secrets: read and checked like the current ones, used for their account alone,
and their use said once per process (without the secret)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from paycore.clock import FakeClock
from paycore.config import ConfigError, Secret, load_settings
from paycore.providers.adyen import AdyenProvider
from paycore.providers.cardco import CardcoClient
from paycore.providers.stripe import StripeProvider, signature_header
from paycore.webhook_signatures import InvalidSecret, signed_headers
from tests.unit import test_adyen_notifications as adyen
from tests.unit import test_stripe_events as stripe
from tests.unit.test_provider_accounts_config import ADYEN, CARDCO, STRIPE, accounts_file, refused

CARDCO_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
CARDCO_OLD = "whsec_c2VjcmV0LW9mLXRoZS1vbGQtc2lkZQ=="
OLD_HMAC = "AB" * 32


# --------------------------------------------------------------------------- configuration


def test_each_providers_previous_secret_is_read_beside_the_current_one() -> None:
    env = {**CARDCO, **STRIPE, **ADYEN, "PAYCORE_CARDCO_WEBHOOK_SECRET": CARDCO_SECRET,
           "PAYCORE_CARDCO_WEBHOOK_SECRET_PREVIOUS": CARDCO_OLD,
           "PAYCORE_STRIPE_WEBHOOK_SECRET_PREVIOUS": "whsec_old",
           "PAYCORE_ADYEN_HMAC_KEY_PREVIOUS": OLD_HMAC, "PAYCORE_ADYEN_WEBHOOK_PASSWORD_PREVIOUS": "old-pw"}
    cardco, stripe_acct, adyen_acct = load_settings(env).accounts
    assert cardco.webhook_secret_previous == Secret(CARDCO_OLD)
    assert stripe_acct.webhook_secret_previous == Secret("whsec_old")
    assert adyen_acct.webhook_secret_previous == Secret(OLD_HMAC)
    assert adyen_acct.webhook_password_previous == Secret("old-pw")
    assert "whsec_old" not in repr(stripe_acct) and "old-pw" not in repr(adyen_acct)


@pytest.mark.parametrize(("env", "variable"), [
    ({**CARDCO, "PAYCORE_CARDCO_WEBHOOK_SECRET_PREVIOUS": CARDCO_OLD},
     "PAYCORE_CARDCO_WEBHOOK_SECRET_PREVIOUS"),
    ({**CARDCO, "PAYCORE_DEFAULT_PROVIDER": "stripe", "PAYCORE_STRIPE_API_KEY": "sk_test_1",
      "PAYCORE_STRIPE_WEBHOOK_SECRET_PREVIOUS": "whsec_old"}, "PAYCORE_STRIPE_WEBHOOK_SECRET_PREVIOUS"),
    ({**CARDCO, **{k: v for k, v in ADYEN.items() if k != "PAYCORE_ADYEN_HMAC_KEY"},
      "PAYCORE_ADYEN_HMAC_KEY_PREVIOUS": OLD_HMAC}, "PAYCORE_ADYEN_HMAC_KEY_PREVIOUS"),
    ({**CARDCO, **ADYEN, "PAYCORE_ADYEN_HMAC_KEY_PREVIOUS": "not hex"}, "PAYCORE_ADYEN_HMAC_KEY_PREVIOUS"),
])
def test_a_previous_secret_without_a_current_one_or_malformed_is_refused(env: dict[str, str],
                                                                        variable: str) -> None:
    assert refused(env, variable)


def test_the_accounts_file_names_previous_secrets_by_variable(tmp_path: Path) -> None:
    env = {**CARDCO, "EU_KEY": "AQE_eu", "EU_HMAC": "00ff", "EU_HMAC_OLD": "ff00", "EU_PW": "pw",
           "EU_PW_OLD": "old", **accounts_file(tmp_path, [
               {"provider": "adyen", "account": "ShopEU", "environment": "test", "api_key_env": "EU_KEY",
                "webhook_secret_env": "EU_HMAC", "webhook_secret_previous_env": "EU_HMAC_OLD",
                "webhook_username": "eu", "webhook_password_env": "EU_PW",
                "webhook_password_previous_env": "EU_PW_OLD", "return_url": "https://shop.example/r"}])}
    eu = load_settings(env).account("adyen:ShopEU:test")
    assert eu is not None
    assert (eu.webhook_secret_previous, eu.webhook_password_previous) == (Secret("ff00"), Secret("old"))


@pytest.mark.parametrize("entry", [
    {"webhook_secret_previous_env": "OLD"},  # without a current one
    {"webhook_secret_env": "NEW", "webhook_password_previous_env": "OLD"},  # Adyen's only
])
def test_a_file_entrys_previous_secret_follows_the_same_rules(tmp_path: Path, entry: dict[str, str]) -> None:
    env = {**CARDCO, "KEY": "sk_test_2", "NEW": CARDCO_SECRET, "OLD": CARDCO_OLD, **accounts_file(tmp_path, [
        {"provider": "cardco", "account": "acct_2", "environment": "test", "api_key_env": "KEY",
         "base_url": "http://cardco.test", **entry}])}
    field = next(iter(entry)) if len(entry) == 1 else "webhook_username"
    assert refused(env, f"PAYCORE_ACCOUNTS_FILE[0].{field}")


# --------------------------------------------------------------------------- start-up checks


def test_the_intakes_start_up_check_refuses_a_malformed_previous_secret() -> None:
    clock = FakeClock()
    [cardco] = load_settings({**CARDCO, "PAYCORE_CARDCO_WEBHOOK_SECRET": CARDCO_SECRET}).accounts
    bad_cardco = dataclasses.replace(cardco, webhook_secret_previous=Secret("whsec_not base64!"))
    with pytest.raises(InvalidSecret, match="previous webhook secret of cardco:acct_store:test"):
        CardcoClient([bad_cardco], clock, max_call_duration_s=30).check_notification_secrets()
    CardcoClient([dataclasses.replace(cardco, webhook_secret_previous=Secret(CARDCO_OLD))], clock,
                   max_call_duration_s=30).check_notification_secrets()

    bad_stripe = dataclasses.replace(stripe.STORE, webhook_secret_previous=Secret("sk_test_oops"))
    with pytest.raises(ValueError, match="previous webhook secret of stripe:acct_store:test"):
        StripeProvider([bad_stripe], clock, max_call_duration_s=30).check_notification_secrets()

    bad_adyen = dataclasses.replace(adyen.account(), webhook_secret_previous=Secret("xyz"))
    with pytest.raises(ValueError, match="previous HMAC key of adyen:PaycoreECOM:test"):
        AdyenProvider([bad_adyen], clock, max_call_duration_s=30).check_notification_secrets()


# --------------------------------------------------------------------------- verification


def test_a_previous_secret_verifies_for_its_account_flagged_and_said_once(
        caplog: pytest.LogCaptureFixture) -> None:
    rotating = dataclasses.replace(stripe.STORE, webhook_secret=Secret("whsec_new_1d2c3b4a"),
                                   webhook_secret_previous=stripe.STORE.webhook_secret)
    provider = StripeProvider([rotating, stripe.OTHER], FakeClock(), max_call_duration_s=30)
    body = stripe.event()
    caplog.set_level(logging.INFO, "paycore.webhooks")
    for _ in range(2):
        headers = {"Stripe-Signature": signature_header(stripe.SECRET, stripe.T, body)}
        [d] = provider.verify_deliveries(headers, body, now=stripe.NOW)
        assert (d.account.provider_account, d.previous_secret) == ("stripe:acct_store:test", True)
    said = [r.getMessage() for r in caplog.records if "previous" in r.getMessage()]
    assert len(said) == 1 and "stripe:acct_store:test" in said[0]
    assert stripe.SECRET not in caplog.text
    headers = {"Stripe-Signature": signature_header("whsec_new_1d2c3b4a", stripe.T, body)}
    [d] = provider.verify_deliveries(headers, body, now=stripe.NOW)
    assert d.previous_secret is False


def test_cardcos_previous_secret_is_flagged() -> None:
    [cardco] = load_settings({**CARDCO, "PAYCORE_CARDCO_WEBHOOK_SECRET": CARDCO_SECRET,
                              "PAYCORE_CARDCO_WEBHOOK_SECRET_PREVIOUS": CARDCO_OLD}).accounts
    provider = CardcoClient([cardco], FakeClock(), max_call_duration_s=30)
    now = FakeClock().now()
    body = b'{"id": "evt_1"}'
    for secret, previous in ((CARDCO_OLD, True), (CARDCO_SECRET, False)):
        headers = signed_headers(secret, "evt_1", int(now.timestamp()), body)
        [d] = provider.verify_deliveries(headers, body, now=now)
        assert d.previous_secret is previous


def test_an_adyen_batch_may_mix_the_accounts_old_and_new_key_and_each_item_says_which() -> None:
    rotating = dataclasses.replace(adyen.account(), webhook_secret=Secret(OLD_HMAC),
                                   webhook_secret_previous=Secret(adyen.HMAC_KEY),
                                   webhook_password_previous=Secret("old-password"))
    provider = AdyenProvider([rotating], FakeClock(), max_call_duration_s=30)
    body = adyen.batch(adyen.signed(adyen.item(pspReference="PSP1"), adyen.HMAC_KEY),
                       adyen.signed(adyen.item(pspReference="PSP2"), OLD_HMAC))
    deliveries = provider.verify_deliveries(adyen.basic(), body, now=adyen.NOW)
    assert [d.previous_secret for d in deliveries] == [True, False]
    # The previous password flags every item, whichever key signed it.
    deliveries = provider.verify_deliveries(adyen.basic(password="old-password"), body, now=adyen.NOW)
    assert [d.previous_secret for d in deliveries] == [True, True]


def test_a_previous_secret_that_is_another_accounts_secret_is_refused_at_start_up() -> None:
    clock = FakeClock()
    [cardco] = load_settings({**CARDCO, "PAYCORE_CARDCO_WEBHOOK_SECRET": CARDCO_SECRET}).accounts
    other = dataclasses.replace(cardco, account="acct_other", webhook_secret=Secret(CARDCO_OLD),
                                webhook_secret_previous=Secret(CARDCO_SECRET))
    with pytest.raises(ConfigError, match="acct_other:test is also a secret of cardco:acct_store:test"):
        CardcoClient([cardco, other], clock, max_call_duration_s=30).check_notification_secrets()
    # The same secret as current and previous of one account is only a rotation not yet begun.
    same = dataclasses.replace(cardco, webhook_secret_previous=cardco.webhook_secret)
    CardcoClient([same], clock, max_call_duration_s=30).check_notification_secrets()

    both_old = dataclasses.replace(stripe.OTHER, webhook_secret_previous=Secret("whsec_old_shared"))
    store = dataclasses.replace(stripe.STORE, webhook_secret_previous=Secret("whsec_old_shared"))
    with pytest.raises(ConfigError) as caught:
        StripeProvider([store, both_old], clock, max_call_duration_s=30).check_notification_secrets()
    assert caught.value.variable == "PAYCORE_STRIPE_WEBHOOK_SECRET_PREVIOUS"
    assert "whsec_old_shared" not in str(caught.value)
