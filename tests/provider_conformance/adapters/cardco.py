"""Cardco's conformance adapter: the sandbox's ``cardco`` dialect."""

from __future__ import annotations

import dataclasses

from paycore.settings_spec import Secret
from tests.provider_conformance.adapters import ConformanceAdapter
from tests.provider_conformance.adapters.sandbox import serving

ADAPTER = ConformanceAdapter(
    serve=serving("cardco"),
    methods={"succeeded": "tok_visa", "declined": "tok_decline"},
    wrong_secret=lambda acct: dataclasses.replace(
        acct, webhook_secret=Secret("whsec_bm90LXRoZS1wcm92aWRlcnMtc2lnbmluZy1zZWNyZXQ=")),
)
