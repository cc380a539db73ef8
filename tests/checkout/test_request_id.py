"""X-Request-Id on the running checkout and webhook intake: kept, generated, replaced, always returned,
and carried by every line logged while the request runs (with the order and attempt it pays)."""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from paycore.logs import configure_logging
from tests.support.webhooks import WebhookStack

GENERATED = re.compile(r"[0-9a-f]{32}")


@pytest.fixture
def logged() -> Iterator[io.StringIO]:
    """Every JSON line the in-process servers log, at DEBUG."""
    stream = io.StringIO()
    root = logging.getLogger()
    level, before = root.level, list(root.handlers)
    configure_logging("test", logging.DEBUG, "json", stream=stream)
    try:
        yield stream
    finally:
        for handler in [h for h in root.handlers if h not in before]:
            root.removeHandler(handler)
        root.setLevel(level)


def lines(stream: io.StringIO, **having: str) -> list[dict[str, Any]]:
    parsed = [orjson.loads(line) for line in stream.getvalue().splitlines()]
    return [p for p in parsed if all(p.get(k) == v for k, v in having.items())]


async def test_request_ids_on_checkout_and_the_intake_and_in_their_lines(
        hooks: WebhookStack, logged: io.StringIO) -> None:
    """One stack for all (starting one costs seconds): a sane id is kept and every line of the
    payment carries it with the order and attempt; else one is generated; always returned."""
    order_id = await hooks.shop.create_order()
    paid = await hooks.shop.pay(order_id, headers={"X-Request-Id": "shop-42:pay.1"})
    assert paid.status_code == 200, paid.text
    assert paid.headers["x-request-id"] == "shop-42:pay.1"
    attempt_id = paid.json()["attempt_id"]
    during = lines(logged, request_id="shop-42:pay.1")
    assert during, logged.getvalue()[-2000:]
    provider_lines = [p for p in during if p["logger"].startswith("paycore.providers")]
    assert provider_lines and all(p.get("order_id") == order_id and p.get("attempt_id") == attempt_id
                                  for p in provider_lines), during

    # Generated when missing, replaced when not sane, returned on problem answers too.
    shop = hooks.shop
    missing = await shop.http.get("/healthz")
    assert GENERATED.fullmatch(missing.headers["x-request-id"])
    for garbage in ("a b", "x" * 129, "id;drop", ""):
        replaced = await shop.http.get("/healthz", headers={"X-Request-Id": garbage})
        assert GENERATED.fullmatch(replaced.headers["x-request-id"]), garbage
    refused = await shop.http.get("/orders/ord_nope", headers={"X-Request-Id": "r-401"})
    assert refused.status_code == 401
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert refused.headers.get_list("x-request-id") == ["r-401"]

    # The intake: returned, and its rejection line carries it.
    rejected = await hooks.intake.post("/webhooks/cardco", content=b"{}",
                                       headers={"X-Request-Id": "hook-7", "content-type": "application/json"})
    assert rejected.status_code in (400, 401) and rejected.headers["x-request-id"] == "hook-7"
    rejection = lines(logged, request_id="hook-7", logger="paycore.webhooks")
    assert any("rejected" in p["message"] for p in rejection)
