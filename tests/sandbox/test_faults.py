"""Fault injection: every request fault, matching, probability/times, webhook rules, and the
sandbox extensions ``lookup_stale`` and ``search_stale``."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from tests.sandbox.support import (
    OTHER_TEST_KEY,
    add_faults,
    auth,
    captured,
    create,
    error_of,
    eventually,
    ledger,
    new_key,
    payment_body,
)


async def _no_answer(impatient: httpx.AsyncClient, body: dict[str, Any], key: str) -> None:
    with pytest.raises(httpx.ReadTimeout):
        await create(impatient, body, key=key)


async def test_drop_request_is_never_processed(client: httpx.AsyncClient,
                                               impatient: httpx.AsyncClient) -> None:
    key, body = new_key(), payment_body()
    await add_faults(client, {"fault": "drop_request", "match": {"any": True}, "times": 1})
    await _no_answer(impatient, body, key)
    [seen] = await captured(client)  # it did arrive, and was never processed
    assert (seen["fault"], seen["status"]) == ("drop_request", None)
    assert await ledger(client) == []
    # Other requests were never blocked, and the key was never stored.
    retry = await create(client, body, key=key)
    assert retry.status_code == 201
    assert "Idempotent-Replayed" not in retry.headers


async def test_lose_response_is_processed(client: httpx.AsyncClient,
                                          impatient: httpx.AsyncClient) -> None:
    key, body = new_key(), payment_body()
    await add_faults(client, {"fault": "lose_response",
                              "match": {"reference": body["reference"]}, "times": 1})
    await _no_answer(impatient, body, key)
    [entry] = await ledger(client)
    assert (entry["idempotency_key"], entry["status"]) == (key, "succeeded")
    replay = await create(client, body, key=key)
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json()["id"] == entry["id"]


async def test_late_arrival_is_processed_later(client: httpx.AsyncClient,
                                               impatient: httpx.AsyncClient) -> None:
    key, body = new_key(), payment_body()
    await add_faults(client, {"fault": "late_arrival", "match": {"any": True}, "times": 1,
                              "delay_ms": 1500})
    await _no_answer(impatient, body, key)
    assert await ledger(client) == []  # not yet

    async def arrived() -> list[dict[str, Any]]:
        return await ledger(client)

    [entry] = await eventually(arrived, what="the late arrival to be processed")
    assert entry["idempotency_key"] == key


async def test_a_late_arrival_lands_when_released_not_before(client: httpx.AsyncClient,
                                                            impatient: httpx.AsyncClient) -> None:
    key, body = new_key(), payment_body()
    await add_faults(client, {"fault": "late_arrival", "match": {"any": True}, "times": 1,
                              "delay_ms": 600_000})  # far longer than the test
    await _no_answer(impatient, body, key)
    assert await ledger(client) == []
    released = await client.post("/_sandbox/late-arrivals/release")
    assert released.status_code == 200

    async def arrived() -> list[dict[str, Any]]:
        return await ledger(client)

    [entry] = await eventually(arrived, what="the released arrival to be processed")
    assert entry["idempotency_key"] == key


async def test_late_arrival_after_retry_does_not_double_charge(
        client: httpx.AsyncClient, impatient: httpx.AsyncClient) -> None:
    key, body = new_key(), payment_body()
    await add_faults(client, {"fault": "late_arrival", "match": {"any": True}, "times": 1,
                              "delay_ms": 800})
    await _no_answer(impatient, body, key)
    retry = await create(client, body, key=key)
    assert retry.status_code == 201

    async def late_one_processed() -> dict[str, Any] | None:
        late = (await captured(client))[0]
        return late if late["status"] is not None else None

    late = await eventually(late_one_processed, what="the late arrival to be processed")
    # It found the retry's completed key and replayed instead of charging again.
    assert (late["fault"], late["status"], late["replayed"]) == ("late_arrival", 201, True)
    assert len(await ledger(client)) == 1


async def test_delay_answers_late(client: httpx.AsyncClient,
                                  impatient: httpx.AsyncClient) -> None:
    body = payment_body()
    await add_faults(client, {"fault": "delay", "match": {"any": True}, "times": 2,
                              "delay_ms": 600})
    await _no_answer(impatient, body, new_key())  # longer than the client's patience
    assert len(await ledger(client)) == 1          # ...but processed
    answered = await create(client, payment_body())
    assert answered.status_code == 201


async def test_malformed_body(client: httpx.AsyncClient) -> None:
    key, body = new_key(), payment_body()
    await add_faults(client, {"fault": "malformed_body", "match": {"any": True}, "times": 1})
    response = await create(client, body, key=key)
    assert response.status_code == 201
    assert response.content
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(response.content)
    [entry] = await ledger(client)
    replay = await create(client, body, key=key)
    assert replay.json()["id"] == entry["id"]


async def test_empty_body(client: httpx.AsyncClient) -> None:
    key, body = new_key(), payment_body()
    await add_faults(client, {"fault": "empty_body", "match": {"any": True}, "times": 1})
    response = await create(client, body, key=key)
    assert (response.status_code, response.content) == (201, b"")
    [entry] = await ledger(client)
    assert (await create(client, body, key=key)).json()["id"] == entry["id"]


async def test_faults_apply_to_lookups(client: httpx.AsyncClient) -> None:
    payment = (await create(client, payment_body())).json()
    await add_faults(client, {"fault": "not_processed_503",
                              "match": {"reference": payment["reference"]}, "times": 1},
                     {"fault": "error_500_after",
                      "match": {"operation": "lookup"}, "times": 1})
    by_id = await client.get(f"/v1/payments/{payment['id']}", headers=auth())
    assert by_id.status_code == 503  # matched through the payment found
    by_ref = await client.get("/v1/payments", params={"reference": "x"}, headers=auth())
    assert by_ref.status_code == 500
    assert error_of(by_ref)["code"] == "internal"
    assert (await client.get(f"/v1/payments/{payment['id']}", headers=auth())).status_code \
        == 200


async def _rules(client: httpx.AsyncClient) -> list[tuple[str, int | None]]:
    listed = (await client.get("/_sandbox/faults")).json()["rules"]
    return [(r["fault"], r["times"]) for r in listed]


async def test_lookup_stale_answers_a_real_miss_to_lookups_by_id_only(
        client: httpx.AsyncClient) -> None:
    stale = (await create(client, payment_body())).json()
    other = (await create(client, payment_body())).json()
    await add_faults(client, {"fault": "lookup_stale",
                              "match": {"reference": stale["reference"]}, "times": 2})

    # By reference it is always there, and that does not use the rule up.
    by_ref = await client.get("/v1/payments", params={"reference": stale["reference"]},
                              headers=auth())
    assert (by_ref.status_code, by_ref.json()) == (200, {"data": [stale]})
    assert await _rules(client) == [("lookup_stale", 2)]

    # By id: exactly the answer to a payment that does not exist.
    hidden = await client.get(f"/v1/payments/{stale['id']}", headers=auth())
    missing = await client.get("/v1/payments/pay_doesnotexist", headers=auth())
    assert hidden.status_code == missing.status_code == 404
    assert hidden.headers["content-type"] == missing.headers["content-type"]
    assert hidden.json() == {"error": {"type": "invalid_request", "code": "resource_missing",
                                       "message": f"No such payment: {stale['id']}"}}
    assert missing.json() == {"error": {"type": "invalid_request", "code": "resource_missing",
                                        "message": "No such payment: pay_doesnotexist"}}
    # Another reference is not matched; the rule fires `times` times, then is gone.
    assert (await client.get(f"/v1/payments/{other['id']}", headers=auth())).json() == other
    assert await _rules(client) == [("lookup_stale", 1)]
    again = await client.get(f"/v1/payments/{stale['id']}", headers=auth())
    assert again.status_code == 404
    assert await _rules(client) == []
    found = await client.get(f"/v1/payments/{stale['id']}", headers=auth())
    assert (found.status_code, found.json()) == (200, stale)
    lookups = [(q["path"], q["status"]) for q in await captured(client) if q["method"] == "GET"]
    assert lookups == [("/v1/payments", 200), (f"/v1/payments/{stale['id']}", 404),
                       ("/v1/payments/pay_doesnotexist", 404), (f"/v1/payments/{other['id']}", 200),
                       (f"/v1/payments/{stale['id']}", 404), (f"/v1/payments/{stale['id']}", 200)]
    assert len(await ledger(client)) == 2  # hidden, never removed


async def test_lookup_stale_follows_match_times_and_probability(client: httpx.AsyncClient) -> None:
    payment = (await create(client, payment_body())).json()
    path = f"/v1/payments/{payment['id']}"
    await add_faults(client,
                     {"fault": "lookup_stale", "match": {"any": True}, "probability": 0},
                     {"fault": "lookup_stale", "match": {"account": "acct_other"}},
                     {"fault": "lookup_stale", "match": {"operation": "create"}})
    assert (await client.get(path, headers=auth())).status_code == 200
    assert (await create(client, payment_body())).status_code == 201  # never touches creates
    await client.delete("/_sandbox/faults")

    await add_faults(client, {"fault": "lookup_stale",
                              "match": {"account": "acct_store", "operation": "lookup"},
                              "times": 1})
    # A payment that does not exist is a miss already: the rule is not used up by it.
    assert (await client.get("/v1/payments/pay_doesnotexist", headers=auth())).status_code == 404
    assert await _rules(client) == [("lookup_stale", 1)]
    assert (await client.get(path, headers=auth())).status_code == 404
    assert (await client.get(path, headers=auth())).status_code == 200


async def test_lookup_stale_is_not_used_up_by_a_lookup_that_failed_first(client: httpx.AsyncClient) -> None:
    payment = (await create(client, payment_body())).json()
    path = f"/v1/payments/{payment['id']}"
    await add_faults(client, {"fault": "error_500_after", "match": {"operation": "lookup"}, "times": 1},
                     {"fault": "lookup_stale", "match": {"any": True}, "times": 1})
    assert (await client.get(path, headers=auth())).status_code == 500
    assert await _rules(client) == [("lookup_stale", 1)]  # the lookup never reached the data
    assert (await client.get(path, headers=auth())).status_code == 404
    assert (await client.get(path, headers=auth())).status_code == 200


async def test_search_stale_answers_a_real_miss_to_lookups_by_reference_only(
        client: httpx.AsyncClient) -> None:
    unindexed = (await create(client, payment_body())).json()
    other = (await create(client, payment_body())).json()
    await add_faults(client, {"fault": "search_stale",
                              "match": {"reference": unindexed["reference"]}, "times": 2})

    # By id it is always there, and that does not use the rule up.
    by_id = await client.get(f"/v1/payments/{unindexed['id']}", headers=auth())
    assert (by_id.status_code, by_id.json()) == (200, unindexed)
    assert await _rules(client) == [("search_stale", 2)]

    # By reference: exactly the answer for a reference no payment carries.
    hidden = await client.get("/v1/payments", params={"reference": unindexed["reference"]}, headers=auth())
    missing = await client.get("/v1/payments", params={"reference": "ref_nobody"}, headers=auth())
    assert (hidden.status_code, hidden.content) == (missing.status_code, missing.content)
    assert (hidden.status_code, hidden.json()) == (200, {"data": []})
    # Another reference is not matched, nor is a reference no payment carries (a miss already).
    assert (await client.get("/v1/payments", params={"reference": other["reference"]},
                             headers=auth())).json() == {"data": [other]}
    assert await _rules(client) == [("search_stale", 1)]
    assert (await client.get("/v1/payments", params={"reference": unindexed["reference"]},
                             headers=auth())).json() == {"data": []}
    assert await _rules(client) == []
    indexed = await client.get("/v1/payments", params={"reference": unindexed["reference"]}, headers=auth())
    assert (indexed.status_code, indexed.json()) == (200, {"data": [unindexed]})
    assert len(await ledger(client)) == 2  # hidden, never removed


async def test_match_by_account_and_operation(client: httpx.AsyncClient) -> None:
    await add_faults(client, {"fault": "rate_limit",
                              "match": {"account": "acct_other", "operation": "create"}})
    mine = await create(client, payment_body())
    assert mine.status_code == 201
    theirs = await create(client, payment_body(), account="acct_other", api_key=OTHER_TEST_KEY)
    assert theirs.status_code == 429
    lookup = await client.get("/v1/payments", params={"reference": "x"},
                              headers=auth("acct_other", OTHER_TEST_KEY))
    assert lookup.status_code == 200


async def test_times_and_probability(client: httpx.AsyncClient) -> None:
    await add_faults(client, {"fault": "not_processed_503", "match": {"any": True},
                              "probability": 0},
                     {"fault": "rate_limit", "match": {"any": True}, "times": 2})
    statuses = [(await create(client, payment_body())).status_code for _ in range(3)]
    assert statuses == [429, 429, 201]
    rules = (await client.get("/_sandbox/faults")).json()["rules"]
    assert [r["fault"] for r in rules] == ["not_processed_503"]  # exhausted rule removed
    assert rules[0]["fired"] == 0  # listed with how often it fired: never, at probability 0
    cleared = await client.delete("/_sandbox/faults")
    assert cleared.json() == {"rules": []}


async def test_webhook_faults_are_accepted_and_stored(client: httpx.AsyncClient) -> None:
    rules = [{"fault": f, "match": {"any": True}, "times": 1} for f in (
        "webhook_duplicate", "webhook_delay", "webhook_drop_first", "webhook_unstable_ids")]
    await add_faults(client, *rules)
    listed = (await client.get("/_sandbox/faults")).json()["rules"]
    assert [r["fault"] for r in listed] == [r["fault"] for r in rules]
    assert listed[1]["delay_ms"] == 1000
    # They never touch /v1 requests.
    assert (await create(client, payment_body())).status_code == 201


@pytest.mark.parametrize(("rules", "param"), [
    ([{"fault": "explode", "match": {"any": True}}], "rules[0].fault"),
    ([{"fault": "delay"}], "rules[0].match"),
    ([{"fault": "delay", "match": {"any": False}}], "rules[0].match.any"),
    ([{"fault": "delay", "match": {"colour": "red"}}], "rules[0].match.colour"),
    ([{"fault": "delay", "match": {"operation": "settle"}}], "rules[0].match.operation"),
    ([{"fault": "delay", "match": {"any": True}, "probability": 2}], "rules[0].probability"),
    ([{"fault": "delay", "match": {"any": True}, "times": 0}], "rules[0].times"),
    ([{"fault": "delay", "match": {"any": True}, "delay_ms": -1}], "rules[0].delay_ms"),
    ([{"fault": "delay", "match": {"any": True}}, "nope"], "rules[1]"),
    ("nope", "rules"),
])
async def test_invalid_rules_are_rejected_whole(client: httpx.AsyncClient, rules: Any,
                                                param: str) -> None:
    response = await client.post("/_sandbox/faults", json={"rules": rules})
    assert response.status_code == 400
    assert error_of(response)["param"] == param
    assert (await client.get("/_sandbox/faults")).json() == {"rules": []}


async def test_each_rule_says_how_often_it_fired(client: httpx.AsyncClient) -> None:
    await add_faults(client, {"fault": "rate_limit", "match": {"operation": "create"}, "probability": 1},
                     {"fault": "lookup_stale", "match": {"any": True}},
                     {"fault": "webhook_duplicate", "match": {"any": True}, "times": 2})
    assert [(await create(client, payment_body())).status_code for _ in range(3)] == [429, 429, 429]
    listed = (await client.get("/_sandbox/faults")).json()["rules"]
    # Fired when it acted, and only then: no lookup met lookup_stale, no event was sent.
    assert [(r["fault"], r["fired"]) for r in listed] == [
        ("rate_limit", 3), ("lookup_stale", 0), ("webhook_duplicate", 0)]
