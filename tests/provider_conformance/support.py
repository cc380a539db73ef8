"""What the conformance suite does the same way for every provider: an attempt's stored
request built by the provider's own client, a send under a fault, a webhook caught as the
provider delivers it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, cast
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from harness.servers import serve_asgi
from paycore.clock import FakeClock
from paycore.domain import Attempt, AttemptState, OperationKind, ProviderOutcome
from paycore.providers.base import OperationCalls, OperationOutcome, Provider, StoredRequest
from paycore.providers.package import ProviderAccountConfig, ProviderPackage
from tests.provider_conformance.adapters import ConformanceAdapter, ProviderServer, adapter_for

AMOUNT: Final = 4999  # a tampered notification says 4998
CURRENCY: Final = "EUR"
BUDGET_S: Final = 15.0
CEILING_S: Final = 30.0  # the client's own ceiling of one call
# The faults that leave the call without an answer until its budget runs out; the others end it.
HELD: Final = frozenset({"drop_request", "lose_response", "delay"})
# The faults that let the request run before the answer is lost or late.
AFTER_PROCESSING: Final = frozenset({"lose_response", "delay", "error_500_after", "malformed_body",
                                     "empty_body"})


def new_reference(prefix: str) -> str:
    """A fresh reference: 16 random hex digits split by a letter, so that no run of digits in it
    looks like a card number (which a provider's client refuses to send)."""
    digits = uuid.uuid4().hex
    return f"{prefix}_{digits[:8]}x{digits[8:16]}"


async def eventually(predicate: Callable[[], Awaitable[bool]], what: str, within_s: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not await predicate():
        if loop.time() > deadline:
            raise AssertionError(f"not reached in time: {what}")
        await asyncio.sleep(0.005)


@dataclass
class Catcher:
    """A webhook endpoint that records every delivery (and answers as Adyen expects, which
    every provider takes as delivered)."""

    url: str = ""
    deliveries: list[tuple[dict[str, str], bytes]] = field(default_factory=list)

    async def receive(self, request: Request) -> Response:
        self.deliveries.append((dict(request.headers), await request.body()))
        return PlainTextResponse("[accepted]")


@dataclass
class Conformance:
    """One provider under test: its package, adapter, server, and client over two accounts."""

    package: ProviderPackage
    adapter: ConformanceAdapter
    server: ProviderServer
    catcher: Catcher
    clock: FakeClock
    store: ProviderAccountConfig
    other: ProviderAccountConfig
    client: Provider

    @property
    def name(self) -> str:
        return self.package.name

    def client_of(self, *accounts: ProviderAccountConfig) -> Provider:
        return self.package.client(list(accounts), self.clock, max_call_duration_s=CEILING_S)

    def stored(self, outcome: str = "succeeded", *, account: ProviderAccountConfig | None = None,
               manual_capture: bool = False) -> StoredRequest:
        """A new attempt's stored request, its body built by the provider's own client (which
        raises ``ValueError`` for a hold it cannot make)."""
        acct = account or self.store
        reference = new_reference("ref")
        method = self.adapter.methods[outcome]
        body = self.client.build_request_body(acct, amount_minor=AMOUNT, currency=CURRENCY,
                                              reference=reference, payment_method=method,
                                              manual_capture=manual_capture)
        return StoredRequest(uuid.uuid4(), acct.provider_account, acct.payments_endpoint, acct.api_version,
                             str(uuid.uuid4()), body, reference, AMOUNT, CURRENCY)

    async def create(self, stored: StoredRequest, *, first_send: bool = True) -> ProviderOutcome:
        return await self.client.create_payment(stored, budget_s=BUDGET_S, first_send=first_send)

    async def sends(self, stored: StoredRequest) -> list[str]:
        """The create requests of ``stored``'s attempt that reached the provider."""
        return [b for b in await self.server.received("POST", urlsplit(stored.endpoint).path)
                if b == stored.request_body]

    async def payments_of(self, reference: str) -> list[dict[str, Any]]:
        return [p for p in await self.server.payments() if p["reference"] == reference]

    async def under_fault(self, fault: str, call: Callable[[], Awaitable[Any]], *,
                          reached: Callable[[], Awaitable[bool]]) -> Any:
        """``call`` meeting ``fault``: a held call's budget runs out once the request ``reached``
        the provider (and, after processing, ran there); any other ends by itself."""
        task = asyncio.ensure_future(call())
        if fault in HELD:
            async def in_flight() -> bool:
                return task.done() or (self.clock.pending_timers > 0 and await reached())

            await eventually(in_flight, f"the request to meet {fault}")
            assert not task.done(), f"answered despite {fault}: {task.result()}"
            self.clock.advance(BUDGET_S)
        return await task

    async def create_under(self, fault: str, stored: StoredRequest) -> ProviderOutcome:
        await self.server.fault(fault, operation="create", delay_ms=2_000 if fault == "delay" else None)

        async def reached() -> bool:
            if fault in AFTER_PROCESSING:
                return bool(await self.payments_of(stored.client_reference))
            return bool(await self.sends(stored))

        outcome = await self.under_fault(fault, lambda: self.create(stored), reached=reached)
        return cast(ProviderOutcome, outcome)

    async def delivery_of(self, payment_id: str) -> tuple[dict[str, str], bytes]:
        """The provider's webhook delivery about ``payment_id`` (the first that names it)."""
        async def delivered() -> bool:
            return any(payment_id.encode() in body for _, body in self.catcher.deliveries)

        await eventually(delivered, f"a webhook about {payment_id}")
        return next((h, b) for h, b in self.catcher.deliveries if payment_id.encode() in b)

    def attempt(self, stored: StoredRequest, state: AttemptState = AttemptState.UNKNOWN) -> Attempt:
        """The attempt whose stored request ``stored`` is, as recorded after a send without an answer."""
        now = self.clock.now()
        return Attempt(stored.attempt_id, "ord_1", "cus_1", 1, stored.provider_account, stored.endpoint,
                       stored.api_version, stored.client_reference, stored.idempotency_key,
                       stored.request_body, stored.amount_minor, stored.currency, state, None, None, None,
                       None, now, now, now, None, None, None, None, None, now, 1)

    # -- after the payment ------------------------------------------------------------------------

    def operations(self) -> OperationCalls | None:
        """The client's captures, cancels and refunds; None for a provider without them."""
        return cast(OperationCalls, self.client) if hasattr(self.client, "send_operation") else None

    def stored_operation(self, ops: OperationCalls, kind: OperationKind, payment_id: str,
                         amount: int) -> StoredRequest:
        """A capture's, cancel's or refund's stored request, its body built by the provider's client."""
        reference = new_reference(kind.value)
        body = ops.build_operation_body(kind, provider_payment_id=payment_id, amount_minor=amount,
                                        reference=reference, currency=CURRENCY, account=self.store)
        return StoredRequest(uuid.uuid4(), self.store.provider_account,
                             ops.operation_endpoint(self.store, kind, payment_id),
                             self.store.api_version, str(uuid.uuid4()), body, reference, amount, CURRENCY)

    async def operate(self, ops: OperationCalls, kind: OperationKind, stored: StoredRequest,
                      payment_id: str, *, first_send: bool = True) -> OperationOutcome:
        return await ops.send_operation(stored, kind, provider_payment_id=payment_id,
                                        budget_s=BUDGET_S, first_send=first_send)

    async def hold(self) -> ProviderOutcome | str:
        """A payment authorized and held for a capture later, or why the client builds no hold."""
        try:
            stored = self.stored("succeeded", manual_capture=True)
        except ValueError as refused:
            return f"{type(refused).__name__}: {refused}"
        return await self.create(stored)


@asynccontextmanager
async def running_conformance(package: ProviderPackage) -> AsyncIterator[Conformance]:
    """``package``'s wire served by its adapter, its client over two test accounts, and a
    webhook endpoint the provider delivers to."""
    adapter = adapter_for(package.name)
    catcher = Catcher()
    hooks = Starlette(routes=[Route("/hook", catcher.receive, methods=["POST"])])
    async with adapter.serve() as server, serve_asgi(hooks) as hooks_url:
        catcher.url = hooks_url + "/hook"
        await server.subscribe(catcher.url)
        clock = FakeClock(current=datetime.now(UTC))
        store, other = server.account("acct_store"), server.account("acct_other")
        client = package.client([store, other], clock, max_call_duration_s=CEILING_S)
        try:
            yield Conformance(package, adapter, server, catcher, clock, store, other, client)
        finally:
            await client.aclose()
