"""The provider interface the core depends on, and the provider-neutral data it trades in.

Checkout and the recovery loop hold :class:`PaymentCalls` (built by
:func:`paycore.providers.registry.for_accounts`: one provider, or a router over several),
the webhook intake one :class:`NotificationReceiver` per provider; none of them names a
provider. A provider serves every configured account of its kind; each call names the
account (``stored.provider_account``, or ``provider_account``), and a notification's
account is the one whose credentials verified it.

The rules every implementation keeps (the reference's "payment client is registered
without automatic resends"):

- it sends the stored request once per call, never retries, never invents a request;
- it never raises for what the provider does: every ending without a usable answer is
  ``ProviderOutcome.unknown(reason)`` (a lookup: ``LookupResult("failed", reason=…)``);
  only a documented rejection of the *first* send is ``not_applied``;
- programming errors surface (only the expected failure types are caught);
- an answer about another payment is never this attempt's (:func:`paycore.evidence.judge`).

Nothing here imports a provider, so :mod:`paycore.notifications` and the services can
import it without a cycle.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

import orjson

from paycore.attempt_row import Attempt
from paycore.domain import Claim, OperationKind, ProviderOutcome
from paycore.errors import PaycoreError
from paycore.webhook_replays import SignedDelivery

if TYPE_CHECKING:
    from paycore.providers.package import ProviderAccountConfig

__all__ = [
    "KEY_VERSION", "Capabilities", "InvalidNotification", "LookupResult", "Notification",
    "NotificationFormat", "NotificationReceiver", "NotificationUnverified", "OperationCalls",
    "OperationEnding", "OperationLookup", "OperationNotification", "OperationOutcome", "PaymentCalls",
    "PaymentMethod", "PaymentRecord", "Provider", "ReferenceLookup", "StoredRequest", "VerifiedDelivery",
    "standard_notification_key", "synthesized_key",
]

# ---------------------------------------------------------------------------
# What a provider can do


class ReferenceLookup(enum.StrEnum):
    """What a lookup by the attempt's client reference can tell."""

    CONSISTENT = "consistent"  # a miss means no payment carries the reference (Cardco)
    EVENTUALLY_CONSISTENT = "eventually-consistent"  # a miss may be indexing lag (a search API)
    UNSUPPORTED = "unsupported"  # no such lookup: find_by_reference answers "unsupported", sends nothing


@dataclass(frozen=True)
class Capabilities:
    """What the core may rely on from a provider, as its contract documents it.

    :param lookup_by_reference: How far a miss by reference can be trusted.
    :param key_retention_s: The documented idempotency-key retention. An account's
        configured ``key_retention_s`` (the ``provider_accounts`` row) governs the
        deadlines; this is what the contract promises.
    :param hold_lapse_s: How long a hold lasts uncaptured before the provider releases it.
    :param server_errors_replayed: A request that failed after execution began is
        stored under its key and answered again, unchanged, to every same-key resend
        (a resend cannot learn more than a lookup).
    """

    lookup_by_reference: ReferenceLookup
    key_retention_s: float
    server_errors_replayed: bool
    # How long an uncaptured hold lasts before it lapses (Cardco's contract and Stripe's online
    # card payments: 7 days); recovery warns a person before, and records the lapse after.
    hold_lapse_s: float = 7 * 86_400
    # How long a capture's, cancel's or refund's key is kept, when shorter than the account's
    # key retention (None: the same); an operation is resent only inside the shorter window.
    operation_key_retention_s: float | None = None


# ---------------------------------------------------------------------------
# The stored request: what every send of one attempt transmits


@dataclass(frozen=True)
class StoredRequest:
    """The provider request as stored on a payment attempt (its ``payment_attempts`` columns).

    Everything the create call sends comes from here, so every send of one
    attempt (checkout's and each of recovery's) is the same request. It is the
    attempt's record, not a provider's: each provider reads the fields its wire needs.

    :param uuid.UUID attempt_id: The attempt; used in logs only.
    :param str provider_account: Internal provider-account id,
        e.g. ``'cardco:acct_store:test'``; selects the provider and the credentials.
    :param str endpoint: Absolute URL the create request goes to, as stored on
        the attempt. It must still be on the configured account's origin.
    :param str api_version: The provider API version the attempt was created under.
    :param str idempotency_key: The attempt's key.
    :param str request_body: The exact serialized body; its UTF-8 bytes are
        sent unchanged on every send. Hidden from ``repr``.
    :param str client_reference: The reference inside the body; a payment
        object in the response must carry the same one.
    :param int amount_minor: The amount inside the body, in minor units.
    :param str currency: The currency inside the body.
    """

    attempt_id: uuid.UUID
    provider_account: str
    endpoint: str
    api_version: str
    idempotency_key: str
    # repr=False: the body holds the payment method and must never reach a log.
    request_body: str = field(repr=False)
    client_reference: str
    amount_minor: int
    currency: str

    @classmethod
    def from_attempt(cls, attempt: Attempt) -> StoredRequest:
        """The request an attempt stores (every send of it is this request)."""
        return cls(
            attempt_id=attempt.attempt_id, provider_account=attempt.provider_account,
            endpoint=attempt.endpoint, api_version=attempt.api_version,
            idempotency_key=attempt.idempotency_key, request_body=attempt.request_body,
            client_reference=attempt.client_reference, amount_minor=attempt.amount_minor,
            currency=attempt.currency,
        )

    @classmethod
    def from_record(cls, row: Mapping[str, Any]) -> StoredRequest:
        """Build from a ``payment_attempts`` row (or any mapping with its column names).

        :raises KeyError: A column is missing.
        """
        attempt_id = row["attempt_id"]
        if not isinstance(attempt_id, uuid.UUID):
            attempt_id = uuid.UUID(str(attempt_id))
        return cls(
            attempt_id=attempt_id, provider_account=row["provider_account"], endpoint=row["endpoint"],
            api_version=row["api_version"], idempotency_key=row["idempotency_key"],
            request_body=row["request_body"], client_reference=row["client_reference"],
            amount_minor=row["amount_minor"], currency=row["currency"],
        )


# ---------------------------------------------------------------------------
# Lookups


class PaymentRecord(Protocol):
    """A payment as a provider's lookup answered it, validated but not yet judged as evidence."""

    def claim(self) -> Claim:
        """What it says about itself (id, reference, amount, account, mode), for ``evidence.judge``."""
        ...

    def evidence(self) -> dict[str, Any]:
        """What was seen, for history and escalations: identifiers, never card data."""
        ...

    def to_outcome(self) -> ProviderOutcome:
        """What it says about an attempt it is evidence about."""
        ...


@dataclass(frozen=True)
class LookupResult:
    """The answer to one lookup.

    :param kind: ``found`` (``payments`` holds at least one, exactly as the
        provider answered; not yet judged as evidence), ``not_found``,
        ``failed`` (no usable answer; ``reason`` says why), ``rate_limited``
        (``retry_after_s`` says when to ask again) or ``unsupported`` (the
        provider has no such lookup; nothing was sent).
    :param payments: The payments found, in the provider's order (oldest
        first for a reference lookup).
    :param retry_after_s: Seconds to wait, for ``rate_limited``.
    :param reason: Machine-readable reason, for ``failed`` and ``rate_limited``.
    """

    kind: Literal["found", "not_found", "failed", "rate_limited", "unsupported"]
    payments: tuple[PaymentRecord, ...] = ()
    retry_after_s: float | None = None
    reason: str | None = None

    @property
    def payment(self) -> PaymentRecord | None:
        """The first payment found, or ``None``."""
        return self.payments[0] if self.payments else None


# ---------------------------------------------------------------------------
# Notifications, in provider-neutral terms


@dataclass(frozen=True)
class Notification:
    """One verified provider notification, in provider-neutral terms."""

    event_id: str | None
    event_type: str
    sequence: int | None
    payment_id: str | None
    reference: str | None
    status: str | None
    amount_minor: int | None
    currency: str | None
    amount_refunded: int
    payload_account: str | None  # what the event envelope says
    payload_livemode: bool | None
    outcome: ProviderOutcome
    event: dict[str, Any]  # the event as received (no card data or secrets in it)
    object_account: str | None = None  # what the payment object itself says
    object_livemode: bool | None = None

    def identified_otherwise(self) -> Notification:
        """This notification as evidence for an attempt identified other than by its reference:
        by the provider payment id the attempt recorded (the reference named no attempt, and
        the provider's own id is the identity), or by an operator who corrected the reference
        problem. The reference it carries is then not judged."""
        claim = dataclasses.replace(self.outcome.evidence(), reference=None)
        return dataclasses.replace(self, outcome=dataclasses.replace(self.outcome, claim=claim))

    @property
    def is_refund(self) -> bool:
        return self.event_type.endswith(".refunded")

    def canonical_fields(self) -> dict[str, Any] | None:
        """The fields that identify one logical event, normalised; ``None`` without all of them."""
        if None in (self.payment_id, self.status, self.amount_minor, self.currency, self.sequence):
            return None
        assert self.payment_id is not None and self.status is not None and self.currency is not None
        return {
            "payment_id": self.payment_id.strip(),
            "type": self.event_type.strip().lower(),
            "status": self.status.strip().lower(),
            "amount_minor": int(self.amount_minor or 0),
            "currency": self.currency.strip().upper(),
            "sequence": int(self.sequence or 0),
        }


KEY_VERSION: Final = "v1"


def synthesized_key(fields: dict[str, Any]) -> str:
    """``v1:`` + SHA-256 of the canonical JSON (sorted keys, no whitespace, integers as integers)."""
    canonical = orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)
    return f"{KEY_VERSION}:{hashlib.sha256(canonical).hexdigest()}"


def standard_notification_key(n: Notification) -> str | None:
    """The event id when present; else a synthesized key where the fields allow; else ``None``
    (each delivery is then recorded separately, since NULL keys never collide)."""
    if n.event_id is not None:
        return n.event_id
    fields = n.canonical_fields()
    return synthesized_key(fields) if fields is not None else None


class InvalidNotification(PaycoreError, ValueError):
    """A verified body that is not a notification this provider understands; ``str()`` says why."""


class NotificationUnverified(PaycoreError):
    """No configured secret verified the delivery: nothing is stored.

    :param reason: Why, never a secret or a signature.
    :param malformed: The delivery lacks what verification needs (answered 400, else 401).
    """

    def __init__(self, reason: str, *, malformed: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.malformed = malformed


@dataclass(frozen=True)
class VerifiedDelivery:
    """A delivery whose signature a configured account's secret verified.

    :param account: That account: the notification's account is whichever secret
        verified it, never a field of the payload.
    :param delivery_id: The provider's id of this delivery, the key a body kept raw is
        recorded under.
    :param replay: What identifies a byte-identical replay inside the signature
        tolerance, when the signature scheme has one.
    :param parsed: The notification (a payment's, or a capture's, cancel's or refund's), with
        ``key`` its deduplication key; or why the verified body is not one this provider
        understands (kept raw, never applied).
    :param previous_secret: The account's previous secret verified it (a rotation is under
        way and the provider still signs with the old one); handled exactly the same.
    :param operation: The same notification read as a capture's, cancel's or refund's, where
        the provider's event does not say which (Adyen's ``REFUND`` and ``CANCELLATION`` are
        also a payment's): the intake applies it to an operation of paycore's when one
        matches, else reads ``parsed``.
    """

    account: ProviderAccountConfig
    delivery_id: str
    replay: SignedDelivery | None
    parsed: Notification | OperationNotification | InvalidNotification
    key: str | None = None
    previous_secret: bool = False
    operation: OperationNotification | None = None


# ---------------------------------------------------------------------------
# The interface


class NotificationFormat(Protocol):
    """How one provider's notifications read: what a stored event is re-parsed with."""

    @property
    def name(self) -> str:
        """The provider's name, the first part of its provider-account ids (``cardco``)."""
        ...

    def parse_notification(self, body: bytes) -> Notification:
        """The notification in a verified body, or :class:`InvalidNotification`.

        It may still hold text PostgreSQL cannot store (NUL, a lone surrogate): the
        caller checks :func:`paycore.pgtext.json_problem` of ``event`` before recording.
        """
        ...

    def notification_key(self, n: Notification) -> str | None:
        """The deduplication key of ``n`` (per account), or ``None`` for "record each delivery"."""
        ...


# What a storefront sends as ``payment_method``: a provider's token or id (``tok_…``, ``pm_…``),
# or an object its client-side library produced (Adyen's encrypted card fields).
PaymentMethod = str | Mapping[str, Any]


class PaymentCalls(Protocol):
    """The calls checkout and recovery make: each names the account it is made on."""

    def capabilities_of(self, provider_account: str) -> Capabilities:
        """What the provider of this account promises (lookups, key retention, replays)."""
        ...

    def build_request_body(self, account: ProviderAccountConfig, *, amount_minor: int, currency: str,
                           payment_method: PaymentMethod, reference: str,
                           description: str | None = None, manual_capture: bool = False) -> str:
        """The create request's body for ``account``, serialized once to be stored on the attempt;
        ``manual_capture``: authorize and hold the amount, for a capture later (the payment then
        succeeds with provider status :data:`paycore.domain.HOLD_STATUS`).

        :raises ValueError: A value the provider's contract would reject (nothing is recorded),
            or manual capture where the provider's client has none.
        """
        ...

    def unbuildable_reason(self, stored: StoredRequest) -> str | None:
        """Why the stored request cannot be sent as its account is configured now, or ``None``."""
        ...

    async def create_payment(self, stored: StoredRequest, *, budget_s: float | None,
                             first_send: bool) -> ProviderOutcome:
        """Send the stored request once, within ``budget_s`` (and the client's own ceiling).

        ``first_send``: no earlier send of this attempt can have happened; only then
        may a documented rejection be ``not_applied``. The outcome carries its
        :class:`~paycore.evidence.Claim`. Never raises for what the provider does.
        """
        ...

    async def get_payment(self, provider_account: str, payment_id: str, *,
                          budget_s: float | None) -> LookupResult:
        """Look a payment up by the provider's id (``found`` even when it is another's: the caller
        judges); ``not_found``, ``rate_limited``, ``failed`` or (no such lookup) ``unsupported``."""
        ...

    async def find_by_reference(self, provider_account: str, reference: str, *,
                                budget_s: float | None) -> LookupResult:
        """Every payment of the account carrying the reference (oldest first, as seen; the caller
        judges); ``unsupported``, sending nothing, when the provider has no such lookup."""
        ...

    async def aclose(self) -> None: ...


class NotificationReceiver(NotificationFormat, Protocol):
    """The webhook side of one provider: ``POST /webhooks/<name>``."""

    def check_notification_secrets(self) -> None:
        """Raise :class:`paycore.config.ConfigError` unless an account of this provider can verify a
        notification (and ``ValueError`` for a malformed secret): the intake's start-up check."""
        ...

    def verify_deliveries(self, headers: Mapping[str, str], body: bytes, *,
                          now: datetime) -> tuple[VerifiedDelivery, ...]:
        """Verify a delivery against every configured account's credentials, then parse each
        notification it carries (one, or a batch), in order.

        :raises NotificationUnverified: Not every notification in it verified (nothing may be stored).
        """
        ...

    @property
    def acknowledgement(self) -> tuple[bytes, str] | None:
        """The body and media type the provider expects once every notification is recorded;
        ``None``: any 2xx will do, and the intake answers with what it did (``{"result": …}``)."""
        ...


class Provider(PaymentCalls, NotificationReceiver, Protocol):
    """One payment provider, for every configured account of its kind."""

    @property
    def capabilities(self) -> Capabilities: ...


# ---------------------------------------------------------------------------
# After the payment: captures, cancels and refunds
#
# An operation is sent like an attempt: recorded first, its request stored as a
# :class:`StoredRequest` (``attempt_id`` is the operation's id, ``client_reference`` the
# operation's own reference, ``amount_minor``/``currency`` what it moves), and every send
# transmits those bytes under that key.


class OperationEnding(enum.StrEnum):
    """How one capture, cancel or refund call (or what a lookup found) ended."""

    SUCCEEDED = "succeeded"
    PENDING = "pending"  # the provider has it; the ending comes by webhook or lookup
    FAILED = "failed"  # final, nothing moved (a failed or canceled refund or capture)
    REJECTED = "rejected-before-execution"  # the only send was refused, nothing was done
    UNKNOWN = "unknown"  # no answer that proves anything: only evidence resolves it


@dataclass(frozen=True)
class OperationOutcome:
    """The classified ending of an operation call, or an operation object a lookup found.

    :param operation: Capture, cancel or refund.
    :param ending: See :class:`OperationEnding`.
    :param reason: Machine-readable why (``rejected:<code>``, ``provider.in-progress``, a
        failure reason); never card data or secrets.
    :param provider_status: The object's status as the provider wrote it.
    :param provider_operation_id: The refund's or capture's id (none for a cancel: its
        answer is the payment).
    :param provider_payment_id: The payment the answer names.
    :param request_rejected: The provider refused these very bytes as invalid (a
        documented 400): the same request will be refused again, so a rejected resend is
        never repeated. On the only send that is ``REJECTED``; on a resend ``UNKNOWN``.
    :param claim: What the answer said about itself (reference, amount, account, mode),
        kept even when it is not evidence about this operation.
    """

    operation: OperationKind
    ending: OperationEnding
    reason: str | None = None
    provider_status: str | None = None
    provider_operation_id: str | None = None
    provider_payment_id: str | None = None
    amount_minor: int | None = None
    currency: str | None = None
    http_status: int | None = None
    replayed: bool = False
    request_rejected: bool = False
    claim: Claim | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def unknown(cls, operation: OperationKind, reason: str, **kw: Any) -> OperationOutcome:
        return cls(operation, OperationEnding.UNKNOWN, reason=reason, **kw)

    @classmethod
    def refused_before_execution(cls, operation: OperationKind, code: str, *, first_send: bool,
                                 resend_reason: str, **kw: Any) -> OperationOutcome:
        """As :meth:`ProviderOutcome.refused_before_execution`: ``REJECTED`` (``rejected:<code>``)
        only on the only send and not replayed; else ``UNKNOWN`` (``resend_reason``), since the
        refusal of this send says nothing about an earlier one that may have taken effect."""
        if first_send and not kw.get("replayed", False):
            return cls(operation, OperationEnding.REJECTED, reason=f"rejected:{code}", **kw)
        return cls.unknown(operation, resend_reason, **kw)


@dataclass(frozen=True)
class OperationLookup:
    """The answer to one operation lookup.

    :param kind: ``found`` (``found`` holds at least one object, as answered, oldest first;
        not yet judged as evidence), ``not_found``, or ``unavailable`` (no usable answer:
        ``reason`` says why; ``retry_after_s`` when rate-limited). ``unavailable`` is never
        "not found".
    """

    kind: Literal["found", "not_found", "unavailable"]
    found: tuple[OperationOutcome, ...] = ()
    reason: str | None = None
    retry_after_s: float | None = None

    @property
    def outcome_kind(self) -> str:
        """``found``, ``not_found``, ``unavailable``, or ``unsupported``: the provider has no such
        lookup (``reason`` ``lookup.unsupported.<kind>``), so only a same-key resend can tell."""
        if self.kind == "unavailable" and (self.reason or "").startswith(UNSUPPORTED_LOOKUP):
            return "unsupported"
        return self.kind


# The reason of an OperationLookup that the provider has no such lookup (sent nothing).
UNSUPPORTED_LOOKUP: Final = "lookup.unsupported"


@dataclass(frozen=True)
class OperationNotification:
    """One verified notification about a capture, cancel or refund, in provider-neutral terms.

    The webhook intake finds the operation by ``outcome.provider_operation_id`` or by the
    reference in ``outcome.claim`` (the operation's own), judges the claim as it judges a
    payment's, and applies ``outcome`` through :func:`paycore.domain.decide_operation_outcome`.

    :param event_id: The provider's id of this notification (its deduplication key), or ``None``.
    :param event_type: As the provider named it (``refund.succeeded``, ``REFUND_FAILED``, …).
    :param payload_account: What the envelope says, apart from the object's (in ``claim``).
    :param outcome: The operation as the notification shows it: kind, ending (Adyen's
        "received" is never ``SUCCEEDED``), provider status, the operation's and the payment's
        provider ids, amount, currency, and the claim (reference, account, mode).
    :param event: The notification as received (no card data or secrets in it).
    """

    event_id: str | None
    event_type: str
    payload_account: str | None
    payload_livemode: bool | None
    outcome: OperationOutcome
    event: dict[str, Any] = field(repr=False, compare=False)


class OperationCalls(Protocol):
    """Captures, cancels and refunds: what the operations' outbox and recovery call.

    The rules of :class:`PaymentCalls` hold: one send per call, the stored bytes under the
    stored key, no retries, and nothing the provider does raises.
    """

    def operation_endpoint(self, account: ProviderAccountConfig, kind: OperationKind,
                           provider_payment_id: str) -> str:
        """The absolute URL an operation of ``kind`` on the payment is stored with."""
        ...

    def build_operation_body(self, kind: OperationKind, *, provider_payment_id: str, amount_minor: int,
                             reference: str, reason: str | None = None, currency: str | None = None,
                             account: ProviderAccountConfig | None = None) -> str:
        """The operation's body, serialized once to be stored (a cancel sends only the reference);
        ``currency`` (the payment's) and ``account`` (the payment's, as configured) for a provider
        whose body names them (Adyen's names the merchant account and the amount's currency).

        :raises ValueError: A value the provider's contract would reject (nothing is recorded).
        """
        ...

    async def send_operation(self, stored: StoredRequest, kind: OperationKind, *, provider_payment_id: str,
                             budget_s: float | None, first_send: bool) -> OperationOutcome:
        """Send the stored operation request once and classify the answer. An answer about
        another payment or reference is ``UNKNOWN``. Never raises for what the provider does."""
        ...

    async def find_operation_by_reference(self, provider_account: str, kind: OperationKind, reference: str,
                                          *, budget_s: float | None,
                                          provider_payment_id: str | None = None) -> OperationLookup:
        """Every operation object of ``kind`` carrying ``reference`` (``unavailable`` when the
        provider has no such lookup, sending nothing); ``provider_payment_id`` is the payment's,
        for a provider that lists a payment's operations rather than search them (Stripe)."""
        ...

    async def get_refund(self, provider_account: str, refund_id: str, *,
                         budget_s: float | None) -> OperationLookup:
        """One refund by the provider's id."""
        ...
