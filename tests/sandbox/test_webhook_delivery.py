"""Webhook delivery: signing, per-account secrets, retries, give-up, faults, reset.

A real receiver (Starlette behind uvicorn) verifies every delivery with paycore's
Standard Webhooks verifier holding all three sandbox secrets, so the account of
a delivery is *which secret verified it*. It answers from a programmable queue
of statuses (a status of 0 means "hang, never answer in time").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import standardwebhooks
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from harness.servers import serve_asgi
from paycore.webhook_signatures import VerificationFailed, Verifier
from paycore_sandbox.app import create_app
from paycore_sandbox.delivery import attempt_offsets
from paycore_sandbox.settings import SandboxSettings
from tests.sandbox.support import (
    OTHER_TEST_KEY,
    STORE_LIVE_KEY,
    add_faults,
    create,
    error_of,
    events,
    eventually,
    new_reference,
    payment_body,
)

SECRETS = {f"{a.account}:{a.environment}": a.webhook_secret
           for a in SandboxSettings.default().accounts}
FAST = 0.0001  # webhook_time_scale: the 5 s first retry takes 0.5 ms


def fast(**overrides: Any) -> SandboxSettings:
    return SandboxSettings(**{"webhook_time_scale": FAST, "async_delay_s": 0.1, **overrides})


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    account: str | None  # whose secret verified it; None: not verified
    at: float  # real time of arrival

    @property
    def json(self) -> dict[str, Any]:
        data: dict[str, Any] = orjson.loads(self.body)
        return data

    @property
    def payment_id(self) -> str:
        return str(self.json["data"]["object"]["id"])


@dataclass
class Receiver:
    answers: deque[int] = field(default_factory=deque)  # then `default`
    default: int = 200
    hang_s: float = 30.0  # how long a 0 answer hangs
    received: list[Received] = field(default_factory=list)
    verifier: Verifier[str] = field(default_factory=lambda: Verifier(SECRETS.items()))

    def answer(self, *statuses: int) -> None:
        self.answers.extend(statuses)

    async def handle(self, request: Request) -> Response:
        body = await request.body()
        headers = dict(request.headers)
        try:
            account: str | None = self.verifier.verify(headers, body, now=datetime.now(UTC))
        except VerificationFailed:
            account = None
        self.received.append(Received(headers, body, account, time.time()))
        status = self.answers.popleft() if self.answers else self.default
        if status == 0:
            await asyncio.sleep(self.hang_s)
            status = 200
        return Response(status_code=status)

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/hook", self.handle, methods=["POST"])])

    def of(self, payment_id: str, type_: str | None = None) -> list[Received]:
        return [r for r in self.received if r.payment_id == payment_id
                and (type_ is None or r.json["type"] == type_)]


@dataclass
class Env:
    client: httpx.AsyncClient
    app: Starlette
    receiver: Receiver
    hook_url: str

    async def pending(self) -> int:
        count: int = (await self.client.get("/_sandbox/webhooks/pending")).json()["pending"]
        return count

    async def quiescent(self, within_s: float = 5.0) -> None:
        async def idle() -> bool:
            return await self.pending() == 0
        await eventually(idle, within_s=within_s, what="webhook deliveries to finish")

    async def deliveries(self, **filters: str) -> list[dict[str, Any]]:
        data: list[dict[str, Any]] = (await self.client.get(
            "/_sandbox/webhooks/deliveries", params=filters)).json()["data"]
        return data

    async def add_endpoint(self, url: str) -> httpx.Response:
        return await self.client.post("/_sandbox/webhooks/endpoints", json={"url": url})

    async def received(self, payment_id: str, count: int, type_: str | None = None,
                       receiver: Receiver | None = None) -> list[Received]:
        who = receiver or self.receiver

        async def enough() -> list[Received] | None:
            got = who.of(payment_id, type_)
            return got if len(got) >= count else None
        return await eventually(enough, what=f"{count} deliveries of {payment_id} {type_ or ''}")


@contextlib.asynccontextmanager
async def running(settings: SandboxSettings | None = None,
                  receiver: Receiver | None = None) -> AsyncIterator[Env]:
    receiver = receiver or Receiver()
    app = create_app(settings or fast())
    async with serve_asgi(receiver.app()) as hook_base, serve_asgi(app) as url, \
            httpx.AsyncClient(base_url=url, timeout=10) as client:
        yield Env(client, app, receiver, hook_base + "/hook")


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    async with running() as e:
        assert (await e.add_endpoint(e.hook_url)).status_code == 200
        yield e


async def _pay(env: Env, *, method: str = "tok_visa", reference: str | None = None,
               account: str = "acct_store", api_key: str | None = None) -> dict[str, Any]:
    kwargs = {"api_key": api_key} if api_key else {}
    response = await create(env.client, payment_body(reference, payment_method=method),
                            account=account, **kwargs)
    assert response.status_code in (201, 402), response.text
    payment: dict[str, Any] = response.json()
    return payment


# -- signing, accounts, sequence ----------------------------------------------


async def test_each_account_signs_with_its_own_secret(env: Env) -> None:
    assert len(set(SECRETS.values())) == 3
    store_test = await _pay(env)
    store_live = await _pay(env, api_key=STORE_LIVE_KEY)
    other = await _pay(env, account="acct_other", api_key=OTHER_TEST_KEY)
    for payment, expected, livemode in [(store_test, "acct_store:test", False),
                                        (store_live, "acct_store:live", True),
                                        (other, "acct_other:test", False)]:
        [got] = await env.received(payment["id"], 1)
        assert got.account == expected
        recorded = (await events(env.client, payment["id"]))[0]
        assert got.body == orjson.dumps(recorded)  # the recorded event, byte for byte
        assert got.json["id"] == got.headers["webhook-id"] == recorded["id"]
        assert (got.json["account"], got.json["livemode"]) == (payment["account"], livemode)
        assert got.headers["content-type"] == "application/json"
        assert abs(int(got.headers["webhook-timestamp"]) - time.time()) < 5
        # Only this account's secret verifies it.
        for name, secret in SECRETS.items():
            alone = Verifier([(name, secret)])
            if name == expected:
                assert alone.verify(got.headers, got.body, now=datetime.now(UTC)) == name
            else:
                with pytest.raises(VerificationFailed):
                    alone.verify(got.headers, got.body, now=datetime.now(UTC))
    # Interop: the reference standardwebhooks implementation agrees.
    [got] = env.receiver.of(store_live["id"])
    payload = standardwebhooks.Webhook(SECRETS["acct_store:live"]).verify(got.body, got.headers)
    assert payload["data"]["object"]["id"] == store_live["id"]


async def test_timestamp_is_real_time_not_the_sandbox_clock(env: Env) -> None:
    await env.client.post("/_sandbox/clock", json={"advance_seconds": 86400})
    payment = await _pay(env)
    [got] = await env.received(payment["id"], 1)
    assert got.account == "acct_store:test"  # within the receiver's 5-minute tolerance
    assert got.json["created"] >= time.time() + 86000  # the body keeps sandbox time


async def test_sequence_per_payment(env: Env) -> None:
    asynchronous = await _pay(env, method="tok_async")
    three_ds = await _pay(env, method="tok_3ds")
    done = await env.client.post(f"/_sandbox/payments/{three_ds['id']}/action",
                                 json={"result": "succeeded"})
    assert done.status_code == 200
    for payment, types in [(asynchronous, ["payment.processing", "payment.succeeded"]),
                           (three_ds, ["payment.requires_action", "payment.succeeded"])]:
        got = await env.received(payment["id"], 2)
        by_sequence = sorted((r.json["sequence"], r.json["type"]) for r in got)
        assert by_sequence == list(enumerate(types, start=1))
        assert all(r.account == "acct_store:test" for r in got)
        assert len({r.headers["webhook-id"] for r in got}) == 2


# -- retries -------------------------------------------------------------------


async def test_redelivery_after_500_keeps_id_and_stops_after_2xx(env: Env) -> None:
    env.receiver.answer(500, 503)
    payment = await _pay(env)
    await env.quiescent()
    got = env.receiver.of(payment["id"])
    assert len(got) == 3  # two failures, then a 2xx ends it
    [event] = await events(env.client, payment["id"])
    assert {r.headers["webhook-id"] for r in got} == {event["id"]}
    assert {r.body for r in got} == {orjson.dumps(event)}
    assert all(r.account == "acct_store:test" for r in got)
    log = await env.deliveries(payment=payment["id"])
    assert [(d["attempt"], d["status"], d["result"]) for d in log] == [
        (1, 500, "retry"), (2, 503, "retry"), (3, 200, "succeeded")]
    assert log[0]["retry_in_s"] == pytest.approx(5 * FAST)
    assert {d["webhook_id"] for d in log} == {event["id"]}
    assert "signature" not in json.dumps(log) and "whsec" not in json.dumps(log)


async def test_redeliver_on_demand(env: Env) -> None:
    payment = await _pay(env)
    [first] = await env.received(payment["id"], 1)
    [event] = await events(env.client, payment["id"])
    response = await env.client.post(f"/_sandbox/webhooks/events/{event['id']}/redeliver")
    assert response.status_code == 200
    assert len(response.json()["deliveries"]) == 1
    [_, again] = await env.received(payment["id"], 2)
    assert again.body == first.body
    assert again.headers["webhook-id"] == first.headers["webhook-id"] == event["id"]
    assert again.account == "acct_store:test"
    missing = await env.client.post("/_sandbox/webhooks/events/evt_nope/redeliver")
    assert missing.status_code == 404


async def test_gives_up_after_three_days_of_schedule() -> None:
    receiver = Receiver(default=500)
    async with running(fast(webhook_time_scale=0.000001), receiver) as env:
        await env.add_endpoint(env.hook_url)
        payment = await _pay(env)
        await env.quiescent()
        log = await env.deliveries(payment=payment["id"])
    offsets = attempt_offsets()
    assert len(offsets) == 12 and offsets[-1] <= 3 * 86400 < offsets[-1] + 36000
    assert [d["attempt"] for d in log] == list(range(1, 13))
    assert [d["result"] for d in log] == ["retry"] * 11 + ["gave_up"]
    assert [d["retry_in_s"] * 1e6 for d in log[:6]] == pytest.approx(
        [5, 300, 1800, 7200, 18000, 36000])
    assert len(receiver.of(payment["id"])) == 12


async def test_timeout_is_a_failure_and_a_slow_endpoint_blocks_no_other() -> None:
    slow, prompt = Receiver(), Receiver()
    slow.answer(0)  # hangs: the first attempt times out
    slow.hang_s = 0.6
    async with running(fast(webhook_timeout_s=0.5),
                       slow) as env, serve_asgi(prompt.app()) as prompt_base:
        await env.add_endpoint(env.hook_url)
        await env.add_endpoint(prompt_base + "/hook")
        payment = await _pay(env)
        [quick] = await env.received(payment["id"], 1, receiver=prompt)
        await env.received(payment["id"], 1)  # the slow one has it, and is not answering

        async def only_slow_pending() -> bool:
            return await env.pending() == 1
        await eventually(only_slow_pending, what="the prompt delivery to finish")
        await env.quiescent()
        log = await env.deliveries(payment=payment["id"])
    slow_log = [d for d in log if d["url"] == env.hook_url]
    assert [(d["status"], d["result"]) for d in slow_log] == [(None, "retry"), (200, "succeeded")]
    assert slow_log[0]["error"].startswith("timeout")
    assert quick.account == "acct_store:test"


# -- endpoints -----------------------------------------------------------------


async def test_two_endpoints_both_receive_every_event() -> None:
    second = Receiver()
    async with serve_asgi(second.app()) as second_base:
        settings = fast(webhook_endpoints=[second_base + "/hook"])
        async with running(settings) as env:
            assert (await env.add_endpoint(env.hook_url)).status_code == 200
            listed = (await env.client.get("/_sandbox/webhooks/endpoints")).json()["data"]
            assert listed == [second_base + "/hook", env.hook_url]
            payment = await _pay(env, method="tok_async")
            for receiver in (env.receiver, second):
                got = await env.received(payment["id"], 2, receiver=receiver)
                assert sorted(r.json["sequence"] for r in got) == [1, 2]
            cleared = await env.client.delete("/_sandbox/webhooks/endpoints")
            assert cleared.json() == {"data": []}
            quiet = await _pay(env)
            await env.quiescent()
            assert [d for d in await env.deliveries() if d["payment_id"] == quiet["id"]] == []


async def test_bad_endpoint_is_rejected(env: Env) -> None:
    for url in ["ftp://x.example/hook", "/relative", "", 5, None, "http://", "http://a b"]:
        response = await env.add_endpoint(url)  # type: ignore[arg-type]
        assert response.status_code == 400, url
        assert error_of(response)["param"] == "url"
    listed = (await env.client.get("/_sandbox/webhooks/endpoints")).json()["data"]
    assert listed == [env.hook_url]
    assert (await env.add_endpoint(env.hook_url)).json()["data"] == [env.hook_url]  # no twice


# -- faults --------------------------------------------------------------------


async def test_webhook_duplicate(env: Env) -> None:
    reference = new_reference()
    await add_faults(env.client, {"fault": "webhook_duplicate",
                                  "match": {"reference": reference}, "times": 2})
    payment = await _pay(env, reference=reference)
    await env.quiescent()
    got = env.receiver.of(payment["id"])
    [event] = await events(env.client, payment["id"])
    assert len(got) == 3  # the original plus `times` extra
    assert {r.body for r in got} == {orjson.dumps(event)}
    assert {r.headers["webhook-id"] for r in got} == {event["id"]}
    assert all(r.account == "acct_store:test" for r in got)
    kinds = sorted(d["kind"] for d in await env.deliveries(payment=payment["id"]))
    assert kinds == ["duplicate", "duplicate", "original"]
    # `times` is the number of copies, not a use count: the rule stays.
    again = await _pay(env, reference=reference)
    await env.received(again["id"], 3)
    assert [r["fault"] for r in (await env.client.get("/_sandbox/faults")).json()["rules"]] \
        == ["webhook_duplicate"]
    other = await _pay(env)
    await env.quiescent()
    assert len(env.receiver.of(other["id"])) == 1


async def test_webhook_delay_is_scaled() -> None:
    async with running(fast(webhook_time_scale=0.01)) as env:
        await env.add_endpoint(env.hook_url)
        reference = new_reference()
        await add_faults(env.client, {"fault": "webhook_delay", "match": {"reference": reference},
                                      "delay_ms": 40_000, "times": 1})  # 0.4 s real
        started = time.time()
        delayed = await _pay(env, reference=reference)
        prompt = await _pay(env, reference=reference)  # rule used up
        [early] = await env.received(prompt["id"], 1)
        [late] = await env.received(delayed["id"], 1)
    assert late.at - started >= 0.4
    assert early.at < late.at
    assert late.account == "acct_store:test"


async def test_webhook_drop_first(env: Env) -> None:
    await add_faults(env.client, {"fault": "webhook_drop_first", "match": {"any": True},
                                  "times": 1})
    dropped = await _pay(env)
    await env.quiescent()
    [got] = env.receiver.of(dropped["id"])  # the first attempt never left the sandbox
    log = await env.deliveries(payment=dropped["id"])
    assert [(d["attempt"], d["status"], d["result"]) for d in log] == [
        (1, None, "retry"), (2, 200, "succeeded")]
    assert "drop" in log[0]["error"]
    assert got.headers["webhook-id"] == log[0]["event_id"]
    assert (await env.client.get("/_sandbox/faults")).json()["rules"] == []  # one use per event
    normal = await _pay(env)
    await env.quiescent()
    assert [d["attempt"] for d in await env.deliveries(payment=normal["id"])] == [1]


async def test_webhook_unstable_ids(env: Env) -> None:
    await add_faults(env.client, {"fault": "webhook_unstable_ids", "match": {"any": True}})
    env.receiver.answer(500)
    payment = await _pay(env)
    await env.quiescent()
    [event] = await events(env.client, payment["id"])  # the record keeps its id
    await env.client.post(f"/_sandbox/webhooks/events/{event['id']}/redeliver")
    got = await env.received(payment["id"], 3)
    ids = [r.headers["webhook-id"] for r in got]
    assert len(set(ids)) == 3 and all(i.startswith("msg_") and i != event["id"] for i in ids)
    assert all(r.account == "acct_store:test" for r in got)  # signed with the fresh id
    assert {r.body for r in got} == {orjson.dumps({**event, "id": None})}
    body = got[0].json
    assert body["id"] is None
    assert (body["type"], body["sequence"], body["data"]["object"]["status"],
            body["data"]["object"]["amount"], body["data"]["object"]["currency"]) == (
        "payment.succeeded", 1, "succeeded", 4999, "EUR")
    log = await env.deliveries(payment=payment["id"])
    assert [d["webhook_id"] for d in log] == ids
    assert {d["event_id"] for d in log} == {event["id"]}


async def test_webhook_fault_probability_zero_never_fires(env: Env) -> None:
    await add_faults(env.client, {"fault": "webhook_drop_first", "match": {"any": True},
                                  "probability": 0, "times": 1})
    payment = await _pay(env)
    await env.quiescent()
    assert [d["attempt"] for d in await env.deliveries(payment=payment["id"])] == [1]
    assert len((await env.client.get("/_sandbox/faults")).json()["rules"]) == 1


async def test_webhook_faults_unused_without_endpoints() -> None:
    async with running() as env:
        await add_faults(env.client, {"fault": "webhook_drop_first", "match": {"any": True},
                                      "times": 1})
        await _pay(env)
        assert len((await env.client.get("/_sandbox/faults")).json()["rules"]) == 1
        assert await env.deliveries() == []


# -- reset and shutdown ----------------------------------------------------------


def _delivery_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks()
            if not t.done() and "WebhookSender._run" in t.get_coro().__qualname__]  # type: ignore[union-attr]


async def test_reset_cancels_pending_deliveries() -> None:
    async with running(fast(webhook_time_scale=1.0), Receiver(default=500)) as env:
        await env.add_endpoint(env.hook_url)
        payment = await _pay(env)
        await env.received(payment["id"], 1)
        assert await env.pending() == 1  # waiting 5 s for the retry
        assert len(_delivery_tasks()) == 1
        assert (await env.client.post("/_sandbox/reset")).status_code == 200
        assert await env.pending() == 0
        assert await env.deliveries() == []
        assert (await env.client.get("/_sandbox/webhooks/endpoints")).json() == {"data": []}

        async def cancelled() -> bool:
            return not _delivery_tasks()
        await eventually(cancelled, what="delivery tasks to be cancelled")


async def test_shutdown_cancels_deliveries_without_hanging() -> None:
    receiver = Receiver(default=500)
    started = time.monotonic()
    async with running(fast(webhook_time_scale=1.0), receiver) as env:
        await env.add_endpoint(env.hook_url)
        payment = await _pay(env)
        await env.received(payment["id"], 1)
        sandbox = env.app.state.sandbox
        client = sandbox.webhook_client()
    assert time.monotonic() - started < 5
    assert not _delivery_tasks()
    assert client.is_closed


# -- settings --------------------------------------------------------------------


def test_webhook_settings_from_env_and_file(tmp_path: Path) -> None:
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"webhook_endpoints": ["http://a.example/h"],
                                  "webhook_timeout_s": 2, "webhook_time_scale": 0.5}))
    from_file = SandboxSettings.from_env({"PAYCORE_SANDBOX_CONFIG": str(config)})
    assert (from_file.webhook_endpoints, from_file.webhook_timeout_s,
            from_file.webhook_time_scale) == (["http://a.example/h"], 2, 0.5)
    from_env = SandboxSettings.from_env({
        "PAYCORE_SANDBOX_CONFIG": str(config),
        "PAYCORE_SANDBOX_WEBHOOK_URLS": " https://b.example/h , http://127.0.0.1:9/x ,",
        "PAYCORE_SANDBOX_WEBHOOK_TIME_SCALE": "0.001"})
    assert from_env.webhook_endpoints == ["https://b.example/h", "http://127.0.0.1:9/x"]
    assert from_env.webhook_time_scale == 0.001
    default = SandboxSettings.default()
    assert (default.webhook_endpoints, default.webhook_time_scale,
            default.webhook_timeout_s) == ([], 1.0, 10.0)


@pytest.mark.parametrize(("config", "env", "named"), [
    ({"webhook_time_scale": 0}, {}, "webhook_time_scale"),
    ({"webhook_time_scale": -1}, {}, "webhook_time_scale"),
    ({}, {"PAYCORE_SANDBOX_WEBHOOK_TIME_SCALE": "fast"}, "PAYCORE_SANDBOX_WEBHOOK_TIME_SCALE"),
    ({}, {"PAYCORE_SANDBOX_WEBHOOK_TIME_SCALE": "nan"}, "webhook_time_scale"),
    ({"webhook_timeout_s": 0}, {}, "webhook_timeout_s"),
    ({"webhook_endpoints": "http://a.example"}, {}, "webhook_endpoints"),
    ({"webhook_endpoints": ["http://a.example", "ftp://b"]}, {}, "webhook_endpoints[1]"),
    ({}, {"PAYCORE_SANDBOX_WEBHOOK_URLS": "a.example/hook"}, "webhook_endpoints[0]"),
])
def test_bad_webhook_settings_name_the_field(tmp_path: Path, config: dict[str, object],
                                             env: dict[str, str], named: str) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=named.replace("[", r"\[").replace("]", r"\]")):
        SandboxSettings.from_env({"PAYCORE_SANDBOX_CONFIG": str(path), **env})
