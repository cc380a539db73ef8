"""Stripe's ``/v1/payment_intents`` over the sandbox core.

Order of checks on every request, as for Cardco: capture, authenticate
(``Authorization: Bearer sk_…`` of a sandbox account; 401), ``Stripe-Version``
(any ``YYYY-MM-DD[.name]``; 400 otherwise), faults
(:mod:`paycore_sandbox.transport`, errors in Stripe's shape), then the work.

Creates (form-encoded, ``confirm=true`` only; ``capture_method=manual`` places a hold:
``requires_capture``) follow Stripe's idempotency:
``Idempotency-Key`` optional; the first answer of an executed request is stored
and replayed with ``Idempotent-Replayed: true`` (500s included); a request
whose parameters fail validation, or that meets the key still executing (409
``idempotency_key_in_use``), stores nothing; the key with other parameters is
400 ``idempotency_error``. Keys live in their own per-account namespace.

Lookups: by id is consistent; search sees an intent only ``stripe_search_lag_s``
(sandbox clock) after its creation. ``lookup_stale`` rules hide a matching
intent from both, as a lagging read would; ``search_stale`` rules from search
only, as an index that has not caught up would (one use per hidden intent).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
import secrets
from dataclasses import dataclass
from typing import Any, cast

import orjson
from starlette.requests import Request
from starlette.responses import Response

from paycore_sandbox import api, lifecycle
from paycore_sandbox.dialects import stripe_wire as wire
from paycore_sandbox.errors import ApiError, JSONResponse
from paycore_sandbox.faults import (
    EXECUTION_FAULTS,
    STALE_LOOKUP_FAULTS,
    STALE_SEARCH_FAULTS,
    FaultContext,
)
from paycore_sandbox.idempotency import Claim, KeyRecord, StoredResponse, fingerprint
from paycore_sandbox.ledger import CaptureMode, Payment
from paycore_sandbox.settings import SandboxAccount, SandboxSettings
from paycore_sandbox.state import Sandbox, SandboxState
from paycore_sandbox.transport import with_faults
from paycore_sandbox.validation import CreateRequest

CREATE_PATH = "/v1/payment_intents"
_VERSION = re.compile(r"\d{4}-\d{2}-\d{2}(\.[a-z_]+)?")
_PARAMS = frozenset({"amount", "currency", "payment_method", "confirm", "metadata",
                     "description", "return_url", "payment_method_types",
                     "automatic_payment_methods", "expand", "capture_method"})
# Stripe's capture methods; "manual" places a hold, the others capture at once.
_CAPTURE_METHODS: dict[str, CaptureMode] = {"automatic": "automatic", "automatic_async": "automatic",
                                            "manual": "manual"}
_MAX_METADATA = (50, 40, 500)  # keys, key length, value length (Stripe's limits)


def authenticate(request: Request, settings: SandboxSettings) -> SandboxAccount:
    scheme, _, credential = request.headers.get("authorization", "").partition(" ")
    key = credential.strip()
    if scheme == "Basic":  # curl -u sk_…: → the key is the user name
        try:
            key = base64.b64decode(key, validate=True).decode().partition(":")[0]
        except (binascii.Error, UnicodeDecodeError):
            key = ""
    elif scheme != "Bearer":
        key = ""
    if not key:
        raise wire.unauthorized("You did not provide an API key. Provide it in the "
                                "Authorization header, e.g. 'Authorization: Bearer YOUR_KEY'.")
    account = settings.account_for_key(key)
    if account is None:
        # Like Stripe, show only the key's start and end, never the key.
        raise wire.unauthorized(f"Invalid API Key provided: {key[:8]}****{key[-4:]}")
    version = request.headers.get("stripe-version")
    if version is not None and not _VERSION.fullmatch(version):
        raise wire.invalid_request(f"Invalid Stripe API version: {version}",
                                   param="Stripe-Version", code="api_version_invalid")
    return account


def finish(request: Request, response: Response) -> Response:
    """Stripe's headers on every answer."""
    response.headers["Request-Id"] = "req_" + secrets.token_hex(12)
    response.headers["Stripe-Version"] = request.headers.get("stripe-version",
                                                             wire.DEFAULT_API_VERSION)
    return response


# -- POST /v1/payment_intents ------------------------------------------------------

@dataclass(frozen=True)
class IntentCall:
    """A create, detached from its HTTP request (a late arrival outlives it)."""

    account: SandboxAccount
    key_header: str | None
    params: dict[str, Any] | None  # None: the body was not a form
    api_version: str


async def create_intent(request: Request) -> Response:
    arrival = await api.arrive(request, authenticate)
    if arrival.account is None:
        return finish(request, cast(Response, arrival.rejection))
    sandbox, state, account = arrival.sandbox, arrival.state, arrival.account
    params = wire.decode_form(await request.body())
    call = IntentCall(account, request.headers.get("idempotency-key"), params,
                      request.headers.get("stripe-version", wire.DEFAULT_API_VERSION))
    ctx = FaultContext(account.account, "create", wire.reference_in(params), wire.NAME)

    async def process(delay_s: float) -> Response:
        return await _process_create(sandbox, state, call, delay_s)

    response = await with_faults(request, sandbox, state, arrival.entry, ctx, process,
                                 ok_status=200, answers=wire.ANSWERS)
    return finish(request, response)


async def _process_create(sandbox: Sandbox, state: SandboxState, call: IntentCall,
                          delay_s: float) -> Response:
    key = None if call.key_header is None else call.key_header.strip()
    if key is not None and not 0 < len(key) <= wire.MAX_KEY_LENGTH:
        await state.gate.sleep(delay_s)
        return wire.invalid_request(
            f"Idempotency-Key must be 1 to {wire.MAX_KEY_LENGTH} characters.",
            param="Idempotency-Key").response()
    if key is None:  # no key, no idempotency: every request executes
        try:
            req, data = validate_intent(call, sandbox.clock.now(), sandbox.settings)
        except ApiError as exc:
            await state.gate.sleep(delay_s)
            return exc.response()
        task = sandbox.spawn(_execute(sandbox, state, None, call.account, req, data, delay_s),
                             survives_reset=True)
        return cast(Response, await asyncio.shield(task))
    scope = (f"{wire.NAME}:{call.account.account}", call.account.environment)
    claim, record = await state.keys.claim(
        scope, key, fingerprint({"path": CREATE_PATH, "params": call.params}),
        sandbox.clock.now())
    if claim is Claim.FRESH:
        try:
            req, data = validate_intent(call, sandbox.clock.now(), sandbox.settings)
        except ApiError as exc:  # failed validation: nothing saved under the key
            state.keys.abandon(record)
            await state.gate.sleep(delay_s)
            return exc.response()
        # Execution runs as its own task: a client that disconnects must not
        # interrupt a payment half-way.
        task = sandbox.spawn(_execute(sandbox, state, record, call.account, req, data,
                                      delay_s), survives_reset=True)
        return cast(Response, await asyncio.shield(task))
    if claim is Claim.MISMATCH:
        response = wire.idempotency_mismatch(key).response()
    elif claim is Claim.IN_PROGRESS:
        response = wire.idempotency_in_use().response()
    else:
        assert record.response is not None
        response = record.response.to_response(replayed=True)
    await state.gate.sleep(delay_s)
    return response


async def _execute(sandbox: Sandbox, state: SandboxState, record: KeyRecord | None,
                   account: SandboxAccount, req: CreateRequest, data: dict[str, Any],
                   delay_s: float) -> Response:
    payment: Payment | None = None
    stored: StoredResponse | None = None
    try:
        payment = lifecycle.create_payment(
            sandbox, state, account, req, record.key if record else "",
            dialect=wire.NAME, id_prefix="pi_", dialect_data=data)
        if record is not None:
            record.payment_id = payment.id
        ctx = FaultContext(account.account, "create", req.reference or None, wire.NAME)
        if state.faults.take(ctx, EXECUTION_FAULTS) is not None:
            stored = StoredResponse.of_error(wire.internal())
        elif payment.status == "declined":
            stored = StoredResponse.of_error(wire.card_error(payment))
        else:
            stored = StoredResponse(200, orjson.dumps(wire.render_intent(payment)))
        await state.gate.sleep(delay_s)  # a `delay` fault answers late, key in progress
    except BaseException:
        if record is not None:
            if payment is None:
                state.keys.abandon(record)
            else:
                state.keys.complete(record, stored or StoredResponse.of_error(wire.internal()))
        raise
    if record is not None:
        state.keys.complete(record, stored)
    return stored.to_response(replayed=False)


def validate_intent(call: IntentCall, now: float,
                    settings: SandboxSettings) -> tuple[CreateRequest, dict[str, Any]]:
    """The core create request and the Stripe-only data, or a 400 (nothing executes)."""
    params = call.params
    if params is None:
        raise wire.invalid_request("The request body must be form-encoded "
                                   "(application/x-www-form-urlencoded).")
    for name in params:
        if name not in _PARAMS:
            raise wire.unknown_parameter(name)
    amount = integer_param(params, "amount")
    currency = string_param(params, "currency", required=True)
    if not re.fullmatch(r"[A-Za-z]{3}", currency):
        raise wire.invalid_request(f"Invalid currency: {currency}.", param="currency")
    if params.get("confirm") != "true":
        raise wire.invalid_request("The sandbox's Stripe dialect creates and confirms in "
                                   "one step: send confirm=true.", param="confirm")
    payment_method = string_param(params, "payment_method", required=True)
    outcome = wire.TOKENS.get(payment_method)
    if outcome is None:
        raise wire.resource_missing("PaymentMethod", payment_method, "payment_method",
                                    status=400)
    metadata = metadata_param(params.get("metadata", {}))
    description = string_param(params, "description") or None
    return_url = string_param(params, "return_url") or None
    types = params.get("payment_method_types")
    if types is not None and (not isinstance(types, list) or types != ["card"]):
        raise wire.invalid_request("The sandbox's Stripe dialect supports only "
                                   "payment_method_types[]=card.",
                                   param="payment_method_types")
    automatic = params.get("automatic_payment_methods")
    if automatic is not None and not isinstance(automatic, dict):
        raise wire.invalid_request("Invalid object", param="automatic_payment_methods")
    redirects_allowed = types is None and (automatic or {}).get("allow_redirects") != "never"
    if redirects_allowed and return_url is None:
        # Stripe: confirming with redirect-capable payment methods needs a return_url.
        raise wire.invalid_request(
            "This PaymentIntent accepts payment methods that may redirect your customer; "
            "provide a return_url, or restrict it with payment_method_types[]=card or "
            "automatic_payment_methods[allow_redirects]=never.", param="return_url")
    capture_method = string_param(params, "capture_method") or "automatic"
    capture = _CAPTURE_METHODS.get(capture_method)
    if capture is None:
        raise wire.invalid_request(f"Invalid capture_method: {capture_method}",
                                   param="capture_method")
    req = CreateRequest(amount, currency.upper(), payment_method,
                        metadata.get("paycore_reference", ""), description, return_url,
                        outcome, capture)
    data = {"metadata": metadata, "payment_method_types": types or ["card"],
            "automatic_payment_methods": automatic, "api_version": call.api_version,
            "searchable_at": now + settings.stripe_search_lag_s}
    return req, data


def string_param(params: dict[str, Any], name: str, *, required: bool = False) -> str:
    value = params.get(name)
    if value is None:
        if required:
            raise wire.missing_parameter(name)
        return ""
    if not isinstance(value, str):
        raise wire.invalid_request(f"Invalid string: {name}", param=name)
    return value


def integer_param(params: dict[str, Any], name: str) -> int:
    raw = string_param(params, name, required=True)
    if not raw.isdigit() or not 0 < int(raw) <= 99_999_999:
        raise wire.invalid_request(f"Invalid integer: {raw}", param=name)
    return int(raw)


def metadata_param(raw: Any) -> dict[str, str]:
    keys, key_len, value_len = _MAX_METADATA
    if not isinstance(raw, dict) or len(raw) > keys or not all(
            isinstance(v, str) and len(k) <= key_len and len(v) <= value_len
            for k, v in raw.items()):
        raise wire.invalid_request(f"metadata: at most {keys} keys of up to {key_len} "
                                   f"characters, string values up to {value_len}.",
                                   param="metadata")
    return cast(dict[str, str], dict(raw))


# -- lookups --------------------------------------------------------------------------

def _stale(state: SandboxState, account: SandboxAccount, payment: Payment,
           faults: frozenset[str] = STALE_LOOKUP_FAULTS) -> bool:
    """Whether a rule of ``faults`` hides this existing intent from this lookup."""
    ctx = FaultContext(account.account, "lookup", payment.reference or None, wire.NAME)
    return state.faults.take(ctx, faults) is not None


def _unindexed(state: SandboxState, account: SandboxAccount, payment: Payment) -> bool:
    """Hidden from search: a lagging read (``lookup_stale``) or index (``search_stale``)."""
    return _stale(state, account, payment) \
        or _stale(state, account, payment, STALE_SEARCH_FAULTS)


async def retrieve_intent(request: Request) -> Response:
    arrival = await api.arrive(request, authenticate)
    if arrival.account is None:
        return finish(request, cast(Response, arrival.rejection))
    sandbox, state, account = arrival.sandbox, arrival.state, arrival.account
    intent_id = request.path_params["intent"]
    lifecycle.sweep(state, sandbox.clock.now())
    found = state.ledger.find_for(account, intent_id, wire.NAME)
    ctx = FaultContext(account.account, "lookup", found.reference if found else None,
                       wire.NAME)

    def answer() -> Response:
        payment = state.ledger.find_for(account, intent_id, wire.NAME)
        if payment is None or _stale(state, account, payment):
            return wire.resource_missing("payment_intent", intent_id, "intent").response()
        return JSONResponse(wire.render_intent(payment))

    response = await api.rate_limited_lookup(request, arrival, ctx, answer,
                                             answers=wire.ANSWERS)
    return finish(request, response)


async def search_intents(request: Request) -> Response:
    arrival = await api.arrive(request, authenticate)
    if arrival.account is None:
        return finish(request, cast(Response, arrival.rejection))
    sandbox, state, account = arrival.sandbox, arrival.state, arrival.account
    query = request.query_params.get("query")
    try:
        clauses = wire.parse_query(query) if query else None
    except ApiError:
        clauses = None
    reference = dict(clauses or []).get("metadata.paycore_reference")
    ctx = FaultContext(account.account, "lookup", reference, wire.NAME)

    def answer() -> Response:
        try:
            return JSONResponse(_search(sandbox, state, account, request))
        except ApiError as exc:
            return exc.response()

    response = await api.rate_limited_lookup(request, arrival, ctx, answer,
                                             answers=wire.ANSWERS)
    return finish(request, response)


def _search(sandbox: Sandbox, state: SandboxState, account: SandboxAccount,
            request: Request) -> dict[str, Any]:
    query = request.query_params.get("query")
    if not query:
        raise wire.missing_parameter("query")
    clauses = wire.parse_query(query)
    limit_raw = request.query_params.get("limit", "10")
    if not limit_raw.isdigit() or not 1 <= int(limit_raw) <= 100:
        raise wire.invalid_request("limit must be an integer between 1 and 100.",
                                   param="limit")
    page = request.query_params.get("page", "")
    offset = int(page.removeprefix("page_")) if re.fullmatch(r"page_\d+", page) else 0
    if page and not offset:
        raise wire.invalid_request(f"Invalid page: {page}", param="page")
    now = sandbox.clock.now()
    hits = [p for p in reversed(state.ledger.visible(account, wire.NAME))
            if p.dialect_data.get("searchable_at", 0.0) <= now
            and wire.matches(wire.render_intent(p), clauses)]
    hits = [p for p in hits if not _unindexed(state, account, p)]
    limit = int(limit_raw)
    window = hits[offset:offset + limit]
    more = offset + limit < len(hits)
    return {"object": "search_result", "url": "/v1/payment_intents/search",
            "data": [wire.render_intent(p) for p in window], "has_more": more,
            "next_page": f"page_{offset + limit}" if more else None}
