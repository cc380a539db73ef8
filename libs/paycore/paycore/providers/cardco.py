"""The Cardco adapter: create a payment, look payments up.

The wire contract is ``docs/providers/cardco.md``; this module relies on
nothing the project's sandbox does beyond it.

Rules this module keeps (see the reference's "payment client is registered
without automatic resends"):

- **It never decides to send.** :meth:`CardcoClient.create_payment` sends the
  stored attempt exactly once per call. There are no retries of any kind: not
  in httpx's transport, not on redirects, not here. Only checkout and the
  recovery loop decide when a payment request goes out.
- **It never invents the request.** Endpoint, body bytes, idempotency key and
  API version come from the stored attempt; only the credentials of the stored
  provider account are applied at send time. There is no fallback to another
  or a default account.
- **No answer is Unknown.** A stored request that cannot be built, an expired
  budget, a transport failure and an unreadable or unrecognised response all
  become ``ProviderOutcome.unknown(reason)``. Only a documented rejection of
  the *first* send is ``not_applied``: a no-effect rejection of a resend proves
  nothing about an earlier send.
- **Programming errors surface.** Only the expected failure types are caught;
  a bug is not disguised as a provider outcome. The attempt is already durably
  Started, so recovery still resolves it.
- **Secrets stay out.** Logs carry attempt ids and reason codes only: never
  the API key, the ``Authorization`` header or a request body.
"""

from __future__ import annotations

import dataclasses
import email.utils
import logging
import math
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Final, Literal, Protocol, TypeGuard
from urllib.parse import quote

import httpx
import orjson

from paycore.clock import Clock
from paycore.config import MAX_BUDGET_S, ProviderAccountConfig
from paycore.domain import OutcomeKind, ProviderOutcome
from paycore.evidence import Claim, judge

__all__ = [
    "CardcoClient",
    "LookupResult",
    "ProviderPayment",
    "StoredRequest",
    "build_request_body",
]

log = logging.getLogger("paycore.providers.cardco")

PROVIDER: Final = "cardco"

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

# When a 429 carries no usable Retry-After.
DEFAULT_RETRY_AFTER_S: Final = 1.0

_CURRENCY_RE: Final = re.compile(r"[A-Z]{3}")
# RFC 9651 sf-string: printable ASCII; '"' and '\' are escaped when serialised.
_SF_STRING_CHARS_RE: Final = re.compile(r"[\x20-\x7e]*")
# A header value we write must be visible ASCII with no whitespace at all:
# API version, account id and API key are all tokens.
_TOKEN_RE: Final = re.compile(r"[\x21-\x7e]+")

_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


# ---------------------------------------------------------------------------
# The stored request


class AttemptLike(Protocol):
    """What a stored request is built from (a :class:`paycore.attempts.Attempt`)."""

    @property
    def attempt_id(self) -> uuid.UUID: ...
    @property
    def provider_account(self) -> str: ...
    @property
    def endpoint(self) -> str: ...
    @property
    def api_version(self) -> str: ...
    @property
    def idempotency_key(self) -> str: ...
    @property
    def request_body(self) -> str: ...
    @property
    def client_reference(self) -> str: ...
    @property
    def amount_minor(self) -> int: ...
    @property
    def currency(self) -> str: ...


@dataclass(frozen=True)
class StoredRequest:
    """The provider request as stored on a payment attempt.

    Everything the create call sends comes from here, so every send of one
    attempt (checkout's and each of recovery's) is the same request.

    :param uuid.UUID attempt_id: The attempt; used in logs only.
    :param str provider_account: Internal provider-account id,
        e.g. ``'cardco:acct_store:test'``; selects the credentials.
    :param str endpoint: Absolute URL of ``POST /v1/payments`` as stored on
        the attempt. It must still be on the configured account's origin.
    :param str api_version: Value of the ``Cardco-Version`` header.
    :param str idempotency_key: The attempt's key, sent as a Structured Field
        String.
    :param str request_body: The exact serialized JSON; its UTF-8 bytes are
        sent unchanged on every send. Hidden from ``repr``.
    :param str client_reference: The ``reference`` inside the body; a payment
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
    def from_attempt(cls, attempt: AttemptLike) -> StoredRequest:
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

        :param row: Has the columns ``attempt_id``, ``provider_account``,
            ``endpoint``, ``api_version``, ``idempotency_key``,
            ``request_body``, ``client_reference``, ``amount_minor`` and
            ``currency``.
        :return: The stored request.
        :raises KeyError: A column is missing.
        """
        attempt_id = row["attempt_id"]
        if not isinstance(attempt_id, uuid.UUID):
            attempt_id = uuid.UUID(str(attempt_id))
        return cls(
            attempt_id=attempt_id,
            provider_account=row["provider_account"],
            endpoint=row["endpoint"],
            api_version=row["api_version"],
            idempotency_key=row["idempotency_key"],
            request_body=row["request_body"],
            client_reference=row["client_reference"],
            amount_minor=row["amount_minor"],
            currency=row["currency"],
        )


def build_request_body(
    *,
    amount_minor: int,
    currency: str,
    payment_method: str,
    reference: str,
    description: str | None = None,
    return_url: str | None = None,
) -> str:
    """Serialize the body of ``POST /v1/payments``, once, for storing on the attempt.

    The result is canonical JSON (orjson, keys sorted, no whitespace); optional
    fields that are ``None`` are left out. It is built once when the attempt is
    created and never again: every send transmits the stored string, so the
    provider's body fingerprint for the key cannot change between sends.

    :param amount_minor: Positive amount in minor units.
    :param currency: Three upper-case letters, e.g. ``'EUR'``.
    :param payment_method: The payment-method token.
    :param reference: The attempt's client reference (1 to 64 characters).
    :param description: Optional free text.
    :param return_url: Optional URL the customer returns to after an action.
    :return: The JSON text.
    :raises ValueError: A value the contract would reject.
    """
    if isinstance(amount_minor, bool) or not isinstance(amount_minor, int) or amount_minor <= 0:
        raise ValueError("amount_minor must be a positive integer")
    if not _CURRENCY_RE.fullmatch(currency):
        raise ValueError("currency must be three upper-case letters")
    if not payment_method:
        raise ValueError("payment_method must not be empty")
    if not 1 <= len(reference) <= 64:
        raise ValueError("reference must be 1 to 64 characters")
    body: dict[str, Any] = {
        "amount": amount_minor,
        "currency": currency,
        "payment_method": payment_method,
        "reference": reference,
    }
    if description is not None:
        body["description"] = description
    if return_url is not None:
        body["return_url"] = return_url
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS).decode("utf-8")


# ---------------------------------------------------------------------------
# Payments and lookups


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


@dataclass(frozen=True)
class LookupResult:
    """The answer to a lookup.

    :param kind: ``found`` (``payments`` holds at least one, exactly as the
        provider answered; not yet judged as evidence), ``not_found``,
        ``failed`` (no usable answer; ``reason`` says why) or
        ``rate_limited`` (``retry_after_s`` says when to ask again).
    :param payments: The payments found, in the provider's order (oldest
        first for a reference lookup).
    :param retry_after_s: Seconds to wait, for ``rate_limited``.
    :param reason: Machine-readable reason, for ``failed`` and ``rate_limited``.
    """

    kind: Literal["found", "not_found", "failed", "rate_limited"]
    payments: tuple[ProviderPayment, ...] = ()
    retry_after_s: float | None = None
    reason: str | None = None

    @property
    def payment(self) -> ProviderPayment | None:
        """The first payment found, or ``None``."""
        return self.payments[0] if self.payments else None


# ---------------------------------------------------------------------------
# Parsing. Explicit type checks, no try/except around our own code, so that a
# bug raises instead of turning into a provider outcome.


class _Unreadable:
    """Marker: the body is empty or not JSON."""


@dataclass(frozen=True)
class _Body:
    """The parsed JSON of a lookup's 200 response, not yet validated."""

    value: Any


_UNREADABLE: Final = _Unreadable()


def _json(body: bytes) -> Any:
    """The parsed body, or ``_UNREADABLE``."""
    if not body.strip():
        return _UNREADABLE
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:  # also invalid UTF-8
        return _UNREADABLE


def _is_int(value: object) -> TypeGuard[int]:
    # bool is an int subclass; an amount of `true` is not an amount.
    return isinstance(value, int) and not isinstance(value, bool)


def _optional_str(obj: Mapping[str, Any], key: str) -> tuple[bool, str | None]:
    value = obj.get(key)
    return (value is None or isinstance(value, str)), value


def parse_payment(obj: Any) -> ProviderPayment | None:
    """A payment object, or ``None`` when the JSON does not fit the contract."""
    return _parse_payment(obj)


def _parse_payment(obj: Any) -> ProviderPayment | None:
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
    if not isinstance(currency, str) or not _CURRENCY_RE.fullmatch(currency):
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


def _error(obj: Any) -> tuple[str, str | None] | None:
    """``(code, param)`` of a contract error body, or ``None``."""
    if not isinstance(obj, dict) or not isinstance(obj.get("error"), dict):
        return None
    err = obj["error"]
    code, param = err.get("code"), err.get("param")
    if not isinstance(code, str) or not code or not (param is None or isinstance(param, str)):
        return None
    return code, (param or None)


def _retry_after(response: httpx.Response, now: datetime) -> float | None:
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


def _replayed(response: httpx.Response) -> bool:
    value: str = response.headers.get("idempotent-replayed", "")
    return value.strip().lower() == "true"


# ---------------------------------------------------------------------------
# Building a request from stored values


class _NotBuildable(Exception):
    """A stored value cannot be applied; ``reason`` is the suffix of the outcome reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port or _DEFAULT_PORTS.get(url.scheme)


def _sf_string(value: str) -> str:
    """``value`` as an RFC 9651 Structured Field String: quoted, ``\\`` and ``"`` escaped."""
    if not _SF_STRING_CHARS_RE.fullmatch(value):
        raise _NotBuildable("invalid-header")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _token(value: str) -> str:
    if not _TOKEN_RE.fullmatch(value):
        raise _NotBuildable("invalid-header")
    return value


def _auth_headers(acct: ProviderAccountConfig, api_version: str) -> dict[str, str]:
    """Credentials and version for ``acct``, read from configuration now."""
    return {
        "Authorization": "Bearer " + _token(acct.api_key.reveal()),
        "Cardco-Account": _token(acct.account),
        "Cardco-Version": _token(api_version),
    }


# ---------------------------------------------------------------------------
# The client


class CardcoClient:
    """The one HTTP client for Cardco.

    One ``httpx.AsyncClient`` with an HTTP/1.1 keep-alive pool, no httpx
    timeout (the per-call budget is the deadline), no redirects and no retries;
    environment proxy settings are not read (``trust_env=False``), so every way
    a payment request leaves is visible here.

    :param accounts: Configured provider accounts; those whose provider is not
        ``cardco`` are ignored. Each stored request names its account.
    :param clock: The clock budgets run on.
    :param max_call_duration_s: The client's own ceiling for one call, applied
        even when the caller passes no budget.
    :param transport: Replaces the HTTP transport (tests); its own pool
        settings then apply.
    :raises ValueError: ``max_call_duration_s`` is not positive, not finite or
        above :data:`paycore.config.MAX_BUDGET_S`; two accounts share an id.
    """

    def __init__(
        self,
        accounts: Sequence[ProviderAccountConfig],
        clock: Clock,
        *,
        max_call_duration_s: float,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not math.isfinite(max_call_duration_s) or not 0 < max_call_duration_s <= MAX_BUDGET_S:
            raise ValueError(
                f"max_call_duration_s must be positive and at most {MAX_BUDGET_S} s, "
                f"got {max_call_duration_s!r}"
            )
        self._accounts: dict[str, ProviderAccountConfig] = {}
        for acct in accounts:
            if acct.provider != PROVIDER:
                continue
            if acct.provider_account in self._accounts:
                raise ValueError(f"provider account {acct.provider_account} is configured twice")
            self._accounts[acct.provider_account] = acct
        self._clock = clock
        self._max_call_duration_s = float(max_call_duration_s)
        if transport is None:
            transport = httpx.AsyncHTTPTransport(
                http1=True,
                http2=False,
                # retries=0: httpx would otherwise be allowed to reconnect on its own.
                retries=0,
                # keepalive_expiry below the common 5 s server idle timeout (uvicorn's
                # default), so we rarely reuse a connection the server is closing:
                # that race would turn a healthy call into an Unknown.
                limits=httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=4.0),
            )
        self._http = httpx.AsyncClient(
            transport=transport,
            timeout=None,
            follow_redirects=False,
            trust_env=False,
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> CardcoClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- budgets ------------------------------------------------------------

    def _call_limit(self, budget_s: float | None) -> tuple[float, str]:
        """Seconds this call may take, and which limit that is (for the reason)."""
        if budget_s is None:
            return self._max_call_duration_s, "client-ceiling"
        if math.isnan(budget_s):
            raise ValueError("budget_s must be a number of seconds, got NaN")
        if budget_s <= self._max_call_duration_s:
            return budget_s, "caller"
        return self._max_call_duration_s, "client-ceiling"

    # -- create -------------------------------------------------------------

    def _build_create(self, stored: StoredRequest) -> httpx.Request:
        acct = self._accounts.get(stored.provider_account)
        if acct is None:
            raise _NotBuildable("account-not-configured")
        try:
            url = httpx.URL(stored.endpoint)
            base = httpx.URL(acct.base_url)
        except httpx.InvalidURL:
            raise _NotBuildable("endpoint-changed") from None
        if (
            url.scheme not in _DEFAULT_PORTS
            or not url.host
            # httpx would turn userinfo into Basic auth, replacing our credentials.
            or url.userinfo
            or _origin(url) != _origin(base)
        ):
            raise _NotBuildable("endpoint-changed")
        if not 0 < len(stored.idempotency_key) <= MAX_IDEMPOTENCY_KEY_LEN:
            raise _NotBuildable("invalid-header")
        headers = {
            "Idempotency-Key": _sf_string(stored.idempotency_key),
            "Content-Type": "application/json",
            **_auth_headers(acct, stored.api_version),
        }
        try:
            content = stored.request_body.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates: not a body we can send as stored
            raise _NotBuildable("invalid-body") from None
        return httpx.Request("POST", url, headers=headers, content=content)

    def unbuildable_reason(self, stored: StoredRequest) -> str | None:
        """Why the stored request cannot be sent as it is now configured, or ``None``.

        Recovery asks this before committing a resend intent: an account no
        longer configured, an endpoint whose origin changed, or an invalid
        stored header or body each refuse the resend before anything is sent.
        """
        try:
            self._build_create(stored)
        except _NotBuildable as exc:
            return exc.reason
        return None

    async def create_payment(
        self, stored: StoredRequest, *, budget_s: float | None, first_send: bool
    ) -> ProviderOutcome:
        """Send the stored create-payment request once and classify the answer.

        The call runs under ``clock.budget(min(budget_s, max_call_duration_s))``;
        a caller that passes no budget is still cut off by the client's maximum
        call duration. The request is built only from ``stored``, plus the
        current credentials of ``stored.provider_account``.

        :param stored: The attempt's stored request.
        :param budget_s: The caller's budget for this call, in seconds on the
            clock, or ``None``. Zero or negative: nothing is sent.
        :param first_send: ``True`` only if no earlier send of this attempt can
            have happened. Only then may a documented rejection mean
            ``not_applied``; on a resend it is ``unknown``.
        :return: The classified outcome (see :meth:`_classify_create`), with
            ``http_status`` and ``replayed`` filled when a response arrived.
        :raises ValueError: ``budget_s`` is NaN.
        :raises asyncio.CancelledError: The calling task was cancelled.
        """
        limit_s, limit_name = self._call_limit(budget_s)
        try:
            request = self._build_create(stored)
        except _NotBuildable as exc:
            # Still Unknown, not NotApplied: this call cannot prove that the
            # attempt had no earlier send. Recovery escalates it.
            return self._logged(stored, ProviderOutcome.unknown(f"request.not-buildable.{exc.reason}"))
        if limit_s <= 0:
            # The budget is already spent; do not start a send that would be
            # cut off part-way.
            return self._logged(stored, ProviderOutcome.unknown(f"provider.no-response.{limit_name}"))

        try:
            async with self._clock.budget(limit_s):
                # stream=False (the default) reads the whole body here, so a
                # response that ends early is a transport error, not a parse error.
                response = await self._http.send(request)
        except TimeoutError:
            return self._logged(stored, ProviderOutcome.unknown(f"provider.no-response.{limit_name}"))
        except httpx.TransportError as exc:
            # Connect/read/write errors, a reset, a remote protocol error, an
            # incomplete body: each means the same for the payment.
            return self._logged(stored, ProviderOutcome.unknown(f"provider.transport.{type(exc).__name__}"))
        except httpx.DecodingError:
            # The body could not be decoded (e.g. a broken Content-Encoding).
            return self._logged(stored, ProviderOutcome.unknown("provider.body-unreadable"))

        outcome = self._classify_create(stored, response, first_send=first_send)
        return self._logged(stored, outcome)

    def _classify_create(
        self, stored: StoredRequest, response: httpx.Response, *, first_send: bool
    ) -> ProviderOutcome:
        """Map a create response to an outcome.

        ======================  ===================  ==========================================
        status                  body                 outcome
        ======================  ===================  ==========================================
        201                     payment              by payment status (see
                                                     :meth:`ProviderPayment.to_outcome`)
        402                     payment, declined    ``failed``, ``declined:<code>``
        400                     documented code      first send: ``not_applied``
                                                     ``rejected:<code>[:<param>]``;
                                                     resend: ``unknown``
                                                     ``provider.rejected-this-send.<code>``
        429                     any                  first send: ``not_applied``
                                                     ``rejected:rate_limited``; resend:
                                                     ``unknown`` ``provider.rate-limited``
        409                     any                  ``unknown`` ``provider.in-progress``
        422                     any                  ``unknown`` ``provider.key-reused``
        401, 403                any                  ``unknown`` ``provider.rejected.auth``
        5xx                     any                  ``unknown`` ``provider.http-<status>``
        other                   any                  ``unknown``
                                                     ``provider.unexpected-status-<status>``
        ======================  ===================  ==========================================

        A 201/402/400 body that is empty or not JSON is ``provider.body-unreadable``;
        JSON that does not fit is ``provider.body-unrecognized``; a payment
        whose reference, amount, currency, account or mode differs from what
        was sent is ``provider.response-mismatch.<field>``.
        """
        status = response.status_code
        replayed = _replayed(response)
        meta: dict[str, Any] = {"http_status": status, "replayed": replayed}

        if status in (201, 402):
            body = _json(response.content)
            if body is _UNREADABLE:
                return ProviderOutcome.unknown("provider.body-unreadable", **meta)
            payment = _parse_payment(body)
            # A 402 is only ever a decline; anything else in it is not understood.
            if payment is None or (status == 402 and payment.status != "declined"):
                return ProviderOutcome.unknown("provider.body-unrecognized", **meta)
            verdict = judge(stored, payment.claim())
            if not verdict.accepted:
                # Evidence about another payment: its id and status are never this
                # attempt's. What it said travels in ``claim``, for the escalation.
                return ProviderOutcome.unknown(
                    f"provider.response-mismatch.{verdict.attribute}", claim=payment.claim(),
                    detail={"reported_payment": payment.evidence()}, **meta,
                )
            return dataclasses.replace(payment.to_outcome(), **meta)

        if status == 400:
            body = _json(response.content)
            if body is _UNREADABLE:
                return ProviderOutcome.unknown("provider.body-unreadable", **meta)
            error = _error(body)
            if error is None or error[0] not in REJECTION_CODES:
                return ProviderOutcome.unknown("provider.body-unrecognized", **meta)
            code, param = error
            # The contract never stores a 400 under the key, so a replayed one is
            # off-contract and proves nothing either.
            if first_send and not replayed:
                return ProviderOutcome.not_applied(
                    f"rejected:{code}" + (f":{param}" if param else ""), request_rejected=True, **meta
                )
            # A resend refused before execution: Unknown (the earlier send may have
            # taken effect), and the same bytes will be refused again.
            return ProviderOutcome.unknown(f"provider.rejected-this-send.{code}", request_rejected=True,
                                           **meta)

        retry_after = _retry_after(response, self._clock.now())
        if retry_after is not None:
            meta["detail"] = {"retry_after_s": retry_after}

        if status == 429:
            # Rejected before execution and not stored under the key: on the
            # only send, nothing happened. On a resend it says nothing about
            # the earlier one.
            if first_send and not replayed:
                return ProviderOutcome.not_applied("rejected:rate_limited", **meta)
            return ProviderOutcome.unknown("provider.rate-limited", **meta)
        if status == 409:
            return ProviderOutcome.unknown("provider.in-progress", **meta)
        if status == 422:
            # The stored body never changes, so a key reused with another body
            # is our bug (or a key collision), never the customer's.
            log.error("cardco create attempt_id=%s: idempotency key reused with a different body",
                      stored.attempt_id)
            return ProviderOutcome.unknown("provider.key-reused", **meta)
        if status in (401, 403):
            return ProviderOutcome.unknown("provider.rejected.auth", **meta)
        if 500 <= status <= 599:
            # Even a 503 "not processed" may come from a proxy that did forward
            # the request; a 500 is stored under the key and may hide a payment.
            return ProviderOutcome.unknown(f"provider.http-{status}", **meta)
        return ProviderOutcome.unknown(f"provider.unexpected-status-{status}", **meta)

    @staticmethod
    def _logged(stored: StoredRequest, outcome: ProviderOutcome) -> ProviderOutcome:
        level = logging.WARNING if outcome.kind is OutcomeKind.UNKNOWN else logging.INFO
        log.log(level, "cardco create attempt_id=%s outcome=%s reason=%s http_status=%s replayed=%s",
                stored.attempt_id, outcome.kind.value, outcome.reason, outcome.http_status, outcome.replayed)
        return outcome

    # -- lookups ------------------------------------------------------------

    async def get_payment(
        self, provider_account: str, payment_id: str, *, budget_s: float | None
    ) -> LookupResult:
        """``GET /v1/payments/{id}`` for one account.

        :param provider_account: Internal provider-account id.
        :param payment_id: Cardco's payment id.
        :param budget_s: Caller's budget, or ``None`` for the client ceiling.
        :return: ``found`` with the payment as answered (even one whose id,
            account or mode is not what was asked: the caller judges the
            evidence), ``not_found`` on 404, ``rate_limited`` on 429, else
            ``failed`` with a reason.
        :raises ValueError: ``budget_s`` is NaN.
        """
        if not payment_id:
            result = LookupResult("failed", reason="request.not-buildable.invalid-payment-id")
        else:
            answer = await self._lookup(
                provider_account,
                # quote(safe=""): an id is one path segment, whatever it contains.
                lambda acct: httpx.Request(
                    "GET", f"{acct.base_url.rstrip('/')}/v1/payments/{quote(payment_id, safe='')}"
                ),
                budget_s=budget_s,
                not_found_on_404=True,
            )
            result = answer if isinstance(answer, LookupResult) else self._payment_found(answer.value)
        return self._lookup_logged("get_payment", provider_account, result)

    async def find_by_reference(
        self, provider_account: str, reference: str, *, budget_s: float | None
    ) -> LookupResult:
        """``GET /v1/payments?reference=…``: every payment of the account with that reference.

        :param provider_account: Internal provider-account id.
        :param reference: The attempt's client reference.
        :param budget_s: Caller's budget, or ``None`` for the client ceiling.
        :return: ``found`` with every payment answered (oldest first, as seen:
            the caller judges whether each is about this attempt), ``not_found``
            for ``data: []``, ``rate_limited`` on 429, else ``failed``.
        :raises ValueError: ``budget_s`` is NaN.
        """
        if not reference:
            result = LookupResult("failed", reason="request.not-buildable.invalid-reference")
        else:
            answer = await self._lookup(
                provider_account,
                # httpx encodes the query parameter.
                lambda acct: httpx.Request(
                    "GET", f"{acct.base_url.rstrip('/')}/v1/payments", params={"reference": reference}
                ),
                budget_s=budget_s,
                not_found_on_404=False,
            )
            result = answer if isinstance(answer, LookupResult) else self._payments_found(answer.value)
        return self._lookup_logged("find_by_reference", provider_account, result)

    # A lookup reports every payment the provider answered with, as it was seen. Whether
    # one is evidence about this attempt (its id, reference, amount, account and mode)
    # is the caller's judgement: a payment of another account or reference is not a
    # failed lookup, it is a mismatch a person must see, with what was seen recorded.

    @staticmethod
    def _payment_found(body: Any) -> LookupResult:
        payment = _parse_payment(body)
        if payment is None:
            return LookupResult("failed", reason="provider.body-unrecognized")
        return LookupResult("found", payments=(payment,))

    @staticmethod
    def _payments_found(body: Any) -> LookupResult:
        if not isinstance(body, dict) or not isinstance(body.get("data"), list):
            return LookupResult("failed", reason="provider.body-unrecognized")
        payments: list[ProviderPayment] = []
        for item in body["data"]:
            payment = _parse_payment(item)
            if payment is None:
                return LookupResult("failed", reason="provider.body-unrecognized")
            payments.append(payment)
        if not payments:
            return LookupResult("not_found")
        return LookupResult("found", payments=tuple(payments))

    async def _lookup(
        self,
        provider_account: str,
        make_request: Callable[[ProviderAccountConfig], httpx.Request],
        *,
        budget_s: float | None,
        not_found_on_404: bool,
    ) -> LookupResult | _Body:
        """Send one lookup: the parsed JSON of a 200, or a final ``LookupResult``."""
        limit_s, limit_name = self._call_limit(budget_s)
        acct = self._accounts.get(provider_account)
        if acct is None:
            return LookupResult("failed", reason="request.not-buildable.account-not-configured")
        try:
            headers = _auth_headers(acct, acct.api_version)
        except _NotBuildable as exc:
            return LookupResult("failed", reason=f"request.not-buildable.{exc.reason}")
        request = make_request(acct)
        request.headers.update(headers)
        if limit_s <= 0:
            return LookupResult("failed", reason=f"provider.no-response.{limit_name}")

        try:
            async with self._clock.budget(limit_s):
                response = await self._http.send(request)
        except TimeoutError:
            return LookupResult("failed", reason=f"provider.no-response.{limit_name}")
        except httpx.TransportError as exc:
            return LookupResult("failed", reason=f"provider.transport.{type(exc).__name__}")
        except httpx.DecodingError:
            return LookupResult("failed", reason="provider.body-unreadable")

        status = response.status_code
        if status == 200:
            body = _json(response.content)
            if body is _UNREADABLE:
                return LookupResult("failed", reason="provider.body-unreadable")
            return _Body(body)
        if status == 404 and not_found_on_404:
            return LookupResult("not_found")
        if status == 429:
            retry_after = _retry_after(response, self._clock.now())
            return LookupResult(
                "rate_limited",
                retry_after_s=DEFAULT_RETRY_AFTER_S if retry_after is None else retry_after,
                reason="provider.rate-limited",
            )
        if status in (401, 403):
            return LookupResult("failed", reason="provider.rejected.auth")
        if 500 <= status <= 599:
            return LookupResult("failed", reason=f"provider.http-{status}")
        return LookupResult("failed", reason=f"provider.unexpected-status-{status}")

    @staticmethod
    def _lookup_logged(operation: str, provider_account: str, result: LookupResult) -> LookupResult:
        level = logging.INFO if result.kind in ("found", "not_found") else logging.WARNING
        log.log(level, "cardco %s account=%s result=%s reason=%s",
                operation, provider_account, result.kind, result.reason)
        return result
