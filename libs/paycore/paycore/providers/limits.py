"""What every provider client checks the same way: its call ceiling, each call's limit, its accounts.

Kept beside ``base`` (and importing no provider) so Cardco's, Stripe's and Adyen's clients
share one rule for how long a call may take and which accounts they serve.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from paycore.providers.package import ProviderAccountConfig
from paycore.settings_spec import MAX_BUDGET_S


def checked_ceiling(max_call_duration_s: float) -> float:
    """The client's own ceiling on one call, in seconds.

    :raises ValueError: Not a finite number in ``(0, MAX_BUDGET_S]``.
    """
    if not math.isfinite(max_call_duration_s) or not 0 < max_call_duration_s <= MAX_BUDGET_S:
        raise ValueError(
            f"max_call_duration_s must be positive and at most {MAX_BUDGET_S} s, "
            f"got {max_call_duration_s!r}"
        )
    return float(max_call_duration_s)


def call_limit(budget_s: float | None, ceiling_s: float) -> tuple[float, str]:
    """Seconds one call may take, and which limit that is (``caller`` or ``client-ceiling``, for the reason).

    :raises ValueError: ``budget_s`` is NaN.
    """
    if budget_s is None:
        return ceiling_s, "client-ceiling"
    if math.isnan(budget_s):
        raise ValueError("budget_s must be a number of seconds, got NaN")
    if budget_s <= ceiling_s:
        return budget_s, "caller"
    return ceiling_s, "client-ceiling"


def accounts_of(provider: str, accounts: Sequence[ProviderAccountConfig]) -> dict[str, ProviderAccountConfig]:
    """``provider``'s accounts among ``accounts``, by provider-account id.

    :raises ValueError: An account is configured twice.
    """
    mine: dict[str, ProviderAccountConfig] = {}
    for acct in accounts:
        if acct.provider != provider:
            continue
        if acct.provider_account in mine:
            raise ValueError(f"provider account {acct.provider_account} is configured twice")
        mine[acct.provider_account] = acct
    return mine
