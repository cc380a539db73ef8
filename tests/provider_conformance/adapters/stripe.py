"""Stripe's conformance adapter: the sandbox's ``stripe`` dialect, its Search lagging."""

from __future__ import annotations

import dataclasses

from paycore.settings_spec import Secret
from tests.provider_conformance.adapters import ConformanceAdapter
from tests.provider_conformance.adapters.sandbox import SEARCH_LAG_S, serving

ADAPTER = ConformanceAdapter(
    serve=serving("stripe", index_lag_s=SEARCH_LAG_S),
    methods={"succeeded": "pm_card_visa", "declined": "pm_card_chargeDeclined"},
    wrong_secret=lambda acct: dataclasses.replace(acct, webhook_secret=Secret("whsec_not_the_signing_key")),
)
