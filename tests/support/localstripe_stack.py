"""localstripe, an independent Stripe fake, as a real server; and the stack that runs paycore against it.

- :func:`running_localstripe`: ``localstripe`` (1.15.10) as a child process on a free port,
  its state in a private file (``tests/support/localstripe_server.py``), polled until it
  answers, stopped at the end.
- :class:`DroppingProxy`: a real HTTP/1.1 server in front of localstripe that forwards each
  request unchanged and, when told, loses one create: forwards it and closes the connection
  instead of answering (the payment exists, checkout never hears of it), or closes before
  forwarding (the request never arrived). Every request it saw is recorded.
- :class:`WebhookRecorder`: a real endpoint localstripe signs and posts its events to, so a
  test can hand localstripe's exact bytes and ``Stripe-Signature`` to the intake when the
  flow needs them there (localstripe sends each event once, about a second after it, and
  never retries), and post them again.
- :func:`running_localstripe_stack`: checkout and the webhook intake as real HTTP servers
  with Stripe alone configured through its own ``PAYCORE_STRIPE_*`` settings, pointed at the
  proxy; recovery workers from the registry, all on one :class:`~paycore.clock.FakeClock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final
from uuid import UUID

import asyncpg
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from harness.servers import free_port, serve_asgi, stop_process
from paycore.attempts import Attempt, get_attempt
from paycore.clock import FakeClock
from paycore.config import Settings, load_settings
from paycore_checkout.app import create_app as create_checkout_app
from paycore_recovery.loop import RecoveryWorker
from paycore_recovery.settings import RecoverySettings
from paycore_webhooks.app import create_app as create_webhooks_app
from tests.support.providers import STORED_ROWS, ProviderShop, deliveries_counted, recovery_worker
from tests.support.stack import JWT_SECRET, eventually

API_KEY: Final = "sk_test_localstripe_paycore"
WEBHOOK_SECRET: Final = "whsec_localstripe_paycore_0123456789"
ACCOUNT: Final = "acct_store"
PROVIDER_ACCOUNT: Final = f"stripe:{ACCOUNT}:test"
CREATE_PATH: Final = "/v1/payment_intents"
# localstripe's test cards (resources.PaymentMethod).
CARDS: Final = {"visa": "4242424242424242", "decline": "4000000000000341", "3ds": "4000002500003155"}
_SERVER: Final = Path(__file__).with_name("localstripe_server.py")


# --------------------------------------------------------------------------- localstripe itself


@contextlib.contextmanager
def running_localstripe(workdir: Path) -> Iterator[str]:
    """localstripe on a free port, working in ``workdir`` (its state file is there); its base URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(_SERVER), str(workdir / "localstripe.pickle"), "--port", str(port),
         "--from-scratch"],
        cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_answering(base_url, proc, within_s=30)
        yield base_url
    finally:
        stop_process(proc)


def _wait_until_answering(base_url: str, proc: subprocess.Popen[bytes], *, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    with httpx.Client(trust_env=False) as http:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"localstripe exited with {proc.returncode}")
            try:
                http.get(base_url + "/v1/payment_intents/pi_probe", auth=(API_KEY, ""))
                return
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


async def payment_method(base_url: str, card: str) -> str:
    """A PaymentMethod for a localstripe test card (what Stripe.js hands the storefront)."""
    async with httpx.AsyncClient(trust_env=False) as http:
        r = await http.post(base_url + "/v1/payment_methods", auth=(API_KEY, ""), data={
            "type": "card", "card[number]": CARDS.get(card, card), "card[exp_month]": "12",
            "card[exp_year]": "2030", "card[cvc]": "123"})
    r.raise_for_status()
    pm: str = r.json()["id"]
    return pm


async def register_webhook(base_url: str, name: str, url: str, *, secret: str = WEBHOOK_SECRET,
                           events: tuple[str, ...] = ("payment_intent.succeeded",)) -> None:
    """Have localstripe sign and post ``events`` to ``url`` (``name`` replaces an earlier one)."""
    async with httpx.AsyncClient(trust_env=False) as http:
        r = await http.post(f"{base_url}/_config/webhooks/{name}",
                            data={"url": url, "secret": secret, "events[]": list(events)})
    r.raise_for_status()


async def intents_with_reference(base_url: str, reference: str) -> list[dict[str, Any]]:
    """Every PaymentIntent localstripe holds for the reference (its list, filtered here: no Search)."""
    async with httpx.AsyncClient(trust_env=False) as http:
        r = await http.get(base_url + CREATE_PATH, params={"limit": "100"}, auth=(API_KEY, ""))
    r.raise_for_status()
    return [i for i in r.json()["data"] if (i.get("metadata") or {}).get("paycore_reference") == reference]


# --------------------------------------------------------------------------- the proxy


@dataclass(frozen=True)
class Seen:
    method: str
    path: str  # without the query
    fate: str  # answered | response-lost | dropped


class DroppingProxy:
    """A real HTTP/1.1 server forwarding to ``upstream``; it can lose the next create.

    It reads each request whole (``Content-Length`` bodies: what the SDK and httpx send),
    forwards it unchanged but for the hop-by-hop headers, and writes the answer back, on a
    keep-alive connection. :meth:`lose_next_create` and :meth:`drop_next_create` arm it for
    the next ``POST /v1/payment_intents``.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.seen: list[Seen] = []
        self._next_create: str | None = None
        self._server: asyncio.Server | None = None
        self._http = httpx.AsyncClient(base_url=upstream, trust_env=False, timeout=30)
        self.url = ""

    def lose_next_create(self) -> None:
        """Forward the next create to localstripe, then close without answering."""
        self._next_create = "response-lost"

    def drop_next_create(self) -> None:
        """Close the next create's connection before anything reaches localstripe."""
        self._next_create = "dropped"

    def creates(self) -> list[Seen]:
        return [s for s in self.seen if (s.method, s.path) == ("POST", CREATE_PATH)]

    def reached_localstripe(self) -> list[Seen]:
        return [s for s in self.seen if s.fate != "dropped"]

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        await self._http.aclose()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._one(reader, writer):
                pass
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away
        finally:
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Handle one request; ``False`` when the connection is to end."""
        head = await reader.readuntil(b"\r\n\r\n")
        request_line, *header_lines = head.decode("latin-1").split("\r\n")[:-2]
        method, target, _ = request_line.split(" ", 2)
        headers = [tuple(line.split(":", 1)) for line in header_lines]
        by_name = {name.strip().lower(): value.strip() for name, value in headers}
        assert "transfer-encoding" not in by_name, "the proxy reads Content-Length bodies only"
        body = await reader.readexactly(int(by_name.get("content-length", "0")))
        path = target.split("?", 1)[0]

        fate = "answered"
        if (method, path) == ("POST", CREATE_PATH) and self._next_create is not None:
            fate, self._next_create = self._next_create, None
        self.seen.append(Seen(method, path, fate))
        if fate == "dropped":
            return False  # closed with the request unread by anyone

        forwarded = [(n.strip(), v.strip()) for n, v in headers
                     if n.strip().lower() not in ("host", "connection", "content-length", "keep-alive")]
        answer = await self._http.request(method, target, headers=forwarded, content=body)
        if fate == "response-lost":
            return False  # localstripe acted on it; its answer goes nowhere
        kept = [(n, v) for n, v in answer.headers.multi_items()
                if n.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding")]
        lines = [f"HTTP/1.1 {answer.status_code} {answer.reason_phrase}",
                 *(f"{n}: {v}" for n, v in kept), f"content-length: {len(answer.content)}"]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + answer.content)
        await writer.drain()
        return True


# --------------------------------------------------------------------------- webhooks


@dataclass
class WebhookRecorder:
    """A real endpoint localstripe posts its signed events to: each delivery's headers and bytes."""

    deliveries: list[tuple[dict[str, str], bytes]] = field(default_factory=list)

    async def handle(self, request: Request) -> Response:
        self.deliveries.append((dict(request.headers), await request.body()))
        return Response(status_code=200)

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/events", self.handle, methods=["POST"])])

    async def event_about(self, reference: str, *, within_s: float = 20) -> tuple[dict[str, str], bytes]:
        """localstripe's one delivery naming ``reference`` (it posts about a second after the event)."""
        async def arrived() -> list[tuple[dict[str, str], bytes]]:
            return [d for d in self.deliveries if reference.encode() in d[1]]

        [delivery] = await eventually(arrived, within_s=within_s, what=f"localstripe's event for {reference}")
        return delivery


# --------------------------------------------------------------------------- the stack


@dataclass
class LocalstripeStack:
    """Checkout, the intake and recovery workers against localstripe (through the proxy)."""

    localstripe: str
    proxy: DroppingProxy
    recorder: WebhookRecorder
    shop: ProviderShop
    intake: httpx.AsyncClient
    clock: FakeClock
    pool: asyncpg.Pool
    settings: Settings
    intake_app: Starlette
    recovery: RecoverySettings = field(default_factory=RecoverySettings)
    workers: list[RecoveryWorker] = field(default_factory=list)

    async def pay(self, card: str = "visa") -> tuple[Attempt, httpx.Response]:
        order = await self.shop.create_order()
        r = await self.shop.pay_with(order, await payment_method(self.localstripe, card))
        assert "attempt_id" in r.json(), r.text
        return await get_attempt(self.pool, UUID(r.json()["attempt_id"])), r

    def worker(self, owner: str = "w1") -> RecoveryWorker:
        worker = recovery_worker(self.settings, self.pool, self.clock, self.recovery, owner)
        self.workers.append(worker)
        return worker

    async def current(self, attempt: Attempt) -> Attempt:
        return await get_attempt(self.pool, attempt.attempt_id)

    async def make_due(self, attempt: Attempt) -> None:
        due = (await self.current(attempt)).next_check_at
        if due is not None and due > self.clock.now():
            self.clock.advance((due - self.clock.now()).total_seconds())

    async def deliver(self, delivery: tuple[dict[str, str], bytes]) -> httpx.Response:
        """Post localstripe's delivery (its bytes and ``Stripe-Signature``) to ``/webhooks/stripe``."""
        headers, body = delivery
        return await self.intake.post("/webhooks/stripe", content=body, headers={
            "Stripe-Signature": headers["stripe-signature"], "Content-Type": headers["content-type"]})

    def delivered_count(self, result: str) -> float:
        return deliveries_counted(self.intake_app.state.metrics_registry, result)

    async def transitions_to(self, attempt: Attempt, state: str) -> int:
        return int(await self.pool.fetchval(
            "SELECT count(*) FROM payment_attempt_events WHERE attempt_id = $1 AND kind = 'transition'"
            " AND detail ->> 'to' = $2", attempt.attempt_id, state))

    async def notifications(self, attempt: Attempt) -> list[str]:
        rows = await self.pool.fetch("SELECT notification_key FROM payment_attempt_events"
                                     " WHERE kind = 'notification' AND attempt_id = $1", attempt.attempt_id)
        return [r["notification_key"] for r in rows]

    async def open_escalations(self) -> list[str]:
        rows = await self.pool.fetch("SELECT escalation_key FROM payment_escalations"
                                     " WHERE resolved_at IS NULL ORDER BY escalation_id")
        return [r["escalation_key"] for r in rows]

    async def stored_rows(self) -> dict[str, int]:
        """How many rows each table the intake writes holds."""
        return dict(await self.pool.fetchrow(STORED_ROWS))

    async def aclose(self) -> None:
        for worker in self.workers:
            await worker.client.aclose()


def localstripe_settings(api_base: str, db_dsn: str) -> Settings:
    """Stripe alone, configured as a store would, with localstripe (through the proxy) as its API."""
    return load_settings({
        "PAYCORE_DATABASE_URL": db_dsn, "PAYCORE_JWT_SECRET": JWT_SECRET,
        "PAYCORE_DEFAULT_PROVIDER": "stripe", "PAYCORE_STRIPE_API_KEY": API_KEY,
        "PAYCORE_STRIPE_API_BASE": api_base, "PAYCORE_STRIPE_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "PAYCORE_STRIPE_ACCOUNT": ACCOUNT,
    })


async def running_localstripe_stack(localstripe: str, pool: asyncpg.Pool,
                                    db_dsn: str) -> AsyncIterator[LocalstripeStack]:
    """Checkout and the intake against ``localstripe`` through a :class:`DroppingProxy`; localstripe
    posts its ``payment_intent.succeeded`` events to a :class:`WebhookRecorder`."""
    clock = FakeClock(current=datetime.now(UTC))  # the intake checks localstripe's wall-clock signatures
    proxy = DroppingProxy(localstripe)
    await proxy.start()
    recorder = WebhookRecorder()
    settings = localstripe_settings(proxy.url, db_dsn)
    checkout = create_checkout_app(settings, clock=clock, pool=pool)
    intake_app = create_webhooks_app(settings, clock=clock, pool=pool)
    try:
        async with serve_asgi(recorder.app()) as recorder_url, serve_asgi(checkout) as checkout_url, \
                serve_asgi(intake_app) as intake_url:
            # One name per module's localstripe: each test's recorder replaces the last one.
            await register_webhook(localstripe, "paycore-flows", recorder_url + "/events")
            async with httpx.AsyncClient(base_url=checkout_url, timeout=30) as shop_http, \
                    httpx.AsyncClient(base_url=intake_url, timeout=30) as intake_http:
                stack = LocalstripeStack(localstripe, proxy, recorder, ProviderShop(shop_http, "cus_alice"),
                                         intake_http, clock, pool, settings, intake_app)
                try:
                    yield stack
                finally:
                    await stack.aclose()
    finally:
        await proxy.aclose()
