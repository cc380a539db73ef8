"""Cardco's wire: the payment, refund and capture objects, parsing, errors, ``Retry-After`` and
structured headers.

The contract is ``docs/providers/cardco.md``; nothing here relies on what the
project's sandbox does beyond it. A body that does not fit the contract parses to
``None`` (or :data:`UNREADABLE`), never to a guess.
"""

from __future__ import annotations

import email.utils
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, Final, TypeVar

import httpx

from paycore.domain import HOLD_STATUS, Claim, ProviderOutcome
from paycore.providers.cardco.provider import NAME as NAME  # re-exported
from paycore.providers.http import NotBuildable, header_token
from paycore.providers.json_body import UNREADABLE as UNREADABLE  # re-exported: the client compares with it
from paycore.providers.json_body import Unreadable as Unreadable
from paycore.providers.json_body import is_int as _is_int
from paycore.providers.json_body import optional_str as _optional_str
from paycore.providers.json_body import read_json as read_json
from paycore.providers.package import ProviderAccountConfig
from paycore.settings_spec import MAX_BUDGET_S

# Every payment status the contract defines; anything else is unrecognised.
PAYMENT_STATUSES: Final = frozenset(
    {"processing", "requires_action", "requires_capture", "succeeded", "declined", "failed", "canceled"}
)
# The statuses ProviderPayment.to_outcome maps: every one (a hold, requires_capture, is a
# Succeeded payment whose provider status says nothing is charged yet: domain.HOLD_STATUS).
OUTCOME_STATUSES: Final = PAYMENT_STATUSES
CAPTURE_MODES: Final = frozenset({"automatic", "manual"})

# 400 error codes that the contract documents as "rejected before execution,
# nothing was created". Any other 400 is not understood, and so is Unknown.
REJECTION_CODES: Final = frozenset(
    {"parameter_invalid", "invalid_request", "missing_idempotency_key", "version_invalid"}
)

# The contract caps the key at 255 characters; a longer one would be rejected
# anyway, so it is refused before sending.
MAX_IDEMPOTENCY_KEY_LEN: Final = 255

CURRENCY_RE: Final = re.compile(r"[A-Z]{3}")
# RFC 9651 sf-string: printable ASCII; '"' and '\\' are escaped when serialised.
_SF_STRING_CHARS_RE: Final = re.compile(r"[\x20-\x7e]*")


# ---------------------------------------------------------------------------
# The payment object


@dataclass(frozen=True)
class ProviderPayment:
    """A Cardco payment object, validated.

    :param str id: Cardco's payment id (``pay_…``).
    :param account: The Cardco account it belongs to, when the object says.
    :param livemode: ``True`` for live mode, when the object says.
    :param int amount_minor: Amount in minor units.
    :param str currency: Three-letter currency.
    :param reference: The merchant reference it carries, when present.
    :param str status: One of ``processing``, ``requires_action``, ``requires_capture``,
        ``succeeded``, ``declined``, ``failed``, ``canceled``.
    :param decline_code: Set when declined.
    :param int amount_refunded: Refunded amount in minor units (0 when absent).
    :param next_action: The customer's next action while ``requires_action``.
    :param next_action_expires_at: When that action expires (UTC).
    :param capture: ``automatic`` or ``manual``; ``None`` when the object has no capture
        fields (a server older than the contract's after-payment part).
    :param amount_capturable: Held and not yet captured, when the object says.
    :param amount_captured: Charged so far, when the object says.
    :param capture_before: Unix time after which an uncaptured hold lapses; ``None``
        unless ``requires_capture``.
    :raises ValueError: An unknown status, or ``requires_action`` without a
        next action.
    """

    id: str
    account: str | None
    livemode: bool | None
    amount_minor: int
    currency: str
    reference: str | None
    status: str
    decline_code: str | None = None
    amount_refunded: int = 0
    next_action: dict[str, Any] | None = None
    next_action_expires_at: datetime | None = None
    capture: str | None = None
    amount_capturable: int | None = None
    amount_captured: int | None = None
    capture_before: int | None = None

    def __post_init__(self) -> None:
        if self.status not in PAYMENT_STATUSES:
            raise ValueError(f"unknown payment status {self.status!r}")
        if self.status == "requires_action" and self.next_action is None:
            raise ValueError("a requires_action payment needs a next_action")

    def evidence(self) -> dict[str, Any]:
        """What was seen, for history and escalations: identifiers, never card data."""
        return {"id": self.id, "status": self.status, "account": self.account, "livemode": self.livemode,
                "reference": self.reference, "amount_minor": self.amount_minor, "currency": self.currency}

    def claim(self) -> Claim:
        """What this payment object says about itself, for :func:`paycore.evidence.judge`."""
        return Claim(provider_payment_id=self.id, reference=self.reference, amount_minor=self.amount_minor,
                     currency=self.currency, accounts=(self.account,) if self.account is not None else (),
                     livemodes=(self.livemode,) if self.livemode is not None else ())

    def to_outcome(self) -> ProviderOutcome:
        """What this payment says about the attempt.

        ==================  ==========================================
        status              outcome
        ==================  ==========================================
        succeeded           ``succeeded``
        requires_capture    ``succeeded``, provider status ``requires_capture`` (a hold)
        processing          ``processing`` (Started)
        requires_action     ``requires_action`` with the next action
        declined            ``failed``, reason ``declined:<code>``
        failed              ``failed``, reason ``failed``
        canceled            ``failed``, reason ``canceled``
        ==================  ==========================================

        :return: The outcome, carrying the payment id, status, amount and
            currency.
        :raises ValueError: A status this table does not map: it must never fall through to
            ``failed``.
        """
        if self.status not in OUTCOME_STATUSES:
            raise ValueError(f"no outcome for payment status {self.status!r}")
        common: dict[str, Any] = {"amount_minor": self.amount_minor, "currency": self.currency,
                                  "claim": self.claim()}
        if self.status == "succeeded":
            return ProviderOutcome.succeeded(self.id, self.amount_minor, self.currency, claim=self.claim())
        if self.status == HOLD_STATUS:  # authorized, held for a capture: nothing charged yet
            return ProviderOutcome.succeeded(self.id, self.amount_minor, self.currency, claim=self.claim(),
                                             provider_status=HOLD_STATUS)
        if self.status == "processing":
            return ProviderOutcome.processing(self.id, **common)
        if self.status == "requires_action":
            assert self.next_action is not None  # enforced by __post_init__
            return ProviderOutcome.requires_action(
                self.id, self.next_action, self.next_action_expires_at, **common
            )
        if self.status == "declined":
            reason = f"declined:{self.decline_code or 'unspecified'}"
        else:  # failed, canceled: final, nothing charged
            reason = self.status
        return ProviderOutcome.failed(
            reason, provider_payment_id=self.id, provider_status=self.status, **common
        )


# ---------------------------------------------------------------------------
# Parsing


# Explicit type checks, no try/except around our own code, so that a bug raises
# instead of turning into a provider outcome.


def parse_payment(obj: Any) -> ProviderPayment | None:
    """A payment object whose status :meth:`ProviderPayment.to_outcome` maps, or ``None`` when
    the JSON does not fit the contract or the status is one it does not map."""
    payment = parse_payment_object(obj)
    if payment is None or payment.status not in OUTCOME_STATUSES:
        return None
    return payment


def parse_payment_object(obj: Any) -> ProviderPayment | None:
    """A payment object in any status of the contract, ``requires_capture`` included, or ``None``
    when the JSON does not fit it. Not for outcomes: see :func:`parse_payment`."""
    if not isinstance(obj, dict):
        return None
    pid, status, amount, currency = obj.get("id"), obj.get("status"), obj.get("amount"), obj.get("currency")
    if not isinstance(pid, str) or not pid:
        return None
    if not isinstance(status, str) or status not in PAYMENT_STATUSES:
        return None
    if not _is_int(amount) or amount <= 0:
        return None
    if not isinstance(currency, str) or not CURRENCY_RE.fullmatch(currency):
        return None
    ok_account, account = _optional_str(obj, "account")
    ok_reference, reference = _optional_str(obj, "reference")
    ok_decline, decline_code = _optional_str(obj, "decline_code")
    if not (ok_account and ok_reference and ok_decline):
        return None
    livemode = obj.get("livemode")
    if livemode is not None and not isinstance(livemode, bool):
        return None
    refunded = obj.get("amount_refunded", 0)
    if refunded is None:
        refunded = 0
    if not _is_int(refunded) or refunded < 0:
        return None

    next_action = obj.get("next_action")
    expires_at: datetime | None = None
    if next_action is not None:
        if not isinstance(next_action, dict):
            return None
        raw_expiry = next_action.get("expires_at")
        if raw_expiry is not None:
            if not (_is_int(raw_expiry) or isinstance(raw_expiry, float)) or not math.isfinite(raw_expiry):
                return None
            try:
                expires_at = datetime.fromtimestamp(raw_expiry, UTC)
            except (OverflowError, OSError, ValueError):  # out of datetime's range
                return None
    if status == "requires_action" and next_action is None:
        return None
    capture = _capture_fields(obj, status)
    if capture is None:
        return None

    return ProviderPayment(
        id=pid,
        account=account,
        livemode=livemode,
        amount_minor=amount,
        currency=currency,
        reference=reference,
        status=status,
        decline_code=decline_code,
        amount_refunded=refunded,
        next_action=next_action,
        next_action_expires_at=expires_at,
        capture=capture.mode,
        amount_capturable=capture.capturable,
        amount_captured=capture.captured,
        capture_before=capture.before,
    )


@dataclass(frozen=True)
class _CaptureFields:
    mode: str | None
    capturable: int | None
    captured: int | None
    before: int | None


def _capture_fields(obj: dict[str, Any], status: str) -> _CaptureFields | None:
    """A payment's capture fields, or ``None`` when one present is malformed.

    Each may be absent (a server older than the after-payment part sends none, and the
    payment parses as before); present, it must fit: ``capture`` a mode, the amounts
    non-negative integers (never null), ``capture_before`` a unix time or null. A hold
    (``requires_capture``) must say it is ``manual`` and when it lapses. Other statuses
    are not checked against the fields (``capture_before`` "null unless requires_capture"):
    the outcome of a charge does not depend on them.
    """
    mode = obj.get("capture")
    if "capture" in obj and mode not in CAPTURE_MODES:
        return None
    amounts: list[int | None] = []
    for key in ("amount_capturable", "amount_captured"):
        value = obj.get(key)
        if key in obj and not _is_non_negative_int(value):
            return None
        amounts.append(value)
    before = obj.get("capture_before")
    if before is not None and not _is_non_negative_int(before):
        return None
    if status == "requires_capture" and (mode != "manual" or before is None):
        return None
    return _CaptureFields(mode, amounts[0], amounts[1], before)


def _is_non_negative_int(value: object) -> bool:
    return _is_int(value) and value >= 0


# ---------------------------------------------------------------------------
# After the payment: refunds and captures

MAX_REFERENCE_LEN: Final = 64


def failure_reason_fits(status: str, failure_reason: str | None) -> bool:
    """A refund's or capture's ``failure_reason`` is a non-empty string exactly when it failed.

    ``canceled`` (refunds only) may carry one or not: the contract says nothing of a reason
    for it, and a canceled refund is final, so refusing either would leave it unreadable.
    """
    if status == "failed":
        return bool(failure_reason)
    if status == "canceled":
        return failure_reason is None or bool(failure_reason)
    return failure_reason is None


@dataclass(frozen=True)
class ProviderMovement:
    """What a Cardco refund and capture share, validated: money moving after a payment.

    :param str id: Its id (``re_…`` / ``cap_…``).
    :param str payment: The payment it moves money of (``pay_…``).
    :param str account: The Cardco account.
    :param bool livemode: ``True`` for live mode.
    :param int amount_minor: Amount in minor units, positive.
    :param str currency: Three-letter currency.
    :param str reference: The merchant's id of this refund or capture (1 to 64 characters).
    :param str status: One of :attr:`STATUSES`.
    :param failure_reason: Set exactly when ``failed`` (and perhaps when ``canceled``).
    :param int created: Unix time.
    :raises ValueError: A status not in :attr:`STATUSES`, or a ``failure_reason`` that does
        not fit it.
    """

    OBJECT: ClassVar[str]
    ID_PREFIX: ClassVar[str]
    STATUSES: ClassVar[frozenset[str]]

    id: str
    payment: str
    account: str
    livemode: bool
    amount_minor: int
    currency: str
    reference: str
    status: str
    failure_reason: str | None
    created: int

    def __post_init__(self) -> None:
        if self.status not in self.STATUSES:
            raise ValueError(f"unknown {self.OBJECT} status {self.status!r}")
        if not failure_reason_fits(self.status, self.failure_reason):
            raise ValueError(f"a {self.status} {self.OBJECT} has the wrong failure_reason")


@dataclass(frozen=True)
class ProviderRefund(ProviderMovement):
    """A Cardco refund. ``succeeded`` is not always final: a returned refund becomes ``failed``."""

    OBJECT: ClassVar[str] = "refund"
    ID_PREFIX: ClassVar[str] = "re_"
    STATUSES: ClassVar[frozenset[str]] = frozenset({"pending", "succeeded", "failed", "canceled"})


@dataclass(frozen=True)
class ProviderCapture(ProviderMovement):
    """A Cardco capture of a held payment; ``succeeded`` and ``failed`` are final."""

    OBJECT: ClassVar[str] = "capture"
    ID_PREFIX: ClassVar[str] = "cap_"
    STATUSES: ClassVar[frozenset[str]] = frozenset({"pending", "succeeded", "failed"})


M = TypeVar("M", bound=ProviderMovement)
T = TypeVar("T")


def parse_refund(obj: Any) -> ProviderRefund | None:
    """A refund object, or ``None`` when the JSON does not fit the contract."""
    return _parse_movement(obj, ProviderRefund)


def parse_capture(obj: Any) -> ProviderCapture | None:
    """A capture object, or ``None`` when the JSON does not fit the contract."""
    return _parse_movement(obj, ProviderCapture)


def parse_list(obj: Any, parse: Callable[[Any], T | None]) -> list[T] | None:
    """A lookup's ``{"data": [...]}`` answer, each element read by ``parse`` (oldest first, as
    answered), or ``None`` when the shape is wrong or any element does not fit: a list with a
    part missing could be taken for the whole."""
    if not isinstance(obj, dict) or not isinstance(obj.get("data"), list):
        return None
    parsed: list[T] = []
    for item in obj["data"]:
        value = parse(item)
        if value is None:
            return None
        parsed.append(value)
    return parsed


_MOVEMENT_FIELDS: Final = ("id", "payment", "account", "livemode", "amount", "currency", "reference",
                           "status", "failure_reason", "created")


def _parse_movement(obj: Any, cls: type[M]) -> M | None:
    # Every field is required (the contract's objects always carry them), except that an
    # absent failure_reason reads as null, as decline_code does; unknown fields are ignored.
    if not isinstance(obj, dict) or obj.get("object") != cls.OBJECT:
        return None
    f: dict[str, Any] = {key: obj.get(key) for key in _MOVEMENT_FIELDS}
    if not (_movement_ids_fit(f, cls.ID_PREFIX) and _movement_amount_fits(f)
            and _movement_state_fits(f, cls.STATUSES)):
        return None
    return cls(id=f["id"], payment=f["payment"], account=f["account"], livemode=f["livemode"],
               amount_minor=f["amount"], currency=f["currency"], reference=f["reference"],
               status=f["status"], failure_reason=f["failure_reason"], created=f["created"])


def _movement_ids_fit(f: dict[str, Any], prefix: str) -> bool:
    """Its id, its payment's, its account and mode, and the merchant's reference."""
    reference = f["reference"]
    return (_is_id(f["id"], prefix) and _is_id(f["payment"], "pay_")
            and isinstance(f["account"], str) and bool(f["account"]) and isinstance(f["livemode"], bool)
            and isinstance(reference, str) and 0 < len(reference) <= MAX_REFERENCE_LEN)


def _movement_amount_fits(f: dict[str, Any]) -> bool:
    amount, currency = f["amount"], f["currency"]
    return (_is_int(amount) and amount > 0
            and isinstance(currency, str) and CURRENCY_RE.fullmatch(currency) is not None)


def _movement_state_fits(f: dict[str, Any], statuses: frozenset[str]) -> bool:
    """Its status, the failure_reason that goes with it, and when it was created."""
    status, reason, created = f["status"], f["failure_reason"], f["created"]
    return (isinstance(status, str) and status in statuses
            and (reason is None or isinstance(reason, str)) and failure_reason_fits(status, reason)
            and _is_non_negative_int(created))


def _is_id(value: object, prefix: str) -> bool:
    """A Cardco id: its kind's prefix and something after it."""
    return isinstance(value, str) and value.startswith(prefix) and len(value) > len(prefix)


def error_code(obj: Any) -> tuple[str, str | None] | None:
    """``(code, param)`` of a contract error body, or ``None``."""
    if not isinstance(obj, dict) or not isinstance(obj.get("error"), dict):
        return None
    err = obj["error"]
    code, param = err.get("code"), err.get("param")
    if not isinstance(code, str) or not code or not (param is None or isinstance(param, str)):
        return None
    return code, (param or None)


def retry_after_seconds(response: httpx.Response, now: datetime) -> float | None:
    """``Retry-After`` in seconds (delta-seconds or HTTP-date), or ``None``."""
    raw = response.headers.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:  # an HTTP-date is GMT by definition
            when = when.replace(tzinfo=UTC)
        seconds = (when - now).total_seconds()
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), MAX_BUDGET_S)


def is_replayed(response: httpx.Response) -> bool:
    value: str = response.headers.get("idempotent-replayed", "")
    return value.strip().lower() == "true"


# ---------------------------------------------------------------------------
# Headers we write, from stored and configured values


def sf_string(value: str) -> str:
    """``value`` as an RFC 9651 Structured Field String: quoted, ``\\`` and ``"`` escaped."""
    if not _SF_STRING_CHARS_RE.fullmatch(value):
        raise NotBuildable("invalid-header")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def auth_headers(acct: ProviderAccountConfig, api_version: str) -> dict[str, str]:
    """Credentials and version for ``acct``, read from configuration now: API version, account id
    and API key are all tokens."""
    return {
        "Authorization": "Bearer " + header_token(acct.api_key.reveal()),
        "Cardco-Account": header_token(acct.account),
        "Cardco-Version": header_token(api_version),
    }
