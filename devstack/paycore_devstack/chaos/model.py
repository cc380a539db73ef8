"""What the pieces of a chaos run pass each other: options, endpoints, the run's record, results.

Every timestamp in a :class:`RunRecord` is seconds since the run started
(``time.monotonic()`` based), so the timeline lines up whatever the wall clock does.
The seed fixes the *plan* (each order's token and behaviour, the fault rules,
which service dies at which point of progress); how the processes interleave is
the machine's, so two runs with one seed are alike, not identical.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from paycore.providers.registry import DEFAULT_PACKAGE


@dataclass(frozen=True)
class ChaosOptions:
    """``paycore chaos`` options (``--orders`` …); the defaults are ``make chaos``'s."""

    orders: int = 2_000
    clients: int = 16
    duration_s: float | None = None  # upper bound of the load phase; None: until every order is done
    fault_rate: float = 0.3  # share of provider requests and webhook events a fault hits
    kills: int = 3  # SIGKILL + restart of each service kind, this many times
    seed: int = 1
    provider: str = DEFAULT_PACKAGE.name  # a shipped provider (chaos.providers): the one the run configures
    db_kill: bool = True  # one kill -9 of the PostgreSQL postmaster, restarted on the same data
    settle_within_s: float = 240.0  # after the faults stop, recovery must settle within this
    out_dir: Path = Path(".paycore/chaos")

    def rng(self, stream: str) -> random.Random:
        """An independent random stream per concern, so one part's draws never shift another's."""
        return random.Random(f"{self.seed}:{stream}")


@dataclass(frozen=True)
class Endpoints:
    """Where the running system is, as the stack started it."""

    dsn: str  # the application database
    sandbox_url: str
    checkout_urls: tuple[str, ...]  # two checkout instances; clients spread over them
    intake_url: str  # the webhook intake's base URL (POST {intake_url}/webhooks/<provider>)
    jwt_secret: str  # HS256 secret the checkouts accept (clients sign their own tokens)
    provider_account: str  # e.g. cardco:acct_store:test
    # What signs that account's webhooks (a whsec_ signing secret, an HMAC key),
    # to deliver webhooks for unknown payments.
    webhook_secret: str
    # The broker and effects topic, so the invariants can count duplicates on the wire
    # (records of one dedup key the consumers saw more than once); None: not counted.
    kafka_bootstrap: str | None = None
    effects_topic: str = "payments.effects"
    provider: str = DEFAULT_PACKAGE.name  # the run's provider (chaos.providers)
    webhook_basic_auth: tuple[str, str] | None = None  # its webhooks' basic-auth user and password, if any
    # The back office's service credential (refunds, captures, voids, read); None: no such load.
    backoffice_secret: str | None = None


@dataclass(frozen=True)
class ClientAnswer:
    """One HTTP exchange of a storefront client, answered or not."""

    at: float
    client: int
    route: str  # "POST /orders", "POST /orders/{id}/payment", "GET /orders/{id}/payment/status", ...
    status: int | None  # None: no answer (connection refused or reset, timeout)
    problem_type: str | None = None  # the problem+json slug, for 4xx/5xx
    retry_after: bool = False  # a Retry-After header came with it
    error: str | None = None  # the transport error's class name when status is None
    order_id: str | None = None


IncidentKind = Literal["kill", "restart", "db-kill", "db-restart", "faults-on", "faults-off",
                       "load-done", "settled", "exited"]


@dataclass(frozen=True)
class Incident:
    at: float
    kind: IncidentKind
    target: str  # a service instance name (checkout-1, recovery-2, postgres, ...) or "sandbox"
    detail: str = ""


@dataclass(frozen=True)
class Sample:
    """The system's state at one moment (the timeline's points)."""

    at: float
    orders_created: int
    orders_paid: int
    attempts_started: int
    attempts_unknown: int
    open_escalations: int
    db_up: bool


@dataclass
class OrderPlan:
    """What one storefront client meant to do with one order, and what it saw."""

    order_id: str
    client: int
    customer_id: str
    amount_minor: int
    currency: str
    tokens: list[str] = field(default_factory=list)  # each payment attempt's token, in order
    double_click: bool = False
    idempotency_keys: bool = False  # retried with Idempotency-Key (else bare retries)
    cancel: Literal["none", "before-pay", "while-paying"] = "none"
    action: Literal["none", "complete", "abandon"] = "none"  # what the customer does with 3-D Secure
    last_state: str | None = None  # the last payment state the client saw
    done: bool = False


@dataclass(frozen=True)
class InvariantResult:
    """One money invariant after the run: ``count`` must be 0."""

    name: str
    count: int
    examples: tuple[str, ...] = ()  # up to five ids that break it, to start an investigation
    note: str = ""  # e.g. duplicates on the wire, counted separately and allowed
    # How many cases the check looked at, where that can be none (resends): 0 proves nothing.
    examined: int | None = None


@dataclass
class RunRecord:
    """Everything a run observed, appended to as it goes; the report reads it."""

    options: ChaosOptions
    started_wall: datetime = field(default_factory=lambda: datetime.now(UTC))
    started_mono: float = field(default_factory=time.monotonic)
    answers: list[ClientAnswer] = field(default_factory=list)
    incidents: list[Incident] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    orders: dict[str, OrderPlan] = field(default_factory=dict)
    exited_on_own: list[tuple[str, int]] = field(default_factory=list)  # (instance, returncode)
    results: list[InvariantResult] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)  # "load", "settle", ... -> seconds
    extra: dict[str, Any] = field(default_factory=dict)

    def now(self) -> float:
        return time.monotonic() - self.started_mono

    def incident(self, kind: IncidentKind, target: str, detail: str = "") -> Incident:
        found = Incident(self.now(), kind, target, detail)
        self.incidents.append(found)
        return found

    @property
    def clean(self) -> bool:
        return bool(self.results) and all(r.count == 0 for r in self.results)
