"""Each account's webhook secrets: its current one and, during a rotation, the one it replaces.

While a rotation rolls out, intake instances and the provider disagree for a while
about which secret signs: so each account may carry its previous secret
(``PAYCORE_<PROVIDER>_…_PREVIOUS``, ``webhook_secret_previous_env``), and a
notification it verifies is that account's, exactly as one its current secret
verifies. A secret only ever verifies for the account it is configured on, and a
previous secret that is also another account's is refused at start-up.

Each use of a previous secret is flagged on the delivery (the intake counts it in
``paycore_webhook_previous_secret_total``) and logged at INFO once per process and
account, so an operator can see when the provider stopped using it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from paycore.providers.package import ProviderAccountConfig
from paycore.settings_spec import ConfigError

log = logging.getLogger("paycore.webhooks")


@dataclass(frozen=True)
class AccountSecret:
    """One secret that verifies for ``account``; ``previous`` when a rotation is replacing it."""

    account: ProviderAccountConfig
    secret: str
    previous: bool


def account_secrets(accounts: Iterable[ProviderAccountConfig], previous_variable: str) -> list[AccountSecret]:
    """Every account's current webhook secret, then every previous one.

    :raises ConfigError: A previous secret is also another account's secret: whose
        deliveries it verifies would be a guess (``previous_variable`` names the setting).
    """
    accounts = list(accounts)
    found = [AccountSecret(a, s.reveal(), previous=False) for a in accounts
             if (s := a.webhook_secret) is not None]
    found += [AccountSecret(a, s.reveal(), previous=True) for a in accounts
              if (s := a.webhook_secret_previous) is not None]
    for old in (f for f in found if f.previous):
        owner = old.account.provider_account
        shared = next((f.account.provider_account for f in found
                       if f.secret == old.secret and f.account.provider_account != owner), None)
        if shared is not None:
            raise ConfigError(previous_variable, f"the previous webhook secret of {owner} is also a secret "
                                                 f"of {shared}: a secret belongs to one account")
    return found


class PreviousSecretLog:
    """Logs, once per process and account, that a previous secret still verifies deliveries."""

    def __init__(self) -> None:
        self._said: set[str] = set()

    def used(self, account: ProviderAccountConfig, what: str = "webhook secret") -> None:
        if account.provider_account in self._said:
            return
        self._said.add(account.provider_account)
        log.info("%s webhook verified by the previous %s of %s (its _PREVIOUS setting): the provider "
                 "still signs with it; see paycore_webhook_previous_secret_total",
                 account.provider, what, account.provider_account)
