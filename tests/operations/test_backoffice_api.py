"""The store's back office over HTTP (issue 29): refunds, captures and voids through checkout,
with service credentials, against the sandbox on real PostgreSQL.

A credential with the route's scope or nothing (401/403, a customer's token refused); a required
Idempotency-Key per endpoint and credential (a replay sends nothing new); 201 for a final state,
202 for a live one; a refusal is a 409 problem naming its rule and records nothing.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest

from paycore import service_credentials
from paycore.service_credentials import Issued
from tests.support.stack import Stack, token_for

from .support import eventually, order_status, paid_order, refund_posts

ALL = ("refunds", "captures", "voids", "read")


async def issue(stack: Stack, name: str = "warehouse", scopes: tuple[str, ...] = ALL,
                client: str | None = None) -> Issued:
    return await service_credentials.issue(stack.pool, name, scopes, issued_by="test", now=stack.clock.now(),
                                           client=client)


def auth(credential: Issued | str, key: str | None = None) -> dict[str, str]:
    secret = credential.secret if isinstance(credential, Issued) else credential
    return {"Authorization": f"Bearer {secret}", **({"Idempotency-Key": key} if key else {})}


async def post(stack: Stack, path: str, body: dict[str, Any] | None,
               headers: dict[str, str]) -> httpx.Response:
    return await stack.shop.http.post(path, json=body, headers=headers)


async def operation_count(stack: Stack) -> int:
    count: int = await stack.pool.fetchval("SELECT count(*) FROM payment_operations")
    return count


def assert_problem(r: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = r.json()
    assert body["type"] == f"https://paycore.dev/problems/{slug}", body
    return body


# --------------------------------------------------------------------------- a refund


async def test_a_refund_is_201_with_its_location_and_reads_back_with_its_timeline(stack: Stack) -> None:
    order_id, attempt_id = await paid_order(stack, 5000)
    cred = await issue(stack, scopes=("refunds", "read"))
    r = await post(stack, f"/orders/{order_id}/refunds",
                   {"amount_minor": 1500, "reason": "damaged in transit"}, auth(cred, "rf-1"))
    assert r.status_code == 201, r.text
    body = r.json()
    assert r.headers["location"] == f"/refunds/{body['operation_id']}"
    assert {k: body[k] for k in ("kind", "order_id", "attempt_id", "amount_minor", "currency", "state",
                                 "requested_by")} == {
        "kind": "refund", "order_id": order_id, "attempt_id": str(attempt_id), "amount_minor": 1500,
        "currency": "EUR", "state": "Succeeded", "requested_by": "backoffice:warehouse"}
    assert body["provider_operation_id"] and body["provider_status"] == "succeeded"
    moves = [(e["kind"], e["from"], e["to"]) for e in body["timeline"]]
    assert moves == [("transition", None, "NotStarted"), ("send_intent", None, None),
                     ("transition", "Started", "Succeeded")]
    assert await order_status(stack.pool, order_id) == "PartiallyRefunded"
    # Nothing of the stored request reaches the store.
    assert "idempotency_key" not in r.text and "request_body" not in r.text

    read = await stack.shop.http.get(r.headers["location"], headers=auth(cred))
    assert read.status_code == 200 and read.json() == body
    listed = await stack.shop.http.get(f"/orders/{order_id}/operations", headers=auth(cred))
    assert listed.status_code == 200 and listed.json() == {"order_id": order_id, "items": [body]}
    # Its id names a refund, not a capture or a void.
    assert_problem(await stack.shop.http.get(f"/captures/{body['operation_id']}", headers=auth(cred)),
                   404, "operation-not-found")
    [used] = await service_credentials.list_credentials(stack.pool)
    assert used.last_used_at == stack.clock.now()


async def test_the_same_key_replays_the_stored_answer_and_sends_nothing_new(stack: Stack) -> None:
    order_id, _ = await paid_order(stack, 5000)
    cred = await issue(stack)
    first = await post(stack, f"/orders/{order_id}/refunds", {"amount_minor": 1500}, auth(cred, "rf-1"))
    again = await post(stack, f"/orders/{order_id}/refunds", {"amount_minor": 1500}, auth(cred, "rf-1"))
    assert first.status_code == again.status_code == 201
    assert again.content == first.content and again.headers["location"] == first.headers["location"]
    assert again.headers["idempotent-replayed"] == "true"
    assert len(await refund_posts(stack)) == 1 and await operation_count(stack) == 1
    # The key with another body is another request: refused, nothing sent.
    other = await post(stack, f"/orders/{order_id}/refunds", {"amount_minor": 1600}, auth(cred, "rf-1"))
    assert_problem(other, 422, "idempotency-key-reused")
    assert len(await refund_posts(stack)) == 1 and await operation_count(stack) == 1


async def test_the_same_key_at_two_endpoints_is_two_intents(stack: Stack) -> None:
    order_id, _ = await paid_order(stack, 5000)
    cred = await issue(stack)
    refund = await post(stack, f"/orders/{order_id}/refunds", {"amount_minor": 1000}, auth(cred, "k"))
    assert refund.status_code == 201, refund.text
    # Not the refund's answer replayed, not a reused key: the capture is judged on its own.
    capture = await post(stack, f"/orders/{order_id}/captures", {"amount_minor": 1000}, auth(cred, "k"))
    assert_problem(capture, 409, "payment-not-capturable")
    assert "idempotent-replayed" not in capture.headers
    # And the key is the client's: another back office's same key is its own request.
    other = await issue(stack, "warehouse-2")
    second = await post(stack, f"/orders/{order_id}/refunds", {"amount_minor": 1000}, auth(other, "k"))
    assert second.status_code == 201 and second.json()["operation_id"] != refund.json()["operation_id"]
    assert second.json()["requested_by"] == "backoffice:warehouse-2"
    assert len(await refund_posts(stack)) == 2


async def test_every_post_needs_an_idempotency_key_and_a_valid_body(stack: Stack) -> None:
    order_id, _ = await paid_order(stack, 5000)
    cred = await issue(stack)
    assert_problem(await post(stack, f"/orders/{order_id}/refunds", {"amount_minor": 100}, auth(cred)),
                   400, "idempotency-key-required")
    for body in ({"amount_minor": 0}, {"amount_minor": "100"}, {"amount_minor": 1.5}, {"amount_minor": True},
                 {}, {"amount_minor": 100, "currency": "EUR"}, {"amount_minor": 100, "reason": ""},
                 {"amount_minor": 100, "reason": "x" * 201}, {"amount_minor": 100, "reason": "a\nb"}):
        assert_problem(await post(stack, f"/orders/{order_id}/refunds", body, auth(cred, "k")), 400,
                       "invalid-body")
    assert_problem(await post(stack, f"/orders/{order_id}/voids", {"amount_minor": 1}, auth(cred, "v")),
                   400, "invalid-body")
    assert_problem(await post(stack, "/orders/no-such-order/refunds", {"amount_minor": 1}, auth(cred, "n")),
                   404, "order-not-found")
    assert await operation_count(stack) == 0 and await refund_posts(stack) == []


# --------------------------------------------------------------------------- who may call


async def test_without_a_valid_credential_it_is_401_and_nothing_is_sent(
    stack: Stack, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("DEBUG")
    order_id, _ = await paid_order(stack, 5000)
    cred = await issue(stack)
    wrong = f"{cred.secret[:-4]}AAAA"
    unknown = f"pcsc_{uuid.uuid4().hex}_{'A' * 43}"
    for headers in ({"Idempotency-Key": "k"}, auth(wrong, "k"), auth(unknown, "k"),
                    auth("pcsc_nonsense", "k"),
                    {"Authorization": "Basic d2FyZWhvdXNlOng=", "Idempotency-Key": "k"}):
        r = await post(stack, f"/orders/{order_id}/refunds", {"amount_minor": 100}, headers)
        assert_problem(r, 401, "unauthenticated")
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert cred.secret[5:] not in r.text
    assert_problem(await stack.shop.http.get(f"/orders/{order_id}/operations"), 401, "unauthenticated")
    assert await operation_count(stack) == 0 and await refund_posts(stack) == []
    # A good secret, and the wrong ones presented, are never logged.
    assert (await post(stack, f"/orders/{order_id}/refunds", {"amount_minor": 100},
                       auth(cred, "ok"))).status_code == 201
    logged = caplog.text + "".join(str(r.__dict__) for r in caplog.records)
    assert "backoffice:warehouse" in logged  # the requester is, by name
    for secret in (cred.secret, wrong, unknown):
        assert secret[5:] not in logged


async def test_a_credential_without_the_routes_scope_is_403(stack: Stack) -> None:
    order_id, _ = await paid_order(stack, 5000)
    reader = await issue(stack, "reporting", ("read",))
    refunder = await issue(stack, "refunds-only", ("refunds",))
    denied = await post(stack, f"/orders/{order_id}/refunds", {"amount_minor": 100}, auth(reader, "k"))
    assert assert_problem(denied, 403, "insufficient-scope")["scope"] == "refunds"
    assert 'scope="refunds"' in denied.headers["www-authenticate"]
    capture = await post(stack, f"/orders/{order_id}/captures", {"amount_minor": 100}, auth(refunder, "k"))
    assert_problem(capture, 403, "insufficient-scope")
    assert_problem(await post(stack, f"/orders/{order_id}/voids", {}, auth(refunder, "k")),
                   403, "insufficient-scope")
    done = await post(stack, f"/orders/{order_id}/refunds", {"amount_minor": 100}, auth(refunder, "k"))
    assert done.status_code == 201
    # Reading needs `read`: the refunder cannot poll what it asked for, the reader can.
    assert_problem(await stack.shop.http.get(done.headers["location"], headers=auth(refunder)),
                   403, "insufficient-scope")
    assert (await stack.shop.http.get(done.headers["location"], headers=auth(reader))).status_code == 200
    assert len(await refund_posts(stack)) == 1


async def test_a_customers_token_is_refused_with_403(stack: Stack) -> None:
    order_id, _ = await paid_order(stack, 5000)
    customer = {"Authorization": f"Bearer {token_for('cus_alice')}", "Idempotency-Key": "k"}
    assert_problem(await post(stack, f"/orders/{order_id}/refunds", {"amount_minor": 100}, customer),
                   403, "customer-token-refused")
    assert_problem(await stack.shop.http.get(f"/orders/{order_id}/operations", headers=customer),
                   403, "customer-token-refused")
    # A token that verifies as nothing is not a customer's either: 401.
    forged = {"Authorization": f"Bearer {token_for('cus_alice', secret='not-the-secret-' * 3)}",
              "Idempotency-Key": "k"}
    assert_problem(await post(stack, f"/orders/{order_id}/refunds", {"amount_minor": 100}, forged),
                   401, "unauthenticated")
    assert await operation_count(stack) == 0


async def test_a_revoked_credential_is_refused_at_once_while_its_successor_works(stack: Stack) -> None:
    order_id, _ = await paid_order(stack, 5000)
    old = await issue(stack, "warehouse-2024")
    assert (await post(stack, f"/orders/{order_id}/refunds", {"amount_minor": 100},
                       auth(old, "a"))).status_code == 201
    new = await issue(stack, "warehouse-2025")  # rotation: both valid meanwhile
    assert (await post(stack, f"/orders/{order_id}/refunds", {"amount_minor": 100},
                       auth(new, "b"))).status_code == 201
    assert (await post(stack, f"/orders/{order_id}/refunds", {"amount_minor": 100},
                       auth(old, "c"))).status_code == 201
    await service_credentials.revoke(stack.pool, "warehouse-2024", revoked_by="test", now=stack.clock.now())
    assert_problem(await post(stack, f"/orders/{order_id}/refunds", {"amount_minor": 100}, auth(old, "d")),
                   401, "unauthenticated")
    # Its stored answers are not served to it either: the key is the credential's.
    assert_problem(await post(stack, f"/orders/{order_id}/refunds", {"amount_minor": 100}, auth(old, "a")),
                   401, "unauthenticated")
    assert (await post(stack, f"/orders/{order_id}/refunds", {"amount_minor": 100},
                       auth(new, "d"))).status_code == 201
    assert len(await refund_posts(stack)) == 4


# --------------------------------------------------------------------------- refusals and live answers


async def test_an_over_refund_is_a_409_naming_the_rule_and_records_nothing(stack: Stack) -> None:
    order_id, _ = await paid_order(stack, 5000)
    cred = await issue(stack)
    r = await post(stack, f"/orders/{order_id}/refunds", {"amount_minor": 5001}, auth(cred, "k"))
    body = assert_problem(r, 409, "amount-exceeds-refundable")
    assert body["code"] == "amount-exceeds-refundable" and body["detail"]
    assert await operation_count(stack) == 0 and await refund_posts(stack) == []
    assert await order_status(stack.pool, order_id) == "Paid"
    # The refusal is that request's answer, replayed under its key.
    again = await post(stack, f"/orders/{order_id}/refunds", {"amount_minor": 5001}, auth(cred, "k"))
    assert again.status_code == 409 and again.headers["idempotent-replayed"] == "true"


async def test_an_unpaid_order_has_nothing_to_refund_capture_or_void(stack: Stack) -> None:
    order_id = await stack.shop.create_order(amount_minor=5000)
    cred = await issue(stack)
    for path, body, slug in (("refunds", {"amount_minor": 1}, "payment-not-captured"),
                             ("captures", {"amount_minor": 1}, "payment-not-capturable"),
                             ("voids", {}, "payment-not-cancelable")):
        assert_problem(await post(stack, f"/orders/{order_id}/{path}", body, auth(cred, path)), 409, slug)
    listed = await stack.shop.http.get(f"/orders/{order_id}/operations", headers=auth(cred))
    assert listed.json() == {"order_id": order_id, "items": []}
    assert await operation_count(stack) == 0


async def test_a_refund_whose_answer_is_lost_is_202_unknown_with_its_location(stack: Stack) -> None:
    order_id, _ = await paid_order(stack, 5000)
    cred = await issue(stack)
    await stack.sandbox.fault("lose_response", match={"operation": "refund"}, times=1)
    asking = asyncio.create_task(post(stack, f"/orders/{order_id}/refunds", {"amount_minor": 5000},
                                      auth(cred, "lost")))
    await eventually(lambda: refund_posts(stack), what="the refund's POST")
    stack.clock.advance(stack.settings.budgets.call_s)  # the call budget fires: no answer
    r = await asking
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["state"] == "Unknown" and r.headers["location"] == f"/refunds/{body['operation_id']}"
    read = await stack.shop.http.get(r.headers["location"], headers=auth(cred))
    assert read.status_code == 200 and read.json()["state"] == "Unknown"
    # It holds its amount: nothing more is refundable until evidence settles it.
    more = await post(stack, f"/orders/{order_id}/refunds", {"amount_minor": 1}, auth(cred, "more"))
    assert_problem(more, 409, "amount-exceeds-refundable")
    assert len(await refund_posts(stack)) == 1


# --------------------------------------------------------------------------- captures and voids


async def test_a_payment_captured_up_front_cannot_be_captured_or_voided(stack: Stack) -> None:
    order_id, _ = await paid_order(stack, 5000)
    cred = await issue(stack)
    capture = await post(stack, f"/orders/{order_id}/captures", {"amount_minor": 5000}, auth(cred, "c"))
    assert assert_problem(capture, 409, "payment-not-capturable")["code"] == "payment-not-capturable"
    void = await post(stack, f"/orders/{order_id}/voids", {}, auth(cred, "v"))
    assert assert_problem(void, 409, "payment-not-cancelable")["code"] == "payment-not-cancelable"
    assert await operation_count(stack) == 0 and await order_status(stack.pool, order_id) == "Paid"


async def test_a_hold_is_captured_and_another_voided_through_the_api(stack: Stack) -> None:
    cred = await issue(stack)
    captured_order, _ = await paid_order(stack, 5000, capture="manual")
    capture = await post(stack, f"/orders/{captured_order}/captures", {"amount_minor": 3000}, auth(cred, "c"))
    assert capture.status_code == 201, capture.text
    assert capture.headers["location"] == f"/captures/{capture.json()['operation_id']}"
    assert capture.json()["kind"] == "capture" and capture.json()["state"] == "Succeeded"
    assert await order_status(stack.pool, captured_order) == "Paid"

    voided_order, _ = await paid_order(stack, 5000, capture="manual")
    void = await post(stack, f"/orders/{voided_order}/voids", None, auth(cred, "v"))  # no body at all
    assert void.status_code == 201, void.text
    assert void.headers["location"] == f"/voids/{void.json()['operation_id']}"
    assert void.json()["kind"] == "cancel" and void.json()["amount_minor"] == 5000
    assert await order_status(stack.pool, voided_order) == "Voided"
    read = await stack.shop.http.get(void.headers["location"], headers=auth(cred))
    assert read.status_code == 200 and read.json()["state"] == "Succeeded"


async def test_a_retry_under_the_rotated_credential_is_the_same_request(stack: Stack) -> None:
    # The answer to a partial refund is lost; the back office rotates its credential and retries
    # under the new one, with the same key: one refund, the first answer replayed.
    order_id, _ = await paid_order(stack, 5000)
    old = await issue(stack, "warehouse-2024", client="warehouse")
    first = await post(stack, f"/orders/{order_id}/refunds", {"amount_minor": 1000}, auth(old, "rf-9"))
    assert first.status_code == 201, first.text
    new = await issue(stack, "warehouse-2025", client="warehouse")
    await service_credentials.revoke(stack.pool, "warehouse-2024", revoked_by="test", now=stack.clock.now())
    retry = await post(stack, f"/orders/{order_id}/refunds", {"amount_minor": 1000}, auth(new, "rf-9"))
    assert retry.status_code == 201 and retry.headers["idempotent-replayed"] == "true", retry.text
    assert retry.json()["operation_id"] == first.json()["operation_id"]
    assert len(await refund_posts(stack)) == 1 and await operation_count(stack) == 1
