"""Payzo's conformance adapter (the test-only fourth provider, ``tests/fourth_provider``)."""

from __future__ import annotations

import dataclasses

from paycore.settings_spec import Secret
from tests.fourth_provider import sandbox
from tests.provider_conformance.adapters import ConformanceAdapter

ADAPTER = ConformanceAdapter(
    serve=sandbox.serve,
    methods={"succeeded": "tok_visa", "declined": "tok_decline"},
    wrong_secret=lambda acct: dataclasses.replace(acct, webhook_secret=Secret("pzwh_not_its_secret")),
)
