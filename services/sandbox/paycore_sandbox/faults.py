"""Fault injection rules for ``/v1`` requests and webhook deliveries.

A rule is ``{"fault", "match", "probability", "times", "delay_ms"}``. ``match``
is ``{"reference": R}`` or ``{"any": true}``; as sandbox extensions it may also
carry ``"account"``, ``"operation"`` (``create`` | ``capture`` | ``cancel`` |
``refund`` | ``lookup``) and ``"dialect"`` (``cardco`` | ``stripe`` | ``adyen``: whose
wire the request or payment speaks), and every key given must match. ``reference``
is the reference of the object the request is about: the payment's for creates and
payment lookups; the capture's, the cancel's or the refund's for those POSTs; the
capture's or refund's for their lookups. A rule's ``times`` is consumed only when it fires, and
an exhausted rule is removed.

When each fault acts, and why:

- at arrival, before anything runs (the network ate or delayed the request):
  ``drop_request``, ``late_arrival``, ``not_processed_503``, ``rate_limit``;
- at execution, only when this request really executes a payment (a replay
  has nothing to fail): ``error_500_after``;
- on the way back (the network ate or mangled the answer): ``lose_response``,
  ``delay``, ``malformed_body``, ``empty_body``.

Sandbox extension beyond the contract: ``lookup_stale`` (a lagging read replica).
A lookup by payment id (``GET /v1/payments/{id}``) of a payment that exists
answers the contract's 404 ``resource_missing``, byte for byte what a real miss
answers. It is consulted at execution time, after the rate limit and
``error_500_after``, and only when the payment exists (a miss is a miss
already), so a use of ``times`` is consumed only when a payment was hidden. The
rule matches on the payment's own reference and account (operation ``lookup``).
Cardco's lookups by reference (``GET /v1/payments?reference=``) never consult
it: they always see every payment. The Stripe dialect applies it to
``GET /v1/payment_intents/{id}`` and to its Search alike.

Sandbox extension beyond the contract: ``search_stale`` (a search index that has
not caught up, as Stripe's Search may lag for a minute or more). A lookup by
reference leaves out the existing payments a rule matches (on the payment's own
reference and account, operation ``lookup``), answering ``{"data": []}`` when it
hides them all: byte for byte a real miss. Consulted at execution time like
``lookup_stale``, and a use of ``times`` is consumed only when a payment was
hidden. Lookups by id never consult it. The Stripe dialect's Search
(``GET /v1/payment_intents/search``) honours it the same way.

Cardco's refund and capture lookups honour both the same way, on the refund's or
capture's own reference: ``lookup_stale`` in ``GET /v1/refunds/{id}``,
``search_stale`` in the lists (``GET /v1/refunds?…``, ``GET /v1/captures?…``).

One arrival/response fault is chosen per request (the first matching rule that
fires); ``error_500_after``, ``lookup_stale`` and ``search_stale`` are chosen
separately at execution time.

Webhook faults (``webhook_*``) are consulted by :mod:`paycore_sandbox.delivery`
once per emitted event (matching ``reference``/``account`` of the payment,
operation ``webhook``), never for ``/v1`` requests; see there for ``times``.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from dataclasses import dataclass
from typing import Any, Literal

from paycore_sandbox.errors import invalid_param

# What a request does, for ``match.operation``: each POST kind, lookups, and webhooks.
RequestOperation = Literal["create", "capture", "cancel", "refund", "lookup"]
REQUEST_OPERATIONS: tuple[RequestOperation, ...] = ("create", "capture", "cancel", "refund",
                                                    "lookup")
Operation = RequestOperation | Literal["webhook"]

HOLD_FAULTS = frozenset({"drop_request", "lose_response", "late_arrival"})
TRANSPORT_FAULTS = frozenset({
    "drop_request", "lose_response", "delay", "late_arrival", "not_processed_503",
    "rate_limit", "malformed_body", "empty_body",
})
EXECUTION_FAULTS = frozenset({"error_500_after"})
STALE_LOOKUP_FAULTS = frozenset({"lookup_stale"})  # by-id lookups only; see the module docstring
STALE_SEARCH_FAULTS = frozenset({"search_stale"})  # by-reference lookups only; see the module docstring
REQUEST_FAULTS = TRANSPORT_FAULTS | EXECUTION_FAULTS | STALE_LOOKUP_FAULTS | STALE_SEARCH_FAULTS
WEBHOOK_FAULTS = frozenset({
    "webhook_duplicate", "webhook_delay", "webhook_drop_first", "webhook_unstable_ids",
})
ALL_FAULTS = REQUEST_FAULTS | WEBHOOK_FAULTS
DEFAULT_DELAY_MS = 1000
_MATCH_KEYS = frozenset({"any", "reference", "account", "operation", "dialect"})
_RULE_KEYS = frozenset({"fault", "match", "probability", "times", "delay_ms"})


@dataclass(frozen=True)
class FaultContext:
    """What a rule can match on."""

    account: str
    operation: Operation
    reference: str | None
    dialect: str = "cardco"  # whose wire the request or webhook speaks


@dataclass(frozen=True)
class Match:
    any: bool = False
    reference: str | None = None
    account: str | None = None
    operation: RequestOperation | None = None
    dialect: str | None = None

    def matches(self, ctx: FaultContext) -> bool:
        if self.reference is not None and ctx.reference != self.reference:
            return False
        if self.account is not None and ctx.account != self.account:
            return False
        if self.dialect is not None and ctx.dialect != self.dialect:
            return False
        return self.operation is None or ctx.operation == self.operation

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.any:
            out["any"] = True
        for name in ("reference", "account", "operation", "dialect"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


@dataclass
class FaultRule:
    id: str
    fault: str
    match: Match
    probability: float = 1.0
    times: int | None = None  # None: unlimited
    delay_ms: int = DEFAULT_DELAY_MS
    fired: int = 0  # how often it fired: what a run's faults really were, not what was planned

    @property
    def delay_s(self) -> float:
        return self.delay_ms / 1000

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "fault": self.fault, "match": self.match.to_json(),
                "probability": self.probability, "times": self.times,
                "delay_ms": self.delay_ms, "fired": self.fired}


class FaultBook:
    def __init__(self, rng: random.Random | None = None) -> None:
        self._rules: list[FaultRule] = []
        self._rng = rng or random.Random()
        self._ids = itertools.count(1)

    def add(self, specs: list[dict[str, Any]]) -> list[FaultRule]:
        # Build every rule before installing any: a bad rule rejects the batch.
        rules = [_rule_from(spec, f"rules[{i}]", f"flt_{next(self._ids)}")
                 for i, spec in enumerate(specs)]
        self._rules.extend(rules)
        return rules

    def clear(self) -> None:
        self._rules.clear()

    def rules(self) -> list[FaultRule]:
        return list(self._rules)

    def take(self, ctx: FaultContext, kinds: frozenset[str], *,
             consume: bool = True) -> FaultRule | None:
        """The first rule of ``kinds`` matching ``ctx`` that fires, consuming one use.

        ``consume=False`` leaves ``times`` alone (``webhook_duplicate`` reads
        ``times`` as a number of copies, not as a use count).
        """
        for rule in self._rules:
            if rule.fault not in kinds or not rule.match.matches(ctx):
                continue
            if self._rng.random() >= rule.probability:
                continue
            rule.fired += 1
            if consume and rule.times is not None:
                rule.times -= 1
                if rule.times <= 0:
                    self._rules.remove(rule)
            return rule
        return None

    def webhook_rules(self) -> list[FaultRule]:
        """The active webhook fault rules."""
        return [r for r in self._rules if r.fault in WEBHOOK_FAULTS]


def parse_rules(payload: Any) -> list[dict[str, Any]]:
    """The rule specs of ``{"rules": [...]}``; each is validated by ``FaultBook.add``."""
    if not isinstance(payload, dict) or not isinstance(payload.get("rules"), list):
        raise invalid_param("rules", 'Body must be {"rules": [ ... ]}.')
    rules: list[dict[str, Any]] = payload["rules"]
    return rules


def _rule_from(spec: Any, where: str, rule_id: str) -> FaultRule:
    if not isinstance(spec, dict):
        raise invalid_param(where, f"{where} must be an object.")
    unknown = sorted(set(spec) - _RULE_KEYS)
    if unknown:
        raise invalid_param(f"{where}.{unknown[0]}", f"Unknown rule field {unknown[0]!r}.")
    fault = spec.get("fault")
    if fault not in ALL_FAULTS:
        raise invalid_param(f"{where}.fault",
                            f"fault must be one of {', '.join(sorted(ALL_FAULTS))}.")
    probability = spec.get("probability", 1.0)
    if isinstance(probability, bool) or not isinstance(probability, int | float) \
            or not 0 <= probability <= 1:
        raise invalid_param(f"{where}.probability", "probability must be between 0 and 1.")
    times = spec.get("times")
    if times is not None and (isinstance(times, bool) or not isinstance(times, int)
                              or times < 1):
        raise invalid_param(f"{where}.times", "times must be a positive integer or null.")
    delay_ms = spec.get("delay_ms", DEFAULT_DELAY_MS)
    if isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or delay_ms < 0:
        raise invalid_param(f"{where}.delay_ms", "delay_ms must be a non-negative integer.")
    return FaultRule(rule_id, fault, _match_from(spec.get("match"), f"{where}.match"),
                     float(probability), times, delay_ms)


def _match_from(raw: Any, where: str) -> Match:
    if not isinstance(raw, dict) or not raw:
        raise invalid_param(where, f'{where} must be {{"reference": R}} or {{"any": true}}.')
    unknown = sorted(set(raw) - _MATCH_KEYS)
    if unknown:
        raise invalid_param(f"{where}.{unknown[0]}", f"Unknown match key {unknown[0]!r}.")
    if "any" in raw and raw["any"] is not True:
        raise invalid_param(f"{where}.any", "any must be true when given.")
    for name in ("reference", "account", "dialect"):
        if name in raw and (not isinstance(raw[name], str) or not raw[name]):
            raise invalid_param(f"{where}.{name}", f"{name} must be a non-empty string.")
    operation = raw.get("operation")
    if operation is not None and operation not in REQUEST_OPERATIONS:
        raise invalid_param(f"{where}.operation",
                            f"operation must be one of {', '.join(REQUEST_OPERATIONS)}.")
    return Match(any=raw.get("any") is True, reference=raw.get("reference"),
                 account=raw.get("account"), operation=operation, dialect=raw.get("dialect"))


class HoldGate:
    """Where "no response" requests wait; released on reset and shutdown.

    Waiting is on an event, never on a thread or a lock, so held requests never
    block any other request.
    """

    def __init__(self) -> None:
        self._released = asyncio.Event()

    def release_all(self) -> None:
        # Waiters hold the old event, which is now set; new holds get a new one.
        released, self._released = self._released, asyncio.Event()
        released.set()

    async def sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True when cut short by a release."""
        if seconds <= 0:
            return False
        try:
            await asyncio.wait_for(self._released.wait(), seconds)
        except TimeoutError:
            return False
        return True
