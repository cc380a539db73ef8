"""One stack per provider: the same black-box flows for Cardco, Stripe and Adyen.

The sandbox speaks each provider's wire as a *dialect* over one core (one ledger, one
idempotency store, one request capture, the same faults). A :class:`ProviderStack` runs
the sandbox, checkout and the webhook intake as real HTTP servers on free ports, on
real PostgreSQL and a :class:`~paycore.clock.FakeClock`, configured with exactly one
provider through that provider's own ``PAYCORE_<PROVIDER>_*`` settings (credentials read
from the running sandbox's ``GET /_sandbox/accounts``, as a developer would). Recovery
workers use the registry's provider for those settings, so nothing here names an adapter
class. The sandbox delivers webhooks in the provider's dialect to the intake's
``/webhooks/<provider>`` once a test subscribes.

A :class:`Wire` says what differs per provider at the edges a black-box test sees: the
create path, the storefront's payment methods, how the provider signs a notification, and
whether it can be asked about a payment at all.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import hashlib
import hmac
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final
from uuid import UUID

import asyncpg
import httpx
import orjson
from prometheus_client import CollectorRegistry, generate_latest

from harness.servers import serve_asgi
from paycore.attempts import Attempt, get_attempt
from paycore.clock import FakeClock
from paycore.config import Settings, load_settings
from paycore.providers.base import PaymentMethod
from paycore.providers.registry import for_accounts
from paycore.webhook_signatures import signed_headers
from paycore_checkout.app import create_app as create_checkout_app
from paycore_recovery.loop import Pass, RecoveryWorker
from paycore_recovery.metrics import RecoveryMetrics
from paycore_recovery.settings import RecoverySettings
from paycore_sandbox.app import create_app as create_sandbox_app
from paycore_sandbox.settings import SandboxSettings
from paycore_webhooks.app import create_app as create_webhooks_app
from tests.support.stack import JWT_SECRET, Sandbox, Shop, eventually

PROVIDERS: Final = ("cardco", "stripe", "adyen")
ACCOUNT: Final = "acct_store"  # the sandbox's test account; every provider's account in these flows
RETURN_URL: Final = "https://shop.example/return"
# Stripe's Search: usually searchable in under a minute, up to an hour behind during incidents
# (docs/providers.md [S4]). The sandbox indexes a new PaymentIntent this long (sandbox clock)
# after creating it: longer than recovery's first look (PAYCORE_RECHECK_AFTER_S, 60 s), shorter
# than PAYCORE_RECOVERY_SEARCH_LAG_S (300 s), so a first look misses and a conclusive one finds.
SANDBOX_SEARCH_LAG_S: Final = 120.0


@dataclass(frozen=True)
class Wire:
    """What a black-box test sees differ between providers."""

    name: str
    create_path: str
    # The storefront's payment method for each sandbox outcome ("rejected": refused by the
    # provider's validation before anything executes).
    methods: Mapping[str, PaymentMethod]
    # Whether the provider can be asked about a payment (Adyen cannot: its notifications and
    # a same-key resend are the only evidence).
    lookups: bool

    def method(self, outcome: str) -> PaymentMethod:
        return self.methods[outcome]

    @property
    def provider_account(self) -> str:
        return f"{self.name}:{ACCOUNT}:test"


def _adyen_card(token: str) -> dict[str, Any]:
    # What Adyen's Drop-in posts: encrypted fields, never a card number. The sandbox reads
    # its outcome from the token in encryptedCardNumber.
    return {"type": "scheme", "encryptedCardNumber": token, "encryptedExpiryMonth": "adyenjs_0_1_25$m",
            "encryptedExpiryYear": "adyenjs_0_1_25$y", "encryptedSecurityCode": "adyenjs_0_1_25$c"}


WIRES: Final[Mapping[str, Wire]] = {
    "cardco": Wire("cardco", "/v1/payments",
                   {"visa": "tok_visa", "decline": "tok_decline", "3ds": "tok_3ds",
                    "rejected": "tok_expired", "async": "tok_async"}, lookups=True),
    "stripe": Wire("stripe", "/v1/payment_intents",
                   {"visa": "pm_card_visa", "decline": "pm_card_chargeDeclined",
                    "3ds": "pm_card_threeDSecure2Required", "rejected": "pm_card_unknown",
                    "async": "pm_card_async"}, lookups=True),
    "adyen": Wire("adyen", "/v71/payments",
                  {"visa": _adyen_card("tok_visa"), "decline": _adyen_card("tok_decline"),
                   "3ds": _adyen_card("tok_3ds"), "rejected": _adyen_card("tok_expired"),
                   "async": _adyen_card("tok_async")}, lookups=False),
}


def provider_env(wire: Wire, sandbox_url: str, credentials: Mapping[str, Any]) -> dict[str, str]:
    """The provider's own settings, as a store would set them, pointing at the sandbox.

    ``credentials`` is the account's row of ``GET /_sandbox/accounts``.
    """
    env = {"PAYCORE_DEFAULT_PROVIDER": wire.name}
    if wire.name == "cardco":
        env.update(PAYCORE_CARDCO_BASE_URL=sandbox_url, PAYCORE_CARDCO_ACCOUNT=ACCOUNT,
                   PAYCORE_CARDCO_ENVIRONMENT="test", PAYCORE_CARDCO_API_KEY=credentials["api_key"],
                   PAYCORE_CARDCO_WEBHOOK_SECRET=credentials["webhook_secret"])
    elif wire.name == "stripe":
        stripe = credentials["stripe"]
        env.update(PAYCORE_STRIPE_API_KEY=stripe["api_key"], PAYCORE_STRIPE_API_BASE=sandbox_url,
                   PAYCORE_STRIPE_WEBHOOK_SECRET=stripe["webhook_secret"], PAYCORE_STRIPE_ACCOUNT=ACCOUNT)
    else:
        adyen = credentials["adyen"]
        env.update(PAYCORE_ADYEN_API_KEY=adyen["api_key"],
                   PAYCORE_ADYEN_MERCHANT_ACCOUNT=adyen["merchant_account"],
                   PAYCORE_ADYEN_BASE_URL=sandbox_url, PAYCORE_ADYEN_HMAC_KEY=adyen["hmac_key"],
                   PAYCORE_ADYEN_WEBHOOK_USERNAME=adyen["webhook_username"],
                   PAYCORE_ADYEN_WEBHOOK_PASSWORD=adyen["webhook_password"],
                   PAYCORE_ADYEN_RETURN_URL=RETURN_URL)
    return env


# --------------------------------------------------------------------------- signing, as each provider does


@dataclass(frozen=True)
class Signer:
    """Signs a notification body the way the provider does, with given credentials.

    Tests use it to forge (wrong credentials) and, for contrast, to sign correctly.
    """

    wire: Wire
    credentials: Mapping[str, Any]

    def cardco(self, body: bytes, *, secret: str | None = None, at: int) -> dict[str, str]:
        event_id = str(orjson.loads(body).get("id") or "msg_forged")
        return signed_headers(secret or self.credentials["webhook_secret"], event_id, at, body)

    def stripe(self, body: bytes, *, secret: str | None = None, at: int) -> dict[str, str]:
        key = (secret or self.credentials["stripe"]["webhook_secret"]).encode()
        v1 = hmac.new(key, f"{at}.".encode() + body, hashlib.sha256).hexdigest()
        return {"Stripe-Signature": f"t={at},v1={v1}", "Content-Type": "application/json"}

    def adyen_item(self, item: Mapping[str, Any], *, hmac_key: str | None = None) -> dict[str, Any]:
        """The item with its ``additionalData.hmacSignature`` (Adyen's signing string)."""
        fields = dict(item, value=item["amount"]["value"], currency=item["amount"]["currency"])
        signing = ":".join(str(fields.get(name, "")) for name in (
            "pspReference", "originalReference", "merchantAccountCode", "merchantReference", "value",
            "currency", "eventCode", "success"))
        key = binascii.a2b_hex(hmac_key or self.credentials["adyen"]["hmac_key"])
        signature = base64.b64encode(hmac.new(key, signing.encode(), hashlib.sha256).digest()).decode()
        return {**item, "additionalData": {**item.get("additionalData", {}), "hmacSignature": signature}}

    def adyen_auth(self, *, password: str | None = None) -> dict[str, str]:
        adyen = self.credentials["adyen"]
        userpass = f"{adyen['webhook_username']}:{password or adyen['webhook_password']}".encode()
        return {"Authorization": "Basic " + base64.b64encode(userpass).decode(),
                "Content-Type": "application/json"}


def adyen_batch(*items: Mapping[str, Any]) -> bytes:
    """A test-mode notification of ``items``, as Adyen posts it."""
    return orjson.dumps({"live": "false",
                         "notificationItems": [{"NotificationRequestItem": i} for i in items]})


# --------------------------------------------------------------------------- the sandbox, any dialect


class ProviderSandbox(Sandbox):
    """The sandbox's control API, with the provider's create path."""

    def __init__(self, url: str, wire: Wire) -> None:
        super().__init__(url)
        self.wire = wire

    async def create_requests(self) -> list[dict[str, Any]]:
        return [q for q in await self.requests()
                if q["method"] == "POST" and q["path"] == self.wire.create_path]

    async def events_of(self, payment_id: str) -> list[dict[str, Any]]:
        r = await self.http.get("/_sandbox/events", params={"payment": payment_id})
        r.raise_for_status()
        return list(r.json()["data"])

    async def deliveries(self, **params: str) -> list[dict[str, Any]]:
        r = await self.http.get("/_sandbox/webhooks/deliveries", params=params)
        r.raise_for_status()
        return list(r.json()["data"])

    async def redeliver(self, event_id: str) -> None:
        (await self.http.post(f"/_sandbox/webhooks/events/{event_id}/redeliver")).raise_for_status()

    async def complete_action(self, payment_id: str, result: str = "succeeded") -> None:
        r = await self.http.post(f"/_sandbox/payments/{payment_id}/action", json={"result": result})
        r.raise_for_status()

    async def advance(self, seconds: float) -> None:
        r = await self.http.post("/_sandbox/clock", json={"advance_seconds": seconds})
        r.raise_for_status()

    async def pending_deliveries(self) -> int:
        r = await self.http.get("/_sandbox/webhooks/pending")
        r.raise_for_status()
        return int(r.json()["pending"])


class ProviderShop(Shop):
    """A storefront whose payment method may be a token or the provider's encrypted object."""

    async def pay_with(self, order_id: str, method: PaymentMethod) -> httpx.Response:
        return await self.http.post(f"/orders/{order_id}/payment", json={"payment_method": method},
                                    headers=self.auth)


# --------------------------------------------------------------------------- the stack

# Every table the webhook intake writes to.
STORED_ROWS: Final = """
SELECT (SELECT count(*) FROM payment_attempt_events) AS events,
       (SELECT count(*) FROM payment_escalations) AS escalations,
       (SELECT count(*) FROM outbox_messages) AS outbox,
       (SELECT count(*) FROM webhook_deliveries_seen) AS replay_window
"""


def recovery_worker(settings: Settings, pool: asyncpg.Pool, clock: FakeClock, recovery: RecoverySettings,
                    owner: str) -> RecoveryWorker:
    """A recovery worker calling the registry's provider for ``settings``' accounts."""
    client = for_accounts(settings.accounts, clock, max_call_duration_s=settings.budgets.max_call_duration_s)
    return RecoveryWorker(pool=pool, client=client, clock=clock, settings=settings, recovery=recovery,
                          metrics=RecoveryMetrics(), owner=owner)


def deliveries_counted(intake_metrics: CollectorRegistry, result: str) -> float:
    """The intake's own count of deliveries that ended ``result`` (what its ``/metrics`` serves)."""
    line = f'paycore_webhook_deliveries_total{{result="{result}"}} '
    text = generate_latest(intake_metrics).decode()
    return sum(float(row.removeprefix(line)) for row in text.splitlines() if row.startswith(line))


@dataclass
class ProviderStack:
    """One provider's sandbox dialect, checkout and intake, and recovery workers on the fake clock.

    Sends are counted from the sandbox's capture (a send is a create request carrying the
    attempt's stored bytes), payments from its ledger.
    """

    wire: Wire
    sandbox: ProviderSandbox
    shop: ProviderShop
    intake: httpx.AsyncClient
    intake_url: str
    clock: FakeClock
    pool: asyncpg.Pool
    settings: Settings
    signer: Signer
    recovery: RecoverySettings = field(default_factory=RecoverySettings)
    workers: list[RecoveryWorker] = field(default_factory=list)
    intake_metrics: CollectorRegistry | None = None  # what the intake's admin port serves

    def intake_metrics_text(self) -> str:
        assert self.intake_metrics is not None
        return generate_latest(self.intake_metrics).decode()

    # -- time: the fake clock and the sandbox's clock move together ------------------------------

    async def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass for paycore and the provider alike."""
        self.clock.advance(seconds)
        await self.sandbox.advance(seconds)

    async def make_due(self, attempt: Attempt) -> None:
        """Move time to the attempt's next check (if it is in the future)."""
        due = (await self.current(attempt)).next_check_at
        if due is not None and due > self.clock.now():
            await self.advance((due - self.clock.now()).total_seconds())

    # -- paying ----------------------------------------------------------------------------------

    async def pay(self, outcome: str = "visa") -> httpx.Response:
        order = await self.shop.create_order()
        return await self.shop.pay_with(order, self.wire.method(outcome))

    async def unknown_via_checkout(self, fault: str, outcome: str = "visa",
                                   **rule: Any) -> tuple[Attempt, httpx.Response]:
        """A checkout whose first send ended without an answer (``fault`` at the sandbox, once,
        with ``rule``'s other fields): the storefront's 202 and the attempt it reports."""
        await self.sandbox.fault(fault, times=1, match={"dialect": self.wire.name, "operation": "create"},
                                 **rule)
        order = await self.shop.create_order()
        pending = asyncio.create_task(self.shop.pay_with(order, self.wire.method(outcome)))

        async def sent_or_answered() -> bool:
            in_flight = len(await self.sandbox.create_requests()) >= 1 and self.clock.pending_timers > 0
            return in_flight or pending.done()

        await eventually(sent_or_answered, what="the first send to be in flight")
        assert not pending.done(), f"checkout answered before its budget ran out: {pending.result().text}"
        self.clock.advance(self.settings.budgets.call_s)  # checkout's call budget runs out
        r = await pending
        await self.sandbox.advance(self.settings.budgets.call_s)  # the provider's time passes too
        assert (r.status_code, r.json()["state"]) == (202, "Unknown"), r.text
        return await get_attempt(self.pool, UUID(r.json()["attempt_id"])), r

    # -- recovery --------------------------------------------------------------------------------

    def worker(self, owner: str = "w1") -> RecoveryWorker:
        """A recovery worker with the registry's provider for this stack's settings."""
        worker = recovery_worker(self.settings, self.pool, self.clock, self.recovery, owner)
        self.workers.append(worker)
        return worker

    async def recover(self, attempt: Attempt, worker: RecoveryWorker, *, passes: int = 5) -> list[Pass]:
        """Run due passes (moving time to each next check) until the attempt is resolved."""
        seen: list[Pass] = []
        for _ in range(passes):
            await self.make_due(attempt)
            seen.extend(await worker.run_pass())
            if (await self.current(attempt)).state.value not in ("Started", "Unknown"):
                return seen
        raise AssertionError(f"not resolved after {passes} passes: {seen}")

    # -- webhooks --------------------------------------------------------------------------------

    async def subscribe(self) -> None:
        """Have the sandbox deliver this provider's webhooks to the intake's route for it."""
        r = await self.sandbox.http.post("/_sandbox/webhooks/endpoints", json={
            "url": f"{self.intake_url}/webhooks/{self.wire.name}", "dialect": self.wire.name})
        r.raise_for_status()

    async def deliveries_settled(self) -> bool:
        return await self.sandbox.pending_deliveries() == 0

    async def delivered_count(self, result: str) -> float:
        """The intake's own count of deliveries that ended ``result`` (its admin port's ``/metrics``)."""
        assert self.intake_metrics is not None
        return deliveries_counted(self.intake_metrics, result)

    def now_s(self) -> int:
        return int(self.clock.now().timestamp())

    # -- reading the outcome ---------------------------------------------------------------------

    async def current(self, attempt: Attempt) -> Attempt:
        return await get_attempt(self.pool, attempt.attempt_id)

    async def state(self, attempt: Attempt) -> str:
        return str((await self.current(attempt)).state)

    async def payments_for(self, attempt: Attempt) -> list[dict[str, Any]]:
        return [p for p in await self.sandbox.ledger() if p["reference"] == attempt.client_reference]

    async def sends_for(self, attempt: Attempt) -> list[dict[str, Any]]:
        return [q for q in await self.sandbox.create_requests() if q["body"] == attempt.request_body]

    async def notifications(self, attempt: Attempt | None = None) -> list[str]:
        rows = await self.pool.fetch(
            "SELECT notification_key FROM payment_attempt_events WHERE kind = 'notification'"
            " AND ($1::uuid IS NULL OR attempt_id = $1) ORDER BY event_id",
            attempt.attempt_id if attempt else None)
        return [r["notification_key"] for r in rows]

    async def transitions_to(self, attempt: Attempt, state: str) -> int:
        return int(await self.pool.fetchval(
            "SELECT count(*) FROM payment_attempt_events WHERE attempt_id = $1 AND kind = 'transition'"
            " AND detail ->> 'to' = $2", attempt.attempt_id, state))

    async def open_escalations(self) -> list[str]:
        rows = await self.pool.fetch(
            "SELECT escalation_key FROM payment_escalations WHERE resolved_at IS NULL ORDER BY escalation_id")
        return [r["escalation_key"] for r in rows]

    async def stored_rows(self) -> dict[str, int]:
        """How many rows each table the intake writes holds."""
        row = await self.pool.fetchrow(STORED_ROWS)
        return dict(row)

    async def aclose(self) -> None:
        for worker in self.workers:
            await worker.client.aclose()


async def sandbox_credentials(sandbox_url: str) -> dict[str, Any]:
    """The sandbox test account's dev credentials, per dialect (``GET /_sandbox/accounts``)."""
    async with httpx.AsyncClient(base_url=sandbox_url, timeout=10) as http:
        r = await http.get("/_sandbox/accounts")
        r.raise_for_status()
    body = r.json()
    rows = body["data"] if isinstance(body, dict) else body
    [row] = [a for a in rows if (a["account"], a["environment"]) == (ACCOUNT, "test")]
    return dict(row)


# Changes a stack's environment before its services read it (``env`` is the provider's own settings).
Configure = Callable[[dict[str, str]], None]


def stack_settings(wire: Wire, sandbox_url: str, db_dsn: str, credentials: Mapping[str, Any],
                   configure: Configure | None = None) -> Settings:
    env = {"PAYCORE_DATABASE_URL": db_dsn, "PAYCORE_JWT_SECRET": JWT_SECRET,
           **provider_env(wire, sandbox_url, credentials)}
    if configure is not None:
        configure(env)
    return load_settings(env)


async def running_provider_stack(provider: str, pool: asyncpg.Pool, db_dsn: str,
                                 configure: Configure | None = None) -> AsyncIterator[ProviderStack]:
    """The sandbox, checkout and intake for ``provider`` alone, on the fake clock; ``configure``
    may change the environment they are configured from."""
    wire = WIRES[provider]
    clock = FakeClock(current=datetime.now(UTC))
    # Webhook retries 10,000 times faster than the providers' schedules; Stripe's Search lags.
    sandbox_settings = dataclasses.replace(SandboxSettings.default(), webhook_time_scale=0.0001,
                                           async_delay_s=0.2, stripe_search_lag_s=SANDBOX_SEARCH_LAG_S)
    async with serve_asgi(create_sandbox_app(sandbox_settings)) as sandbox_url:
        credentials = await sandbox_credentials(sandbox_url)
        settings = stack_settings(wire, sandbox_url, db_dsn, credentials, configure)
        checkout = create_checkout_app(settings, clock=clock, pool=pool)
        intake_app = create_webhooks_app(settings, clock=clock, pool=pool)
        async with serve_asgi(checkout) as checkout_url, serve_asgi(intake_app) as intake_url:
            sandbox = ProviderSandbox(sandbox_url, wire)
            async with httpx.AsyncClient(base_url=checkout_url, timeout=30) as shop_http, \
                    httpx.AsyncClient(base_url=intake_url, timeout=30) as intake_http:
                stack = ProviderStack(wire, sandbox, ProviderShop(shop_http, "cus_alice"), intake_http,
                                      intake_url, clock, pool, settings, Signer(wire, credentials),
                                      intake_metrics=intake_app.state.metrics_registry)
                try:
                    yield stack
                finally:
                    await stack.aclose()
            await sandbox.aclose()


__all__ = ["PROVIDERS", "STORED_ROWS", "WIRES", "ProviderStack", "Signer", "Wire", "adyen_batch",
           "deliveries_counted", "recovery_worker", "running_provider_stack"]
