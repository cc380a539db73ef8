"""The console answers every request, pages and problems alike, with an X-Request-Id."""

from __future__ import annotations

import re

from tests.console.conftest import ConsoleRig


async def test_the_console_returns_a_request_id_on_pages_and_refusals(rig: ConsoleRig) -> None:
    client = rig.client()
    health = await client.get("/healthz", headers={"X-Request-Id": "ops-1"})
    assert health.headers["x-request-id"] == "ops-1"
    refused = await client.get("/api/v1/escalations", headers={"X-Request-Id": "no\tway"})
    assert refused.status_code in (401, 403)
    assert re.fullmatch(r"[0-9a-f]{32}", refused.headers["x-request-id"])
