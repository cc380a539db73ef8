"""The provider's faults during a run: sandbox fault rules drawn from the seed.

:func:`plan_rules` draws the rules from ``options.rng("faults")``; :func:`install`
posts them to ``POST /_sandbox/faults`` and checks ``GET /_sandbox/faults``
lists them; :func:`clear` removes them all. The rule format is the sandbox's
(services/sandbox/paycore_sandbox/faults.py): ``{"fault", "match", "probability",
"times", "delay_ms"}``, ``times`` null for unlimited.

How the shares add up to ``options.fault_rate``:

- The sandbox applies, per request, the *first* arrival/response rule that
  fires, so each such rule's probability is its share divided by what the
  rules before it left: their total is exactly the sum of their shares.
- ``error_500_after`` (on creates), ``lookup_stale`` (on by-id lookups) and,
  for Stripe, ``search_stale`` (its Search lagging) are rolled separately when
  the request executes; their probability is scaled by what the transport faults
  left, so create and lookup requests are each hit by about ``fault_rate`` in all.

Refunds, captures and cancels (issue 29) each get the create's table, matched by their own
operation, drawn after everything else so a seed's other rules do not move.

Every rule matches the run's provider's ``dialect`` (one provider runs at a time;
the match says which wire a rule is for). Adyen has no lookups, so its run has
no lookup rules.
- Webhook faults are rolled independently per event (several may hit one);
  their probabilities add up to ``fault_rate``.

"409 in progress" has no fault of its own: the sandbox answers 409
``request_in_progress`` (with Retry-After) to a create whose key is still
executing, and a ``delay`` rule holds the key in progress past the call
budget, so recovery's same-key resend inside that window meets it naturally.
Webhooks out of order and late come from ``webhook_delay`` and
``webhook_drop_first``; webhooks for unknown payments are delivered by
:mod:`.load` (:func:`~.load.deliver_unknown_webhooks`).
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

import httpx

from paycore_devstack.chaos.model import ChaosOptions, Endpoints, RunRecord
from paycore_devstack.chaos.providers import provider as chaos_provider

log = logging.getLogger("paycore.chaos.faults")

# Relative weights within each operation's share of the fault rate.
CREATE_FAULTS: tuple[tuple[str, int], ...] = (
    ("lose_response", 3), ("drop_request", 2), ("delay", 2), ("late_arrival", 2),
    ("not_processed_503", 2), ("rate_limit", 2), ("malformed_body", 1), ("empty_body", 1),
    ("error_500_after", 2),
)
LOOKUP_FAULTS: tuple[tuple[str, int], ...] = (
    ("lose_response", 2), ("drop_request", 1), ("delay", 2), ("not_processed_503", 2),
    ("rate_limit", 2), ("malformed_body", 1), ("empty_body", 1), ("lookup_stale", 3),
)
# Stripe's Search lags behind its writes: some lookups by reference miss a payment that exists.
# Weighed heavier than the others: only a search that would find a payment consults it, and
# recovery searches only when the id is unknown or missed (at weight 2, a 200-order run met none).
SEARCH_FAULTS: tuple[tuple[str, int], ...] = (("search_stale", 5),)
# A capture's, cancel's or refund's POST meets what a create meets (issue 29), each kind with
# its own rules, matched by the operation's reference like a create's by the payment's.
OPERATION_FAULTS: tuple[tuple[str, int], ...] = CREATE_FAULTS
OPERATION_KINDS = ("refund", "capture", "cancel")
WEBHOOK_FAULTS: tuple[tuple[str, int], ...] = (
    ("webhook_duplicate", 3), ("webhook_delay", 3), ("webhook_drop_first", 3),
    ("webhook_unstable_ids", 1),
)
# Rolled at execution, separately from the first-match arrival/response rules.
EXECUTION_FAULTS = frozenset({"error_500_after", "lookup_stale", "search_stale"})
# The stack's call budget is 3 s (PAYCORE_CALL_BUDGET_S): a delay of 4-6 s always outlives it.
DELAY_MS = (4_000, 6_000)
LATE_ARRIVAL_MS = (4_000, 8_000)  # the original lands after the checkout gave up on it
# A delayed webhook arrives 2-8 s late in real time, after later events of its payment
# (out of order). The sandbox multiplies delay_ms by its webhook_time_scale, which the
# chaos stack sets to 0.01 (PAYCORE_SANDBOX_WEBHOOK_TIME_SCALE); the rule is scaled back.
WEBHOOK_DELAY_S = (2.0, 8.0)
STACK_WEBHOOK_TIME_SCALE = 0.01
SANDBOX_TRIES = 5


class FaultsNotInstalled(RuntimeError):
    """The sandbox refused the rules, or does not list what it accepted."""


def _shares(rng: random.Random, table: tuple[tuple[str, int], ...], rate: float) -> list[tuple[str, float]]:
    # Each weight jittered by the seed, then scaled so the shares sum to ``rate``.
    drawn = [(name, weight * rng.uniform(0.5, 1.5)) for name, weight in table]
    total = sum(w for _, w in drawn)
    return [(name, rate * w / total) for name, w in drawn]


def _request_rules(rng: random.Random, operation: str, table: tuple[tuple[str, int], ...],
                   rate: float, dialect: str) -> list[dict[str, Any]]:
    shares = _shares(rng, table, rate)
    transport = [(n, s) for n, s in shares if n not in EXECUTION_FAULTS]
    execution = [(n, s) for n, s in shares if n in EXECUTION_FAULTS]
    rules: list[dict[str, Any]] = []
    left = 1.0  # the share of requests no earlier rule took
    for name, share in transport:
        rule: dict[str, Any] = {"fault": name, "match": {"operation": operation, "dialect": dialect},
                                "probability": round(min(1.0, share / left) if left > 0 else 1.0, 6),
                                "times": None}
        if name == "delay":
            rule["delay_ms"] = rng.randint(*DELAY_MS)
        elif name == "late_arrival":
            rule["delay_ms"] = rng.randint(*LATE_ARRIVAL_MS)
        rules.append(rule)
        left -= share
    for name, share in execution:
        rules.append({"fault": name, "match": {"operation": operation, "dialect": dialect},
                      "probability": round(min(1.0, share / left) if left > 0 else 1.0, 6),
                      "times": None})
    return rules


def plan_rules(options: ChaosOptions, *,
               webhook_time_scale: float = STACK_WEBHOOK_TIME_SCALE) -> list[dict[str, Any]]:
    """The run's fault rules, from the seed alone (the same list on every call)."""
    rate = options.fault_rate
    if not 0 <= rate <= 1:
        raise ValueError(f"fault_rate must be between 0 and 1, not {rate}")
    if rate == 0:
        return []
    provider = chaos_provider(options.provider)
    dialect = provider.name
    rng = options.rng("faults")
    rules = _request_rules(rng, "create", CREATE_FAULTS, rate, dialect)
    if provider.lookups:
        lookups = LOOKUP_FAULTS + (SEARCH_FAULTS if provider.search_lags else ())
        rules += _request_rules(rng, "lookup", lookups, rate, dialect)
    for name, share in _shares(rng, WEBHOOK_FAULTS, rate):
        rule: dict[str, Any] = {"fault": name, "match": {"any": True, "dialect": dialect},
                                "probability": round(share, 6), "times": None}
        if name == "webhook_duplicate":
            rule["times"] = rng.choice((1, 1, 2))  # copies per hit event; never used up
        elif name == "webhook_delay":
            rule["delay_ms"] = round(rng.uniform(*WEBHOOK_DELAY_S) * 1000 / webhook_time_scale)
        rules.append(rule)
    # Drawn last, so a seed's payment and webhook rules stay what they were before operations.
    for kind in OPERATION_KINDS:
        rules += _request_rules(rng, kind, OPERATION_FAULTS, rate, dialect)
    return rules


def effective_shares(rules: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per operation (create, lookup, webhook), the share of requests/events each fault hits."""
    out: dict[str, dict[str, float]] = {}
    left: dict[str, float] = {}
    for rule in rules:
        operation = rule["match"].get("operation", "webhook")
        shares = out.setdefault(operation, {})
        if operation == "webhook":
            shares[rule["fault"]] = rule["probability"]
            continue
        remaining = left.setdefault(operation, 1.0)
        share = rule["probability"] * remaining
        shares[rule["fault"]] = share
        if rule["fault"] not in EXECUTION_FAULTS:
            left[operation] = remaining - share
    return out


def summary(rules: list[dict[str, Any]], rate: float) -> str:
    if not rules:
        return "no faults (fault rate 0)"
    parts = []
    for operation, shares in effective_shares(rules).items():
        each = ", ".join(f"{name} {100 * share:.1f}%" for name, share in shares.items())
        parts.append(f"{operation} {100 * sum(shares.values()):.0f}% ({each})")
    return f"{len(rules)} rules at fault rate {rate:g}: " + "; ".join(parts)


async def _sandbox(endpoints: Endpoints, method: str, json: Any = None) -> httpx.Response:
    """One control call, retried a few times on no answer (the sandbox may be busy, never killed)."""
    async with httpx.AsyncClient(base_url=endpoints.sandbox_url, timeout=10) as http:
        for attempt in range(SANDBOX_TRIES):
            try:
                return await http.request(method, "/_sandbox/faults", json=json)
            except httpx.TransportError as exc:
                if attempt == SANDBOX_TRIES - 1:
                    raise
                log.warning("sandbox %s /_sandbox/faults: %s; retrying", method, type(exc).__name__)
                await asyncio.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


async def install(endpoints: Endpoints, options: ChaosOptions, record: RunRecord, *,
                  webhook_time_scale: float = STACK_WEBHOOK_TIME_SCALE) -> None:
    """Install the seed's rules in the sandbox; raise :class:`FaultsNotInstalled` if it refuses any.

    ``webhook_time_scale`` is the sandbox's (see :data:`WEBHOOK_DELAY_S`).
    """
    rules = plan_rules(options, webhook_time_scale=webhook_time_scale)
    answer = await _sandbox(endpoints, "POST", {"rules": rules})
    if answer.status_code != 200:
        raise FaultsNotInstalled(f"POST /_sandbox/faults answered {answer.status_code}: {answer.text[:500]}")
    listed = await _sandbox(endpoints, "GET")
    active = listed.json().get("rules", []) if listed.status_code == 200 else []
    missing = sorted({r["fault"] for r in rules} - {r.get("fault") for r in active})
    if len(active) < len(rules) or missing:
        raise FaultsNotInstalled(f"GET /_sandbox/faults lists {len(active)} of {len(rules)} rules"
                                 f"{'; missing ' + ', '.join(missing) if missing else ''}")
    record.extra["fault_rules"] = active
    detail = summary(rules, options.fault_rate)
    record.incident("faults-on", "sandbox", detail)
    log.info("faults on: %s", detail)


def fired(rules: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per operation (create, lookup, webhook), how often each fault fired (the sandbox's counts)."""
    out: dict[str, dict[str, int]] = {}
    for rule in rules:
        operation = rule.get("match", {}).get("operation", "webhook")
        counts = out.setdefault(operation, {})
        counts[rule["fault"]] = counts.get(rule["fault"], 0) + int(rule.get("fired") or 0)
    return out


async def clear(endpoints: Endpoints, record: RunRecord) -> None:
    """Remove every fault rule (``DELETE /_sandbox/faults``) and check none is left.

    What fired before is kept in ``record.extra["faults_fired"]`` (:func:`fired`): the run
    shows the faults the system really met, not only the ones it planned.
    """
    before = await _sandbox(endpoints, "GET")
    listed = before.json().get("rules", []) if before.status_code == 200 else []
    count = len(listed)
    record.extra["faults_fired"] = fired(listed)
    answer = await _sandbox(endpoints, "DELETE")
    after = await _sandbox(endpoints, "GET")
    left = after.json().get("rules", []) if after.status_code == 200 else None
    if answer.status_code != 200 or left != []:
        raise FaultsNotInstalled(f"DELETE /_sandbox/faults answered {answer.status_code}; "
                                 f"rules left: {left}")
    record.incident("faults-off", "sandbox", f"{count} rules removed")
    log.info("faults off: %d rules removed", count)
