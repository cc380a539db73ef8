"""Every API answer is what the OpenAPI document says, on data that fills every part of it.

The fuzz test (tests/openapi/test_fuzz.py) checks the live API against the document too, but on
the few rows it can make itself; here each read answers about escalations, attempts with history,
notifications, outbox rows and operator actions, and each action answers once, and every 200 body
is validated against the response schema its operation declares (the dataclass-derived components).
"""

from __future__ import annotations

from typing import Any

import jsonschema

from paycore_console import api
from paycore_console.openapi import document
from tests.console.conftest import Browser, MakeRig
from tests.matrix.test_notification_matrix import account, live_attempt
from tests.operators.test_attach_preview import stray
from tests.operators.test_conflicts import identity_conflict
from tests.operators.test_dead_ends import dead_end
from tests.operators.test_inspection import episode, queued
from tests.support.webhooks import WebhookStack

DOCUMENT = document(api.ENDPOINTS)


def schema_of(method: str, path: str) -> dict[str, Any]:
    """The 200 body schema of an operation, with the components its references point into."""
    route = next(p for p in DOCUMENT["paths"] if _matches(p, path))
    answer = DOCUMENT["paths"][route][method]["responses"]["200"]["content"]["application/json"]["schema"]
    return {**answer, "components": DOCUMENT["components"]}


def _matches(template: str, path: str) -> bool:
    parts, given = template.split("/"), path.split("?")[0].split("/")
    return len(parts) == len(given) and all(p == g or p.startswith("{")
                                            for p, g in zip(parts, given, strict=True))


def conforms(method: str, path: str, body: Any) -> None:
    validator = jsonschema.Draft202012Validator(schema_of(method, path),
                                                format_checker=jsonschema.FormatChecker())
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(body)]
    assert errors == [], (method, path, errors[:5])


async def get(browser: Browser, path: str) -> Any:
    answer = await browser.client.get(path)
    assert answer.status_code == 200, (path, answer.text)
    conforms("get", path, answer.json())
    return answer.json()


async def post(browser: Browser, path: str, body: dict[str, Any]) -> Any:
    answer = await browser.post_json(path, body)
    assert answer.status_code == 200, (path, answer.text)
    conforms("post", path, answer.json())
    return answer.json()


def test_every_api_answer_declares_a_schema_of_its_own() -> None:
    for path, ops in DOCUMENT["paths"].items():
        for method, op in ops.items():
            schema = op["responses"]["200"]["content"]["application/json"]["schema"]
            if path.endswith("/openapi.json"):
                continue
            assert schema != {"type": "object"}, (method, path)
            assert "$ref" in str(schema) or "properties" in str(schema), (method, path)
    jsonschema.Draft202012Validator.check_schema({**schema_of("get", "/api/v1/overview")})


async def test_every_read_and_action_answers_as_its_schema_says(
    hooks: WebhookStack, make_rig: MakeRig,
) -> None:
    rig = await make_rig(hooks.clock)
    pool, clock = hooks.pool, hooks.clock
    closing = await dead_end(pool, clock, account(hooks))
    eid = await pool.fetchval("SELECT escalation_id FROM payment_escalations WHERE attempt_id = $1",
                              closing.attempt_id)
    a, b, conflict = await identity_conflict(hooks)
    stray_of = await live_attempt(hooks, customer="cus_carol")
    event_id = await stray(hooks, stray_of)
    loose = await episode(pool, clock.now(), "deadline")
    requeue, skip = (await queued(pool, clock, "order-confirmation", dead=True, attempt_id=b.attempt_id),
                     await queued(pool, clock, "order-confirmation", dead=True))
    browser = await rig.browser("ops-9")

    await post(browser, f"/api/v1/escalations/{eid}/ack", {"reason": "looking"})
    await post(browser, f"/api/v1/attempts/{closing.attempt_id}/close",
               {"reason": "customer asked", "checked_at_provider": "dashboard: nothing"})
    await post(browser, f"/api/v1/escalations/{loose}/resolve", {"reason": "handled"})
    owned = await post(browser, f"/api/v1/escalations/{conflict['escalation_id']}/resolve-conflict",
                       {"owner_attempt_id": str(b.attempt_id), "reason": "pay_b is b's"})
    assert owned["owner_state"] == "Succeeded"
    previewing = f"/api/v1/notifications/{event_id}/attach-preview?attempt_id="
    preview = await get(browser, f"{previewing}{stray_of.attempt_id}")
    assert preview["refused"] is None and preview["after"]["state"] == "Succeeded"
    refused = await get(browser, f"{previewing}{b.attempt_id}")  # b owns pay_b: another payment
    assert refused["after"] is None and refused["refused"]
    await post(browser, f"/api/v1/notifications/{event_id}/attach",
               {"attempt_id": str(stray_of.attempt_id), "reason": "reference typo"})
    await post(browser, f"/api/v1/outbox/{requeue}/requeue", {"reason": "broker back"})
    await post(browser, f"/api/v1/outbox/{skip}/skip", {"reason": "told by phone"})
    await queued(pool, clock, "order-confirmation", dead=True)  # one left to list
    await stray(hooks, await live_attempt(hooks, customer="cus_dan"), "pay_9")

    overview = await get(browser, "/api/v1/overview")
    assert overview["escalations_by_reason"] and overview["outbox"]
    listed = await get(browser, "/api/v1/escalations?include_resolved=true&limit=2")
    assert listed["items"] and listed["next_cursor"]
    detail = await get(browser, f"/api/v1/escalations/{conflict['escalation_id']}")
    assert detail["actions"]
    for attempt in (closing, a, b, stray_of):
        shown = await get(browser, f"/api/v1/attempts/{attempt.attempt_id}")
        assert shown["history"]
    assert (await get(browser, f"/api/v1/attempts/{b.attempt_id}"))["notifications"]
    assert (await get(browser, "/api/v1/notifications/unmatched"))["items"]
    assert (await get(browser, "/api/v1/outbox/dead-letters"))["items"]

