"""Storefront clients: concurrent customers creating orders and paying them, as a shop's pages do.

Every order's *script* is drawn from ``options.rng("load")`` before any client
runs (:func:`draw_scripts`), so the seed fixes what each customer means to do
whatever the processes' interleaving; what they see is recorded as it comes.
A script names the sandbox *outcome* it asks for by the sandbox core's token
(``tok_visa``, ``tok_3ds`` ...); the storefront sends the run's provider's
payment method for it (:mod:`.providers`), so one script plays on every provider.

A client is one asyncio task with its own HTTP client and its own signed JWT
(one customer). It sends each request to the next checkout instance in turn;
when an instance refuses or resets the connection (it may have just been
SIGKILLed) it retries on the other after a short bounded backoff, as a
storefront's load balancer would. A 503 (or a 409 ``request-in-progress``)
with ``Retry-After`` is retried after it; any other 5xx is recorded (an
invariant flags it) and the client moves on. Every exchange, answered or not,
becomes a :class:`~.model.ClientAnswer`.

Besides the storefront, a few signed webhooks for payments that do not exist
are delivered to the intake's route for the provider, in its format, during the
load (:func:`deliver_unknown_webhooks`): each must be answered 200 (``unmatched``;
Adyen's ``[accepted]``) and escalated.

What a run's record gets from here: ``record.orders`` (one :class:`~.model.OrderPlan`
per order a client got: ``tokens`` are the tokens it sent, ``done`` once its
client finished with it, ``last_state`` the last attempt state it saw, final or
not; the outcome tokens, whatever the provider), ``record.answers``, and in
``record.extra``: ``spare_orders`` (orders a
bare ``POST /orders`` retry created besides the one paid; in ``record.orders``
too, with no tokens), ``orders_not_created`` (script indexes whose order no
create answered 201), ``unknown_webhooks`` (each stray event's ids and the
intake's ``result``) and ``client_errors`` (defects of the client itself).

Waiting here is the mechanism, on the real clock: every wait has a bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import httpx
import jwt

from paycore import currencies
from paycore_devstack.chaos.model import ChaosOptions, ClientAnswer, Endpoints, OrderPlan, RunRecord
from paycore_devstack.chaos.providers import ChaosProvider
from paycore_devstack.chaos.providers import provider as chaos_provider

log = logging.getLogger("paycore.chaos.load")

# -- what the customers do (drawn up front) ---------------------------------------------------

# The sandbox outcomes, by the core's tokens (each provider's methods for them: .providers).
TOKENS: tuple[tuple[str, int], ...] = (
    ("tok_visa", 50), ("tok_decline", 8), ("tok_insufficient_funds", 7), ("tok_3ds", 15),
    ("tok_async", 10), ("tok_expired", 10),
)
# Zero-, two- and three-decimal currencies, so every exponent crosses the wire.
CURRENCIES: tuple[tuple[str, int], ...] = (
    ("EUR", 35), ("USD", 20), ("GBP", 10), ("JPY", 15), ("KWD", 10), ("CHF", 5), ("BHD", 5),
)
# Tokens whose attempt ends Failed or NotApplied, after which a customer may pay again.
FAILING_TOKENS = frozenset({"tok_decline", "tok_insufficient_funds", "tok_expired"})
SECOND_TOKEN = "tok_visa"
CancelPlan = Literal["none", "before-pay", "while-paying"]
# What the store's back office does once an order is paid (issue 29), through its service
# credential: refund it whole, refund it in two parts, race two partial refunds that cannot both
# pass; for an order held for a capture, capture part of it (then refund some), void it, or race
# a capture against a void.
AfterPlan = Literal["none", "refund-full", "refund-parts", "refund-race", "capture", "void",
                    "capture-void-race"]
AFTER_AUTOMATIC: tuple[tuple[str, int], ...] = (
    ("none", 55), ("refund-full", 15), ("refund-parts", 15), ("refund-race", 15))
AFTER_MANUAL: tuple[tuple[str, int], ...] = (("capture", 45), ("void", 30), ("capture-void-race", 25))
MANUAL_SHARE = 0.2  # orders held for a capture, where the provider offers it
ActionPlan = Literal["none", "complete", "abandon"]


@dataclass(frozen=True)
class Script:
    """One order as drawn up front: what its customer will do, whatever the system answers."""

    index: int
    client: int
    amount_minor: int
    currency: str
    token: str
    action: ActionPlan  # what the customer does with 3-D Secure (tok_3ds only)
    keys: bool  # requests carry an Idempotency-Key (a retry reuses it); else bare
    double_clicks: int  # extra concurrent POSTs of the first payment (0, 1 or 2)
    retry_create: bool  # POST /orders sent again, as a page that never saw the first answer
    retry_pay: bool  # the payment POST sent again after its answer
    cancel: CancelPlan
    cancel_after_s: float  # while-paying: how long after the payment POST the cancel goes
    pay_again: bool  # after a Failed or NotApplied outcome, a second attempt with tok_visa
    # Which of the provider's methods for the token (where it has several), from its own
    # stream: the other draws are the same whichever provider runs.
    variant: int = 0
    # After the payment, from its own stream too (a seed's payment scripts stay what they were).
    manual_capture: bool = False
    after: AfterPlan = "none"


def _weighted(rng: random.Random, table: tuple[tuple[str, int], ...]) -> str:
    return rng.choices([name for name, _ in table], weights=[w for _, w in table])[0]


def _amount(rng: random.Random, currency: str, ceiling: int | None = None) -> int:
    exponent = currencies.EXPONENTS[currency]
    if rng.random() < 0.02:  # now and then a very large order, up to the currency's limit ...
        top = currencies.max_amount_minor(currency)
        amount = rng.randint(top // 10, top)
        # ... scaled under the provider's own (the same draw, so the other draws stay the same).
        return amount if ceiling is None or top <= ceiling else max(1, amount * ceiling // top)
    return rng.randint(1, 2_000 * 10**exponent)


def draw_scripts(options: ChaosOptions) -> list[Script]:
    """Every order's script, from the seed alone (the same list on every call)."""
    rng = options.rng("load")
    variants = options.rng("method-variants")
    after_rng = options.rng("after-payment")
    provider = chaos_provider(options.provider)
    ceiling = provider.max_amount_minor
    scripts = []
    for index in range(options.orders):
        currency = _weighted(rng, CURRENCIES)
        amount = _amount(rng, currency, ceiling)
        token = _weighted(rng, TOKENS)
        action: ActionPlan = "none"
        if token == "tok_3ds":
            action = "complete" if rng.random() < 0.6 else "abandon"
        cancel_roll = rng.random()
        cancel: CancelPlan = ("before-pay" if cancel_roll < 0.04
                              else "while-paying" if cancel_roll < 0.09 else "none")
        may_fail = token in FAILING_TOKENS or action == "abandon"
        manual = after_rng.random() < MANUAL_SHARE
        after = _weighted(after_rng, AFTER_MANUAL if manual else AFTER_AUTOMATIC)
        manual = manual and provider.manual_capture
        if not manual and after in ("capture", "void", "capture-void-race"):
            after = "refund-full"  # the provider holds nothing: the store refunds instead
        scripts.append(Script(
            index=index,
            client=index % options.clients,
            amount_minor=amount,
            currency=currency,
            token=token,
            action=action,
            keys=rng.random() < 0.5,
            double_clicks=rng.choice((1, 1, 2)) if rng.random() < 0.12 else 0,
            retry_create=rng.random() < 0.1,
            retry_pay=rng.random() < 0.12,
            cancel=cancel,
            cancel_after_s=round(rng.uniform(0.0, 0.3), 3),
            pay_again=may_fail and cancel == "none" and rng.random() < 0.6,
            variant=variants.randrange(12),
            manual_capture=manual,
            after=cast(AfterPlan, after),
        ))
    return scripts


# -- progress ------------------------------------------------------------------------------------

@dataclass
class Progress:
    """How far the load is: orders done out of ``total``; ``finished`` once the load ends."""

    total: int
    done: int = 0
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    # Set and replaced on every advance: a waiter holds the event of the moment it looked.
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0

    async def advance(self) -> None:
        self.done += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def reached(self, fraction: float) -> bool:
        """Wait until ``fraction`` of the orders are done; ``False`` if the load ended first."""
        while self.fraction < fraction and not self.finished.is_set():
            changed = asyncio.ensure_future(self._changed.wait())
            finished = asyncio.ensure_future(self.finished.wait())
            try:
                await asyncio.wait({changed, finished}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                changed.cancel()
                finished.cancel()
        return self.fraction >= fraction


# -- one storefront client -------------------------------------------------------------------------

HTTP_TIMEOUT_S = 10.0
MAX_SENDS = 8  # per request: the first send and its retries
REQUEST_BUDGET_S = 45.0  # per request, retries included (a database outage answers 503 for a while)
MAX_RETRY_AFTER_S = 5.0
POLL_INTERVAL_S = 0.5
POLL_BUDGET_S = 20.0  # per attempt; still confirming after it is left to the settle phase
TOKEN_LIFETIME_S = 6 * 3600
PROGRESS_LOG_S = 5.0
FINAL_STATES = frozenset({"Succeeded", "Failed", "NotApplied"})
PROBLEM_PREFIX = "https://paycore.dev/problems/"

CREATE = "POST /orders"
PAY = "POST /orders/{id}/payment"
STATUS = "GET /orders/{id}/payment/status"
CANCEL = "POST /orders/{id}/cancel"
REFUND = "POST /orders/{id}/refunds"  # the back office's (a service credential, not a customer)
CAPTURE = "POST /orders/{id}/captures"
VOID = "POST /orders/{id}/voids"
ACTION = "POST /_sandbox/payments/{id}/action"
WEBHOOK = "POST /webhooks/{provider}"


def _problem_type(response: httpx.Response) -> str | None:
    if response.status_code < 400 or "json" not in response.headers.get("content-type", ""):
        return None
    try:
        body = response.json()
    except ValueError:
        return None
    kind = body.get("type") if isinstance(body, dict) else None
    if not isinstance(kind, str):
        return None
    return kind.removeprefix(PROBLEM_PREFIX)


def _retry_after_s(response: httpx.Response) -> float | None:
    raw = response.headers.get("retry-after")
    if raw is None:
        return None
    try:
        return min(max(float(raw), 0.0), MAX_RETRY_AFTER_S)
    except ValueError:
        return 1.0  # an HTTP date or garbage: still "later", not "never"


def _body(response: httpx.Response | None) -> dict[str, Any]:
    if response is None:
        return {}
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


_JITTER = random.Random()  # not the plan's: when retries happen is the machine's anyway


def _backoff_s(send: int) -> float:
    return float(min(0.2 * 2**send, 2.0) * (0.5 + _JITTER.random()))


def _refused(response: httpx.Response) -> bool:
    """A 4xx that ends the attempt for the page (not "still running, ask later")."""
    return 400 <= response.status_code < 500 and _problem_type(response) != "request-in-progress"


def _retryable(response: httpx.Response) -> bool:
    """A "later" answer: 503, or 409 request-in-progress, each with Retry-After."""
    if "retry-after" not in response.headers:
        return False
    return response.status_code == 503 or (
        response.status_code == 409 and _problem_type(response) == "request-in-progress")


class Storefront:
    """One customer's browser and the shop's load balancer in front of the checkouts."""

    def __init__(self, client: int, endpoints: Endpoints, record: RunRecord, http: httpx.AsyncClient,
                 poll_budget_s: float) -> None:
        self.client = client
        self.provider = chaos_provider(endpoints.provider)
        self.customer_id = f"cus_chaos_{client:03d}"
        self.endpoints = endpoints
        self.record = record
        self.http = http
        self.poll_budget_s = poll_budget_s
        self._next = client  # clients start on different instances
        self._token = ""
        self._token_expires = 0.0
        self.taken: list[OrderPlan] = []  # the orders of the current script (marked done after it)

    def _auth(self) -> dict[str, str]:
        now = time.time()
        if now > self._token_expires - 600:
            self._token_expires = now + TOKEN_LIFETIME_S
            self._token = jwt.encode({"sub": self.customer_id, "iat": int(now),
                                      "exp": int(self._token_expires)},
                                     self.endpoints.jwt_secret, algorithm="HS256")
        return {"Authorization": f"Bearer {self._token}"}

    def _checkout(self) -> str:
        urls = self.endpoints.checkout_urls
        url = urls[self._next % len(urls)]
        self._next += 1
        return url

    def _answer(self, route: str, response: httpx.Response | None, order_id: str | None,
                error: BaseException | None = None) -> None:
        if response is None:
            self.record.answers.append(ClientAnswer(
                self.record.now(), self.client, route, None, error=type(error).__name__,
                order_id=order_id))
            return
        self.record.answers.append(ClientAnswer(
            self.record.now(), self.client, route, response.status_code,
            problem_type=_problem_type(response), retry_after="retry-after" in response.headers,
            order_id=order_id))

    async def send(self, method: str, path: str, route: str, *, order_id: str | None = None,
                   body: dict[str, Any] | None = None, key: str | None = None,
                   retry: bool = True, backoffice: bool = False) -> httpx.Response | None:
        """One request to a checkout; retried (``retry``) on no answer and on a Retry-After answer,
        as the customer (a bearer JWT) or, with ``backoffice``, as the store's back office (its
        service credential).

        Returns the last answer, or None when no send was answered.
        """
        headers = (self._auth() if not backoffice
                   else {"Authorization": f"Bearer {self.endpoints.backoffice_secret}"})
        if key is not None:
            headers["Idempotency-Key"] = key
        deadline = time.monotonic() + REQUEST_BUDGET_S
        last: httpx.Response | None = None
        for send in range(MAX_SENDS):
            try:
                response = await self.http.request(method, self._checkout() + path, json=body,
                                                   headers=headers)
            except httpx.TransportError as exc:
                self._answer(route, None, order_id, exc)
                if not retry or send == MAX_SENDS - 1 or time.monotonic() > deadline:
                    return last
                await asyncio.sleep(_backoff_s(send))
                continue
            self._answer(route, response, order_id)
            last = response
            wait_s = _retry_after_s(response)
            if (not retry or wait_s is None or not _retryable(response) or send == MAX_SENDS - 1
                    or time.monotonic() + wait_s > deadline):
                return response
            await asyncio.sleep(wait_s)
        return last

    # -- one order --

    async def order(self, script: Script, spare_orders: list[str]) -> None:
        key = str(uuid.uuid4()) if script.keys else None
        order_id = await self._create(script, key, spare_orders)
        if order_id is None:  # no 201 within the retries: the plan has no order to be recorded under
            self.record.extra.setdefault("orders_not_created", []).append(script.index)
            return
        plan = self.record.orders[order_id]
        if script.cancel == "before-pay":
            await self.send("POST", f"/orders/{order_id}/cancel", CANCEL, order_id=order_id)
            # The customer's stale page still shows "pay": it must be refused, nothing sent.
            await self._attempt(plan, script, script.token, first=True)
            return
        state = await self._attempt(plan, script, script.token, first=True)
        if state in ("Failed", "NotApplied") and script.pay_again:
            state = await self._attempt(plan, script, SECOND_TOKEN, first=False)
        if state == "Succeeded" and script.after != "none" and self.endpoints.backoffice_secret:
            await self._after_payment(plan, script)

    # -- the back office, once the order is paid (issue 29) --

    async def _operation(self, order_id: str, kind: str, amount_minor: int | None) -> httpx.Response | None:
        """One refund, capture or void by the back office, under its own key (a retry reuses it)."""
        route = {"refunds": REFUND, "captures": CAPTURE, "voids": VOID}[kind]
        body = {} if amount_minor is None else {"amount_minor": amount_minor}
        return await self.send("POST", f"/orders/{order_id}/{kind}", route, order_id=order_id, body=body,
                               key=str(uuid.uuid4()), backoffice=True)

    async def _after_payment(self, plan: OrderPlan, script: Script) -> None:
        order_id, amount = plan.order_id, script.amount_minor
        part = max(1, amount * 6 // 10)  # two of these exceed the payment: at most one may pass
        if script.after == "refund-full":
            await self._operation(order_id, "refunds", amount)
        elif script.after == "refund-parts":
            await self._operation(order_id, "refunds", max(1, amount // 3))
            await self._operation(order_id, "refunds", max(1, amount // 3))
        elif script.after == "refund-race":
            await asyncio.gather(self._operation(order_id, "refunds", part),
                                 self._operation(order_id, "refunds", part))
        elif script.after == "capture":
            captured = await self._operation(order_id, "captures", part)
            if captured is not None and captured.status_code in (201, 202):
                await self._operation(order_id, "refunds", max(1, part // 2))
        elif script.after == "void":
            await self._operation(order_id, "voids", None)
        elif script.after == "capture-void-race":
            await asyncio.gather(self._operation(order_id, "captures", amount),
                                 self._operation(order_id, "voids", None))

    async def _create(self, script: Script, key: str | None, spare_orders: list[str]) -> str | None:
        body: dict[str, Any] = {"amount_minor": script.amount_minor, "currency": script.currency}
        if script.manual_capture:
            body["capture"] = "manual"
        got: list[str] = []
        for _ in range(2 if script.retry_create else 1):
            response = await self.send("POST", "/orders", CREATE, body=body, key=key)
            order_id = _body(response).get("order_id") if response is not None else None
            if response is not None and response.status_code == 201 and isinstance(order_id, str):
                if order_id not in got:
                    got.append(order_id)
        if len(got) > 1 and key is not None:
            log.warning("a keyed POST /orders retry created a second order: %s", got)
        if not got:
            return None
        # The page shows the last order it got; a bare retry's earlier order stays unpaid.
        for spare in got[:-1]:
            self.record.orders[spare] = OrderPlan(
                order_id=spare, client=self.client, customer_id=self.customer_id,
                amount_minor=script.amount_minor, currency=script.currency,
                idempotency_keys=key is not None, done=True)
            spare_orders.append(spare)
        order_id = got[-1]
        self.record.orders[order_id] = plan = OrderPlan(
            order_id=order_id, client=self.client, customer_id=self.customer_id,
            amount_minor=script.amount_minor, currency=script.currency,
            double_click=script.double_clicks > 0, idempotency_keys=key is not None,
            cancel=script.cancel, action=script.action)
        self.taken.append(plan)
        return order_id

    async def _attempt(self, plan: OrderPlan, script: Script, token: str, *, first: bool) -> str | None:
        """One payment attempt: POST it (double clicks, a retry, a cancel as planned), then poll."""
        order_id = plan.order_id
        plan.tokens.append(token)
        key = str(uuid.uuid4()) if script.keys else None  # a new attempt is a new request
        path = f"/orders/{order_id}/payment"
        body = {"payment_method": self.provider.method(token, script.variant)}
        clicks = [self.send("POST", path, PAY, order_id=order_id, body=body, key=key)]
        if first:
            # Extra clicks are the same request at once; a page does not retry them.
            clicks += [self.send("POST", path, PAY, order_id=order_id, body=body, key=key, retry=False)
                       for _ in range(script.double_clicks)]
        jobs: list[asyncio.Future[httpx.Response | None]] = [asyncio.ensure_future(c) for c in clicks]
        if first and script.cancel == "while-paying":
            jobs.append(asyncio.ensure_future(self._cancel_later(order_id, script.cancel_after_s)))
        answers = await asyncio.gather(*jobs)
        clicked = [a for a in answers[:len(clicks)] if a is not None]
        if first and script.retry_pay:
            again = await self.send("POST", path, PAY, order_id=order_id, body=body, key=key)
            clicked = [again, *clicked] if again is not None else clicked
        state: str | None = None
        for answer in clicked:  # the newest answer that names a state is what the page shows
            state = self._seen(plan, answer)
            if state is not None:
                break
        if state is None and clicked and all(_refused(a) for a in clicked):
            return None  # refused (cancelled, paid, invalid): no attempt to follow
        acted = False
        for answer in clicked:
            acted = await self._act(plan, script, answer, acted)
        deadline = time.monotonic() + self.poll_budget_s
        while state not in FINAL_STATES and time.monotonic() < deadline:
            await asyncio.sleep(POLL_INTERVAL_S)
            polled = await self.send("GET", f"/orders/{order_id}/payment/status", STATUS,
                                     order_id=order_id)
            if polled is None or polled.status_code == 404:
                continue  # no answer, or the attempt is not recorded yet
            if polled.status_code not in (200, 202):
                continue  # a 503 past its retries, or a 5xx (recorded): look again
            state = self._seen(plan, polled)
            acted = await self._act(plan, script, polled, acted)
        return state

    async def _cancel_later(self, order_id: str, after_s: float) -> httpx.Response | None:
        await asyncio.sleep(after_s)
        return await self.send("POST", f"/orders/{order_id}/cancel", CANCEL, order_id=order_id)

    def _seen(self, plan: OrderPlan, response: httpx.Response) -> str | None:
        """The attempt state an answer names (remembered as the last the customer saw)."""
        if response.status_code not in (200, 202):
            return None
        state = _body(response).get("state")
        if not isinstance(state, str):
            return None
        plan.last_state = state
        return state

    async def _act(self, plan: OrderPlan, script: Script, response: httpx.Response, acted: bool) -> bool:
        """Complete or abandon a current 3-D Secure step, once, as the customer planned."""
        if acted or script.action == "none" or plan.tokens[-1] != "tok_3ds" \
                or response.status_code != 200:
            return acted
        body = _body(response)
        payment_id = body.get("provider_payment_id")
        if body.get("next_action") is None or not isinstance(payment_id, str):
            return False
        result = "succeeded" if script.action == "complete" else "failed"
        url = f"{self.endpoints.sandbox_url}/_sandbox/payments/{payment_id}/action"
        for send in range(3):
            try:
                answer = await self.http.post(url, json={"result": result})
            except httpx.TransportError as exc:
                self._answer(ACTION, None, plan.order_id, exc)
                await asyncio.sleep(_backoff_s(send))
                continue
            self._answer(ACTION, answer, plan.order_id)
            break
        return True


# -- webhooks for payments that do not exist -------------------------------------------------------

UNKNOWN_WEBHOOK_SHARE = 0.01
# A provider redelivers what was not answered 2xx for days; a stray event is redelivered for up to
# this long (six sends, ~10 s, once ran out while a killed intake restarted under a loaded CI).
STRAY_REDELIVER_WITHIN_S = 90.0


@dataclass(frozen=True)
class StrayWebhook:
    """A signed event for a payment paycore never sent: answered ``unmatched``, escalated."""

    at_fraction: float  # sent once this share of the orders is done
    amount_minor: int
    currency: str
    status: Literal["succeeded", "declined", "processing"]


def draw_stray_webhooks(options: ChaosOptions) -> list[StrayWebhook]:
    rng = options.rng("unknown-webhooks")  # its own stream: the orders' scripts stay as they are
    provider = chaos_provider(options.provider)
    count = max(1, round(options.orders * UNKNOWN_WEBHOOK_SHARE))
    strays = []
    for _ in range(count):
        currency = _weighted(rng, CURRENCIES)
        strays.append(StrayWebhook(
            at_fraction=round(rng.uniform(0.05, 0.95), 4),
            amount_minor=_amount(rng, currency, provider.max_amount_minor), currency=currency,
            status=rng.choice(provider.stray_statuses)))
    return sorted(strays, key=lambda s: s.at_fraction)


@dataclass(frozen=True)
class StrayMessage:
    """One stray webhook as the provider sends it: its ids, its bytes, and how each send is signed."""

    event_id: str  # the event's id (or what stands for it where items carry none)
    payment_id: str
    reference: str
    body: bytes
    sign: Callable[[int], dict[str, str]]  # headers for a send at this unix time


def stray_message(endpoints: Endpoints, stray: StrayWebhook) -> StrayMessage:
    """The stray event in the run's provider's format, signed as that provider signs (as the
    sandbox's dialect of it renders an unknown payment's webhook)."""
    from paycore_sandbox.dialects import UnknownPayment, dialect_named  # the provider's wire

    nonce = uuid.uuid4().hex[:20]  # per run: a reused database would see a replay otherwise
    _, account, environment = endpoints.provider_account.split(":")
    reference = f"chaos-unknown-{nonce}"
    made = dialect_named(endpoints.provider).unknown_payment_webhook(
        UnknownPayment(account, environment, stray.amount_minor, stray.currency, stray.status, reference,
                       nonce, int(time.time())),
        webhook_secret=endpoints.webhook_secret, basic_auth=endpoints.webhook_basic_auth)
    return StrayMessage(made.event_id, made.payment_id, reference, made.body, made.sign)


def _answered_unmatched(provider: ChaosProvider, response: httpx.Response) -> str | None:
    """What the intake's 2xx says about the stray: its ``result``, or the provider's acknowledgement."""
    if provider.acknowledgement is not None:  # the provider takes exactly that; the escalation says the rest
        return provider.acknowledgement.decode() if response.content == provider.acknowledgement else None
    found = _body(response).get("result")
    return found if isinstance(found, str) else None


async def _deliver_stray(endpoints: Endpoints, record: RunRecord, http: httpx.AsyncClient,
                         stray: StrayWebhook) -> None:
    provider = chaos_provider(endpoints.provider)
    message = stray_message(endpoints, stray)
    result: str | None = None
    status: int | None = None
    give_up_at = time.monotonic() + STRAY_REDELIVER_WITHIN_S
    for send in itertools.count():  # a provider redelivers what was not answered 2xx
        if send and time.monotonic() >= give_up_at:
            break
        try:
            response = await http.post(endpoints.intake_url + provider.webhook_route, content=message.body,
                                       headers=message.sign(int(time.time())))
        except httpx.TransportError as exc:
            record.answers.append(ClientAnswer(record.now(), -1, WEBHOOK, None, error=type(exc).__name__))
            await asyncio.sleep(_backoff_s(send + 2))
            continue
        status = response.status_code
        record.answers.append(ClientAnswer(
            record.now(), -1, WEBHOOK, status, problem_type=_problem_type(response),
            retry_after="retry-after" in response.headers))
        if 200 <= status < 300:
            result = _answered_unmatched(provider, response)
            break
        await asyncio.sleep(_retry_after_s(response) or _backoff_s(send + 2))
    record.extra.setdefault("unknown_webhooks", []).append({
        "event_id": message.event_id, "payment_id": message.payment_id, "reference": message.reference,
        "status": status, "result": result})
    if result not in ("unmatched", "[accepted]"):
        log.warning("webhook for unknown payment %s answered %s %s", message.payment_id, status, result)


async def deliver_unknown_webhooks(endpoints: Endpoints, options: ChaosOptions, record: RunRecord,
                                   progress: Progress, clients_done: asyncio.Event) -> None:
    """Deliver the seed's stray webhooks at their points of progress (the rest once the clients end).

    ``ClientAnswer.client`` is -1 for them: the provider's side, not a storefront.
    """
    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as http:
        for stray in draw_stray_webhooks(options):
            if not clients_done.is_set():
                reached = asyncio.ensure_future(progress.reached(stray.at_fraction))
                ended = asyncio.ensure_future(clients_done.wait())
                try:
                    await asyncio.wait({reached, ended}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    reached.cancel()
                    ended.cancel()
            await _deliver_stray(endpoints, record, http, stray)


# -- the load ----------------------------------------------------------------------------------

async def _client(index: int, scripts: list[Script], endpoints: Endpoints, record: RunRecord,
                  progress: Progress, stop_at: float | None, spare_orders: list[str],
                  poll_budget_s: float) -> None:
    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT_S) as http:
        shop = Storefront(index, endpoints, record, http, poll_budget_s)
        for script in scripts:
            if stop_at is not None and time.monotonic() >= stop_at:
                return
            try:
                await shop.order(script, spare_orders)
            except Exception:
                # A defect of the client, not of paycore: counted, and the load goes on.
                log.exception("client %d: order #%d failed in the client", index, script.index)
                record.extra["client_errors"] = int(record.extra.get("client_errors", 0)) + 1
            finally:
                for plan in shop.taken:
                    plan.done = True
                shop.taken.clear()
                await progress.advance()


def _status_class(answer: ClientAnswer) -> str:
    return "none" if answer.status is None else f"{answer.status // 100}xx"


async def _log_progress(record: RunRecord, progress: Progress, stop: asyncio.Event) -> None:
    counts: Counter[str] = Counter()
    seen = 0
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), PROGRESS_LOG_S)
        answers = record.answers
        counts.update(_status_class(a) for a in answers[seen:])
        seen = len(answers)
        log.info("load: %d/%d orders done; answers %s", progress.done, progress.total,
                 ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none yet")


async def run(endpoints: Endpoints, options: ChaosOptions, record: RunRecord, progress: Progress,
              *, poll_budget_s: float = POLL_BUDGET_S) -> None:
    """Run ``options.clients`` storefront clients over ``options.orders`` orders (see the module doc).

    Ends when every client is done with its orders, or, with ``options.duration_s``,
    once that has passed and each client finished its current order.
    """
    scripts = draw_scripts(options)
    stop_at = None if options.duration_s is None else time.monotonic() + options.duration_s
    spare_orders: list[str] = record.extra.setdefault("spare_orders", [])
    log.info("load: %d orders, %d clients over %s", len(scripts), options.clients,
             ", ".join(endpoints.checkout_urls))
    clients_done = asyncio.Event()
    logging_stop = asyncio.Event()
    logger = asyncio.create_task(_log_progress(record, progress, logging_stop))
    strays = asyncio.create_task(
        deliver_unknown_webhooks(endpoints, options, record, progress, clients_done))
    try:
        await asyncio.gather(*(
            _client(c, [s for s in scripts if s.client == c], endpoints, record, progress, stop_at,
                    spare_orders, poll_budget_s)
            for c in range(options.clients)))
    finally:
        clients_done.set()
        try:
            await strays
        finally:
            logging_stop.set()
            await logger
