"""Payzo as paycore would know it: settings, account, client, notifications (one module).

The wire (``sandbox.py`` serves it): ``POST /charges`` with ``Authorization: Bearer <key>`` and
``Idempotency-Key``, answering 200 with the charge (``state`` ``paid`` or ``refused``) or a 400
refusal before execution; ``GET /charges?reference=`` every charge carrying it; webhooks
``{"id", "type": "charge.<state>", "charge": {...}}`` signed ``Payzo-Signature: t=<unix>,
hmac=<hex HMAC-SHA256 of "<t>.<body>">`` with the account's secret, five minutes' tolerance.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from datetime import date, datetime
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import httpx
import orjson

from paycore.clock import Clock
from paycore.domain import Claim, OperationKind, ProviderOutcome
from paycore.evidence import judge
from paycore.providers.adapter import EventFormat, OneEventPerDelivery, ProviderClient
from paycore.providers.base import (
    UNSUPPORTED_LOOKUP,
    Capabilities,
    InvalidNotification,
    LookupResult,
    Notification,
    NotificationFormat,
    NotificationUnverified,
    OperationEnding,
    OperationLookup,
    OperationOutcome,
    PaymentMethod,
    Provider,
    ReferenceLookup,
    StoredRequest,
    VerifiedDelivery,
    standard_notification_key,
)
from paycore.providers.http import (
    NotBuildable,
    header_token,
    lookup_result,
    send_once,
    stored_body,
    stored_url,
)
from paycore.providers.json_body import UNREADABLE, read_json
from paycore.providers.package import (
    ACCOUNT_SEPARATOR,
    DAY_S,
    ProviderAccountConfig,
    ProviderPackage,
    WebhookSecurity,
)
from paycore.providers.webhook_secrets import account_secrets
from paycore.settings_spec import Group, SecretText, Text, Url
from paycore.settlement_lines import BadLine, SettlementBatch, SettlementLine, SettlementSource

NAME: Final = "payzo"
API_VERSION: Final = "2026-01"
TOLERANCE_S: Final = 300

SETTINGS = Group("every service: the default Payzo account")
BASE_URL = SETTINGS.declare("PAYCORE_PAYZO_BASE_URL", Url(), None, "the Payzo API")
ACCOUNT = SETTINGS.declare("PAYCORE_PAYZO_ACCOUNT", Text(forbidden=ACCOUNT_SEPARATOR), None, "the account")
API_KEY = SETTINGS.declare("PAYCORE_PAYZO_API_KEY", SecretText(), None, "its API key")
WEBHOOK_SECRET = SETTINGS.declare("PAYCORE_PAYZO_WEBHOOK_SECRET", SecretText(), None, "its webhook secret")


@dataclasses.dataclass(frozen=True)
class Charge:
    """A Payzo charge as answered (a :class:`~paycore.providers.base.PaymentRecord`)."""

    id: str
    account: str
    test: bool
    reference: str
    amount: int
    currency: str
    state: str

    @classmethod
    def parse(cls, body: Any) -> Charge | None:
        try:
            charge = cls(**{f.name: body[f.name] for f in dataclasses.fields(cls)})
        except (KeyError, TypeError):
            return None
        return charge if charge.state in ("paid", "refused") and isinstance(charge.amount, int) else None

    def claim(self) -> Claim:
        return Claim(self.id, self.reference, self.amount, self.currency, (self.account,), (not self.test,))

    def evidence(self) -> dict[str, Any]:
        return {"id": self.id, "reference": self.reference, "state": self.state}

    def to_outcome(self, **meta: Any) -> ProviderOutcome:
        if self.state == "paid":
            return ProviderOutcome.succeeded(self.id, self.amount, self.currency, provider_status="paid",
                                             claim=self.claim(), **meta)
        return ProviderOutcome.failed("declined:refused", provider_payment_id=self.id,
                                      provider_status="refused", amount_minor=self.amount,
                                      currency=self.currency, claim=self.claim(), **meta)


def parse_notification(body: bytes) -> Notification:
    event = read_json(body)
    charge = Charge.parse(event.get("charge")) if isinstance(event, dict) else None
    if charge is None or not isinstance(event.get("id"), str):
        raise InvalidNotification("not a Payzo charge event")
    return Notification(event["id"], str(event.get("type")), None, charge.id, charge.reference,
                        charge.state, charge.amount, charge.currency, 0, charge.account, not charge.test,
                        charge.to_outcome(), event, charge.account, not charge.test)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


class Verifier(OneEventPerDelivery):
    def __init__(self, accounts: Iterable[ProviderAccountConfig]) -> None:
        self.secrets = account_secrets(accounts, "PAYCORE_PAYZO_WEBHOOK_SECRET_PREVIOUS")

    def verify(self, headers: Mapping[str, str], body: bytes, *, now: datetime) -> VerifiedDelivery:
        fields = dict(p.split("=", 1) for p in headers.get("payzo-signature", "").split(",") if "=" in p)
        if not fields.get("t", "").isdigit() or "hmac" not in fields:
            raise NotificationUnverified("signature-missing", malformed=True)
        if abs(now.timestamp() - int(fields["t"])) > TOLERANCE_S:
            raise NotificationUnverified("timestamp-outside-tolerance")
        for s in self.secrets:
            if hmac.compare_digest(signature(s.secret, int(fields["t"]), body), fields["hmac"]):
                try:
                    parsed: Notification | InvalidNotification = parse_notification(body)
                except InvalidNotification as exc:
                    parsed = exc
                key = standard_notification_key(parsed) if isinstance(parsed, Notification) else None
                return VerifiedDelivery(s.account, key or fields["t"], None, parsed, key, s.previous)
        raise NotificationUnverified("signature-mismatch")


class PayzoClient(ProviderClient[httpx.Request, httpx.Response]):
    FORMAT = EventFormat(NAME, parse_notification, standard_notification_key)
    CAPABILITIES = Capabilities(ReferenceLookup.CONSISTENT, key_retention_s=float(DAY_S),
                                server_errors_replayed=False)

    def build_request_body(self, account: ProviderAccountConfig, *, amount_minor: int, currency: str,
                           payment_method: PaymentMethod, reference: str,
                           description: str | None = None, manual_capture: bool = False) -> str:
        if not isinstance(payment_method, str) or manual_capture or amount_minor <= 0:
            raise ValueError("Payzo takes a positive amount and a token, and captures at once")
        return orjson.dumps({"amount": amount_minor, "currency": currency, "source": payment_method,
                             "reference": reference}).decode()

    def _headers(self, acct: ProviderAccountConfig, api_version: str) -> dict[str, str]:
        return {"Authorization": "Bearer " + header_token(acct.api_key.reveal()),
                "Payzo-Version": header_token(api_version), "Content-Type": "application/json"}

    def _build_create(self, stored: StoredRequest) -> httpx.Request:
        acct = self._configured(stored.provider_account)
        url = stored_url(stored, acct.base_url, max_key_length=255)
        headers = {**self._headers(acct, stored.api_version),
                   "Idempotency-Key": header_token(stored.idempotency_key)}
        return httpx.Request("POST", url, content=stored_body(stored), headers=headers)

    async def _send_create(self, request: httpx.Request, limit_s: float,
                           limit_name: str) -> httpx.Response | str:
        return await send_once(self._http, request, self._clock, limit_s, limit_name)

    def _classify_create(self, stored: StoredRequest, answer: httpx.Response, *,
                         first_send: bool) -> ProviderOutcome:
        meta: dict[str, Any] = {"http_status": answer.status_code}
        if answer.status_code == 400:
            return ProviderOutcome.refused_before_execution(
                "invalid", first_send=first_send, resend_reason="provider.rejected-this-send.invalid",
                request_rejected=True, **meta)
        if answer.status_code != 200:
            return ProviderOutcome.unknown(f"provider.http-{answer.status_code}", **meta)
        body = read_json(answer.content)
        if body is UNREADABLE:
            return ProviderOutcome.unknown("provider.body-unreadable", **meta)
        charge = Charge.parse(body)
        if charge is None:
            return ProviderOutcome.unknown("provider.body-unrecognized", **meta)
        verdict = judge(stored, charge.claim())
        if not verdict.accepted:
            return ProviderOutcome.unknown(f"provider.response-mismatch.{verdict.attribute}",
                                           claim=charge.claim(), **meta)
        return charge.to_outcome(**meta)

    async def _get(self, provider_account: str, path: str, params: dict[str, str] | None,
                   budget_s: float | None, *, by_id: bool) -> LookupResult:
        limit_s, limit_name = self._call_limit(budget_s)
        try:
            acct = self._configured(provider_account)
            request = httpx.Request("GET", acct.base_url.rstrip("/") + path, params=params,
                                    headers=self._headers(acct, acct.api_version))
        except NotBuildable as exc:
            return LookupResult("failed", reason=f"request.not-buildable.{exc.reason}")
        answer = await send_once(self._http, request, self._clock, limit_s, limit_name)
        if isinstance(answer, str):
            return LookupResult("failed", reason=answer)

        def found(body: Any) -> LookupResult:
            charges = [Charge.parse(c) for c in ([body] if by_id else body.get("charges", []))]
            if any(c is None for c in charges):
                return LookupResult("failed", reason="provider.body-unrecognized")
            return LookupResult("found", payments=tuple(c for c in charges if c)) if charges \
                else LookupResult("not_found")

        return lookup_result(answer.status_code, answer.content, None, found=found, not_found_on_404=by_id)

    async def get_payment(self, provider_account: str, payment_id: str, *,
                          budget_s: float | None) -> LookupResult:
        return await self._get(provider_account, f"/charges/{payment_id}", None, budget_s, by_id=True)

    async def find_by_reference(self, provider_account: str, reference: str, *,
                                budget_s: float | None) -> LookupResult:
        return await self._get(provider_account, "/charges", {"reference": reference}, budget_s, by_id=False)

    def _new_verifier(self, accounts: Iterable[ProviderAccountConfig]) -> Verifier:
        return Verifier(accounts)

    # -- refunds (Payzo captures at once and has no cancel; it cannot look a refund up) -----------

    def operation_endpoint(self, account: ProviderAccountConfig, kind: OperationKind,
                           provider_payment_id: str) -> str:
        return account.base_url.rstrip("/") + f"/charges/{quote(provider_payment_id, safe='')}/refunds"

    def build_operation_body(self, kind: OperationKind, *, provider_payment_id: str, amount_minor: int,
                             reference: str, reason: str | None = None, currency: str | None = None,
                             account: ProviderAccountConfig | None = None) -> str:
        if kind is not OperationKind.REFUND or amount_minor <= 0:
            raise ValueError("Payzo makes refunds of a positive amount only")
        return orjson.dumps({"amount": amount_minor, "reference": reference}).decode()

    async def send_operation(self, stored: StoredRequest, kind: OperationKind, *, provider_payment_id: str,
                             budget_s: float | None, first_send: bool) -> OperationOutcome:
        return await self._send_operation_once(stored, kind, provider_payment_id=provider_payment_id,
                                               budget_s=budget_s, first_send=first_send)

    def _build_operation(self, stored: StoredRequest, kind: OperationKind,
                         provider_payment_id: str) -> httpx.Request:
        return self._build_create(stored)

    def _classify_operation(self, stored: StoredRequest, kind: OperationKind, provider_payment_id: str,
                            answer: httpx.Response, *, first_send: bool) -> OperationOutcome:
        meta: dict[str, Any] = {"http_status": answer.status_code}
        if answer.status_code == 400:
            return OperationOutcome.refused_before_execution(
                kind, "invalid", first_send=first_send, resend_reason="provider.rejected-this-send.invalid",
                request_rejected=True, **meta)
        if answer.status_code != 200:
            return OperationOutcome.unknown(kind, f"provider.http-{answer.status_code}", **meta)
        body = read_json(answer.content)
        if body is UNREADABLE:
            return OperationOutcome.unknown(kind, "provider.body-unreadable", **meta)
        if not isinstance(body, dict) or body.get("state") != "done":
            return OperationOutcome.unknown(kind, "provider.body-unrecognized", **meta)
        if (body.get("charge"), body.get("reference")) != (provider_payment_id, stored.client_reference):
            return OperationOutcome.unknown(kind, "provider.response-mismatch", **meta)
        return OperationOutcome(kind, OperationEnding.SUCCEEDED, provider_status="done",
                                provider_operation_id=str(body.get("id")),
                                provider_payment_id=provider_payment_id, amount_minor=stored.amount_minor,
                                currency=stored.currency, **meta)

    async def find_operation_by_reference(self, provider_account: str, kind: OperationKind, reference: str,
                                          *, budget_s: float | None,
                                          provider_payment_id: str | None = None) -> OperationLookup:
        return OperationLookup("unavailable", reason=f"{UNSUPPORTED_LOOKUP}.{kind.value}")

    async def get_refund(self, provider_account: str, refund_id: str, *,
                         budget_s: float | None) -> OperationLookup:
        return OperationLookup("unavailable", reason=f"{UNSUPPORTED_LOOKUP}.refund")


class Payzo(ProviderPackage):
    def from_env(self, env: Mapping[str, str]) -> ProviderAccountConfig:
        return ProviderAccountConfig(NAME, ACCOUNT.require(env), "test", BASE_URL.require(env),
                                     API_KEY.require(env), WEBHOOK_SECRET.get(env), api_version=API_VERSION)

    def client(self, accounts: Sequence[ProviderAccountConfig], clock: Clock, *, max_call_duration_s: float,
               transport: httpx.AsyncBaseTransport | None = None) -> Provider:
        return PayzoClient(accounts, clock, max_call_duration_s=max_call_duration_s, transport=transport)

    def notification_format(self) -> NotificationFormat:
        return PayzoClient.FORMAT

    def settlement_source(self, config: ProviderAccountConfig, clock: Clock,
                          transport: httpx.AsyncBaseTransport | None = None) -> SettlementSource:
        raise NotImplementedError("Payzo reports no settlements")

    async def read_report_file(self, path: Path, provider_account: str, *, batch_id: str | None = None,
                               batch_date: date | None = None
                               ) -> tuple[SettlementBatch, AsyncIterator[SettlementLine | BadLine]]:
        raise NotImplementedError("Payzo reports no settlements")

    def sandbox_env(self, base_url: str, account: str, environment: str, credentials: Mapping[str, str],
                    return_url: str) -> dict[str, str]:
        return {BASE_URL.name: base_url, ACCOUNT.name: account, API_KEY.name: credentials["api_key"],
                WEBHOOK_SECRET.name: credentials["webhook_secret"]}


PROVIDER: Final = Payzo(
    name=NAME, title="Payzo", settings=SETTINGS, marker=BASE_URL, registered_by={"base_url": BASE_URL},
    payments_path="/charges", api_version=API_VERSION, key_retention_s=DAY_S,
    webhook_security=WebhookSecurity("payzoSignature",
                                     {"type": "apiKey", "in": "header", "name": "Payzo-Signature"}),
)
