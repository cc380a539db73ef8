"""The intake's edges (issue 8): framework errors as problem+json, poison bodies recorded, not refused."""

from __future__ import annotations

from tests.support.webhooks import WebhookStack


async def test_unknown_paths_and_wrong_methods_are_problem_json(hooks: WebhookStack) -> None:
    r = await hooks.intake.get("/no/such/path")
    assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json"
    assert r.json()["type"] == "https://paycore.dev/problems/not-found"
    r = await hooks.intake.get("/webhooks/cardco")
    assert r.status_code == 405 and r.headers["content-type"] == "application/problem+json"
    assert r.headers["allow"] == "POST"
