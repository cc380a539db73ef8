"""Cardco's wire: the payment object, parsing, errors, ``Retry-After`` and structured headers.

The contract is ``docs/providers/cardco.md``; nothing here relies on what the
project's sandbox does beyond it. A body that does not fit the contract parses to
``None`` (or :data:`UNREADABLE`), never to a guess.
"""

from __future__ import annotations

import email.utils
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import httpx

from paycore.config import MAX_BUDGET_S, ProviderAccountConfig
from paycore.domain import Claim, ProviderOutcome
from paycore.providers.http import NotBuildable, header_token
from paycore.providers.json_body import UNREADABLE as UNREADABLE  # re-exported: the client compares with it
from paycore.providers.json_body import Unreadable as Unreadable
from paycore.providers.json_body import is_int as _is_int
from paycore.providers.json_body import optional_str as _optional_str
from paycore.providers.json_body import read_json as read_json

NAME: Final = "cardco"

# Every payment status the contract defines; anything else is unrecognised.
PAYMENT_STATUSES: Final = frozenset(
    {"processing", "requires_action", "succeeded", "declined", "failed", "canceled"}
)

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
    :param str status: One of ``processing``, ``requires_action``,
        ``succeeded``, ``declined``, ``failed``, ``canceled``.
    :param decline_code: Set when declined.
    :param int amount_refunded: Refunded amount in minor units (0 when absent).
    :param next_action: The customer's next action while ``requires_action``.
    :param next_action_expires_at: When that action expires (UTC).
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
        processing          ``processing`` (Started)
        requires_action     ``requires_action`` with the next action
        declined            ``failed``, reason ``declined:<code>``
        failed              ``failed``, reason ``failed``
        canceled            ``failed``, reason ``canceled``
        ==================  ==========================================

        :return: The outcome, carrying the payment id, status, amount and
            currency.
        """
        common: dict[str, Any] = {"amount_minor": self.amount_minor, "currency": self.currency,
                                  "claim": self.claim()}
        if self.status == "succeeded":
            return ProviderOutcome.succeeded(self.id, self.amount_minor, self.currency, claim=self.claim())
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
    """A payment object, or ``None`` when the JSON does not fit the contract."""
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
    )


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
